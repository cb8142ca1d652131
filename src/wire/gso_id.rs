//! The ICRC of a segment of a UDP GSO train over IPv4.
//!
//! The kernel cuts a GSO send into segments and writes each one's IPv4 header itself. From an
//! unconnected socket with DF set, the first segment carries IP ID 0 (`ip_select_ident_segs`:
//! DF without a connected peer gives ID 0) and segmentation counts up from there, one per
//! segment (`inet_gso_segment` increments the ID unless the train is TCP with fixed IDs): the
//! segment at index `i` of a train leaves with ID `i`. The ICRC covers the ID, so the engine's
//! ICRC (computed for ID 0) is right for segment 0 only.
//!
//! A CRC is affine in its input: two inputs of one length that differ only in the ID field
//! have CRCs that differ by the CRC-register image of that difference, shifted over the bytes
//! that follow it. For a train of equal-sized packets that shift is one constant, so fixing a
//! segment costs one carry-less multiply of 32 steps instead of hashing the packet again.
//! IPv6 has no ID: nothing to fix there.

/// The reflected CRC-32 polynomial of the ICRC.
const POLY: u32 = 0xEDB8_8320;
/// x^0 in the reflected representation (bit 31 holds the lowest power).
const ONE: u32 = 0x8000_0000;
/// Bytes of the ICRC's pseudo-packet after the IPv4 ID field and before the BTH: the rest of the
/// IPv4 header (20 - 6) and the UDP header.
const AFTER_ID: usize = 14 + 8;

/// `a * b` modulo the CRC polynomial, both in the reflected representation.
fn mul(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    for power in 0..32 {
        if a & (ONE >> power) != 0 {
            product ^= b;
        }
        // b *= x
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    product
}

/// x^(8 * bytes) modulo the polynomial: the effect of `bytes` zero bytes on a CRC register.
fn shift_over(bytes: usize) -> u32 {
    let mut result = ONE;
    let mut square = ONE >> 8; // x^8
    let mut n = bytes;
    while n != 0 {
        if n & 1 != 0 {
            result = mul(result, square);
        }
        square = mul(square, square);
        n >>= 1;
    }
    result
}

/// The CRC register after the two bytes of `id` (big-endian) from a zero register.
fn register_of(id: u16) -> u32 {
    let mut c = 0u32;
    for byte in id.to_be_bytes() {
        c ^= byte as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
        }
    }
    c
}

/// How the ICRC of IPv4 packets of one length changes with their IP ID.
#[derive(Clone, Copy, Debug)]
pub struct IdShift {
    shift: u32,
}

impl IdShift {
    /// For packets whose UDP payload, the ICRC included, is `udp_payload_len` bytes long.
    pub fn new(udp_payload_len: usize) -> IdShift {
        let covered = udp_payload_len.saturating_sub(super::icrc::ICRC_LEN);
        IdShift { shift: shift_over(AFTER_ID + covered) }
    }

    /// What to XOR into the ICRC computed for ID 0 to get the ICRC for ID `id` (the rest of
    /// the packet unchanged). XORing it again undoes it.
    pub fn delta(&self, id: u16) -> u32 {
        if id == 0 {
            0
        } else {
            mul(register_of(id), self.shift)
        }
    }

    /// `out[i] = self.delta(i)` for every `i < out.len()` (at most 65,536), with one multiply
    /// per bit of the largest ID instead of one per ID: the delta is linear in the ID (a CRC
    /// from a zero register, then a multiply), so `delta(i)` is `delta(i` without its lowest
    /// set bit`)` XOR the delta of that bit. A GSO train of 44 segments costs 6 multiplies.
    pub fn fill_deltas(&self, out: &mut [u32]) {
        let mut bit = [0u32; 16];
        for (b, d) in bit.iter_mut().enumerate() {
            if 1usize << b >= out.len() {
                break;
            }
            *d = self.delta(1 << b);
        }
        for i in 0..out.len() {
            out[i] = if i == 0 { 0 } else { out[i & (i - 1)] ^ bit[i.trailing_zeros() as usize] };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::icrc::{icrc, IpFields, IPV4_DF};

    fn v4(id: u16) -> IpFields {
        IpFields::V4 { src: [10, 9, 0, 1], dst: [10, 9, 0, 2], id, flags_frag: IPV4_DF }
    }

    #[test]
    fn the_delta_turns_the_id_0_icrc_into_the_icrc_for_every_id() {
        for len in [12usize, 13, 40, 100, 1024 + 28, 4096 + 28, 8956] {
            let body: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let base = icrc(&v4(0), 49153, 4791, &body);
            let s = IdShift::new(len + 4);
            for id in [0u16, 1, 2, 3, 7, 63, 64, 255, 0x1234, 0xFFFF] {
                assert_eq!(base ^ s.delta(id), icrc(&v4(id), 49153, 4791, &body), "len {len} id {id}");
            }
        }
    }

    #[test]
    fn filled_deltas_are_the_deltas_of_each_id() {
        for len in [20usize, 1052, 4124, 8956] {
            let s = IdShift::new(len);
            let mut out = [0xFFFF_FFFFu32; 64];
            s.fill_deltas(&mut out);
            for (id, d) in out.iter().enumerate() {
                assert_eq!(*d, s.delta(id as u16), "len {len} id {id}");
            }
            let mut one = [7u32; 1];
            s.fill_deltas(&mut one);
            assert_eq!(one, [0]);
        }
    }

    #[test]
    fn a_wrong_length_gives_a_wrong_icrc() {
        let body = vec![0x5Au8; 1052];
        let base = icrc(&v4(0), 49153, 4791, &body);
        assert_ne!(base ^ IdShift::new(body.len() + 5).delta(1), icrc(&v4(1), 49153, 4791, &body));
    }
}
