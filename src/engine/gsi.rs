//! Engine: the GSI queue pair, QP1, as the connection manager needs it on RoCE: received UD
//! SEND_ONLY packets to QP1 with the GSI Q_Key are queued as (peer, MAD) for
//! [`Engine::poll_gsi`](super::Engine::poll_gsi); MADs given to
//! [`Engine::send_gsi`](super::Engine::send_gsi) leave as UD SEND_ONLY to QP1 of the peer
//! (P_Key 0xFFFF, DETH Q_Key 0x80010000, source QP 1) from QP1's UDP flow port, 55410 as
//! kernel rxe (`0xC000 + hash_32(1, 14)`).
//!
//! The queues are bounded ([`GSI_QUEUE`] each way): a MAD that does not fit is dropped and
//! counted; the CM above retransmits what matters. Must not: interpret MADs (that is
//! `crate::cm`).

use std::collections::VecDeque;
use std::net::IpAddr;

use crate::wire::bth::BthRepr;
use crate::wire::deth::DethRepr;
use crate::wire::icrc::{IpFields, ROCEV2_PORT};
use crate::wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};
use crate::wire::opcode::op;
use crate::wire::packet::finish;
use crate::wire::{Headers, Parsed, Psn};

use super::qp::ud_source_port;
use super::types::Transmit;

/// MADs held each way before new ones are dropped.
pub const GSI_QUEUE: usize = 256;

/// What QP1 did (all monotonic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GsiCounters {
    pub mads_received: u64,
    pub mads_sent: u64,
    /// Received for QP1 but not a GSI MAD (wrong opcode, Q_Key, or length).
    pub malformed_dropped: u64,
    /// Dropped because a queue was full.
    pub overflow_dropped: u64,
}

/// QP1's two queues.
#[derive(Debug, Default)]
pub struct Gsi {
    rx: VecDeque<(IpAddr, [u8; MAD_LEN])>,
    tx: VecDeque<(IpAddr, [u8; MAD_LEN])>,
    psn: u32,
    pub counters: GsiCounters,
}

impl Gsi {
    /// A packet for QP1 (ICRC and P_Key already checked). Returns true if it made the receive
    /// queue non-empty (the driver's cue to wake the GSI reader).
    pub fn receive(&mut self, src: IpAddr, p: &Parsed<'_>) -> bool {
        let good = p.headers.bth.opcode == op::UD_SEND_ONLY
            && p.headers.deth.is_some_and(|d| d.qkey == GSI_QKEY)
            && p.payload.len() >= MAD_LEN;
        if !good {
            self.counters.malformed_dropped += 1;
            return false;
        }
        if self.rx.len() >= GSI_QUEUE {
            self.counters.overflow_dropped += 1;
            return false;
        }
        let mut mad = [0u8; MAD_LEN];
        mad.copy_from_slice(&p.payload[..MAD_LEN]);
        self.rx.push_back((src, mad));
        self.counters.mads_received += 1;
        self.rx.len() == 1
    }

    pub fn poll_recv(&mut self) -> Option<(IpAddr, [u8; MAD_LEN])> {
        self.rx.pop_front()
    }

    /// Queues a MAD for QP1 of `peer`; false (and counted) if the queue is full.
    pub fn send(&mut self, peer: IpAddr, mad: &[u8; MAD_LEN]) -> bool {
        if self.tx.len() >= GSI_QUEUE {
            self.counters.overflow_dropped += 1;
            return false;
        }
        self.tx.push_back((peer, *mad));
        true
    }

    pub fn has_pending(&self) -> bool {
        !self.tx.is_empty()
    }

    /// The next queued MAD as a packet in `buf`; `tx_ip` gives the ICRC's IP fields for a
    /// destination (None: another family than ours; that MAD is dropped).
    pub fn poll_transmit(&mut self, buf: &mut [u8], tx_ip: impl Fn(IpAddr) -> Option<IpFields>) -> Option<Transmit> {
        while let Some((peer, mad)) = self.tx.pop_front() {
            let Some(ip) = tx_ip(peer) else {
                self.counters.malformed_dropped += 1;
                continue;
            };
            let h = Headers {
                bth: BthRepr {
                    opcode: op::UD_SEND_ONLY,
                    dest_qp: GSI_QPN,
                    psn: Psn::new(self.psn),
                    ..BthRepr::default()
                },
                deth: Some(DethRepr { qkey: GSI_QKEY, src_qp: GSI_QPN }),
                ..Headers::default()
            };
            let Ok(hl) = h.emit(buf) else { continue };
            buf[hl..hl + MAD_LEN].copy_from_slice(&mad);
            let sport = ud_source_port(GSI_QPN);
            let Ok(len) = finish(buf, hl, MAD_LEN, &ip, sport, ROCEV2_PORT) else { continue };
            self.psn = (self.psn + 1) & 0xFF_FFFF;
            self.counters.mads_sent += 1;
            return Some(Transmit { dst: peer, src_port: sport, flow_label: 0, len, tos: 0 });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::packet::parse;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    fn v4(dst: IpAddr) -> Option<IpFields> {
        match (A, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Some(IpFields::v4_df(s, d)),
            _ => None,
        }
    }

    #[test]
    fn sent_mad_is_a_ud_send_only_to_qp1_from_port_55410_and_is_received_back() {
        let mut g = Gsi::default();
        let mut mad = [0u8; MAD_LEN];
        mad[0] = 1;
        mad[255] = 0xAB;
        assert!(g.send(B, &mad));
        let mut buf = vec![0u8; 4096];
        let t = g.poll_transmit(&mut buf, v4).unwrap();
        assert_eq!((t.dst, t.src_port), (B, 55410));
        let p = parse(&buf[..t.len]).unwrap();
        assert_eq!(p.headers.bth.opcode, op::UD_SEND_ONLY);
        assert_eq!((p.headers.bth.dest_qp, p.headers.bth.pkey), (1, 0xFFFF));
        assert_eq!(p.headers.deth, Some(DethRepr { qkey: GSI_QKEY, src_qp: 1 }));
        let mut rx = Gsi::default();
        assert!(rx.receive(A, &p), "first MAD wakes the reader");
        assert_eq!(rx.poll_recv(), Some((A, mad)));
        assert!(g.poll_transmit(&mut buf, v4).is_none());
    }

    #[test]
    fn wrong_qkey_and_full_queue_are_dropped_and_counted() {
        let mut g = Gsi::default();
        let mad = [7u8; MAD_LEN];
        let mut buf = vec![0u8; 4096];
        g.send(B, &mad);
        let t = g.poll_transmit(&mut buf, v4).unwrap();
        let mut p = parse(&buf[..t.len]).unwrap();
        p.headers.deth = Some(DethRepr { qkey: 0x1234, src_qp: 1 });
        let mut rx = Gsi::default();
        assert!(!rx.receive(A, &p));
        assert_eq!(rx.counters.malformed_dropped, 1);
        let p = parse(&buf[..t.len]).unwrap();
        for _ in 0..GSI_QUEUE + 3 {
            rx.receive(A, &p);
        }
        assert_eq!(rx.counters.overflow_dropped, 3);
        assert_eq!(rx.counters.mads_received, GSI_QUEUE as u64);
        // An IPv6 peer from an IPv4 engine cannot be sent to: dropped, counted.
        g.send(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), &mad);
        assert!(g.poll_transmit(&mut buf, v4).is_none());
        assert_eq!(g.counters.malformed_dropped, 1);
    }
}
