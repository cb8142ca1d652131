//! bench/instructions.sh counts whole-process instructions per message with bench/insn/insn.c:
//! the program must really move its messages over urxe, or the figure would count a failure.
//! Built here with ASan/UBSan against the installed header, it runs a requester and a
//! responder process (SENDs and WRITEs, bursts of 16, blocking waits) and each says so.

mod abi_util;
use abi_util::*;
use std::path::PathBuf;
use std::sync::OnceLock;

fn program() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile_c("bench/insn/insn.c"))
}

fn insn(kind: &str, n: &str, addr: &str) -> (bool, String) {
    let o = run(with_lib(program())
        .args([kind, n])
        .env("URXE_ADDR", addr)
        .env("ASAN_OPTIONS", "detect_leaks=0")
        .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1"));
    (o.status.success(), text(&o))
}

#[test]
fn both_processes_move_every_message_and_name_themselves() {
    for (kind, addr) in [("send64", "127.48.0.1"), ("write4k", "127.48.0.2")] {
        let (ok, out) = insn(kind, "320", addr);
        assert!(ok, "{kind}:\n{out}");
        assert!(out.lines().any(|l| l.starts_with("responder pid ")), "{kind}:\n{out}");
        assert!(out.contains(&format!(": {kind}, 320 messages ok")), "{kind}:\n{out}");
        assert!(!out.contains("runtime error:"), "{kind}:\n{out}");
    }
}

#[test]
fn a_count_that_is_not_a_whole_number_of_bursts_is_refused() {
    let (ok, out) = insn("send64", "100", "127.48.0.3");
    assert!(!ok && out.contains("N must be a positive multiple of 16"), "{out}");
}
