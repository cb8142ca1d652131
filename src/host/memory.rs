//! The process-memory accessor: [`HostMemory`] over raw addresses of this process.
//!
//! The engine calls it only after its own checks (key, PD, access flags, and that the whole
//! range lies inside a registered region), so an address reaching this accessor is inside
//! memory the application registered, as with a NIC doing DMA. Registration checked that the
//! range was mapped with the access it needs ([`super::registration`]); the application may
//! still unmap or protect it afterwards, so every access goes through [`super::fault`] and a
//! vanished page is [`MemError::Fault`], never a signal. Memory shared with the application is
//! never turned into a Rust reference (`&[u8]`): the application may write it concurrently, so
//! we copy with raw copies (vm-memory's rule). An on-demand-paging MR was not checked at
//! registration and the implicit one (`ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND)`)
//! covers every address of the process: for those the guarded access is the only check, and
//! with the implicit MR the application has handed the peer the whole process, as it does with
//! a NIC's implicit ODP.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use super::fault;
use crate::engine::{HostMemory, MemError};

/// Registered memory of the current process. Holding one is a licence to read and write any
/// address through the [`HostMemory`] methods, hence the `unsafe` constructor and no `Clone`,
/// `Copy` or `Default`.
#[derive(Debug)]
pub struct ProcessMemory {
    _licence: (),
}

impl ProcessMemory {
    /// Creates the accessor and installs the fault handler ([`fault::install`]).
    ///
    /// # Safety
    /// The holder passes to the [`HostMemory`] methods only address ranges the application
    /// handed to the verbs layer for access (registered memory regions, checked by the engine
    /// against key, PD, bounds and access flags): never memory that Rust code of this process
    /// owns or references — unless the application registered it itself (the implicit ODP MR
    /// covers the whole address space: the application's choice, as with a NIC's DMA). Such a range may be unmapped or protected by the time it is accessed
    /// (that is reported as [`MemError::Fault`]); it must not be memory the Rust abstract machine
    /// considers borrowed.
    pub unsafe fn new() -> Self {
        fault::install();
        ProcessMemory { _licence: () }
    }

    /// For tests of the layers above whose engine registers no memory region: with none, the
    /// engine's key, PD and bounds checks refuse every access before one reaches memory.
    #[cfg(test)]
    pub(crate) fn without_regions() -> Self {
        // SAFETY: the caller's engine registers no MR, so no address reaches the methods.
        unsafe { Self::new() }
    }
}

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
        // SAFETY: the constructor's contract: [addr, addr+len) is registered application
        // memory, which Rust does not reference and `buf` (ours) cannot overlap. It may be
        // unmapped: `fault::copy` reports that.
        unsafe { fault::copy(buf.as_mut_ptr(), src, buf.len()) }
            .map_err(|f| MemError::Fault { addr: addr + f.done as u64 })
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        if data.is_empty() {
            return Ok(());
        }
        let dst = checked_ptr(addr, data.len())?;
        // SAFETY: as in `read`; the engine also checked the region grants local or remote
        // write. A fault part-way leaves the first `done` bytes written (the responder NAKs).
        unsafe { fault::copy(dst, data.as_ptr(), data.len()) }
            .map_err(|f| MemError::Fault { addr: addr + f.done as u64 })
    }

    fn atomic_cmp_swap(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        let p = atomic_ptr(addr)?;
        // SAFETY: 8-byte aligned (checked), inside a registered region with REMOTE_ATOMIC access
        // (checked by the engine; the constructor's contract). Concurrent plain accesses by the
        // application are its own business, as with a NIC's atomics.
        unsafe { fault::cmp_swap(p, compare, swap) }.map_err(|_| MemError::Fault { addr })
    }

    fn atomic_fetch_add(&self, addr: u64, add: u64) -> Result<u64, MemError> {
        let p = atomic_ptr(addr)?;
        // SAFETY: as in `atomic_cmp_swap`.
        unsafe { fault::fetch_add(p, add) }.map_err(|_| MemError::Fault { addr })
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
    use std::ptr;

    #[test]
    fn reads_writes_and_atomics_reach_process_memory() {
        let mut region = vec![0u64; 4];
        let base = region.as_mut_ptr() as u64;
        // SAFETY: only `region` (not referenced while `m` accesses it) is accessed.
        let m = unsafe { ProcessMemory::new() };
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

    fn page() -> usize {
        // SAFETY: no preconditions.
        unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
    }

    /// `n` fresh anonymous read-write pages; Rust never references them.
    fn map(n: usize) -> u64 {
        // SAFETY: an anonymous private mapping; the result is checked.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                n * page(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as u64
    }

    fn protect(addr: u64, prot: i32) {
        // SAFETY: one page of a mapping the test made.
        assert_eq!(unsafe { libc::mprotect(addr as *mut libc::c_void, page(), prot) }, 0);
    }

    fn unmap(addr: u64, n: usize) {
        // SAFETY: pages of a mapping the test made, not referenced.
        assert_eq!(unsafe { libc::munmap(addr as *mut libc::c_void, n * page()) }, 0);
    }

    #[test]
    fn unmapped_and_protected_pages_are_errors_not_signals() {
        // SAFETY: only the test's own mappings are accessed.
        let m = unsafe { ProcessMemory::new() };
        let base = map(3);
        let (p0, p1, p2) = (base, base + page() as u64, base + 2 * page() as u64);
        let data = vec![0xabu8; 2 * page()];
        m.write(p0, &data).unwrap();
        unmap(p1, 1);

        // A copy that runs into the hole stops there and says where; the bytes before it landed.
        assert_eq!(m.write(p0 + 8, &data), Err(MemError::Fault { addr: p1 }));
        let mut back = vec![0u8; page() - 8];
        m.read(p0 + 8, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0xab));
        let mut b = [0u8; 16];
        assert_eq!(m.read(p1 + 8, &mut b), Err(MemError::Fault { addr: p1 + 8 }));
        assert_eq!(m.read(p0 + page() as u64 - 4, &mut b), Err(MemError::Fault { addr: p1 }));
        assert_eq!(m.atomic_fetch_add(p1, 1), Err(MemError::Fault { addr: p1 }));
        assert_eq!(m.atomic_cmp_swap(p1 + 8, 0, 1), Err(MemError::Fault { addr: p1 + 8 }));

        // Read-only: reads work, writes and both atomics fault, and nothing changed.
        m.write(p2, &7u64.to_ne_bytes()).unwrap();
        protect(p2, libc::PROT_READ);
        assert_eq!(m.write(p2, &[1]), Err(MemError::Fault { addr: p2 }));
        assert_eq!(m.atomic_fetch_add(p2, 1), Err(MemError::Fault { addr: p2 }));
        assert_eq!(m.atomic_cmp_swap(p2, 7, 9), Err(MemError::Fault { addr: p2 }));
        m.read(p2, &mut b[..8]).unwrap();
        assert_eq!(u64::from_ne_bytes(b[..8].try_into().unwrap()), 7);

        // PROT_NONE: nothing works; after PROT_READ|WRITE again everything does.
        protect(p2, libc::PROT_NONE);
        assert_eq!(m.read(p2, &mut b), Err(MemError::Fault { addr: p2 }));
        protect(p2, libc::PROT_READ | libc::PROT_WRITE);
        assert_eq!(m.atomic_cmp_swap(p2, 7, 9), Ok(7));
        assert_eq!(m.atomic_fetch_add(p2, 1), Ok(9));
        unmap(p0, 1);
        unmap(p2, 1);
    }

    #[test]
    fn faults_from_many_threads_at_once_are_all_reported() {
        // SAFETY: only the test's own (inaccessible) page is accessed.
        let m = unsafe { ProcessMemory::new() };
        // PROT_NONE rather than unmapped: tests run in parallel and another could map the hole.
        // Two pages, so this mapping cannot land in the one-page holes other tests leave.
        let gone = map(2);
        protect(gone, libc::PROT_NONE);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let mut b = [0u8; 64];
                    for _ in 0..1000 {
                        assert!(m.read(gone, &mut b).is_err());
                        assert!(m.atomic_fetch_add(gone, 1).is_err());
                    }
                });
            }
        });
        unmap(gone, 2);
    }

    /// Runs `f` in a forked child and returns its wait status. The child does only
    /// async-signal-safe things (memory accesses, `_exit`).
    fn in_child(f: fn()) -> i32 {
        // SAFETY: fork in a test process; the child runs `f` (async-signal-safe) and `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            f();
            // SAFETY: leaves the child without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        status
    }

    #[test]
    fn faults_outside_our_routines_still_kill() {
        // SAFETY: nothing is accessed through it; it installs the handler.
        let _m = unsafe { ProcessMemory::new() };
        assert_eq!(fault::mode(), fault::Mode::Guarded);
        let st = in_child(|| {
            let p = map(1);
            protect(p, libc::PROT_NONE);
            // SAFETY: deliberately faults (the point of the test): an application bug.
            unsafe { ptr::read_volatile(p as *const u8) };
        });
        assert!(libc::WIFSIGNALED(st) && libc::WTERMSIG(st) == libc::SIGSEGV, "status {st:#x}");
        let st = in_child(|| {
            let m = ProcessMemory { _licence: () };
            let p = map(1);
            unmap(p, 1);
            let ok = m.read(p, &mut [0u8; 4]).is_err() && m.atomic_fetch_add(p, 1).is_err();
            // SAFETY: ends the child with the verdict.
            unsafe { libc::_exit(if ok { 7 } else { 1 }) };
        });
        assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 7, "our faults survive a fork: {st:#x}");
    }

    const CHAIN_CHILD: &str = "URXE_TEST_CHAIN_CHILD";

    /// Runs `chain_child` in a fresh process with `mode` and returns its exit status.
    fn chain_child_status(mode: &str) -> std::process::ExitStatus {
        let exe = std::env::current_exe().unwrap();
        std::process::Command::new(exe)
            .args(["--ignored", "--exact", "--nocapture", "host::memory::tests::chain_child"])
            .env(CHAIN_CHILD, mode)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
    }

    #[test]
    fn previous_handlers_and_default_actions_still_apply() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(chain_child_status("app").code(), Some(42), "the application's handler ran");
        assert_eq!(chain_child_status("dfl-fault").signal(), Some(libc::SIGSEGV));
        assert_eq!(chain_child_status("dfl-raise").signal(), Some(libc::SIGBUS));
    }

    /// Run by the test above in a fresh process. Installs, before urxe's handler, either an
    /// "application" SIGSEGV handler (which must keep receiving the application's own faults)
    /// or the default actions (which must still end the process, for a fault and a raise).
    #[test]
    #[ignore = "run as a subprocess by previous_handlers_and_default_actions_still_apply"]
    fn chain_child() {
        let Some(mode) = std::env::var_os(CHAIN_CHILD) else { return };
        extern "C" fn app_handler(_: i32, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
            // SAFETY: async-signal-safe exit with the marker status.
            unsafe { libc::_exit(42) };
        }
        for sig in [libc::SIGSEGV, libc::SIGBUS] {
            // SAFETY: installs a plain handler or the default action.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                if mode == "app" {
                    sa.sa_sigaction = app_handler as *const () as usize;
                    sa.sa_flags = libc::SA_SIGINFO;
                } else {
                    sa.sa_sigaction = libc::SIG_DFL;
                }
                libc::sigaction(sig, &sa, ptr::null_mut());
            }
        }
        // SAFETY: accesses only the child's own unmapped page.
        let m = unsafe { ProcessMemory::new() };
        let p = map(1);
        unmap(p, 1);
        assert!(m.write(p, &[1, 2, 3]).is_err(), "our fault is ours");
        if mode == "dfl-raise" {
            // SAFETY: a sent signal, not a fault of ours.
            unsafe { libc::raise(libc::SIGBUS) };
        } else {
            // SAFETY: deliberately faults outside our routines.
            unsafe { ptr::read_volatile(p as *const u8) };
        }
        std::process::exit(3);
    }

    /// Prints the cost of a 4 KiB copy: memcpy, the guarded routine, process_vm_writev.
    #[test]
    #[ignore = "a measurement: cargo test --release --lib copy_cost -- --ignored --nocapture"]
    fn copy_cost() {
        // SAFETY: only the test's own buffers are accessed.
        let m = unsafe { ProcessMemory::new() };
        let dst = map(1);
        let src = vec![5u8; 4096];
        let n = 200_000u32;
        let time = |name: &str, f: &dyn Fn()| {
            let t = std::time::Instant::now();
            for _ in 0..n {
                f();
            }
            println!("{name:>24}: {:7.1} ns per copy", t.elapsed().as_nanos() as f64 / f64::from(n));
        };
        // SAFETY: dst is our own mapping, src our own buffer.
        time("4 KiB memcpy", &|| unsafe {
            ptr::copy_nonoverlapping(src.as_ptr(), std::hint::black_box(dst as *mut u8), 4096)
        });
        time("4 KiB guarded", &|| m.write(std::hint::black_box(dst), &src).unwrap());
        time("4 KiB process_vm_writev", &|| {
            let l = libc::iovec { iov_base: src.as_ptr() as *mut libc::c_void, iov_len: 4096 };
            let r = libc::iovec { iov_base: dst as *mut libc::c_void, iov_len: 4096 };
            // SAFETY: the kernel checks both ranges.
            assert_eq!(unsafe { libc::process_vm_writev(libc::getpid(), &l, 1, &r, 1, 0) }, 4096);
        });
        time("64 B guarded", &|| m.write(std::hint::black_box(dst), &src[..64]).unwrap());
        // SAFETY: as above.
        time("64 B memcpy", &|| unsafe {
            ptr::copy_nonoverlapping(src.as_ptr(), std::hint::black_box(dst as *mut u8), 64)
        });
        unmap(dst, 1);
    }

    /// What a page of the property test's mapping allows.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Prot {
        Rw,
        Ro,
        None,
    }

    #[derive(Clone, Debug)]
    enum Op {
        Read { off: usize, len: usize },
        Write { off: usize, len: usize, seed: u8 },
        FetchAdd { word: usize, add: u64 },
        CmpSwap { word: usize, swap: u64, hit: bool },
    }

    const PAGES: usize = 6;

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let span = PAGES * 4096;
        prop_oneof![
            (0..span, 0..3 * 4096usize).prop_map(|(off, len)| Op::Read { off, len }),
            (0..span, 0..3 * 4096usize, any::<u8>()).prop_map(|(off, len, seed)| Op::Write { off, len, seed }),
            (0..span / 8, any::<u64>()).prop_map(|(word, add)| Op::FetchAdd { word, add }),
            (0..span / 8, any::<u64>(), any::<bool>()).prop_map(|(word, swap, hit)| Op::CmpSwap { word, swap, hit }),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Random reads, writes and atomics over pages that are read-write, read-only or
        /// inaccessible: every access either succeeds exactly as on a model or fails with
        /// `Fault` at the first byte it could not touch; nothing outside the range changes
        /// and the process lives.
        #[test]
        fn accesses_over_holes_match_a_model(
            prots in proptest::collection::vec(
                proptest::sample::select(vec![Prot::Rw, Prot::Ro, Prot::None]), PAGES),
            ops in proptest::collection::vec(op(), 1..40),
        ) {
            assert_eq!(page(), 4096, "the strategy assumes 4 KiB pages");
            // SAFETY: only the test's own mapping is accessed.
            let m = unsafe { ProcessMemory::new() };
            let base = map(PAGES);
            let mut model: Vec<u8> = (0..PAGES * 4096).map(|i| (i * 7 + 3) as u8).collect();
            m.write(base, &model).unwrap();
            for (i, p) in prots.iter().enumerate() {
                let prot = match p {
                    Prot::Rw => libc::PROT_READ | libc::PROT_WRITE,
                    Prot::Ro => libc::PROT_READ,
                    Prot::None => libc::PROT_NONE,
                };
                protect(base + (i * 4096) as u64, prot);
            }
            let span = PAGES * 4096;
            // The first byte in [off, off+len) on a page failing `ok`, if any.
            let first_bad = |off: usize, len: usize, ok: &dyn Fn(Prot) -> bool| {
                (off..off + len).find(|&b| !ok(prots[b / 4096]))
            };
            let readable = |p: Prot| p != Prot::None;
            let writable = |p: Prot| p == Prot::Rw;
            for o in ops {
                match o {
                    Op::Read { off, len } => {
                        let len = len.min(span - off);
                        let mut buf = vec![0u8; len];
                        let r = m.read(base + off as u64, &mut buf);
                        match first_bad(off, len, &readable) {
                            None => {
                                proptest::prop_assert_eq!(r, Ok(()));
                                proptest::prop_assert!(buf == model[off..off + len]);
                            }
                            Some(b) => proptest::prop_assert_eq!(r, Err(MemError::Fault { addr: base + b as u64 })),
                        }
                    }
                    Op::Write { off, len, seed } => {
                        let len = len.min(span - off);
                        let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
                        let r = m.write(base + off as u64, &data);
                        match first_bad(off, len, &writable) {
                            None => {
                                proptest::prop_assert_eq!(r, Ok(()));
                                model[off..off + len].copy_from_slice(&data);
                            }
                            Some(b) => {
                                proptest::prop_assert_eq!(r, Err(MemError::Fault { addr: base + b as u64 }));
                                // Bytes before the fault landed; the faulting page is read-only
                                // or inaccessible, so nothing from it on was written.
                                model[off..b].copy_from_slice(&data[..b - off]);
                            }
                        }
                    }
                    Op::FetchAdd { word, add } => {
                        let off = word * 8;
                        let r = m.atomic_fetch_add(base + off as u64, add);
                        let old = u64::from_ne_bytes(model[off..off + 8].try_into().unwrap());
                        if writable(prots[off / 4096]) {
                            proptest::prop_assert_eq!(r, Ok(old));
                            model[off..off + 8].copy_from_slice(&old.wrapping_add(add).to_ne_bytes());
                        } else {
                            proptest::prop_assert_eq!(r, Err(MemError::Fault { addr: base + off as u64 }));
                        }
                    }
                    Op::CmpSwap { word, swap, hit } => {
                        let off = word * 8;
                        let old = u64::from_ne_bytes(model[off..off + 8].try_into().unwrap());
                        let compare = if hit { old } else { old ^ 1 };
                        let r = m.atomic_cmp_swap(base + off as u64, compare, swap);
                        if writable(prots[off / 4096]) {
                            proptest::prop_assert_eq!(r, Ok(old));
                            if hit {
                                model[off..off + 8].copy_from_slice(&swap.to_ne_bytes());
                            }
                        } else {
                            proptest::prop_assert_eq!(r, Err(MemError::Fault { addr: base + off as u64 }));
                        }
                    }
                }
            }
            // The whole mapping, page by page, equals the model wherever it can be read.
            for (i, p) in prots.iter().enumerate() {
                protect(base + (i * 4096) as u64, libc::PROT_READ);
                let mut got = vec![0u8; 4096];
                m.read(base + (i * 4096) as u64, &mut got).unwrap();
                proptest::prop_assert!(got == model[i * 4096..(i + 1) * 4096], "page {} ({:?}) differs", i, p);
            }
            unmap(base, PAGES);
        }
    }
}
