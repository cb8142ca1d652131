//! Bundles urxe's two drop-in libraries into the `urxe` binary, so that `cargo install --path cli`
//! gives a urxe that runs programs with no other step (`urxe run` unpacks them into a cache
//! when no installed copy is beside the binary).
//!
//! With the `bundle` feature (default) in a release build, this runs provider/build.sh (which
//! also builds rdmacm/) in a cargo of its own, with its own target directory
//! (`<target>/urxe-bundle`: the outer build holds the lock of the usual one), and writes
//! `$OUT_DIR/bundle.rs`, the list `include!`d by src/bin/urxe/libs.rs. Debug builds, `cargo
//! check` / `clippy` and `URXE_BUNDLE=0` bundle nothing (the binary then needs the libraries
//! beside it, as before: `bash provider/build.sh`). The nested build sets URXE_BUNDLE_NESTED
//! so that its own build of this package does not recurse.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    println!("cargo:rerun-if-env-changed=URXE_BUNDLE");
    println!("cargo:rerun-if-env-changed=URXE_BUNDLE_NESTED");
    println!("cargo:rerun-if-changed=build.rs");
    let wanted = std::env::var_os("CARGO_FEATURE_BUNDLE").is_some()
        && std::env::var("PROFILE").as_deref() == Ok("release")
        && std::env::var_os("URXE_BUNDLE_NESTED").is_none()
        && std::env::var("URXE_BUNDLE").as_deref() != Ok("0")
        && manifest.join("../provider/build.sh").is_file();
    let files = if wanted { build_libs(&out, &manifest) } else { Vec::new() };
    let mut list = String::from("&[\n");
    let mut id: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, path) in &files {
        list.push_str(&format!("    ({name:?}, include_bytes!({:?}) as &[u8]),\n", path.display().to_string()));
        for b in std::fs::read(path).expect("read a built library") {
            id = (id ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    list.push(']');
    std::fs::write(out.join("bundle.rs"), list).expect("write bundle.rs");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rustc-env=URXE_BUNDLE_ID={version}-{id:016x}");
}

fn build_libs(out: &Path, manifest: &Path) -> Vec<(String, PathBuf)> {
    for d in ["../src", "../provider/src", "../provider/examples", "../provider/build.sh", "../provider/Cargo.toml"] {
        println!("cargo:rerun-if-changed={d}");
    }
    for d in [
        "../rdmacm/src",
        "../rdmacm/examples",
        "../rdmacm/build.sh",
        "../rdmacm/Cargo.toml",
        "../Cargo.toml",
        "../Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={d}");
    }
    // Both libraries are built on the C-ABI toolkit.
    for d in ["../cabi/src", "../cabi/macros/src", "../cabi/Cargo.toml", "../cabi/macros/Cargo.toml"] {
        println!("cargo:rerun-if-changed={d}");
    }
    // OUT_DIR is <target>[/<triple>]/release/build/urxe-<hash>/out.
    let target = out.ancestors().nth(4).map(Path::to_path_buf).unwrap_or_else(|| out.join("t"));
    let nested = target.join("urxe-bundle");
    let dest = out.join("bundle");
    let cargo = PathBuf::from(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    let mut path = std::ffi::OsString::new();
    if let Some(dir) = cargo.parent().filter(|d| !d.as_os_str().is_empty()) {
        path.push(dir);
        path.push(":");
    }
    path.push(std::env::var_os("PATH").unwrap_or_default());
    let status = Command::new("bash")
        .arg(manifest.join("../provider/build.sh"))
        .arg("--release")
        .current_dir(manifest.join(".."))
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", &nested)
        .env("URXE_OUT", &dest)
        .env("URXE_BUNDLE_NESTED", "1")
        // Not for the nested build: clippy's driver and the outer build's job server.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .env_remove("CARGO_MAKEFLAGS")
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "building urxe's libibverbs.so.1 / librdmacm.so.1 to bundle them failed ({s}); gcc is needed \
             (Debian: apt-get install gcc). URXE_BUNDLE=0 builds a urxe without them."
        ),
        Err(e) => panic!("cannot run bash provider/build.sh: {e}; URXE_BUNDLE=0 builds a urxe without the libraries"),
    }
    ["libibverbs.so.1", "librdmacm.so.1"].iter().map(|n| (n.to_string(), dest.join(n))).collect()
}
