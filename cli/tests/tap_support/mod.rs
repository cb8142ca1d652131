//! What the capture-tap tests share: urxe's libraries and a bounded wait for a child.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// urxe's libibverbs.so.1 (built by `bash provider/build.sh --release` if it is not there).
pub fn urxe_lib_dir() -> PathBuf {
    let root = &Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let dir = target.join("urxe/lib");
    if !dir.join("libibverbs.so.1").is_file() {
        let st = Command::new("bash").arg(root.join("provider/build.sh")).arg("--release").current_dir(root).status();
        assert!(st.is_ok_and(|s| s.success()), "bash provider/build.sh --release failed");
    }
    dir
}

/// Waits for `child` at most `limit`; kills it when it overstays (`None`). Otherwise whether
/// it exited 0.
pub fn wait_bounded(child: &mut std::process::Child, limit: Duration) -> Option<bool> {
    let end = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st.success());
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
