//! The provider's `#[repr(C)]` mirrors have exactly the sizes, alignments, field offsets,
//! field sizes and constant values of the installed `<infiniband/verbs.h>`: the Rust side
//! prints its facts (`layout_report` example), a C program generated from the same keys prints
//! the header's, and every line must agree.

mod abi_util;
use abi_util::*;
use std::collections::BTreeSet;
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

fn c_program(report: &str) -> String {
    let mut c =
        String::from("#include <stdio.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <infiniband/verbs.h>\n");
    c.push_str(PRIVATE_MIRRORS);
    c.push_str("int main(void) {\n");
    for line in report.lines() {
        let w: Vec<&str> = line.split(' ').collect();
        match w[0] {
            "type" => {
                // type <struct|union> <name> size N align A
                let ty = format!("{} {}", w[1], w[2]);
                c.push_str(&format!(
                    "  printf(\"type %s size %zu align %zu\\n\", \"{ty}\", sizeof({ty}), _Alignof({ty}));\n"
                ));
            }
            "field" => {
                // field <struct|union> <name>|<path> off N size N
                let (name, path) = w[2].split_once('|').unwrap();
                let ty = format!("{} {}", w[1], name);
                c.push_str(&format!(
                    "  printf(\"field %s|%s off %zu size %zu\\n\", \"{ty}\", \"{path}\", offsetof({ty}, {path}), sizeof((({ty} *)0)->{path}));\n"
                ));
            }
            "const" => {
                let n = w[1];
                c.push_str(&format!("  printf(\"const %s %llu\\n\", \"{n}\", (unsigned long long)({n}));\n"));
            }
            other => panic!("unknown report line kind {other:?}: {line}"),
        }
    }
    c.push_str("  return 0;\n}\n");
    c
}

#[test]
fn rust_mirrors_match_the_installed_header() {
    let report = rust_report();
    assert!(report.lines().count() > 400, "report suspiciously short");
    let dir = target_dir().join("urxe").join("abi-layout");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout_check.c");
    let exe = dir.join("layout_check");
    std::fs::write(&src, c_program(&report)).unwrap();
    let o = run(Command::new("gcc").args(["-std=gnu11", "-Wall", "-Werror", "-o"]).arg(&exe).arg(&src));
    assert!(o.status.success(), "gcc failed:\n{}", text(&o));
    let o = run(&mut Command::new(&exe));
    assert!(o.status.success());
    let c_side = String::from_utf8(o.stdout).unwrap();
    let r: BTreeSet<&str> = report.lines().collect();
    let h: BTreeSet<&str> = c_side.lines().collect();
    let only_rust: Vec<_> = r.difference(&h).collect();
    let only_c: Vec<_> = h.difference(&r).collect();
    assert!(
        only_rust.is_empty() && only_c.is_empty(),
        "layout mismatch\n  Rust says:\n    {}\n  header says:\n    {}",
        only_rust.iter().map(|s| s.to_string()).collect::<Vec<_>>().join("\n    "),
        only_c.iter().map(|s| s.to_string()).collect::<Vec<_>>().join("\n    ")
    );
    assert_eq!(r.len(), report.lines().count(), "duplicate report lines");
}
