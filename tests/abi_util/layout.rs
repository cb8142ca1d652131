//! Layout reports (`type …`, `field …`, `const …` lines printed by a crate's `layout_report`
//! example) checked against installed C headers: the same keys become a C program that prints
//! the header's facts, and both sets of lines must be equal.

use super::{run, target_dir, text};
use std::collections::BTreeSet;
use std::process::Command;

/// The C program printing, for every line of `report`, the header's value of the same fact.
pub fn c_program(report: &str, prelude: &str) -> String {
    let mut c = String::from("#include <stdio.h>\n#include <stddef.h>\n#include <stdint.h>\n");
    c.push_str(prelude);
    c.push_str("\nint main(void) {\n");
    for line in report.lines() {
        let w: Vec<&str> = line.split(' ').collect();
        match w[0] {
            "type" => {
                let ty = format!("{} {}", w[1], w[2]);
                c.push_str(&format!(
                    "  printf(\"type %s size %zu align %zu\\n\", \"{ty}\", sizeof({ty}), _Alignof({ty}));\n"
                ));
            }
            "field" => {
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

/// Compiles and runs the C side of `report` (named `name` under target/urxe/) and asserts that
/// both sides print the same set of lines.
pub fn assert_report_matches_headers(name: &str, report: &str, prelude: &str) {
    let dir = target_dir().join("urxe").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout_check.c");
    let exe = dir.join("layout_check");
    std::fs::write(&src, c_program(report, prelude)).unwrap();
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
