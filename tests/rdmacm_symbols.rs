//! The built librdmacm.so.1 exports exactly Debian rdma-core 44's symbol set
//! (tests/data/symbols-librdmacm.txt, from `objdump -T` of the real library), each as
//! `name@@RDMACM_1.x` with the nodes chained 1.0 ← 1.1 ← 1.2 ← 1.3, soname librdmacm.so.1,
//! DT_NEEDED libibverbs.so.1 (the verbs go through the application's libibverbs), nothing of
//! Rust's std or urxe's CM leaking out, and the table that generates its version script agrees.

mod abi_util;
use abi_util::*;

#[allow(dead_code)]
#[path = "../rdmacm/src/entries.rs"]
mod entries;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn rdmacm_lib() -> PathBuf {
    let dir = lib_dir();
    let lib = dir.join("librdmacm.so.1");
    if !lib.is_file() {
        let o = run(Command::new("bash").arg(root().join("rdmacm/build.sh")).current_dir(root()));
        assert!(o.status.success(), "rdmacm/build.sh failed: {}", text(&o));
    }
    assert!(lib.is_file(), "{} was not built", lib.display());
    lib
}

/// Defined, global, versioned dynamic symbols as `name@VER` / `name@@VER`.
fn exported(lib: &std::path::Path) -> BTreeSet<String> {
    let o = run(Command::new("readelf").args(["--dyn-syms", "-W"]).arg(lib));
    assert!(o.status.success(), "readelf failed: {}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let defined = f.len() >= 8 && f[0].ends_with(':') && f[0] != "Num:" && !matches!(f[6], "UND" | "ABS");
            (defined && f[4] != "LOCAL" && f[3] != "SECTION").then(|| f[7].to_string())
        })
        .collect()
}

#[test]
fn exports_equal_debians_librdmacm() {
    let data = std::fs::read_to_string(root().join("tests/data/symbols-librdmacm.txt")).unwrap();
    let want: BTreeSet<String> = data.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
    assert_eq!(want.len(), 68);
    let have = exported(&rdmacm_lib());
    let missing: Vec<_> = want.difference(&have).collect();
    let extra: Vec<_> = have.difference(&want).collect();
    assert!(missing.is_empty(), "missing exports: {missing:?}");
    assert!(extra.is_empty(), "unexpected exports (unversioned = Rust std leaking?): {extra:?}");
    let table: BTreeSet<String> = entries::ENTRY_POINTS.iter().map(|(n, v)| format!("{n}@@{v}")).collect();
    assert_eq!(table, want, "rdmacm/src/entries.rs is the same set");
}

#[test]
fn exports_every_symbol_of_rdma_core_56_map() {
    // rdma-core 56.1's librdmacm.map: the same 68 names and nodes as Debian 44's library.
    let data = std::fs::read_to_string(root().join("tests/data/symbols-librdmacm-56.txt")).unwrap();
    let want: BTreeSet<String> = data.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
    assert_eq!(want.len(), 68);
    let have: BTreeSet<String> = exported(&rdmacm_lib()).iter().map(|n| n.replace("@@", "@")).collect();
    let missing: Vec<_> = want.difference(&have).collect();
    assert!(missing.is_empty(), "missing exports of rdma-core 56: {missing:?}");
}

#[test]
fn soname_needed_and_chained_version_nodes() {
    let o = run(Command::new("readelf").args(["-d", "-V", "-W"]).arg(rdmacm_lib()));
    let t = text(&o);
    assert!(t.contains("Library soname: [librdmacm.so.1]"), "{t}");
    assert!(t.contains("Shared library: [libibverbs.so.1]"), "DT_NEEDED libibverbs.so.1:\n{t}");
    for (i, node) in entries::VERSION_NODES.iter().enumerate().skip(1) {
        let parent = entries::VERSION_NODES[i - 1];
        let def = t.find(&format!("Name: {node}")).unwrap_or_else(|| panic!("node {node} missing\n{t}"));
        assert!(t[def..].lines().nth(1).is_some_and(|l| l.contains(parent)), "{node} must inherit {parent}\n{t}");
    }
}
