//! pthread_cancel against the verbs (tests/c/cancel.c, compiled against the installed header
//! with -Werror and ASan/UBSan): the data-path verbs are no cancellation points, as a hardware
//! provider's are not, so a thread cancelled between them leaves the device working; a thread
//! blocked in ibv_get_cq_event can be cancelled, as with rdma-core; a cancellation pending when
//! a control verb runs waits for the thread's next cancellation point. The same for rdma_cm
//! (tests/rdmacm_c/cm_cancel.c) and rsockets (tests/rdmacm_c/rs_cancel.c). Each test runs one
//! section of a program in its own process.

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
    run_c_section(program(), "cancel", name)
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

#[test]
fn a_pending_cancellation_lets_control_verbs_finish() {
    section("control");
}

/// A signal interrupts a blocked ibv_get_cq_event as it does rdma-core's read of the event
/// file: EINTR when the handler was installed without SA_RESTART, restarted with it.
#[test]
fn a_signal_to_a_thread_in_get_cq_event_restarts_or_fails_with_eintr_as_rdma_core() {
    section("signal");
}

/// A program of tests/rdmacm_c, linked against the test build's librdmacm.so.1.
fn rdmacm_program(name: &str) -> PathBuf {
    let dir = target_dir().join("urxe").join("c-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let o = run(std::process::Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g", "-fsanitize=address,undefined"])
        .arg("-o")
        .arg(&exe)
        .arg(root().join(format!("tests/rdmacm_c/{name}.c")))
        .arg(format!("-L{}", lib_dir().display()))
        .args(["-l:librdmacm.so.1", "-l:libibverbs.so.1"]));
    assert!(o.status.success(), "gcc failed:\n{}", text(&o));
    exe
}

fn cm_program() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| rdmacm_program("cm_cancel"))
}

fn rs_program() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| rdmacm_program("rs_cancel"))
}

/// Runs one section of a program on its own address; it must exit 0 and say so.
fn addr_section(exe: &PathBuf, name: &str, addr: &str) {
    let o = run(with_lib(exe).args([name, addr]).env("URXE_ADDR", addr).env("ASAN_OPTIONS", "detect_leaks=1"));
    let out = text(&o);
    assert!(o.status.success() && out.contains("all checks passed"), "{} {name}:\n{out}", exe.display());
}

fn cm_section(name: &str, addr: &str) {
    addr_section(cm_program(), name, addr)
}

fn rs_section(name: &str, addr: &str) {
    addr_section(rs_program(), name, addr)
}

#[test]
fn a_thread_blocked_in_rdma_get_cm_event_can_be_cancelled() {
    cm_section("event", "127.31.9.1");
}

#[test]
fn a_pending_cancellation_lets_rdma_cm_calls_finish() {
    cm_section("control", "127.31.9.2");
}

#[test]
fn a_thread_blocked_in_rdma_get_request_can_be_cancelled() {
    cm_section("request", "127.31.9.3");
}

// rsockets (tests/rdmacm_c/rs_cancel.c): librdmacm's blocking rsockets calls wait in poll(2)
// or the completion channel's read, cancellation points; the others, with a cancellation
// pending, finish. All but `accept` abort the process on fbf1622.

#[test]
fn a_thread_blocked_in_rrecv_can_be_cancelled() {
    rs_section("recv", "127.31.9.4");
}

#[test]
fn threads_blocked_in_rpoll_and_rselect_can_be_cancelled() {
    rs_section("poll", "127.31.9.5");
}

#[test]
fn a_thread_blocked_in_rsend_can_be_cancelled_and_the_stream_goes_on() {
    rs_section("send", "127.31.9.6");
}

#[test]
fn a_thread_blocked_in_raccept_can_be_cancelled() {
    rs_section("accept", "127.31.9.7");
}

#[test]
fn a_thread_blocked_in_rconnect_can_be_cancelled() {
    rs_section("connect", "127.31.9.8");
}

#[test]
fn a_socket_closed_under_a_blocked_rrecv_ends_it_and_its_number_goes_to_the_next_socket() {
    rs_section("close", "127.31.9.10");
}

#[test]
fn a_pending_cancellation_lets_rsockets_calls_finish() {
    rs_section("control", "127.31.9.9");
}
