//! The Internet checksum (one's complement sum of 16-bit words, RFC 1071) that the IPv4 and UDP
//! headers around a RoCEv2 packet carry, and the comment urxe's capture tap writes on a record
//! whose IPv4 ID it could not see: shared by the tap (transport) and `urxe check`.

/// Comment urxe's capture tap puts on a received IPv4 packet: a UDP socket cannot see the IP
/// ID the sender used, so the record carries ID 0 and the ICRC may not verify with it.
pub const TAP_IP_ID_UNKNOWN: &str = "urxe: IPv4 ID not seen by the receiving socket, recorded as 0";

/// Adds `data` as big-endian 16-bit words (an odd last byte padded with 0) to a one's
/// complement accumulator (IP, UDP checksums).
pub fn ones_complement_sum(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [last] = chunks.remainder() {
        acc += (*last as u32) << 8;
    }
    acc
}

/// Folds the carries of a one's complement accumulator into 16 bits.
pub fn fold(mut acc: u32) -> u16 {
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_1071_example_sums_and_folds() {
        // RFC 1071 section 3's example: 0001 f203 f4f5 f6f7 sums to 0x2ddf0, folds to 0xddf2.
        let acc = ones_complement_sum(0, &[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]);
        assert_eq!(acc, 0x2_ddf0);
        assert_eq!(fold(acc), 0xddf2);
        // An odd last byte is the high byte of a word padded with zero.
        assert_eq!(ones_complement_sum(0, &[0x12]), 0x1200);
    }
}
