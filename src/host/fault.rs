//! Guarded access to application memory: copies and atomics that report a fault instead of
//! killing the process.
//!
//! After `ibv_reg_mr` the application may still `munmap` or `mprotect` the pages behind a
//! valid key (a NIC would keep them pinned; we cannot). Every access the engine makes through
//! [`super::memory::ProcessMemory`] therefore goes through the routines here:
//!
//! - **x86_64, the guarded mode** (the kernel's exception-table idea): a copy (`rep movsb`), a
//!   compare-and-swap (`lock cmpxchg`) and a fetch-and-add (`lock xadd`), each written in
//!   `global_asm!` so the one instruction that touches application memory has a known address.
//!   A process-wide SIGSEGV/SIGBUS handler (installed once, `SA_SIGINFO | SA_ONSTACK`) checks
//!   the saved instruction pointer of a kernel-generated fault: if it is one of those
//!   instructions it rewrites the saved pointer to the routine's fault exit, which returns
//!   "faulted". Any other signal goes to the handler that was installed before ours (ASan's, the
//!   Rust runtime's, the application's), or — for `SIG_DFL`/`SIG_IGN` — the default action is
//!   restored and the fault re-executes, so the application's own crashes behave as before.
//!   The fast path costs nothing beyond `rep movsb` against `memcpy`.
//! - **Everything else, the syscall mode**: `process_vm_readv`/`process_vm_writev` on our own
//!   pid (the kernel reports EFAULT instead of signalling); atomics first probe that the word
//!   is mapped (`process_vm_readv`), which leaves two holes: a page unmapped between the probe
//!   and the atomic, and a page made read-only, still fault. x86_64 also falls back to this mode if the handler could not be
//!   installed (a sanitizer configured to refuse user SIGSEGV handlers).
//!
//! Limits, documented in docs/DESIGN.md: an application that installs its own SIGSEGV handler
//! after us without chaining to the previous one takes our faults too (the process dies as it
//! would have before this module existed); the previous handler is called with our signal
//! mask, not its own `sa_mask`/`SA_RESETHAND`.
//!
//! The handler is async-signal-safe: it reads two atomics and a `OnceLock` set before it was
//! installed, compares addresses, and at most calls `sigaction`/`raise`.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Once;

/// An access that touched memory which is not mapped with the access it needs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Faulted {
    /// How many bytes were copied before the fault (0 for atomics).
    pub done: usize,
}

const MODE_UNSET: u8 = 0;
const MODE_GUARDED: u8 = 1;
const MODE_SYSCALL: u8 = 2;
static MODE: AtomicU8 = AtomicU8::new(MODE_UNSET);
static INSTALL: Once = Once::new();

/// Which mechanism protects accesses (for tests, the micro-measurement and `urxe stat`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// The signal handler and the guarded routines.
    Guarded,
    /// `process_vm_readv`/`process_vm_writev` on our own pid.
    Syscall,
}

/// Installs the fault handler once per process (idempotent, thread-safe) and returns the mode.
pub fn install() -> Mode {
    INSTALL.call_once(|| {
        let m = if arch::install_handler() { MODE_GUARDED } else { MODE_SYSCALL };
        MODE.store(m, Ordering::Release);
    });
    mode()
}

/// The mode in use ([`install`] must have run; before it, the syscall mode).
pub fn mode() -> Mode {
    if MODE.load(Ordering::Acquire) == MODE_GUARDED {
        Mode::Guarded
    } else {
        Mode::Syscall
    }
}

/// Copies `len` bytes from `src` to `dst`; either side may be unmapped or protected.
///
/// # Safety
/// The ranges do not overlap; `[dst, dst+len)` is not memory any Rust reference points to
/// (other than through `*mut` derived for this call), and `[src, src+len)` is not memory a
/// live `&mut` points to. Unmapped or protected pages are allowed: they are the point.
pub unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) -> Result<(), Faulted> {
    if len == 0 {
        return Ok(());
    }
    if mode() == Mode::Guarded {
        // SAFETY: the caller's contract; the guarded mode means our handler is installed, so a
        // fault inside the routine returns the remaining count instead of killing the process.
        let left = unsafe { arch::guarded_copy(dst, src, len) };
        if left == 0 {
            Ok(())
        } else {
            Err(Faulted { done: len - left })
        }
    } else {
        syscall_copy(dst, src, len)
    }
}

/// Atomic 64-bit compare-and-swap at `p`; returns the value found there.
///
/// # Safety
/// `p` is 8-byte aligned and not memory any Rust reference points to. It may be unmapped or
/// protected.
pub unsafe fn cmp_swap(p: *mut u64, compare: u64, swap: u64) -> Result<u64, Faulted> {
    // SAFETY: forwarded contract.
    unsafe { atomic(p, Atomic::CmpSwap { compare, swap }) }
}

/// Atomic 64-bit fetch-and-add at `p`; returns the value found there.
///
/// # Safety
/// As for [`cmp_swap`].
pub unsafe fn fetch_add(p: *mut u64, add: u64) -> Result<u64, Faulted> {
    // SAFETY: forwarded contract.
    unsafe { atomic(p, Atomic::FetchAdd { add }) }
}

#[derive(Clone, Copy)]
enum Atomic {
    CmpSwap { compare: u64, swap: u64 },
    FetchAdd { add: u64 },
}

/// # Safety
/// As for [`cmp_swap`].
unsafe fn atomic(p: *mut u64, op: Atomic) -> Result<u64, Faulted> {
    if mode() == Mode::Guarded {
        let mut old = 0u64;
        // SAFETY: the caller's contract; `old` is our own local.
        let faulted = unsafe {
            match op {
                Atomic::CmpSwap { compare, swap } => arch::guarded_cas(p, compare, swap, &mut old),
                Atomic::FetchAdd { add } => arch::guarded_fadd(p, add, &mut old),
            }
        };
        return if faulted == 0 { Ok(old) } else { Err(Faulted { done: 0 }) };
    }
    probe_word(p)?;
    // SAFETY: aligned (caller), mapped a moment ago (probe). See the module doc for the window
    // between the probe and the atomic in this mode.
    let a = unsafe { std::sync::atomic::AtomicU64::from_ptr(p) };
    Ok(match op {
        Atomic::CmpSwap { compare, swap } => {
            match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            }
        }
        Atomic::FetchAdd { add } => a.fetch_add(add, Ordering::SeqCst),
    })
}

/// The syscall mode's copy: the kernel copies between two ranges of our own address space and
/// answers EFAULT (or a short count) instead of a signal.
fn syscall_copy(dst: *mut u8, src: *const u8, len: usize) -> Result<(), Faulted> {
    let mut done = 0usize;
    while done < len {
        let local = libc::iovec { iov_base: src.wrapping_add(done) as *mut libc::c_void, iov_len: len - done };
        let remote = libc::iovec { iov_base: dst.wrapping_add(done) as *mut libc::c_void, iov_len: len - done };
        // SAFETY: the kernel validates both ranges and reports a fault as an error; it never
        // writes through `local` (the write-to-remote direction).
        let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(Faulted { done });
        }
        done += n as usize;
    }
    Ok(())
}

/// Checks that the word at `p` is mapped readable, through the kernel (which cannot fault
/// us). Writability is not probed: a write probe would race the application's own stores.
fn probe_word(p: *mut u64) -> Result<(), Faulted> {
    let mut v = 0u64;
    let local = libc::iovec { iov_base: &mut v as *mut u64 as *mut libc::c_void, iov_len: 8 };
    let remote = libc::iovec { iov_base: p as *mut libc::c_void, iov_len: 8 };
    // SAFETY: the kernel validates the remote range; `local` is our own 8-byte local.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == 8 {
        Ok(())
    } else {
        Err(Faulted { done: 0 })
    }
}

#[cfg(target_arch = "x86_64")]
mod arch {
    //! x86_64: the guarded routines and the handler that redirects their faults.
    use std::sync::OnceLock;

    // The instruction that touches application memory in each routine has its own label
    // (`*_insn`), and each routine has a fault exit (`*_fixup`). Arguments follow the System V
    // ABI; DF is clear on entry (ABI), so `rep movsb` copies upwards.
    core::arch::global_asm!(
        ".pushsection .text.urxe_guarded,\"ax\",@progbits",
        ".p2align 4",
        // usize urxe_guarded_copy(dst rdi, src rsi, len rdx) -> bytes left (0 = done)
        ".globl urxe_guarded_copy",
        ".hidden urxe_guarded_copy",
        ".type urxe_guarded_copy,@function",
        "urxe_guarded_copy:",
        "    mov rcx, rdx",
        ".globl urxe_guarded_copy_insn",
        ".hidden urxe_guarded_copy_insn",
        "urxe_guarded_copy_insn:",
        "    rep movsb",
        "    xor eax, eax",
        "    ret",
        ".globl urxe_guarded_copy_fixup",
        ".hidden urxe_guarded_copy_fixup",
        "urxe_guarded_copy_fixup:",
        "    mov rax, rcx",
        "    ret",
        ".size urxe_guarded_copy, . - urxe_guarded_copy",
        ".p2align 4",
        // u32 urxe_guarded_cas(p rdi, compare rsi, swap rdx, out rcx) -> 0 ok, 1 faulted
        ".globl urxe_guarded_cas",
        ".hidden urxe_guarded_cas",
        ".type urxe_guarded_cas,@function",
        "urxe_guarded_cas:",
        "    mov rax, rsi",
        ".globl urxe_guarded_cas_insn",
        ".hidden urxe_guarded_cas_insn",
        "urxe_guarded_cas_insn:",
        "    lock cmpxchg qword ptr [rdi], rdx",
        "    mov qword ptr [rcx], rax",
        "    xor eax, eax",
        "    ret",
        ".globl urxe_guarded_cas_fixup",
        ".hidden urxe_guarded_cas_fixup",
        "urxe_guarded_cas_fixup:",
        "    mov eax, 1",
        "    ret",
        ".size urxe_guarded_cas, . - urxe_guarded_cas",
        ".p2align 4",
        // u32 urxe_guarded_fadd(p rdi, add rsi, out rdx) -> 0 ok, 1 faulted
        ".globl urxe_guarded_fadd",
        ".hidden urxe_guarded_fadd",
        ".type urxe_guarded_fadd,@function",
        "urxe_guarded_fadd:",
        ".globl urxe_guarded_fadd_insn",
        ".hidden urxe_guarded_fadd_insn",
        "urxe_guarded_fadd_insn:",
        "    lock xadd qword ptr [rdi], rsi",
        "    mov qword ptr [rdx], rsi",
        "    xor eax, eax",
        "    ret",
        ".globl urxe_guarded_fadd_fixup",
        ".hidden urxe_guarded_fadd_fixup",
        "urxe_guarded_fadd_fixup:",
        "    mov eax, 1",
        "    ret",
        ".size urxe_guarded_fadd, . - urxe_guarded_fadd",
        ".popsection",
    );

    extern "C" {
        fn urxe_guarded_copy(dst: *mut u8, src: *const u8, len: usize) -> usize;
        fn urxe_guarded_cas(p: *mut u64, compare: u64, swap: u64, out: *mut u64) -> u32;
        fn urxe_guarded_fadd(p: *mut u64, add: u64, out: *mut u64) -> u32;
        // Labels, not functions: only their addresses are used.
        fn urxe_guarded_copy_insn();
        fn urxe_guarded_copy_fixup();
        fn urxe_guarded_cas_insn();
        fn urxe_guarded_cas_fixup();
        fn urxe_guarded_fadd_insn();
        fn urxe_guarded_fadd_fixup();
    }

    /// # Safety
    /// As [`super::copy`], with the handler installed.
    pub(super) unsafe fn guarded_copy(dst: *mut u8, src: *const u8, len: usize) -> usize {
        // SAFETY: forwarded contract; the routine touches only the two ranges.
        unsafe { urxe_guarded_copy(dst, src, len) }
    }

    /// # Safety
    /// As [`super::cmp_swap`], with the handler installed; `out` is valid for a write.
    pub(super) unsafe fn guarded_cas(p: *mut u64, compare: u64, swap: u64, out: &mut u64) -> u32 {
        // SAFETY: forwarded contract.
        unsafe { urxe_guarded_cas(p, compare, swap, out) }
    }

    /// # Safety
    /// As [`super::fetch_add`], with the handler installed; `out` is valid for a write.
    pub(super) unsafe fn guarded_fadd(p: *mut u64, add: u64, out: &mut u64) -> u32 {
        // SAFETY: forwarded contract.
        unsafe { urxe_guarded_fadd(p, add, out) }
    }

    /// The fault exit for a faulting instruction pointer, if it is one of ours.
    fn fixup_for(pc: usize) -> Option<usize> {
        let table: [(usize, usize); 3] = [
            (urxe_guarded_copy_insn as *const () as usize, urxe_guarded_copy_fixup as *const () as usize),
            (urxe_guarded_cas_insn as *const () as usize, urxe_guarded_cas_fixup as *const () as usize),
            (urxe_guarded_fadd_insn as *const () as usize, urxe_guarded_fadd_fixup as *const () as usize),
        ];
        table.iter().find(|(insn, _)| *insn == pc).map(|(_, fix)| *fix)
    }

    /// The handlers that were installed before ours (SIGSEGV, SIGBUS), read by the handler.
    struct Prev(libc::sigaction);
    static PREV_SEGV: OnceLock<Prev> = OnceLock::new();
    static PREV_BUS: OnceLock<Prev> = OnceLock::new();

    fn prev_slot(sig: libc::c_int) -> &'static OnceLock<Prev> {
        if sig == libc::SIGBUS {
            &PREV_BUS
        } else {
            &PREV_SEGV
        }
    }

    extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
        let code = unsafe { (*info).si_code };
        // Only kernel-generated faults (si_code > 0) are ours to redirect; kill(2)/raise(3)
        // have si_code <= 0.
        if code > 0 && !ctx.is_null() {
            let uc = ctx as *mut libc::ucontext_t;
            // SAFETY: for an SA_SIGINFO handler the third argument is the interrupted thread's
            // ucontext_t, writable; the kernel restores the registers from it on return.
            let rip = unsafe { &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] };
            if let Some(fix) = fixup_for(*rip as usize) {
                *rip = fix as i64;
                return;
            }
        }
        chain(sig, info, ctx, code);
    }

    /// Hands a signal that is not ours to whoever had it before us.
    fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void, code: libc::c_int) {
        let prev = prev_slot(sig).get().map(|p| (p.0.sa_sigaction, p.0.sa_flags));
        match prev {
            Some((h, flags)) if h != libc::SIG_DFL && h != libc::SIG_IGN => {
                if flags & libc::SA_SIGINFO != 0 {
                    // SAFETY: with SA_SIGINFO the saved handler is a three-argument handler
                    // (sigaction(2)); we pass it the arguments we received.
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        unsafe { std::mem::transmute(h) };
                    f(sig, info, ctx);
                } else {
                    // SAFETY: without SA_SIGINFO the saved handler is a one-argument handler.
                    let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
                    f(sig);
                }
            }
            Some((h, _)) if h == libc::SIG_IGN && code <= 0 => {
                // A sent SIGSEGV/SIGBUS the application ignores: ignore it.
            }
            _ => {
                // SIG_DFL (or SIG_IGN for a real fault, which the kernel would not let the
                // process ignore either): restore the default action. A real fault re-executes
                // on return and takes it; a sent signal is raised again (blocked until we return).
                // SAFETY: sigaction and raise are async-signal-safe; `dfl` is a valid struct.
                unsafe {
                    let mut dfl: libc::sigaction = std::mem::zeroed();
                    dfl.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(sig, &dfl, std::ptr::null_mut());
                    if code <= 0 {
                        libc::raise(sig);
                    }
                }
            }
        }
    }

    /// Installs [`on_fault`] for SIGSEGV and SIGBUS, remembering the previous handlers. Returns
    /// whether our handler is in place for both (read back: a sanitizer may refuse it).
    pub(super) fn install_handler() -> bool {
        for sig in [libc::SIGSEGV, libc::SIGBUS] {
            // SAFETY: plain sigaction calls with valid structs; the previous handler is stored
            // before ours can run.
            let ok = unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                    return false;
                }
                let _ = prev_slot(sig).set(Prev(old));
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_fault as *const () as usize;
                new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut new.sa_mask);
                let mut now: libc::sigaction = std::mem::zeroed();
                libc::sigaction(sig, &new, std::ptr::null_mut()) == 0
                    && libc::sigaction(sig, std::ptr::null(), &mut now) == 0
                    && now.sa_sigaction == on_fault as *const () as usize
            };
            if !ok {
                return false;
            }
        }
        true
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod arch {
    //! Other architectures: no guarded routines yet; the syscall mode is used.
    pub(super) fn install_handler() -> bool {
        false
    }
    // Never called (the guarded mode is never selected here); each reports "faulted".
    pub(super) unsafe fn guarded_copy(_: *mut u8, _: *const u8, len: usize) -> usize {
        len
    }
    pub(super) unsafe fn guarded_cas(_: *mut u64, _: u64, _: u64, _: &mut u64) -> u32 {
        1
    }
    pub(super) unsafe fn guarded_fadd(_: *mut u64, _: u64, _: &mut u64) -> u32 {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_syscall_mode_reports_faults_too() {
        // SAFETY: an anonymous mapping of two pages, the second made inaccessible.
        let (p, page) = unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
            let p = libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(libc::mprotect((p as *mut u8).add(page) as *mut libc::c_void, page, libc::PROT_NONE), 0);
            (p as *mut u8, page)
        };
        let src = vec![9u8; 2 * page];
        assert_eq!(syscall_copy(p, src.as_ptr(), page), Ok(()));
        assert_eq!(syscall_copy(p.wrapping_add(16), src.as_ptr(), page), Err(Faulted { done: page - 16 }));
        let mut back = vec![0u8; 8];
        assert!(syscall_copy(back.as_mut_ptr(), p.wrapping_add(page), 8).is_err());
        assert_eq!(syscall_copy(back.as_mut_ptr(), p, 8), Ok(()));
        assert_eq!(back, [9u8; 8]);
        assert_eq!(probe_word(p as *mut u64), Ok(()));
        assert!(probe_word(p.wrapping_add(page) as *mut u64).is_err());
        // SAFETY: our own mapping.
        unsafe { libc::munmap(p as *mut libc::c_void, 2 * page) };
    }
}
