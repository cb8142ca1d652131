//! urxe's verbs beyond rxe (timestamps, ibv_rereg_mr, device memory, thread and parent
//! domains), checked by a C program (tests/c/features.c) compiled against the installed header
//! with -Werror and ASan/UBSan, exactly as an unmodified application sees the library. Each
//! test runs one section of the program in its own process.

mod abi_util;
use abi_util::*;
use std::path::PathBuf;
use std::sync::OnceLock;

fn program() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile_c_test("features"))
}

/// Runs one section; it must exit 0 and say so.
fn section(name: &str) {
    run_c_section(program(), "features", name);
}

#[test]
fn timestamps_query_rt_values_and_completion_clocks() {
    section("timestamps");
}

#[test]
fn rereg_mr_translation_pd_access_and_error_codes() {
    section("rereg");
}

#[test]
fn device_memory_copies_zero_based_mrs_remote_access_and_import() {
    section("dm");
}

#[test]
fn thread_and_parent_domains_hold_their_objects_and_carry_traffic() {
    section("pd");
}
