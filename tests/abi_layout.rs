//! The provider's `#[repr(C)]` mirrors have exactly the sizes, alignments, field offsets,
//! field sizes and constant values of the installed `<infiniband/verbs.h>`: the Rust side
//! prints its facts (`layout_report` example), a C program generated from the same keys prints
//! the header's, and every line must agree.

mod abi_util;
use abi_util::*;
use std::process::Command;

fn rust_report() -> String {
    let o = run(Command::new(env!("CARGO")).current_dir(root()).args([
        "run",
        "-q",
        "-p",
        "urxe-provider",
        "--example",
        "layout_report",
    ]));
    assert!(o.status.success(), "layout_report failed: {}", text(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// rdma-core's private `struct verbs_device` (driver.h, v44), which system providers cast
/// devices to. Not in the installed headers; written from ../shared/abi/layout.txt.
const PRIVATE_MIRRORS: &str = r#"
struct verbs_device {
    struct ibv_device device;
    const void *ops;
    int refcount;
    void *entry[2];
    void *sysfs;
    uint64_t core_support;
};
"#;

#[test]
fn rust_mirrors_match_the_installed_header() {
    let report = rust_report();
    assert!(report.lines().count() > 400, "report suspiciously short");
    let prelude = format!("#include <infiniband/verbs.h>\n#include <infiniband/sa.h>\n{PRIVATE_MIRRORS}");
    abi_util::layout::assert_report_matches_headers("abi-layout", &report, &prelude);
}
