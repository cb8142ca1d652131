//! librdmacm's `#[repr(C)]` mirrors (rdmacm/src/abi.rs) have exactly the sizes, alignments,
//! field offsets and sizes, and constants of the installed `<rdma/rdma_cma.h>`.

mod abi_util;
use abi_util::layout::assert_report_matches_headers;
use abi_util::{root, run, text};
use std::process::Command;

#[test]
fn rdmacm_mirrors_match_the_installed_header() {
    let o = run(Command::new(env!("CARGO")).current_dir(root()).args([
        "run",
        "-q",
        "-p",
        "urxe-rdmacm",
        "--example",
        "rdmacm_layout_report",
    ]));
    assert!(o.status.success(), "layout_report failed: {}", text(&o));
    let report = String::from_utf8(o.stdout).unwrap();
    assert!(report.lines().count() > 100, "report suspiciously short");
    assert!(report.contains("field struct rdma_cm_id|pd off"), "the fields rdma_verbs.h reads are covered");
    assert_report_matches_headers("rdmacm-layout", &report, "#include <rdma/rdma_cma.h>\n");
}
