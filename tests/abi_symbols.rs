//! The built libibverbs.so.1 exports every symbol of two references, each with its exact
//! version, with soname libibverbs.so.1, and nothing else but urxe's private
//! `urxe_gsi_*@@URXE_PRIVATE_1` (the GSI calls of librdmacm.so.1):
//!
//! * Debian rdma-core 44's library (tests/data/symbols-libibverbs.txt, from `readelf
//!   --dyn-syms` of the real library): 146 default entries `name@@VERSION` and 34 non-default
//!   ones, the 33 `name@IBVERBS_1.0` compat entries and `ibv_register_driver@IBVERBS_1.1`
//!   (provider/src/compat.rs: they load and fail cleanly);
//! * rdma-core 56.1's `libibverbs.map.in` (tests/data/symbols-libibverbs-56.txt, every
//!   `name@NODE` it defines, `IBVERBS_PRIVATE_@IBVERBS_PABI_VERSION@` written as
//!   IBVERBS_PRIVATE_34, which 56 keeps): three more private calls, `ibv_wr_opcode_str`,
//!   `ibv_cmd_create_cq_ex2` and `ibv_cmd_query_device`.

mod abi_util;
use abi_util::*;

/// The provider's entry-point table, the one source of the version nodes (the same file
/// provider/build.sh turns into the version script).
#[allow(dead_code)]
#[path = "../provider/src/entries.rs"]
mod entries;
use std::collections::BTreeSet;
use std::process::Command;

/// (name@VER or name@@VER, type, size) of every defined, versioned dynamic symbol.
fn exported(lib: &std::path::Path) -> Vec<(String, String, u64)> {
    let o = run(Command::new("readelf").args(["--dyn-syms", "-W"]).arg(lib));
    assert!(o.status.success(), "readelf failed: {}", text(&o));
    let mut v = vec![];
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name
        // skip the header, undefined imports, locals and the version-node definitions (ABS)
        if f.len() < 8 || f[0] == "Num:" || !f[0].ends_with(':') || matches!(f[6], "UND" | "ABS") || f[4] == "LOCAL" {
            continue;
        }
        let name = f[7].to_string();
        if f[3] == "SECTION" || f[3] == "NOTYPE" && !name.contains('@') {
            continue;
        }
        v.push((name, f[3].to_string(), f[2].parse().unwrap_or(0)));
    }
    v
}

fn lines(file: &str) -> BTreeSet<String> {
    let data = std::fs::read_to_string(root().join("tests/data").join(file)).unwrap();
    data.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect()
}

/// Debian 44's exact set (default `@@` and non-default `@` entries).
fn reference_44() -> BTreeSet<String> {
    lines("symbols-libibverbs.txt")
}

/// rdma-core 56's map: `name@NODE`, default or not.
fn reference_56() -> BTreeSet<String> {
    lines("symbols-libibverbs-56.txt")
}

fn have_without_private() -> (BTreeSet<String>, usize) {
    let syms = exported(&lib_path());
    let unversioned: Vec<_> = syms.iter().filter(|(n, _, _)| !n.contains('@')).collect();
    assert!(unversioned.is_empty(), "unversioned global exports (Rust std leaking?): {unversioned:?}");
    // Beyond rdma-core's set: urxe's own private node, the GSI calls librdmacm.so.1 uses.
    let private: BTreeSet<String> = entries::ENTRY_POINTS
        .iter()
        .filter(|(_, v)| *v == "URXE_PRIVATE_1")
        .map(|(n, v)| format!("{n}@@{v}"))
        .collect();
    assert_eq!(private.len(), 8, "urxe_gsi_fd/recv/send/comm_id_base/listen/unlisten/cm_counters/fault_note");
    let have: BTreeSet<String> = syms.iter().map(|(n, _, _)| n.clone()).filter(|n| !private.contains(n)).collect();
    assert_eq!(syms.len() - have.len(), private.len(), "every URXE_PRIVATE_1 call is exported");
    (have, syms.len())
}

#[test]
fn exports_include_debian_44_exactly() {
    let want = reference_44();
    assert_eq!(want.iter().filter(|l| l.contains("@@")).count(), 146);
    assert_eq!(
        want.iter().filter(|l| !l.contains("@@")).count(),
        34,
        "33 @IBVERBS_1.0 + ibv_register_driver@IBVERBS_1.1"
    );
    let (have, _) = have_without_private();
    let missing: Vec<_> = want.difference(&have).collect();
    assert!(missing.is_empty(), "missing (or exported with another default/non-default version): {missing:?}");
    // The compat entries are non-default: their default spelling is not there.
    for (name, node) in entries::COMPAT_ENTRIES {
        assert!(have.contains(&format!("{name}@{node}")), "{name}@{node}");
        assert!(!have.contains(&format!("{name}@@{node}")), "{name}@@{node} must not be the default");
    }
}

#[test]
fn exports_equal_rdma_core_56_map() {
    let want = reference_56();
    assert_eq!(want.len(), 183);
    let (have, _) = have_without_private();
    // Compare without the default/non-default distinction the map file does not carry.
    let plain: BTreeSet<String> = have.iter().map(|n| n.replace("@@", "@")).collect();
    let missing: Vec<_> = want.difference(&plain).collect();
    let extra: Vec<_> = plain.difference(&want).collect();
    assert!(missing.is_empty(), "missing exports of rdma-core 56: {missing:?}");
    assert!(extra.is_empty(), "exports rdma-core 56 does not define: {extra:?}");
    // 56 adds only private calls to 44's set.
    let old: BTreeSet<String> = reference_44().iter().map(|n| n.replace("@@", "@")).collect();
    let added: Vec<_> = want.difference(&old).cloned().collect();
    assert_eq!(
        added,
        [
            "ibv_cmd_create_cq_ex2@IBVERBS_PRIVATE_34",
            "ibv_cmd_query_device@IBVERBS_PRIVATE_34",
            "ibv_wr_opcode_str@IBVERBS_PRIVATE_34"
        ]
    );
}

#[test]
fn verbs_allow_disassociate_destroy_is_a_one_byte_object() {
    let syms = exported(&lib_path());
    let s =
        syms.iter().find(|(n, _, _)| n == "verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34").expect("exported");
    assert_eq!((s.1.as_str(), s.2), ("OBJECT", 1));
    let funcs = syms.iter().filter(|(_, t, _)| t == "FUNC").count();
    assert_eq!(
        funcs, 190,
        "every other export is a function (145 of Debian 44's defaults + 34 compat + 3 of 56 + 8 URXE_PRIVATE_1)"
    );
}

#[test]
fn soname_and_version_nodes() {
    let o = run(Command::new("readelf").args(["-d", "-V", "-W"]).arg(lib_path()));
    let t = text(&o);
    assert!(t.contains("Library soname: [libibverbs.so.1]"), "{t}");
    for node in entries::VERSION_NODES {
        assert!(
            t.contains(&format!("Name: {node}\n")) || t.contains(&format!("Name: {node} ")),
            "version node {node} missing"
        );
    }
}
