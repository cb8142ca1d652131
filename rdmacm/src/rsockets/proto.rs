//! rsockets' wire protocol as rdma-core's librdmacm defines it: the limits, the immediate
//! encoding (`op << 29 | value`), the iomap size scale, the socket states, and the 40-byte
//! connection data exchanged in REQ/REP. Pure: no I/O, no unsafe.

use libc::c_int;
use std::time::Duration;

pub(super) const RS_OLAP_START_SIZE: u32 = 2048;
pub(super) const RS_MAX_TRANSFER: u32 = 65536;
pub(super) const RS_SNDLOWAT: u32 = 2048;
pub(super) const RS_QP_MIN_SIZE: u16 = 16;
pub(super) const RS_QP_MAX_SIZE: u32 = 0xFFFE;
pub(super) const RS_QP_CTRL_SIZE: u32 = 4;
pub(super) const RS_SGL_SIZE: usize = 2;
pub(super) const RS_CONN_FLAG_NET: u8 = 1;
pub(super) const RS_CONN_FLAG_IOMAP: u8 = 2;
pub(super) const CONN_DATA_LEN: usize = 40;
pub(super) const SGE_LEN: usize = 16;
/// `sizeof(struct rs_iomap)`: a u64 offset and an `rs_sge`.
pub(super) const IOMAP_LEN: usize = 24;
pub(super) const RECV_FLAG: u64 = 1 << 63;

pub(super) const DEF_INLINE: u16 = 64;
pub(super) const DEF_SQSIZE: u16 = 384;
pub(super) const DEF_RQSIZE: u16 = 384;
pub(super) const DEF_MEM: u32 = 1 << 17;
pub(super) const DEF_WMEM: u32 = 1 << 17;
/// How long a blocking call spins on the CQ before it sleeps (librdmacm's polling_time).
pub(super) const POLL_SPIN: Duration = Duration::from_micros(10);
/// The longest single sleep of a blocking call (it re-checks the socket after each).
pub(super) const WAKE_INTERVAL_MS: c_int = 500;
/// How long closing a connected socket waits for its last sends (a vanished peer ends it
/// sooner, by the QP's retry errors).
pub(super) const CLOSE_DRAIN: Duration = Duration::from_secs(2);

/// `SOL_RDMA` and its options (`<rdma/rsocket.h>`).
pub const SOL_RDMA: c_int = 0x10000;
pub const RDMA_SQSIZE: c_int = 0;
pub const RDMA_RQSIZE: c_int = 1;
pub const RDMA_INLINE: c_int = 2;
pub const RDMA_IOMAPSIZE: c_int = 3;
pub const RDMA_ROUTE: c_int = 4;

pub(super) mod op {
    pub const DATA: u32 = 0;
    pub const WRITE: u32 = 2;
    pub const SGL: u32 = 4;
    pub const IOMAP_SGL: u32 = 6;
    pub const CTRL: u32 = 7;
}
pub(super) mod ctrl {
    pub const DISCONNECT: u32 = 0;
    pub const SHUTDOWN: u32 = 2;
}

pub(super) fn msg_set(op: u32, data: u32) -> u32 {
    (op << 29) | (data & 0x1FFF_FFFF)
}
pub(super) fn msg_op(m: u32) -> u32 {
    m >> 29
}
pub(super) fn msg_data(m: u32) -> u32 {
    m & 0x1FFF_FFFF
}

/// The scaled 8-bit encoding of the iomap size in the connection data.
pub(super) fn value_to_scale(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (1 << (bits - 1)) | (value >> bits)
    }
}
pub(super) fn scale_to_value(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (value & !(1 << (bits - 1))) << bits
    }
}

/// Socket states as librdmacm orders them: passive, opening, connected, closed.
pub(super) mod st {
    pub const INIT: u32 = 0;
    pub const BOUND: u32 = 0x0001;
    pub const LISTENING: u32 = 0x0002;
    pub const OPENING: u32 = 0x0004;
    pub const CONNECTING: u32 = OPENING | 0x0040;
    pub const ACCEPTING: u32 = OPENING | 0x0080;
    pub const CONNECTED: u32 = 0x0100;
    pub const WRITABLE: u32 = 0x0200;
    pub const READABLE: u32 = 0x0400;
    pub const CONNECT_RDWR: u32 = CONNECTED | READABLE | WRITABLE;
    pub const CONNECT_ERROR: u32 = 0x0800;
    pub const DISCONNECTED: u32 = 0x1000;
    pub const ERROR: u32 = 0x2000;
}

#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(super) struct RsSge {
    pub(super) addr: u64,
    pub(super) key: u32,
    pub(super) length: u32,
}

/// The 40-byte connection data of an rsocket's REQ and REP (librdmacm's `rs_conn_data`), all
/// fields big-endian on the wire:
///
/// | bytes | field |
/// |---|---|
/// | 0 | version (1) |
/// | 1 | flags: IOMAP (2), NET (1: the sender is big-endian) |
/// | 2–3 | credits: the sender's receive queue depth |
/// | 4–6 | reserved |
/// | 7 | the target iomap's size, scaled ([`value_to_scale`], 8 bits) |
/// | 8–23 | the target SGL: where the peer writes grants of this side's receive buffer |
/// | 24–39 | the first half of the sender's receive buffer |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ConnData {
    pub(super) flags: u8,
    pub(super) credits: u16,
    pub(super) iomap_scaled: u8,
    pub(super) target_sgl: RsSge,
    pub(super) data_buf: RsSge,
}

impl ConnData {
    /// The data this host sends: version 1, IOMAP, NET on a big-endian host.
    pub(super) fn ours(credits: u16, target_iomap_size: u32, target_sgl: RsSge, data_buf: RsSge) -> ConnData {
        let net = if cfg!(target_endian = "big") { RS_CONN_FLAG_NET } else { 0 };
        ConnData {
            flags: RS_CONN_FLAG_IOMAP | net,
            credits,
            iomap_scaled: value_to_scale(target_iomap_size, 8) as u8,
            target_sgl,
            data_buf,
        }
    }

    pub(super) fn emit(&self) -> [u8; CONN_DATA_LEN] {
        let mut c = [0u8; CONN_DATA_LEN];
        c[0] = 1;
        c[1] = self.flags;
        c[2..4].copy_from_slice(&self.credits.to_be_bytes());
        c[7] = self.iomap_scaled;
        for (at, s) in [(8, self.target_sgl), (24, self.data_buf)] {
            c[at..at + 8].copy_from_slice(&s.addr.to_be_bytes());
            c[at + 8..at + 12].copy_from_slice(&s.key.to_be_bytes());
            c[at + 12..at + 16].copy_from_slice(&s.length.to_be_bytes());
        }
        c
    }

    /// Parses a peer's connection data: EOPNOTSUPP for a short one or another version,
    /// EPROTO for an empty target SGL.
    pub(super) fn parse(c: &[u8]) -> Result<ConnData, i32> {
        if c.len() < CONN_DATA_LEN || c[0] != 1 {
            return Err(libc::EOPNOTSUPP);
        }
        let be64 =
            |o: usize| u64::from_be_bytes([c[o], c[o + 1], c[o + 2], c[o + 3], c[o + 4], c[o + 5], c[o + 6], c[o + 7]]);
        let be32 = |o: usize| u32::from_be_bytes([c[o], c[o + 1], c[o + 2], c[o + 3]]);
        let sge = |o: usize| RsSge { addr: be64(o), key: be32(o + 8), length: be32(o + 12) };
        let d = ConnData {
            flags: c[1],
            credits: u16::from_be_bytes([c[2], c[3]]),
            iomap_scaled: c[7],
            target_sgl: sge(8),
            data_buf: sge(24),
        };
        if d.target_sgl.length == 0 {
            return Err(libc::EPROTO);
        }
        Ok(d)
    }

    /// Whether the peer's SGEs written into our target buffer are in the other byte order.
    pub(super) fn swapped(&self) -> bool {
        (self.flags & RS_CONN_FLAG_NET != 0) != cfg!(target_endian = "big")
    }

    /// The peer's target iomap, after its target SGL in the same registration; none without
    /// the IOMAP flag.
    pub(super) fn remote_iomap(&self) -> Option<RsSge> {
        (self.flags & RS_CONN_FLAG_IOMAP != 0).then(|| RsSge {
            addr: self.target_sgl.addr + (SGE_LEN as u64) * u64::from(self.target_sgl.length),
            length: scale_to_value(self.iomap_scaled.into(), 8),
            key: self.target_sgl.key,
        })
    }
}

/// Whether the receiver owes the sender credits (librdmacm's rs_give_credits, less the
/// control-slot and state checks): half the receive buffer is free again, or the sender's
/// receive credits reached the last grant's mark.
pub(super) fn credits_due(rbuf_bytes_avail: u32, rbuf_size: u32, rseq_no: u16, rseq_comp: u16) -> bool {
    rbuf_bytes_avail >= rbuf_size >> 1 || (rseq_no.wrapping_sub(rseq_comp) as i16) >= 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immediate_is_op_in_the_top_three_bits() {
        let m = msg_set(op::SGL, 0x1234);
        assert_eq!(m, 0x8000_1234);
        assert_eq!((msg_op(m), msg_data(m)), (op::SGL, 0x1234));
        let c = msg_set(op::CTRL, ctrl::SHUTDOWN);
        assert_eq!(c, 0xE000_0002);
        // A value wider than 29 bits loses its top bits, never the op's.
        assert_eq!(msg_op(msg_set(op::DATA, u32::MAX)), op::DATA);
        assert_eq!(msg_data(msg_set(op::DATA, u32::MAX)), 0x1FFF_FFFF);
    }

    #[test]
    fn iomap_scale_is_exact_up_to_128_and_coarse_above() {
        for v in 0..=128 {
            assert_eq!(scale_to_value(value_to_scale(v, 8), 8), v);
        }
        assert_eq!(value_to_scale(256, 8), 0x81);
        assert_eq!(scale_to_value(0x81, 8), 256);
        assert!(value_to_scale(0xFFFF, 8) <= 0xFF);
    }

    #[test]
    fn conn_data_bytes_round_trip() {
        let t = RsSge { addr: 0x0102_0304_0506_0708, key: 0x1122_3344, length: 2 };
        let b = RsSge { addr: 0xA0A1_A2A3_A4A5_A6A7, key: 0x5566_7788, length: 65536 };
        let d = ConnData::ours(384, 0, t, b);
        let bytes = d.emit();
        assert_eq!(&bytes[..8], &[1, RS_CONN_FLAG_IOMAP, 0x01, 0x80, 0, 0, 0, 0]);
        assert_eq!(&bytes[8..24], &[1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 2]);
        assert_eq!(&bytes[36..40], &[0, 1, 0, 0]);
        assert_eq!(ConnData::parse(&bytes), Ok(d));
        assert!(!d.swapped());
        let m = d.remote_iomap().expect("IOMAP flag");
        assert_eq!((m.addr, m.length, m.key), (t.addr + 32, 0, t.key));
    }

    #[test]
    fn conn_data_refuses_what_librdmacm_refuses() {
        let good = ConnData::ours(16, 4, RsSge { addr: 1, key: 2, length: 2 }, RsSge::default()).emit();
        assert_eq!(ConnData::parse(&good[..39]), Err(libc::EOPNOTSUPP));
        let mut v2 = good;
        v2[0] = 2;
        assert_eq!(ConnData::parse(&v2), Err(libc::EOPNOTSUPP));
        let mut empty = good;
        empty[20..24].fill(0);
        assert_eq!(ConnData::parse(&empty), Err(libc::EPROTO));
        let mut net = good;
        net[1] |= RS_CONN_FLAG_NET;
        assert_eq!(ConnData::parse(&net).map(|d| d.swapped()), Ok(cfg!(target_endian = "little")));
        let mut plain = good;
        plain[1] = 0;
        assert_eq!(ConnData::parse(&plain).map(|d| d.remote_iomap()), Ok(None));
    }

    #[test]
    fn credits_fall_due_at_half_a_buffer_or_the_grant_mark() {
        assert!(credits_due(1 << 16, 1 << 17, 0, 100));
        assert!(!credits_due((1 << 16) - 1, 1 << 17, 0, 100));
        assert!(credits_due(0, 1 << 17, 100, 100));
        assert!(credits_due(0, 1 << 17, 5, 0xFFF0)); // wrapped: past the mark
        assert!(!credits_due(0, 1 << 17, 0xFFF0, 5));
    }
}
