//! The `urxe` binary for this package's tests. It belongs to the `urxe-cli` crate (cli/), so
//! cargo sets no `CARGO_BIN_EXE_urxe` here: the first call builds it with the profile and the
//! `urxe` features of this test (a no-op when `cargo test --workspace` has just built it) and
//! every call returns its path, in the target directory this test runs from.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The path of a freshly built `urxe`.
pub fn urxe() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        // This test is <target>/<profile>/deps/<name>-<hash>; the binary is <target>/<profile>/urxe.
        let exe = std::env::current_exe().expect("the test's own path");
        let profile_dir: PathBuf = exe.parent().and_then(Path::parent).expect("<target>/<profile>").into();
        let target = profile_dir.parent().expect("<target>");
        let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        c.args(["build", "-q", "-p", "urxe-cli", "--bin", "urxe", "--features", "urxe/fuzzing"]);
        if !cfg!(debug_assertions) {
            c.arg("--release");
        }
        c.arg("--target-dir").arg(target).current_dir(root);
        let st = c.status().expect("run cargo build -p urxe-cli");
        assert!(st.success(), "cargo build -p urxe-cli --bin urxe failed");
        let bin = profile_dir.join("urxe");
        assert!(bin.is_file(), "{} missing after the build", bin.display());
        bin.into_os_string().into_string().expect("a UTF-8 target path")
    })
}
