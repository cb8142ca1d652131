//! Application-level proof that urxe's drop-in `libibverbs.so.1` runs unmodified verbs programs:
//! Debian's `ibverbs-utils` pingpongs and `perftest`, plus our own C programs (tests/verbs_c/),
//! each as a server and a client in two processes on one host with
//! `LD_LIBRARY_PATH=target/urxe/lib` and no other setting.
//!
//! If the library is missing it is built with `bash provider/build.sh`; if that script does not
//! exist every test here fails with a message saying so (never skipped). Every wait is bounded
//! (see `apps/mod.rs`); process pairs run one at a time (2-core CI machine) on distinct TCP ports.
//!
//! ```sh
//! cargo test --test apps                                   # everything
//! cargo test --test apps -- ib_read_bw --nocapture         # one group, with both outputs shown
//! ```
//!
//! Pingpongs get `-d urxe0 -g 1 -p PORT` (+ `-c` to validate buffers where the tool has it);
//! perftest gets `-d urxe0 -x 1 -p PORT -F` (`-F`: no cpufreq warning) and modest `-n` counts.

#[path = "apps/mod.rs"]
mod harness;
mod urxe_bin;

use harness::*;
use std::process::Command;

// ------------------------------------------------------------------ helpers

/// The GIDs printed on `local address:` / `remote address:` lines of the pingpongs.
fn pingpong_gids(out: &Output) -> (String, String) {
    let find = |tag: &str| {
        out.stdout
            .lines()
            .find(|l| l.contains(tag))
            .and_then(|l| l.rsplit("GID ").next())
            .map(|g| g.trim().to_string())
            .unwrap_or_else(|| panic!("no {tag:?} line with a GID in the output of {}\n{out}", out.what))
    };
    (find("local address:"), find("remote address:"))
}

/// Runs a pingpong server and client with `-d urxe0 -g 1 -p PORT` plus `extra`; checks both
/// finished their exchanges, both GIDs are the user's shared ::ffff:127.x.y.z, and `-c` found
/// no bad data.
fn pingpong(tool_name: &str, port: u16, extra: &[&str]) -> (Output, Output) {
    let (s, c) = run_tool_pair(tool_name, port, extra);
    for o in [&s, &c] {
        assert_contains(o, " iters in ");
        assert_lacks(o, "invalid data");
        let (local, remote) = pingpong_gids(o);
        assert!(local.starts_with("::ffff:127."), "local GID {local:?} is not ::ffff:127.x.y.z\n{o}");
        assert!(remote.starts_with("::ffff:127."), "remote GID {remote:?} is not ::ffff:127.x.y.z\n{o}");
        assert_eq!(local, remote, "server and client of one user share their address and GID, as on a NIC\n{o}");
    }
    (s, c)
}

/// Runs the Debian tool `tool_name` as server and client (`HOST`) with `-d urxe0 -g 1 -p PORT`
/// plus `extra`, one heavy test at a time; both must exit 0.
fn run_tool_pair(tool_name: &str, port: u16, extra: &[&str]) -> (Output, Output) {
    let port_s = port.to_string();
    let mut args: Vec<&str> = vec!["-d", DEV, "-g", "1", "-p", &port_s];
    args.extend_from_slice(extra);
    run_args_pair(tool_name, port, &args)
}

/// Runs the Debian tool `tool_name` as server (`args`) and client (`args` + `HOST`) on TCP
/// port `port`, one heavy test at a time; both must exit 0.
fn run_args_pair(tool_name: &str, port: u16, args: &[&str]) -> (Output, Output) {
    let bin = tool(tool_name);
    let mut server = urxe_cmd(&bin);
    server.args(args);
    let mut client = urxe_cmd(&bin);
    client.args(args).arg(HOST);
    let _serial = heavy_lock();
    run_pair(port, server, client)
}

/// Runs a perftest server and client with `-d urxe0 -p PORT -F -x 1` plus `extra`; checks the
/// client printed a result table with at least one numeric row and both sides used a
/// ::ffff:127.x.y.z GID.
fn perftest(tool_name: &str, port: u16, extra: &[&str]) -> (Output, Output) {
    perftest_gid(tool_name, port, Some("1"), extra)
}

/// [`perftest`] with a chosen `-x` GID index, or none (perftest then picks one itself with
/// `ibv_query_gid` / `ibv_query_gid_ex`, preferring an IPv4-mapped RoCE v2 GID).
fn perftest_gid(tool_name: &str, port: u16, gid_index: Option<&str>, extra: &[&str]) -> (Output, Output) {
    let port_s = port.to_string();
    let mut args: Vec<&str> = vec!["-d", DEV, "-p", &port_s, "-F"];
    if let Some(x) = gid_index {
        args.extend_from_slice(&["-x", x]);
    }
    args.extend_from_slice(extra);
    let (s, c) = run_args_pair(tool_name, port, &args);
    // perftest prints GIDs in decimal: "GID: 00:00:...:00:255:255:127:xx:yy:zz".
    for o in [&s, &c] {
        assert_contains(o, ":255:255:127:");
    }
    let rows = result_rows(&c.stdout);
    assert!(rows > 0, "no result row under the '#bytes' header in the client output\n{c}\n{s}");
    (s, c)
}

/// Numeric rows (`<bytes> <iterations> ...`) after perftest's `#bytes` header.
fn result_rows(stdout: &str) -> usize {
    let mut lines = stdout.lines().skip_while(|l| !l.contains("#bytes"));
    if lines.next().is_none() {
        return 0;
    }
    lines
        .filter(|l| {
            let mut f = l.split_whitespace();
            matches!((f.next().map(str::parse::<u64>), f.next().map(str::parse::<u64>)), (Some(Ok(_)), Some(Ok(n))) if n > 0)
        })
        .count()
}

/// Runs one of our C programs (tests/verbs_c) as server and client; both must report only PASS
/// lines and exit 0, with no sanitizer finding.
fn c_pair(name: &str, port: u16, extra: &[&str]) -> (Output, Output) {
    let bin = c_program(name);
    let port_s = port.to_string();
    let mut server = urxe_cmd(&bin);
    server.arg("server").args(["-p", &port_s]).args(extra);
    let mut client = urxe_cmd(&bin);
    client.arg("client").arg(HOST).args(["-p", &port_s]).args(extra);
    let _serial = heavy_lock();
    let (s, c) = run_pair(port, server, client);
    for o in [&s, &c] {
        assert_lacks(o, "FAIL ");
        assert_lacks(o, "AddressSanitizer");
        assert_lacks(o, "LeakSanitizer");
        assert_lacks(o, "runtime error:");
        assert_contains(o, "PASS ");
        assert_contains(o, " 0 failed");
    }
    (s, c)
}

fn assert_check(out: &Output, role: &str, check: &str) {
    assert_contains(out, &format!("PASS {role} {check}"));
}

/// Runs a single urxe-backed command (no peer) with the usual bound.
fn run_one(mut cmd: Command) -> Output {
    run_bounded(&mut cmd, RUN_TIMEOUT).unwrap_or_else(|e| panic!("cannot run command: {e}"))
}

// ------------------------------------------------------------------ ibverbs-utils: device listing

#[test]
fn ibv_devices_lists_urxe0() {
    let out = run_one(urxe_cmd(tool("ibv_devices")));
    assert!(out.success(), "ibv_devices failed\n{out}");
    assert!(
        out.stdout.lines().any(|l| l.split_whitespace().next() == Some(DEV)),
        "ibv_devices does not list {DEV}\n{out}"
    );
}

#[test]
fn ibv_devinfo_verbose_describes_active_ethernet_port_with_v4_mapped_gid() {
    let mut cmd = urxe_cmd(tool("ibv_devinfo"));
    cmd.args(["-v", "-d", DEV]);
    let out = run_one(cmd);
    assert!(out.success(), "ibv_devinfo -v failed\n{out}");
    assert_contains(&out, &format!("hca_id:\t{DEV}"));
    assert_contains(&out, "PORT_ACTIVE");
    let link = out.stdout.lines().find(|l| l.trim_start().starts_with("link_layer:"));
    assert!(link.is_some_and(|l| l.contains("Ethernet")), "link_layer is not Ethernet\n{out}");
    for idx in 0..4 {
        let tag = format!("GID[{idx:>3}]:");
        let line = out.stdout.lines().find(|l| l.contains(&tag));
        assert!(
            line.is_some_and(|l| l.contains("::ffff:127.")),
            "{tag} is missing or not ::ffff:127.x.y.z (GID indices 0-3 must all hold it)\n{out}"
        );
    }
}

#[test]
fn bad_urxe_addr_stops_with_message_naming_it() {
    let mut cmd = urxe_cmd(tool("ibv_devinfo"));
    cmd.env("URXE_ADDR", "not-an-address");
    let out = run_one(cmd);
    assert!(!out.timed_out, "ibv_devinfo hung with a bad URXE_ADDR\n{out}");
    assert_eq!(out.signal(), None, "ibv_devinfo was killed by a signal with a bad URXE_ADDR\n{out}");
    assert!(!out.success(), "ibv_devinfo exited 0 with URXE_ADDR=not-an-address\n{out}");
    assert_contains(&out, "URXE_ADDR");
    assert_lacks(&out, "panicked");
}

// ------------------------------------------------------------------ ibverbs-utils: pingpongs

#[test]
fn ibv_rc_pingpong_default() {
    pingpong("ibv_rc_pingpong", 18601, &[]);
}

#[test]
fn ibv_rc_pingpong_one_byte_validated() {
    pingpong("ibv_rc_pingpong", 18602, &["-s", "1", "-c"]);
}

#[test]
fn ibv_rc_pingpong_one_mebibyte_validated() {
    pingpong("ibv_rc_pingpong", 18603, &["-s", "1048576", "-n", "100", "-c"]);
}

#[test]
fn ibv_rc_pingpong_completion_events() {
    pingpong("ibv_rc_pingpong", 18604, &["-e", "-c"]);
}

#[test]
fn ibv_rc_pingpong_new_post_send_api() {
    pingpong("ibv_rc_pingpong", 18605, &["-N", "-c"]);
}

#[test]
fn ibv_rc_pingpong_ten_thousand_iterations() {
    pingpong("ibv_rc_pingpong", 18606, &["-n", "10000", "-c"]);
}

#[test]
fn ibv_rc_pingpong_mtu_4096() {
    pingpong("ibv_rc_pingpong", 18607, &["-m", "4096", "-s", "65536", "-n", "200", "-c"]);
}

#[test]
fn ibv_rc_pingpong_completion_timestamps() {
    // `-t` reads IBV_WC_EX_WITH_COMPLETION_TIMESTAMP from an extended CQ and prints the
    // spread between receive completions in core-clock cycles (1 GHz: ns).
    let (s, c) = pingpong("ibv_rc_pingpong", 18608, &["-t", "-n", "200", "-c"]);
    for o in [&s, &c] {
        let cycles = |tag: &str| -> f64 {
            o.stdout
                .lines()
                .find_map(|l| l.strip_prefix(tag))
                .and_then(|v| v.trim().trim_start_matches('=').trim().parse().ok())
                .unwrap_or_else(|| panic!("no {tag:?} line\n{o}"))
        };
        let (min, avg, max) = (
            cycles("Min receive completion clock cycles"),
            cycles("Average receive completion clock cycles"),
            cycles("Max receive completion clock cycles"),
        );
        assert!(0.0 < min && min <= avg && avg <= max, "min {min} avg {avg} max {max}\n{o}");
        // Each iteration is a round trip on loopback: well under a second.
        assert!(avg < 1e9, "average {avg} cycles (ns)\n{o}");
    }
}

#[test]
fn ibv_uc_pingpong_validated() {
    pingpong("ibv_uc_pingpong", 18611, &["-c"]);
}

#[test]
fn ibv_uc_pingpong_events() {
    pingpong("ibv_uc_pingpong", 18612, &["-e", "-c"]);
}

#[test]
fn ibv_ud_pingpong_validated() {
    pingpong("ibv_ud_pingpong", 18621, &["-c"]);
}

#[test]
fn ibv_ud_pingpong_events_small() {
    pingpong("ibv_ud_pingpong", 18622, &["-e", "-s", "64", "-c"]);
}

#[test]
fn ibv_srq_pingpong_sixteen_qps() {
    pingpong("ibv_srq_pingpong", 18631, &["-q", "16", "-c"]);
}

/// `ibv_xsrq_pingpong` (XRC: a domain opened on a temporary file, XRC SRQs, initiator and
/// target QPs, `ibv_get_srq_num`, the legacy `wr.qp_type.xrc.remote_srqn`): both sides run
/// their rounds and report success. The tool checks no data itself; the simulator tests
/// (tests/sim_xrc.rs) check every byte.
fn xsrq_pingpong(port: u16, extra: &[&str]) {
    let (s, c) = run_tool_pair("ibv_xsrq_pingpong", port, extra);
    check_xsrq_outputs(&[s, c]);
}

/// Both sides (or all) ran their rounds, printed their SRQ numbers and share the user's GID.
fn check_xsrq_outputs(outs: &[Output]) {
    for o in outs {
        assert_contains(o, "success");
        assert_contains(o, "SRQN");
        assert_lacks(o, "Failed");
        assert_lacks(o, "panicked");
        // "   local: LID 0000, QPN RECV .., SRQN 000001, GID ::ffff:127.x.y.z" and "remote:".
        let gid = |tag: &str| {
            o.stdout
                .lines()
                .find(|l| l.trim_start().starts_with(tag))
                .and_then(|l| l.rsplit("GID ").next())
                .map(|g| g.trim().to_string())
        };
        let (local, remote) = (gid("local:"), gid("remote:"));
        assert!(local.as_deref().is_some_and(|g| g.starts_with("::ffff:127.")), "local GID {local:?}\n{o}");
        assert_eq!(local, remote, "server and client of one user share their address and GID\n{o}");
    }
}

/// One server, two clients (`-c 2`): the server's initiators take turns, so a message for one
/// client's SRQ may travel on the QP connected to the other client's target.
#[test]
fn ibv_xsrq_pingpong_two_clients() {
    let bin = tool("ibv_xsrq_pingpong");
    let port = 18643u16;
    let port_s = port.to_string();
    let args = ["-d", DEV, "-g", "1", "-p", &port_s, "-n", "10"];
    let mut server = urxe_cmd(&bin);
    server.args(args).args(["-c", "2"]);
    let clients = (0..2)
        .map(|_| {
            let mut c = urxe_cmd(&bin);
            c.args(args).arg(HOST);
            c
        })
        .collect();
    let _serial = heavy_lock();
    let (s, mut cs) = run_server_clients(port, server, clients);
    cs.push(s);
    check_xsrq_outputs(&cs);
}

#[test]
fn ibv_xsrq_pingpong_xrc() {
    xsrq_pingpong(18641, &["-n", "20", "-s", "8192", "-m", "1024"]);
}

/// Events mode. The server sends its first message right after connecting, often before the
/// client's target QP is ready (dropped, counted in bad_state_drops): the retransmission must
/// happen while both processes sleep in `ibv_get_cq_event`.
#[test]
fn ibv_xsrq_pingpong_xrc_events() {
    xsrq_pingpong(18642, &["-e", "-n", "10", "-s", "100"]);
}

// ------------------------------------------------------------------ perftest: bandwidth

#[test]
fn ib_send_bw_rc() {
    perftest("ib_send_bw", 18701, &["-c", "RC", "-n", "1000"]);
}

/// UC has neither flow control nor retransmission, and a sender on loopback can outrun a
/// receiver that shares the CPU with other tests: once more data is in flight than the
/// receiver's socket buffer holds (16 MiB, urxe's setting), a dropped message hangs perftest's
/// server, which waits for every one (seen once in CI with 1000 × 64 KiB; 20000 × 64 KiB beside
/// a CPU hog hung 4 runs of 4). 200 × 64 KiB = 12.5 MiB fits even if the server read nothing
/// until the end, so this test checks UC SEND, not scheduling luck.
#[test]
fn ib_send_bw_uc() {
    perftest("ib_send_bw", 18702, &["-c", "UC", "-n", "200"]);
}

#[test]
fn ib_send_bw_ud() {
    perftest("ib_send_bw", 18703, &["-c", "UD", "-n", "1000"]);
}

#[test]
fn ib_send_bw_rc_four_qps() {
    perftest("ib_send_bw", 18704, &["-c", "RC", "-q", "4", "-n", "1000"]);
}

#[test]
fn ib_send_bw_ud_four_qps() {
    perftest("ib_send_bw", 18705, &["-c", "UD", "-q", "4", "-n", "1000"]);
}

#[test]
fn ib_send_bw_rc_completion_events() {
    perftest("ib_send_bw", 18706, &["-c", "RC", "-e", "-n", "1000"]);
}

#[test]
fn ib_send_bw_rc_gid_picked_by_perftest() {
    // No -x: perftest chooses the GID itself (IPv4-mapped, RoCE v2 preferred via ibv_query_gid_ex).
    perftest_gid("ib_send_bw", 18707, None, &["-c", "RC", "-n", "1000"]);
}

#[test]
fn ib_write_bw_rc() {
    perftest("ib_write_bw", 18711, &["-c", "RC", "-n", "1000"]);
}

#[test]
fn ib_write_bw_uc() {
    perftest("ib_write_bw", 18712, &["-c", "UC", "-n", "1000"]);
}

#[test]
fn ib_write_bw_rc_gid_index_3() {
    // The mlx5 habit (-x 3): GID indices 0-3 all hold the RoCE v2 GID.
    perftest_gid("ib_write_bw", 18714, Some("3"), &["-c", "RC", "-n", "1000"]);
}

#[test]
fn ib_write_bw_rc_four_qps() {
    perftest("ib_write_bw", 18713, &["-c", "RC", "-q", "4", "-n", "1000"]);
}

#[test]
fn ib_read_bw_all_sizes() {
    // -a: sizes 2 B .. 8 MiB; few iterations per size keeps the total near 300 MiB.
    let (_, c) = perftest("ib_read_bw", 18721, &["-c", "RC", "-a", "-n", "20"]);
    let rows = result_rows(&c.stdout);
    assert!(rows >= 23, "ib_read_bw -a reported {rows} sizes, expected 23 (2 B .. 8 MiB)\n{c}");
}

#[test]
fn ib_read_bw_four_qps() {
    perftest("ib_read_bw", 18722, &["-c", "RC", "-q", "4", "-n", "1000"]);
}

#[test]
fn ib_atomic_bw_cmp_and_swap() {
    perftest("ib_atomic_bw", 18731, &["-A", "CMP_AND_SWAP", "-n", "1000"]);
}

#[test]
fn ib_atomic_bw_fetch_and_add() {
    perftest("ib_atomic_bw", 18732, &["-A", "FETCH_AND_ADD", "-n", "1000"]);
}

#[test]
fn ib_atomic_bw_fetch_and_add_four_qps() {
    perftest("ib_atomic_bw", 18733, &["-A", "FETCH_AND_ADD", "-q", "4", "-n", "1000"]);
}

// ------------------------------------------------------------------ perftest: latency

#[test]
fn ib_send_lat_rc() {
    perftest("ib_send_lat", 18801, &["-c", "RC", "-n", "1000"]);
}

#[test]
fn ib_send_lat_uc() {
    perftest("ib_send_lat", 18802, &["-c", "UC", "-n", "1000"]);
}

#[test]
fn ib_send_lat_ud() {
    perftest("ib_send_lat", 18803, &["-c", "UD", "-n", "1000"]);
}

#[test]
fn ib_write_lat_rc() {
    perftest("ib_write_lat", 18811, &["-c", "RC", "-n", "1000"]);
}

#[test]
fn ib_write_lat_uc() {
    perftest("ib_write_lat", 18812, &["-c", "UC", "-n", "1000"]);
}

#[test]
fn ib_read_lat_rc() {
    perftest("ib_read_lat", 18821, &["-c", "RC", "-n", "1000"]);
}

#[test]
fn ib_atomic_lat_fetch_and_add() {
    perftest("ib_atomic_lat", 18831, &["-A", "FETCH_AND_ADD", "-n", "1000"]);
}

#[test]
fn ib_atomic_lat_cmp_and_swap() {
    perftest("ib_atomic_lat", 18832, &["-A", "CMP_AND_SWAP", "-n", "1000"]);
}

// ------------------------------------------------------------------ our own C programs

#[test]
fn c_rc_client_server_gid_index_1() {
    let (s, c) = c_pair("rc_client_server", 18901, &["-g", "1"]);
    for check in ["recv_0B", "recv_1B", "recv_4KiB", "recv_1MiB_3sge", "rdma_write_landed", "write_imm_imm_data"] {
        assert_check(&s, "server", check);
    }
    for check in ["rdma_read_back", "atomic_fetch_add_7", "atomic_cmp_swap_match", "wrong_rkey_rem_access_err"] {
        assert_check(&c, "client", check);
    }
    assert_check(&s, "server", "wrong_rkey_memory_untouched");
}

#[test]
fn c_rc_client_server_gid_index_3() {
    c_pair("rc_client_server", 18902, &["-g", "3"]);
}

#[test]
fn c_ud_client_server() {
    let (s, c) = c_pair("ud_client_server", 18911, &[]);
    assert_check(&s, "server", "grh_ipv4_src_is_peer");
    assert_check(&s, "server", "ud_bad_qkey_dropped");
    assert_check(&c, "client", "grh_ipv4_src_is_peer");
}

#[test]
fn c_completion_channel_events() {
    let (s, _) = c_pair("events", 18921, &[]);
    assert_check(&s, "server", "blocking_get_cq_event");
    assert_check(&s, "server", "nonblocking_empty_channel_eagain");
    assert_check(&s, "server", "solicited_event");
}

#[test]
fn c_mr_faults_bad_registrations_and_unmapped_memory() {
    let (s, c) = c_pair("mr_faults", 18931, &[]);
    for check in ["reg_null_efault", "reg_1tib_over_small_buffer_efault", "reg_readonly_remote_write_efault"] {
        assert_check(&s, "server", check);
    }
    assert_check(&s, "server", "ctrl_qp_still_rts");
    assert_check(&c, "client", "write_into_unmapped_rem_access_err");
}

#[test]
fn c_mr_faults_syscall_fallback() {
    let (s, _) = c_pair("mr_faults", 18932, &["--syscall-mode"]);
    assert_contains(&s, "allow_user_segv_handler=0");
}

#[test]
fn c_remote_invalidation_and_index_checks() {
    let (s, c) = c_pair("invalidate", 18941, &[]);
    for check in [
        "send_inv_of_mr_refused_rem_inv_req_err",
        "mr_still_valid_write",
        "mr_still_valid_read_data",
        "send_inv_of_type2_mw",
        "write_through_invalidated_window_rem_access_err",
    ] {
        assert_check(&c, "client", check);
    }
    for check in [
        "send_inv_of_mr_recv_rem_inv_req_err",
        "mr_still_valid_remote_write_landed",
        "send_inv_of_type2_mw_with_inv_flag",
        "send_inv_of_type2_mw_invalidated_rkey",
        "window_write_after_invalidate_wrote_nothing",
        "create_ah_sgid_index_200_einval",
        "create_ah_port_2_einval",
        "modify_qp_sgid_index_100_einval",
        "modify_qp_port_2_einval",
        "modify_qp_pkey_index_1_einval",
        "query_gid_index_past_table_einval",
        "gid_table_has_16_slots",
        "gid_table_has_4_entries",
        "query_gid_empty_entry_zero_gid",
        "query_gid_ex_empty_entry_enodata",
        "create_ah_empty_gid_entry_einval",
        "create_ah_last_gid_index_ok",
        "query_pkey_index_1_einval",
        "mr_keys_carry_random_bits",
    ] {
        assert_check(&s, "server", check);
    }
}

/// ATOMIC WRITE and FLUSH both ways between two processes on their own addresses
/// (127.46.0.1 and .2), each capturing its traffic: `urxe check` decodes the requests and
/// their READ RESPONSE ONLY answers in both captures and flags only the hostile misaligned one.
#[test]
fn c_atomic_write_and_flush_both_directions_checked_on_the_wire() {
    let bin = c_program("atomic_write_flush");
    let dir = std::env::temp_dir().join(format!("urxe-apps-awf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (spcap, cpcap) = (dir.join("server.pcap"), dir.join("client.pcap"));
    let port = "18951";
    let mut server = urxe_cmd(&bin);
    server.arg("server").args(["-p", port]).env("URXE_ADDR", "127.46.0.1").env("URXE_PCAP", &spcap);
    let mut client = urxe_cmd(&bin);
    client.arg("client").arg(HOST).args(["-p", port]).env("URXE_ADDR", "127.46.0.2").env("URXE_PCAP", &cpcap);
    let (s, c) = {
        let _serial = heavy_lock();
        run_pair(18951, server, client)
    };
    for o in [&s, &c] {
        assert_lacks(o, "FAIL ");
        assert_lacks(o, "AddressSanitizer");
        assert_lacks(o, "runtime error:");
        assert_contains(o, " 0 failed");
    }
    for role in ["server", "client"] {
        let o = if role == "server" { &s } else { &c };
        for check in [
            "device_caps_flush_global_atomic_write_not_persistent",
            "reg_mr_flush_persistent_eopnotsupp",
            "atomic_write_completes",
            "flush_range_completes",
            "flush_region_completes",
            "peer_atomic_write_landed",
            "peer_write_before_flush_landed",
        ] {
            assert_check(o, role, check);
        }
    }
    for check in [
        "misaligned_atomic_write_rem_inv_req_err",
        "atomic_write_past_region_rem_access_err",
        "flush_without_flush_access_rem_access_err",
    ] {
        assert_check(&c, "client", check);
    }
    for check in
        ["guard_after_region_untouched", "word_untouched_by_misaligned_write", "responder_qp_in_error_after_nak"]
    {
        assert_check(&s, "server", check);
    }
    for pcap in [&spcap, &cpcap] {
        let o = Command::new(urxe_bin::urxe()).arg("check").arg(pcap).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        // Every packet passes but the client's deliberately misaligned ATOMIC WRITE, which
        // `urxe check` names (the responder NAKed it: 3 NAKs for the 3 hostile requests).
        assert!(!o.status.success(), "urxe check {} passed a misaligned ATOMIC WRITE:\n{out}", pcap.display());
        let flagged: Vec<&str> = out.lines().filter(|l| l.contains(" [")).collect();
        assert_eq!(flagged.len(), 1, "{out}");
        assert!(
            flagged[0].contains("RC ATOMIC_WRITE") && flagged[0].contains("[ATOMIC WRITE VA is not 8-byte aligned]"),
            "{out}"
        );
        assert!(out.contains(" ok, 1 bad (") && out.contains("naks 3,"), "{out}");
        assert!(out.contains("RC ATOMIC_WRITE") && out.contains("len=8"), "{out}");
        assert!(out.contains("RC FLUSH") && out.contains("placement=global level=range"), "{out}");
        assert!(out.contains("placement=global level=mr"), "{out}");
        assert!(out.contains("RC RDMA_READ_RESPONSE_ONLY"), "{out}");
        assert!(out.contains("127.46.0.1") && out.contains("127.46.0.2"), "{out}");
    }
}

#[test]
fn c_programs_compile_with_werror_and_sanitizers() {
    // Compiling needs no library: this holds today and keeps the C sources honest.
    for name in C_PROGRAMS {
        assert!(c_program(name).is_file(), "{name} was not built");
    }
}
