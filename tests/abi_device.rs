//! Device, context, query, channel and configuration behaviour of urxe's libibverbs.so.1,
//! checked by a C program (tests/c/device_basics.c) compiled against the installed header
//! with -Werror and ASan/UBSan, exactly as an unmodified application sees the library.

mod abi_util;
use abi_util::*;
use std::net::UdpSocket;
use std::path::PathBuf;
use std::sync::OnceLock;

fn program() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile_c_test("device_basics"))
}

fn run_program(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut c = with_lib(program());
    c.args(args).env_remove("URXE_ADDR").env("ASAN_OPTIONS", "detect_leaks=1");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = run(&mut c);
    (o.status.success(), text(&o))
}

#[test]
fn device_context_queries_and_channels_behave_like_libibverbs() {
    let (ok, out) = run_program(&[], &[]);
    assert!(ok && out.contains("all checks passed"), "{out}");
}

#[test]
fn bad_urxe_addr_fails_device_list_with_einval_and_names_the_variable() {
    for bad in ["not/an/if", "0.0.0.0", "no-such-if0"] {
        let (ok, out) = run_program(&["bad-env"], &[("URXE_ADDR", bad)]);
        assert!(ok, "URXE_ADDR={bad}: {out}");
        assert!(out.contains("URXE_ADDR"), "message must name URXE_ADDR: {out}");
    }
}

#[test]
fn busy_port_4791_is_reported_with_the_address() {
    // Hold UDP 4791 on a pid-derived loopback address ourselves (outside 127.77/16, so no
    // other urxe process on this shared host picks it by default).
    let pid = std::process::id();
    let addr = format!("127.80.{}.{}", (pid >> 8) as u8, (pid as u8).clamp(1, 254));
    let _guard = UdpSocket::bind((addr.as_str(), 4791)).expect("bind the test's own address");
    let (ok, out) = run_program(&["port-busy"], &[("URXE_ADDR", &addr)]);
    assert!(ok, "{out}");
    assert!(out.contains("4791") && out.contains(&addr), "{out}");
}

#[test]
fn explicit_address_becomes_the_gid() {
    // 127.0.0.2 is local (lo holds 127/8); the device must use it and report it as its GID.
    let o = run(with_lib("ibv_devinfo").args(["-v"]).env("URXE_ADDR", "127.0.0.2"));
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("::ffff:127.0.0.2, RoCE v2"), "{out}");
    assert!(out.contains("node_guid:\t\t\t0275:7278:7f00:0002"), "{out}");
}
