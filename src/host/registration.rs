//! Registration checks: what the kernel's `ib_umem_get` guarantees for `ibv_reg_mr` on
//! rdma_rxe, without pinning.
//!
//! The kernel pins the whole range with `pin_user_pages_fast`, asking for write access when the
//! MR is writable (`ib_access_writable`: LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC or MW_BIND).
//! Its answers, which we give:
//! - `addr + length` wraps, or its page-rounded end does: EINVAL;
//! - more than `u32::MAX` pages: EINVAL;
//! - a page of the range not mapped (NULL, past the end of a buffer, unmapped), mapped without
//!   read permission (PROT_NONE), mapped without write permission for a writable MR, or a
//!   `VM_IO | VM_PFNMAP` special mapping (`[vvar]`, `[vsyscall]`): EFAULT.
//!
//! The kernel also answers ENOMEM when a caller without CAP_IPC_LOCK would pin more than
//! RLIMIT_MEMLOCK; urxe pins nothing, so that limit does not apply and is not emulated.
//! Length 0 is left to the caller (the provider rejects NULL with length 0).
//!
//! The check is one pass over `/proc/self/maps` per registration (stopping at the range's end) (ranges and permissions), not
//! a per-page call, so a large MR costs the same as a small one. It is a snapshot: the
//! application may unmap or protect the range later, which [`super::fault`] turns into access
//! errors instead of signals.

use crate::engine::AccessFlags;

/// Access flags for which the kernel pins the range for writing (`ib_access_writable`).
const WRITABLE: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC)
    .union(AccessFlags::MW_BIND);

/// Checks that `[addr, addr+len)` is mapped with the access `access` needs; `Err(errno)` as
/// the kernel's `ib_umem_get` would answer (see the module documentation).
pub fn check(addr: u64, len: u64, access: AccessFlags) -> Result<(), i32> {
    if len == 0 {
        return Ok(());
    }
    let page = page_size();
    let end = addr.checked_add(len).ok_or(libc::EINVAL)?;
    let first = addr & !(page - 1);
    let last = end.checked_add(page - 1).ok_or(libc::EINVAL)? & !(page - 1);
    if (last - first) / page > u64::from(u32::MAX) {
        return Err(libc::EINVAL);
    }
    let maps = match std::fs::File::open("/proc/self/maps") {
        Ok(f) => std::io::BufReader::with_capacity(64 << 10, f),
        // Without procfs there is nothing to check against; accesses stay guarded.
        Err(_) => return Ok(()),
    };
    // Lines are read only up to the range's end (the kernel lists mappings in address order).
    let lines = std::io::BufRead::split(maps, b'\n').map_while(Result::ok);
    covered(lines, first, last, access.intersects(WRITABLE))
}

/// Whether `(addr, len)` is the implicit on-demand-paging MR, `ibv_reg_mr(pd, NULL, SIZE_MAX,
/// IBV_ACCESS_ON_DEMAND | ...)`: the whole address space of the process.
pub fn is_implicit(addr: u64, len: u64) -> bool {
    addr == 0 && len == u64::MAX
}

/// What `ibv_reg_mr` checks for an on-demand-paging MR (`IBV_ACCESS_ON_DEMAND`). Nothing is
/// pinned or faulted in, so, as the kernel's `ib_umem_odp_get`, the mappings are not looked at:
/// the range may have holes or be mapped later, and every access is checked when it happens
/// ([`super::fault`]). Only a range whose end, or page-rounded end, wraps is refused (EINVAL);
/// the implicit MR ([`is_implicit`]) is the one range that reaches the top.
pub fn check_on_demand(addr: u64, len: u64) -> Result<(), i32> {
    if is_implicit(addr, len) {
        return Ok(());
    }
    let end = addr.checked_add(len).ok_or(libc::EINVAL)?;
    end.checked_add(page_size() - 1).ok_or(libc::EINVAL)?;
    Ok(())
}

/// Whether an MR with `access` is writable as the kernel counts it (`ib_access_writable`):
/// such an MR is pinned, or prefetched, for writing.
pub fn writable(access: AccessFlags) -> bool {
    access.intersects(WRITABLE)
}

/// Faults the pages of `[addr, addr + len)` in, as `ibv_advise_mr`'s PREFETCH (`write` false)
/// and PREFETCH_WRITE (`write` true) ask: `madvise(MADV_POPULATE_READ / _WRITE)`, which
/// faults each page in as a read (write) access would, breaking copy-on-write for writing,
/// without changing a byte. Nothing stays pinned: the application may still unmap the range.
/// EFAULT if part of the range is not mapped, or not with the access asked for, or cannot be
/// populated (a `VM_IO`/`VM_PFNMAP` mapping). Before Linux 5.14 (no MADV_POPULATE_*) each page
/// is read through the guarded copy instead: pages are faulted in for reading only (a write
/// fault is left to the access; an atomic add of 0 would do it, but in the syscall fallback
/// mode an atomic is not guarded against a read-only page).
pub fn prefetch(addr: u64, len: u64, write: bool) -> Result<(), i32> {
    if len == 0 {
        return Ok(());
    }
    let page = page_size();
    let end = addr.checked_add(len).ok_or(libc::EFAULT)?;
    let first = addr & !(page - 1);
    let last = end.checked_add(page - 1).ok_or(libc::EFAULT)? & !(page - 1);
    let advice = if write { libc::MADV_POPULATE_WRITE } else { libc::MADV_POPULATE_READ };
    if populate_supported(first) {
        let mut at = first;
        while at < last {
            // One call covers at most 1 GiB, so a huge range is not one uninterruptible call.
            let n = (last - at).min(1 << 30);
            // SAFETY: madvise with a populate advice only faults pages in (it changes no
            // content and no mapping); any address range is safe to pass, bad ones give errors.
            let r = unsafe { libc::madvise(at as usize as *mut libc::c_void, n as usize, advice) };
            if r != 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(libc::EFAULT);
            }
            at += n;
        }
        return Ok(());
    }
    touch_pages(addr, first, last, page)
}

/// The fallback of [`prefetch`]: reads the first byte of `[addr, last)` and each page start
/// after it (`first` is `addr` rounded down to a page) through the guarded copy.
fn touch_pages(addr: u64, first: u64, last: u64, page: u64) -> Result<(), i32> {
    let mut at = first;
    while at < last {
        let p = at.max(addr);
        let mut b = 0u8;
        // SAFETY: a guarded one-byte read of memory the application handed to the device, into
        // our own local; a missing page is reported, not raised.
        unsafe { super::fault::copy(&mut b, p as usize as *const u8, 1) }.map_err(|_| libc::EFAULT)?;
        at += page;
    }
    Ok(())
}

/// Whether the kernel knows MADV_POPULATE_READ (Linux 5.14): a zero-length call on a
/// page-aligned address succeeds when it does and is EINVAL when it does not.
fn populate_supported(aligned: u64) -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    static KNOWN: AtomicU8 = AtomicU8::new(0);
    match KNOWN.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            // SAFETY: a zero-length madvise touches nothing.
            let ok = unsafe { libc::madvise(aligned as usize as *mut libc::c_void, 0, libc::MADV_POPULATE_READ) } == 0;
            KNOWN.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
            ok
        }
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 && (p as u64).is_power_of_two() {
        p as u64
    } else {
        4096
    }
}

/// One line of `/proc/<pid>/maps`: `start-end perms offset dev inode [name]`.
struct Mapping<'a> {
    start: u64,
    end: u64,
    read: bool,
    write: bool,
    name: &'a [u8],
}

fn parse_line(line: &[u8]) -> Option<Mapping<'_>> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let range = fields.next()?;
    let perms = fields.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let hex = |s: &[u8]| u64::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok();
    let start = hex(&range[..dash])?;
    let end = hex(&range[dash + 1..])?;
    // offset, dev, inode, then the optional name.
    let name = fields.nth(3).unwrap_or(&[]);
    Some(Mapping { start, end, read: perms.first() == Some(&b'r'), write: perms.get(1) == Some(&b'w'), name })
}

/// Whether the mappings on `lines` (ascending, as the kernel prints them) cover the
/// page range `[first, last)` without a hole, each with the access needed.
fn covered<L: AsRef<[u8]>>(
    lines: impl IntoIterator<Item = L>,
    first: u64,
    last: u64,
    writable: bool,
) -> Result<(), i32> {
    let mut cur = first;
    for line in lines {
        let Some(m) = parse_line(line.as_ref()) else { continue };
        if m.end <= cur {
            continue;
        }
        if m.start > cur {
            break; // a hole
        }
        let special = m.name.starts_with(b"[vvar") || m.name == b"[vsyscall]";
        let permitted = if writable { m.write } else { m.read };
        if special || !permitted {
            return Err(libc::EFAULT);
        }
        cur = m.end;
        if cur >= last {
            return Ok(());
        }
    }
    Err(libc::EFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RW: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE);
    const RO: AccessFlags = AccessFlags::REMOTE_READ;

    /// Three fresh anonymous pages, unmapped on drop.
    struct Pages(*mut u8, usize);
    impl Pages {
        fn new() -> Pages {
            let len = 3 * page_size() as usize;
            // SAFETY: an anonymous private mapping; the result is checked.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            Pages(p as *mut u8, len)
        }
        fn page(&self, i: usize) -> u64 {
            self.0 as u64 + i as u64 * page_size()
        }
        fn protect(&self, i: usize, prot: i32) {
            // SAFETY: page `i` is inside our own mapping.
            let r = unsafe { libc::mprotect(self.page(i) as *mut libc::c_void, page_size() as usize, prot) };
            assert_eq!(r, 0);
        }
        fn unmap(&self, i: usize) {
            // SAFETY: page `i` is inside our own mapping, not referenced by Rust.
            let r = unsafe { libc::munmap(self.page(i) as *mut libc::c_void, page_size() as usize) };
            assert_eq!(r, 0);
        }
    }
    impl Drop for Pages {
        fn drop(&mut self) {
            // SAFETY: our own mapping (munmap of already-unmapped pages is fine).
            unsafe { libc::munmap(self.0 as *mut libc::c_void, self.1) };
        }
    }

    #[test]
    fn mapped_ranges_pass_with_the_access_they_have() {
        let p = Pages::new();
        let ps = page_size();
        assert_eq!(check(p.page(0) + 5, 3 * ps - 5, RW), Ok(()));
        assert_eq!(check(p.page(1), 1, RO), Ok(()));
        p.protect(1, libc::PROT_READ);
        assert_eq!(check(p.page(0), 3 * ps, RO), Ok(()), "read-only is enough for REMOTE_READ");
        for w in [AccessFlags::LOCAL_WRITE, AccessFlags::REMOTE_ATOMIC, AccessFlags::MW_BIND] {
            assert_eq!(check(p.page(0), 3 * ps, w), Err(libc::EFAULT), "{w:?} pins for writing");
        }
        assert_eq!(check(p.page(2), ps, RW), Ok(()), "the writable page alone");
    }

    #[test]
    fn holes_and_protected_pages_are_efault() {
        let p = Pages::new();
        let ps = page_size();
        p.protect(2, libc::PROT_NONE);
        assert_eq!(check(p.page(2), 8, RO), Err(libc::EFAULT), "PROT_NONE");
        assert_eq!(check(p.page(0), 2 * ps, RO), Ok(()));
        p.unmap(1);
        assert_eq!(check(p.page(0), 2 * ps, RO), Err(libc::EFAULT), "unmapped in the middle");
        assert_eq!(check(p.page(0), ps, RW), Ok(()));
        assert_eq!(check(0, 1 << 20, RW), Err(libc::EFAULT), "NULL");
        assert_eq!(check(p.page(0), 1 << 40, RW), Err(libc::EFAULT), "1 TiB over a small buffer");
    }

    #[test]
    fn wrapping_and_oversized_ranges_are_einval() {
        assert_eq!(check(u64::MAX - 10, 100, RW), Err(libc::EINVAL));
        assert_eq!(check(u64::MAX - page_size() + 2, page_size() - 3, RW), Err(libc::EINVAL), "end rounds past 2^64");
        assert_eq!(check(page_size(), (u64::from(u32::MAX) + 1) * page_size(), RW), Err(libc::EINVAL));
        assert_eq!(check(0, 0, RW), Ok(()), "length 0 is the caller's to judge");
    }

    #[test]
    fn on_demand_ranges_need_no_mapping_only_no_wrap() {
        let p = Pages::new();
        p.unmap(1);
        let ps = page_size();
        assert_eq!(check_on_demand(p.page(0), 3 * ps), Ok(()), "a hole is fine: accesses are checked at use");
        assert_eq!(check_on_demand(0, 1 << 20), Ok(()), "NULL is fine: it may be mapped later");
        assert_eq!(check_on_demand(0, u64::MAX), Ok(()), "the implicit MR");
        assert!(is_implicit(0, u64::MAX) && !is_implicit(4096, u64::MAX - 4096) && !is_implicit(0, 1 << 40));
        assert_eq!(check_on_demand(u64::MAX - 10, 100), Err(libc::EINVAL));
        assert_eq!(check_on_demand(ps, u64::MAX - ps), Err(libc::EINVAL), "end at 2^64 - 1 rounds past it");
    }

    #[test]
    fn writable_is_the_kernels_set() {
        assert!(writable(AccessFlags::LOCAL_WRITE) && writable(AccessFlags::MW_BIND));
        assert!(writable(AccessFlags::REMOTE_ATOMIC) && writable(AccessFlags::REMOTE_WRITE));
        assert!(!writable(AccessFlags::REMOTE_READ | AccessFlags::ON_DEMAND));
    }

    #[test]
    fn prefetch_faults_mapped_pages_in_and_refuses_holes() {
        crate::host::fault::install();
        let p = Pages::new();
        let ps = page_size();
        assert_eq!(prefetch(p.page(0) + 7, 3 * ps - 7, true), Ok(()));
        assert_eq!(prefetch(p.page(0), 3 * ps, false), Ok(()));
        assert_eq!(prefetch(p.page(0), 0, true), Ok(()), "nothing to do");
        p.protect(2, libc::PROT_READ);
        assert_eq!(prefetch(p.page(2), ps, false), Ok(()), "read-only pages prefetch for reading");
        assert_eq!(prefetch(p.page(2), ps, true), Err(libc::EFAULT), "not for writing");
        p.protect(2, libc::PROT_NONE);
        assert_eq!(prefetch(p.page(2), 1, false), Err(libc::EFAULT), "PROT_NONE");
        p.unmap(1);
        assert_eq!(prefetch(p.page(0), 2 * ps, false), Err(libc::EFAULT), "a hole");
        assert_eq!(prefetch(p.page(0), ps, true), Ok(()));
        assert_eq!(prefetch(0, 64, false), Err(libc::EFAULT), "NULL");
        assert_eq!(prefetch(u64::MAX - 8, 64, false), Err(libc::EFAULT), "wrapping");
    }

    #[test]
    fn prefetch_fallback_touches_each_page_and_refuses_holes() {
        crate::host::fault::install();
        let p = Pages::new();
        let ps = page_size();
        assert_eq!(touch_pages(p.page(0) + 9, p.page(0), p.page(3), ps), Ok(()));
        p.protect(2, libc::PROT_NONE);
        assert_eq!(touch_pages(p.page(1), p.page(1), p.page(3), ps), Err(libc::EFAULT), "PROT_NONE");
        p.unmap(1);
        assert_eq!(touch_pages(p.page(0), p.page(0), p.page(2), ps), Err(libc::EFAULT), "a hole");
        assert_eq!(touch_pages(p.page(0), p.page(0), p.page(1), ps), Ok(()));
    }

    fn lines(maps: &[u8]) -> impl Iterator<Item = &[u8]> {
        maps.split(|&b| b == b'\n')
    }

    #[test]
    fn parses_the_kernel_format() {
        let maps = b"00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon\n\
00651000-00652000 rw-p 00051000 08:02 173521      /usr/bin/dbus-daemon\n\
00652000-00655000 rw-p 00000000 00:00 0 \n\
7ffd1c9f0000-7ffd1c9f2000 r--p 00000000 00:00 0                          [vvar]\n";
        assert_eq!(covered(lines(maps), 0x400000, 0x452000, false), Ok(()));
        assert_eq!(covered(lines(maps), 0x400000, 0x452000, true), Err(libc::EFAULT));
        assert_eq!(covered(lines(maps), 0x651000, 0x655000, true), Ok(()), "adjacent mappings join");
        assert_eq!(covered(lines(maps), 0x451000, 0x652000, false), Err(libc::EFAULT), "hole");
        assert_eq!(covered(lines(maps), 0x7ffd1c9f0000, 0x7ffd1c9f1000, false), Err(libc::EFAULT), "[vvar]");
        assert_eq!(covered(lines(maps), 0x655000, 0x656000, false), Err(libc::EFAULT), "past the last");
    }

    /// Prints the cost of one check: it does not grow with the MR's size.
    #[test]
    #[ignore = "a measurement: cargo test --release --lib registration_cost -- --ignored --nocapture"]
    fn registration_cost() {
        let p = Pages::new();
        // SAFETY: a reservation of 1 GiB, never touched (no pages are faulted in).
        let big = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                1 << 30,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(big, libc::MAP_FAILED);
        for (name, addr, len) in [("4 KiB", p.page(0), page_size()), ("1 GiB", big as u64, 1u64 << 30)] {
            let t = std::time::Instant::now();
            for _ in 0..1000 {
                assert_eq!(check(addr, len, RW), Ok(()));
            }
            println!("{name:>6} MR: {:7.1} us per registration check", t.elapsed().as_secs_f64() * 1e3);
        }
        // SAFETY: our own mapping.
        unsafe { libc::munmap(big, 1 << 30) };
    }
}
