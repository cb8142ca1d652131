//! RDMA Extended Transport Header (IBTA Vol 1 §9.3.3, 16 bytes): virtual address, R_Key, DMA
//! length. Carried by RDMA WRITE FIRST/ONLY and RDMA READ REQUEST.

use super::view::header_view;

header_view!(
    /// Zero-copy RETH view.
    Reth,
    16
);

impl<T: AsRef<[u8]>> Reth<T> {
    pub fn va(&self) -> u64 {
        self.be64(0)
    }
    pub fn rkey(&self) -> u32 {
        self.be32(8)
    }
    pub fn dma_len(&self) -> u32 {
        self.be32(12)
    }
}

/// RETH values.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct RethRepr {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

impl RethRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &Reth<T>) -> RethRepr {
        RethRepr { va: h.va(), rkey: h.rkey(), dma_len: h.dma_len() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Reth<T>) {
        h.set_be64(0, self.va);
        h.set_be32(8, self.rkey);
        h.set_be32(12, self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const BYTES: [u8; 16] = [0, 0, 0x55, 0x8B, 0x1C, 0x2D, 0x30, 0x00, 0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x10, 0x00];

    #[test]
    fn test_parse_emit() {
        let r = RethRepr::parse(&Reth::new_checked(&BYTES[..]).unwrap());
        assert_eq!(r, RethRepr { va: 0x558B_1C2D_3000, rkey: 0x1234, dma_len: 4096 });
        let mut out = [0u8; 16];
        r.emit(&mut Reth::new_unchecked(&mut out[..]));
        assert_eq!(out, BYTES);
    }

    #[test]
    fn test_impossible_len() {
        assert!(Reth::new_checked(&BYTES[..15]).is_err());
    }
}
