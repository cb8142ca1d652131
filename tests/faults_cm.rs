//! Issue #41's rdma_cm faults (`URXE_FAULTS`, site `cm`), each with tests/rdmacm_c/cm_faults.c
//! (server and client in one process, ASan/UBSan) checking the exact event and status sequence
//! the kernel's CMA gives (see `src/engine/faults/cm.rs` for the facts):
//!
//! - `cm-error=E` (address resolution): ADDR_ERROR, status -E; `step=resolve-route`: ROUTE_ERROR;
//!   `cm-id=N`: only the Nth ID the process created (from 0) meets it;
//! - `reject=R:count=1`: REJECTED with status R, no CONNECT_REQUEST at the server; the
//!   reconnect with a new ID is ESTABLISHED;
//! - `cm-error=ETIMEDOUT:step=connect`: every REQ lost, UNREACHABLE -ETIMEDOUT after the CM's
//!   15 retries (about 98 s, as the kernel's timers give);
//! - `disconnect:at=T`: DISCONNECTED on both sides, QPs in ERR, posted receives flushed;
//! - `lose-rtu`: the client ESTABLISHED at once, the server after its REP timeout (~6 s);
//! - `device-removal:at=T`: DEVICE_REMOVAL, status 0, for the listener and both connected IDs;
//! - each CM fault injected is counted per kind in `urxe stat` (`faults_cm_reject`,
//!   `faults_cm_disconnect`, ... in the `CmCounters` block).
//!
//! ```sh
//! cargo test --release --test faults_cm -- --nocapture
//! ```

#[allow(dead_code)]
#[path = "apps/mod.rs"]
mod harness;
mod stat_text;
mod urxe_bin;

use harness::*;
use stat_text::stat_counter;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

fn cm_faults() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("urxe-faults-cm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let bin = dir.join("cm_faults");
        let mut gcc = Command::new("gcc");
        gcc.args(["-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined", "-g", "-o"])
            .arg(&bin)
            .arg(repo_root().join("tests/rdmacm_c/cm_faults.c"))
            .args(["-lrdmacm", "-libverbs"]);
        let out = run_bounded(&mut gcc, Duration::from_secs(120)).map_err(|e| e.to_string())?;
        if out.success() {
            Ok(bin)
        } else {
            Err(format!("gcc failed for tests/rdmacm_c/cm_faults.c:\n{out}"))
        }
    })
    .clone()
    .unwrap_or_else(|e| panic!("{e}"))
}

/// `cm_faults ARGS` under the plan `faults`, urxe's device at `addr`.
fn run(faults: &str, addr: &str, args: &[&str], timeout: Duration) -> Output {
    run_with(faults, addr, args, timeout, &[])
}

/// `run` with more environment.
fn run_with(faults: &str, addr: &str, args: &[&str], timeout: Duration, env: &[(&str, &str)]) -> Output {
    ensure_rdmacm();
    let mut c = urxe_cmd(cm_faults());
    c.envs(env.iter().copied());
    c.env("URXE_ADDR", addr)
        .env("URXE_FAULTS", faults)
        .env("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=0")
        .arg(args[0])
        .arg(addr)
        .args(&args[1..]);
    let out = run_bounded(&mut c, timeout).expect("run cm_faults");
    eprintln!("{out}");
    out
}

fn passed(out: &Output, lines: &[&str]) {
    assert!(out.success(), "cm_faults must exit 0\n{out}");
    assert_lacks(out, "FAIL");
    assert_lacks(out, "AddressSanitizer");
    assert_lacks(out, "runtime error");
    assert_contains(out, "all checks passed");
    for l in lines {
        assert_contains(out, l);
    }
}

const T: Duration = Duration::from_secs(60);

#[test]
fn an_address_resolution_error_is_addr_error_with_the_planned_status() {
    let out = run("cm-error=EHOSTUNREACH", "127.41.1.1", &["addr", "-113"], T);
    passed(&out, &["event RDMA_CM_EVENT_ADDR_ERROR status -113\n", "cm-error=EHOSTUNREACH -> AddrError(-113)"]);
    let out = run("cm-error=ETIMEDOUT", "127.41.1.1", &["addr", "-110"], T);
    passed(&out, &["event RDMA_CM_EVENT_ADDR_ERROR status -110\n"]);
}

#[test]
fn a_cm_id_scoped_fault_meets_that_id_only() {
    let stat = [("CM_FAULTS_STAT", urxe_bin::urxe())];
    for n in ["0", "1"] {
        let plan = format!("cm-error=EHOSTUNREACH:cm-id={n}");
        let out = run_with(&plan, "127.41.10.1", &["cmid", n, "-113"], T, &stat);
        passed(&out, &["ok the chosen ID: addr error\n", "ok the other ID: addr resolved\n"]);
        // One fault, one count.
        assert_eq!(stat_counter(&out.stdout, "CmCounters", "faults_cm_addr_error"), Some(1), "{out}");
    }
}

#[test]
fn a_route_resolution_error_is_route_error_after_addr_resolved() {
    let out = run("cm-error=ENETUNREACH:step=resolve-route", "127.41.2.1", &["route", "-101"], T);
    passed(
        &out,
        &[
            "event RDMA_CM_EVENT_ADDR_RESOLVED status 0\nok addr resolved\n",
            "event RDMA_CM_EVENT_ROUTE_ERROR status -101\n",
        ],
    );
}

#[test]
fn a_planned_rej_is_rejected_with_its_reason_and_the_reconnect_succeeds() {
    let out = run("reject=28:count=1", "127.41.3.1", &["reject", "7471", "28"], T);
    passed(
        &out,
        &["event RDMA_CM_EVENT_REJECTED status 28\n", "ok the server saw no connect request\n", "reconnected"],
    );
}

#[test]
fn lost_reqs_end_in_unreachable_etimedout_after_the_cms_retries() {
    let out = run("cm-error=ETIMEDOUT:step=connect", "127.41.4.1", &["unreachable", "7471"], Duration::from_secs(200));
    passed(&out, &["event RDMA_CM_EVENT_UNREACHABLE status -110\n", "ok after the CM's 15 retries\n"]);
}

#[test]
fn a_dreq_mid_connection_disconnects_both_sides_and_flushes_the_qps() {
    let out = run("disconnect:at=300ms", "127.41.5.1", &["disconnect", "7471"], T);
    passed(&out, &["ok client disconnected\n", "ok server disconnected\n", "ok client receives flushed\n"]);
}

#[test]
fn a_lost_rtu_establishes_the_passive_side_after_the_rep_is_sent_again() {
    let out = run("lose-rtu", "127.41.6.1", &["lostrtu", "7471"], T);
    passed(&out, &["ok server not established without the RTU\n", "ok after one REP timeout\n"]);
}

#[test]
fn device_removal_reaches_every_id_with_status_0() {
    let out = run("device-removal:at=300ms", "127.41.7.1", &["removal", "7471"], T);
    passed(&out, &["ok device removal, status 0, for each ID\n"]);
}

#[test]
fn urxe_stat_counts_each_cm_fault_injected_by_kind() {
    let stat = [("CM_FAULTS_STAT", urxe_bin::urxe())];
    let out = run_with("reject=28:count=1", "127.41.8.1", &["reject", "7471", "28"], T, &stat);
    passed(&out, &["reconnected", "ok urxe stat of this process\n"]);
    let got = |name| stat_counter(&out.stdout, "CmCounters", name);
    assert_eq!(got("faults_cm_reject"), Some(1), "{out}");
    assert_eq!(got("rejects_sent"), Some(1), "{out}");
    assert_eq!(got("faults_cm_disconnect"), Some(0), "{out}");

    let out = run_with("disconnect:at=300ms", "127.41.9.1", &["disconnect", "7471"], T, &stat);
    passed(&out, &["ok client disconnected\n", "ok urxe stat of this process\n"]);
    let got = |name| stat_counter(&out.stdout, "CmCounters", name);
    assert_eq!(got("faults_cm_disconnect"), Some(1), "{out}");
    assert_eq!(got("faults_cm_reject"), Some(0), "{out}");
}

/// An rdma_cm fault is marked in the `URXE_PCAP` capture as the engine's faults are: a record
/// on the device's `urxe-faults` interface whose pcapng comment (tshark `frame.comment`) is the
/// fault's trace line, among the CM MADs it changed (the REJ instead of a REP).
#[test]
fn a_cm_fault_is_noted_in_the_capture() {
    let dir = std::env::temp_dir().join(format!("urxe-faults-cm-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("reject.pcapng");
    let pcap_s = pcap.display().to_string();
    let env = [("URXE_PCAP", pcap_s.as_str()), ("URXE_TRACE", "1")];
    let out = run_with("reject=28:count=1", "127.41.11.1", &["reject", "7471", "28"], T, &env);
    passed(&out, &["reconnected"]);
    let traced: Vec<&str> = out.stderr.lines().filter(|l| l.starts_with("urxe: fault injected: reject=28")).collect();
    assert_eq!(traced.len(), 1, "one REJ fault traced\n{out}");
    let mut tshark = Command::new("tshark");
    tshark.arg("-r").arg(&pcap).args(["-Y", "frame.comment", "-T", "fields", "-e", "frame.comment"]);
    let t = run_bounded(&mut tshark, Duration::from_secs(60)).expect("run tshark");
    assert!(t.success(), "{t}");
    let noted: Vec<&str> = t.stdout.lines().filter(|l| l.starts_with("urxe: fault injected:")).collect();
    assert_eq!(noted, traced, "the capture notes the CM fault with its trace line");
    // The MADs around it are in the same capture: the REJ the fault sent is there.
    let mut rej = Command::new("tshark");
    rej.arg("-r").arg(&pcap).args(["-Y", "udp.dstport == 4791", "-T", "fields", "-e", "frame.number"]);
    let r = run_bounded(&mut rej, Duration::from_secs(60)).expect("run tshark");
    assert!(r.stdout.lines().count() >= 4, "REQ, REJ, REQ, REP... expected in the capture\n{r}");
    let _ = std::fs::remove_dir_all(&dir);
}
