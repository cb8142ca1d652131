//! XRC through the C ABI (tests/c/xrc.c, compiled against the installed header with -Werror
//! and ASan/UBSan): domains and their sharing by file, XRC SRQs and their numbers, initiator
//! and target QPs, `ibv_open_qp`, both ways of naming the remote SRQ, WRITE/READ through a
//! target, the errno of every refusal.

mod abi_util;
use abi_util::*;

#[test]
fn xrc_domains_srqs_qps_and_traffic_through_the_c_abi() {
    let exe = compile_c_test("xrc");
    let o = run(with_lib(&exe).env_remove("URXE_ADDR").env("ASAN_OPTIONS", "detect_leaks=1"));
    let out = text(&o);
    assert!(o.status.success() && out.contains("all checks passed"), "xrc:\n{out}");
}
