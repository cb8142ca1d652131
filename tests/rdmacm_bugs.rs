//! Issue #35's four rdma_cm bugs, each with its reproducer (tests/rdmacm_c/cm_bugs.c, built
//! with ASan/UBSan; server and client in one process) over urxe's librdmacm.so.1:
//!
//! 1. the CM thread touched the application's QP on a DREQ (a QP fio had already destroyed:
//!    a SIGSEGV in `urxe-rdmacm`); DISCONNECTED now leaves the QP alone, REJECTED moves it to
//!    ERR in the application's own `rdma_get_cm_event`;
//! 2. a channel's fd stayed readable after `rdma_migrate_id` moved its events away, or
//!    `rdma_destroy_id` dropped them (and a non-blocking `rdma_get_cm_event` gave EAGAIN);
//! 3. `rdma_create_qp_ex` refused `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`: an ATOMIC WRITE through
//!    `ibv_qp_to_qp_ex` on a CM QP now lands on the other side;
//! 4. `rdma_bind_addr` of an IPv6 link-local address with its scope id (`fe80::…%if`), on a
//!    veth pair in a network namespace of the test's own.
//!
//! ```sh
//! cargo test --release --test rdmacm_bugs -- --nocapture
//! ```

#[allow(dead_code)]
#[path = "apps/mod.rs"]
mod harness;

use harness::*;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

fn cm_bugs() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("urxe-rdmacm-bugs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let bin = dir.join("cm_bugs");
        let mut gcc = Command::new("gcc");
        gcc.args(["-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined", "-g", "-o"])
            .arg(&bin)
            .arg(repo_root().join("tests/rdmacm_c/cm_bugs.c"))
            .args(["-lrdmacm", "-libverbs"]);
        let out = run_bounded(&mut gcc, Duration::from_secs(120)).map_err(|e| e.to_string())?;
        if out.success() {
            Ok(bin)
        } else {
            Err(format!("gcc failed for tests/rdmacm_c/cm_bugs.c:\n{out}"))
        }
    })
    .clone()
    .unwrap_or_else(|e| panic!("{e}"))
}

/// `cm_bugs ARGS` with urxe's device at `addr`; freed memory is filled (0xbe) so that a library
/// thread reading a QP the application destroyed follows garbage and crashes, every time.
fn run(addr: &str, args: &[&str]) -> Output {
    ensure_rdmacm();
    let mut c = urxe_cmd(cm_bugs());
    c.env("URXE_ADDR", addr)
        .env("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=0:max_free_fill_size=65536:free_fill_byte=190")
        .args(args);
    let out = run_bounded(&mut c, TIMEOUT).expect("run cm_bugs");
    eprintln!("{out}");
    out
}

fn passed(out: &Output, checks: &[&str]) {
    assert!(out.success(), "cm_bugs must exit 0\n{out}");
    assert_lacks(out, "FAIL");
    assert_lacks(out, "AddressSanitizer");
    assert_lacks(out, "runtime error");
    assert_contains(out, "all checks passed");
    for c in checks {
        assert_contains(out, &format!("ok {c}\n"));
    }
}

#[test]
fn bug1_disconnect_never_touches_a_qp_the_application_destroyed() {
    let out = run("127.35.1.1", &["disconnect", "127.35.1.1", "7531"]);
    passed(
        &out,
        &[
            "disconnected_after_application_destroyed_its_qp",
            "disconnected_leaves_the_qp_alone",
            "rdma_disconnect_moves_the_qp_to_err",
            "rejected_qp_in_err_after_get_cm_event",
        ],
    );
}

#[test]
fn bug2_channel_fd_readable_exactly_while_events_are_queued() {
    let out = run("127.35.1.2", &["migrate", "127.35.1.2"]);
    passed(
        &out,
        &[
            "old_channel_unreadable_after_migrate",
            "old_channel_eagain_after_migrate",
            "new_channel_has_the_event",
            "channel_unreadable_after_destroy_dropped_its_event",
            "channel_eagain_after_destroy",
        ],
    );
}

#[test]
fn bug3_atomic_write_through_qp_ex_on_a_cm_qp() {
    let out = run("127.35.1.3", &["atomic", "127.35.1.3", "7533"]);
    passed(&out, &["ibv_qp_to_qp_ex_on_the_cm_qp", "atomic_write_completes", "atomic_write_landed_on_the_server"]);
}

/// A network namespace with a veth pair, `fe80::35:1` on one end (deleted on drop).
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let ns = Netns(format!("hx-cmbugs-ll-{}", std::process::id()));
        let ip = |args: &[&str]| {
            let out = run_bounded(Command::new("ip").args(args), Duration::from_secs(20)).expect("run ip");
            assert!(out.success(), "ip {args:?} failed (this test needs root)\n{out}");
        };
        let n = ns.0.as_str();
        ip(&["netns", "add", n]);
        ip(&["-n", n, "link", "set", "lo", "up"]);
        ip(&["-n", n, "link", "add", "ll0", "type", "veth", "peer", "name", "ll1"]);
        ip(&["-n", n, "addr", "add", "fe80::35:1/64", "dev", "ll0", "nodad"]);
        ip(&["-n", n, "link", "set", "ll0", "up"]);
        ip(&["-n", n, "link", "set", "ll1", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run_bounded(Command::new("ip").args(["netns", "del", &self.0]), Duration::from_secs(20));
    }
}

#[test]
fn bug4_bind_ipv6_link_local_with_scope_id() {
    ensure_rdmacm();
    let ns = Netns::new();
    let mut c = urxe_cmd("ip");
    c.args(["netns", "exec", &ns.0]).arg(cm_bugs()).args(["linklocal", "fe80::35:1%ll0", "7534"]);
    let out = run_bounded(&mut c, TIMEOUT).expect("run cm_bugs");
    eprintln!("{out}");
    passed(
        &out,
        &[
            "bind_link_local_with_scope",
            "local_addr_keeps_address_port_and_scope",
            "listen_on_link_local",
            "bind_link_local_without_scope_refused",
        ],
    );
}
