//! What crosses the sans-IO boundary: host memory, received datagrams, packets to send.

use std::fmt;
use std::net::IpAddr;

/// Host memory as the engine sees it: a flat address space of the process (or, in tests, of a
/// simulated host). Implementations check nothing about keys or PDs — the engine has already —
/// but must refuse addresses they cannot reach rather than fault.
pub trait HostMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError>;
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError>;
    /// 8-byte aligned atomic compare-and-swap; returns the original value.
    fn atomic_cmp_swap(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError>;
    /// 8-byte aligned atomic fetch-and-add; returns the original value.
    fn atomic_fetch_add(&self, addr: u64, add: u64) -> Result<u64, MemError>;
    /// 8-byte aligned atomic store (ATOMIC WRITE): the 8 bytes become visible as one unit,
    /// after every write the engine made before. The default is a compare-and-swap loop,
    /// which is both (a successful swap is one atomic read-modify-write with full ordering);
    /// each retry means another writer changed the word, so it ends unless the word is
    /// rewritten without pause, and gives up (`Fault`) after a bounded number of tries.
    fn atomic_store(&self, addr: u64, value: u64) -> Result<(), MemError> {
        let mut seen = self.atomic_cmp_swap(addr, 0, 0)?;
        for _ in 0..ATOMIC_STORE_TRIES {
            let now = self.atomic_cmp_swap(addr, seen, value)?;
            if now == seen {
                return Ok(());
            }
            seen = now;
        }
        Err(MemError::Fault { addr })
    }
}

/// Bound of [`HostMemory::atomic_store`]'s default compare-and-swap loop.
pub const ATOMIC_STORE_TRIES: u32 = 1 << 16;

/// A host memory access that could not be done. `Fault`: registered memory no longer mapped
/// with the access needed (unmapped or protected after registration), at `addr`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MemError {
    OutOfBounds { addr: u64, len: u64 },
    Misaligned { addr: u64 },
    Fault { addr: u64 },
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemError::OutOfBounds { addr, len } => {
                write!(f, "access of {len} bytes at {addr:#x} is outside host memory")
            }
            MemError::Misaligned { addr } => write!(f, "atomic at {addr:#x} is not 8-byte aligned"),
            MemError::Fault { addr } => write!(f, "registered memory at {addr:#x} is no longer mapped"),
        }
    }
}

impl std::error::Error for MemError {}

/// How much of a received packet's IP header the driver knows, for the ICRC.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum IcrcCheck {
    /// The full set of covered IP fields (IPv6; IPv4 from a raw socket or a simulator).
    Full(crate::wire::icrc::IpFields),
    /// IPv4 via a UDP socket: the IP ID is unknown. Verify assuming ID 0 with DF (what urxe
    /// peers send); on mismatch accept and count `icrc_unverified`.
    V4NoId { src: [u8; 4], dst: [u8; 4] },
    /// The driver hashed the packet itself, where its buffer is writable (see
    /// [`crate::wire::icrc::IcrcFlow::icrc_in_place`]): `icrc` is the ICRC of the payload for
    /// the covered fields it knows. `id_known` false: IPv4 from a UDP socket, hashed as
    /// `V4NoId` assumes (ID 0, DF), a mismatch accepted and counted `icrc_unverified`.
    Hashed { icrc: u32, id_known: bool },
}

/// One received UDP datagram addressed to port 4791.
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    pub src: IpAddr,
    pub src_port: u16,
    pub dst: IpAddr,
    pub icrc: IcrcCheck,
    /// The UDP payload: BTH .. ICRC.
    pub payload: &'a [u8],
    /// The IP header's ECN field was CE (congestion experienced on the way; DCQCN's NP).
    pub ce: bool,
}

/// One datagram the engine wants sent to `dst`:4791 from UDP source port `src_port`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Transmit {
    pub dst: IpAddr,
    pub src_port: u16,
    /// IPv6 flow label (20 bits) of the packet; IPv4 has none.
    pub flow_label: u32,
    pub len: usize,
    /// The IPv4 TOS / IPv6 traffic class to send it with: DSCP in the upper six bits, ECN in
    /// the lower two (ECT(0) on data while DCQCN is on; DSCP `cnp_dscp` on a CNP).
    pub tos: u8,
}
