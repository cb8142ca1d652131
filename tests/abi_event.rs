//! The completion-channel wait (tests/c/event_path.c, compiled against the installed header
//! with -Werror and ASan/UBSan): a thread asleep in ibv_get_cq_event receives the packets of
//! its own exchange (src/runtime/owner.rs), with the completion arriving before, during and
//! after the thread goes to sleep; two threads on one channel each get one event; a
//! non-blocking channel answers EAGAIN and wakes the program's own poll(); a waiter cancelled
//! while it owns the socket leaves the device working. Each section runs in its own process.

mod abi_util;
use abi_util::*;
use std::path::PathBuf;
use std::sync::OnceLock;

fn program() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile_c_test("event_path"))
}

/// Runs one section; it must exit 0 and say so.
fn section(name: &str) -> String {
    run_c_section(program(), "event_path", name)
}

#[test]
fn a_waiter_receives_its_own_completion_whenever_it_arrives() {
    let out = section("race");
    assert!(out.contains("race: 300 rounds"), "{out}");
}

#[test]
fn two_threads_on_one_channel_each_get_one_event() {
    let out = section("two");
    assert!(out.contains("two: 200 rounds"), "{out}");
}

#[test]
fn a_non_blocking_channel_says_eagain_and_wakes_the_programs_poll() {
    let out = section("nonblock");
    assert!(out.contains("nonblock: 100 rounds"), "{out}");
}

#[test]
fn a_waiter_cancelled_while_it_owns_the_socket_leaves_the_device_working() {
    let out = section("cancelled");
    assert!(out.contains("cancelled: ok"), "{out}");
}

#[test]
fn destroy_cq_waits_for_every_event_to_be_acked() {
    let out = section("acks");
    assert!(out.contains("acks: 50 events"), "{out}");
}

#[test]
fn nobody_spins_while_a_thread_sleeps_on_its_channel() {
    let out = section("idle");
    assert!(out.contains("idle: "), "{out}");
}
