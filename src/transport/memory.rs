//! The process-memory accessor: [`HostMemory`] over raw addresses of this process.
//!
//! The engine calls it only after its own checks (key, PD, access flags, and that the whole
//! range lies inside a registered region), so an address reaching this accessor is inside
//! memory the application registered and promised to keep mapped, exactly as with a NIC doing
//! DMA. Memory shared with the application is never turned into a Rust reference (`&[u8]`):
//! the application may write it concurrently, so we copy with raw pointer copies.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::{HostMemory, MemError};

/// Registered memory of the current process.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessMemory;

fn checked_ptr(addr: u64, len: usize) -> Result<*mut u8, MemError> {
    // Null and wrapping ranges can never be registered memory.
    if addr == 0 || addr.checked_add(len as u64).is_none() {
        return Err(MemError::OutOfBounds { addr, len: len as u64 });
    }
    Ok(addr as usize as *mut u8)
}

impl HostMemory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        if buf.is_empty() {
            return Ok(());
        }
        let src = checked_ptr(addr, buf.len())?;
        // SAFETY: the engine verified that [addr, addr+len) lies inside a memory region the
        // application registered and keeps mapped while registered (the verbs contract). `buf` is
        // our own buffer and cannot overlap application memory we are reading.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        if data.is_empty() {
            return Ok(());
        }
        let dst = checked_ptr(addr, data.len())?;
        // SAFETY: as in `read`; the engine also checked the region grants local or remote write.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    fn atomic_cmp_swap(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        let p = atomic_ptr(addr)?;
        // SAFETY: 8-byte aligned (checked), inside a registered region with REMOTE_ATOMIC access
        // (checked by the engine). Concurrent plain accesses by the application are its own
        // business, as with a NIC's atomics.
        let a = unsafe { AtomicU64::from_ptr(p) };
        Ok(match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(v) | Err(v) => v,
        })
    }

    fn atomic_fetch_add(&self, addr: u64, add: u64) -> Result<u64, MemError> {
        let p = atomic_ptr(addr)?;
        // SAFETY: as in `atomic_cmp_swap`.
        let a = unsafe { AtomicU64::from_ptr(p) };
        Ok(a.fetch_add(add, Ordering::SeqCst))
    }
}

fn atomic_ptr(addr: u64) -> Result<*mut u64, MemError> {
    if !addr.is_multiple_of(8) {
        return Err(MemError::Misaligned { addr });
    }
    Ok(checked_ptr(addr, 8)? as *mut u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_writes_and_atomics_reach_process_memory() {
        let mut region = vec![0u64; 4];
        let base = region.as_mut_ptr() as u64;
        let m = ProcessMemory;
        m.write(base + 8, &7u64.to_ne_bytes()).unwrap();
        let mut b = [0u8; 8];
        m.read(base + 8, &mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 7);
        assert_eq!(m.atomic_fetch_add(base + 8, 5).unwrap(), 7);
        assert_eq!(m.atomic_cmp_swap(base + 8, 12, 99).unwrap(), 12);
        assert_eq!(m.atomic_cmp_swap(base + 8, 12, 1).unwrap(), 99, "failed compare returns the current value");
        assert_eq!(m.atomic_fetch_add(base + 3, 1), Err(MemError::Misaligned { addr: base + 3 }));
        assert!(m.read(0, &mut b).is_err());
        assert!(m.write(u64::MAX - 2, &[1, 2, 3, 4]).is_err());
        drop(region);
    }
}
