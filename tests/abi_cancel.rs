//! pthread_cancel against the verbs (tests/c/cancel.c, compiled against the installed header
//! with -Werror and ASan/UBSan): the data-path verbs are no cancellation points, as a hardware
//! provider's are not, so a thread cancelled between them leaves the device working; a thread
//! blocked in ibv_get_cq_event can be cancelled, as with rdma-core. Each test runs one section
//! of the program in its own process.

mod abi_util;
use abi_util::*;
use std::path::PathBuf;
use std::sync::OnceLock;

fn program() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile_c_test("cancel"))
}

/// Runs one section; it must exit 0 and say so.
fn section(name: &str) -> String {
    let o = run(with_lib(program()).arg(name).env_remove("URXE_ADDR").env("ASAN_OPTIONS", "detect_leaks=1"));
    let out = text(&o);
    assert!(o.status.success() && out.contains("all checks passed"), "cancel {name}:\n{out}");
    out
}

#[test]
fn a_thread_cancelled_between_verbs_leaves_the_device_working() {
    let out = section("datapath");
    assert!(out.contains("100 rounds"), "{out}");
}

#[test]
fn a_thread_blocked_in_get_cq_event_can_be_cancelled() {
    section("event");
}
