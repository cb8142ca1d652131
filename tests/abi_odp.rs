//! On-demand paging through the C API: tests/verbs_c/odp.c (compiled against the installed
//! header with -Werror and ASan/UBSan) registers the implicit MR before its memory exists, has a
//! peer QP write, read, add and send into pages mapped afterwards, fails cleanly on pages
//! unmapped afterwards, and checks `ibv_advise_mr` and the ODP capabilities. One process, an RC
//! QP pair connected to itself on 127.47.0.1.

mod abi_util;
use abi_util::*;
use std::path::PathBuf;
use std::sync::OnceLock;

fn program() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile_c("tests/verbs_c/odp.c"))
}

/// Runs the program with `asan` options; every check must pass, with no sanitizer finding.
fn odp(asan: &str) -> String {
    let o = run(with_lib(program())
        .env("URXE_ADDR", "127.47.0.1")
        .env("ASAN_OPTIONS", asan)
        .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1"));
    let out = text(&o);
    for bad in ["FAIL ", "AddressSanitizer", "runtime error:"] {
        assert!(!out.contains(bad), "odp printed {bad:?}:\n{out}");
    }
    assert!(o.status.success() && out.contains(" 0 failed"), "odp failed:\n{out}");
    out
}

#[test]
fn implicit_odp_serves_pages_mapped_later_and_fails_cleanly_on_unmapped_ones() {
    let out = odp("detect_leaks=1");
    for check in [
        "odp_caps_general",
        "odp_caps_per_transport",
        "odp_reg_over_hole_ok",
        "plain_reg_over_hole_efault",
        "implicit_reg_ok",
        "implicit_reg_iova_4096_einval",
        "implicit_write_into_later_mmap",
        "implicit_read_from_later_mmap",
        "implicit_fetch_add_on_later_mmap",
        "implicit_recv_into_later_mmap",
        "implicit_write_into_munmapped_rem_access_err",
        "process_alive_after_remote_fault",
        "implicit_gather_from_munmapped_loc_prot_err",
        "implicit_write_at_null_page_rem_access_err",
        "implicit_write_next_to_hole",
        "odp_write_into_hole_rem_access_err",
        "odp_write_into_hole_mapped_later",
        "sync_prefetch_made_page_resident",
        "no_fault_left_page_alone",
        "read_prefetch_made_page_resident",
        "advise_sync_unmapped_efault",
        "advise_async_unmapped_best_effort",
        "advise_past_mr_end_efault",
        "advise_bad_flags_einval",
        "advise_unknown_advice_eopnotsupp",
        "advise_no_sge_einval",
        "advise_other_pd_eperm",
        "advise_read_only_prefetch_write_eperm",
        "advise_non_odp_mr_enoent",
        "advise_stale_key_enoent",
        "advise_window_key_einval",
    ] {
        assert!(out.contains(&format!("PASS odp {check}")), "no PASS for {check}:\n{out}");
    }
}

/// The same with ASan refusing user SIGSEGV handlers: urxe falls back to process_vm_readv /
/// process_vm_writev, and the faults must still be errors, not signals.
#[test]
fn implicit_odp_faults_are_errors_in_the_syscall_fallback_too() {
    let out = odp("detect_leaks=1:allow_user_segv_handler=0");
    assert!(out.contains("PASS odp implicit_write_into_munmapped_rem_access_err"), "{out}");
    assert!(out.contains("PASS odp implicit_write_at_null_page_rem_access_err"), "{out}");
}
