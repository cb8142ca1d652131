//! Where `urxe run` finds urxe's libibverbs.so.1 and librdmacm.so.1, and the copy of them this
//! binary carries (built and embedded by build.rs with the default `bundle` feature), so that a
//! `cargo install`ed urxe runs programs with no other step.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The two libraries, by file name.
pub const LIBS: [&str; 2] = ["libibverbs.so.1", "librdmacm.so.1"];

/// The libraries this binary carries: `(file name, bytes)`, empty without the `bundle` feature
/// (or when build.rs could not build them; it says so as a cargo warning).
fn bundled() -> &'static [(&'static str, &'static [u8])] {
    include!(concat!(env!("OUT_DIR"), "/bundle.rs"))
}

/// Identifies the bundled copy (its size and a hash, from build.rs): the cache directory name.
const BUNDLE_ID: &str = env!("URXE_BUNDLE_ID");

/// Where a lib dir came from, for `urxe doctor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Option,
    Env,
    BesideBinary,
    Bundled,
}

impl Source {
    pub fn describe(self) -> &'static str {
        match self {
            Source::Option => "--lib",
            Source::Env => "URXE_LIB_DIR",
            Source::BesideBinary => "beside the urxe binary",
            Source::Bundled => "carried by the urxe binary, unpacked into the cache",
        }
    }
}

fn has_lib(d: &Path) -> bool {
    d.join("libibverbs.so.1").is_file()
}

/// Directories beside this binary that hold an installed or built copy: cargo's
/// `target/<profile>/urxe` -> `target/urxe/lib`; an install's `bin/urxe` -> `lib/urxe` (the
/// Debian package's /usr/bin/urxe -> /usr/lib/urxe, `urxe install --prefix P` -> P/lib/urxe).
fn beside_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent().unwrap_or(Path::new("."));
    [bin.join("../urxe/lib"), bin.join("../lib/urxe"), bin.join("../../target/urxe/lib")]
        .into_iter()
        .find(|d| has_lib(d))
}

/// Where urxe's libibverbs.so.1 is: `--lib`, else $URXE_LIB_DIR, else beside this binary,
/// else the bundled copy unpacked into the cache.
pub fn find_lib_dir(explicit: Option<&Path>) -> Result<(PathBuf, Source), String> {
    if let Some(d) = explicit {
        return if has_lib(d) {
            Ok((d.to_path_buf(), Source::Option))
        } else {
            Err(format!("--lib {}: no libibverbs.so.1 there", d.display()))
        };
    }
    if let Ok(d) = std::env::var("URXE_LIB_DIR") {
        let p = PathBuf::from(&d);
        return if has_lib(&p) {
            Ok((p, Source::Env))
        } else {
            Err(format!("URXE_LIB_DIR={d}: no libibverbs.so.1 there"))
        };
    }
    if let Some(d) = beside_binary() {
        return Ok((d, Source::BesideBinary));
    }
    if bundled().is_empty() {
        return Err("urxe's libibverbs.so.1 not found beside this binary and this binary carries no copy \
                    (built without the `bundle` feature); build it with `bash provider/build.sh` or set URXE_LIB_DIR"
            .to_string());
    }
    unpack_cached().map(|d| (d, Source::Bundled))
}

/// The cache directory for the bundled copy: $XDG_CACHE_HOME/urxe, else ~/.cache/urxe, else
/// /tmp/urxe-cache-<uid> (created 0700 and checked to be this user's own).
fn cache_root() -> PathBuf {
    let xdg = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()).map(|v| PathBuf::from(v).join("urxe"));
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|v| PathBuf::from(v).join(".cache/urxe"));
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    xdg.or(home).unwrap_or_else(|| PathBuf::from(format!("/tmp/urxe-cache-{uid}")))
}

fn own_dir(d: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().recursive(true).mode(0o700).create(d) {
        Ok(()) => {}
        Err(e) => return Err(format!("cannot create {}: {e}", d.display())),
    }
    let md = std::fs::symlink_metadata(d).map_err(|e| format!("{}: {e}", d.display()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if !md.is_dir() || md.uid() != uid || md.mode() & 0o022 != 0 {
        return Err(format!(
            "{}: not a directory of uid {uid} closed to others; set XDG_CACHE_HOME or URXE_LIB_DIR",
            d.display()
        ));
    }
    Ok(())
}

/// Unpacks the bundled libraries into `<cache>/<BUNDLE_ID>/` once (each file written under a
/// temporary name and renamed, so concurrent runs never see half a library).
fn unpack_cached() -> Result<PathBuf, String> {
    let root = cache_root();
    let dir = root.join(BUNDLE_ID);
    own_dir(&root)?;
    own_dir(&dir)?;
    write_libs(&dir)?;
    Ok(dir)
}

/// Writes the bundled libraries into `dir` unless the same bytes are already there.
fn write_libs(dir: &Path) -> Result<(), String> {
    for (name, bytes) in bundled() {
        let path = dir.join(name);
        if std::fs::read(&path).is_ok_and(|have| have == *bytes) {
            continue;
        }
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o755).open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot write {}: {e}", path.display())
        })?;
    }
    Ok(())
}

/// `urxe install --prefix P`: the libraries into P/lib/urxe (from wherever `urxe run` would
/// take them), the man pages into P/share/man/man1. Returns the files written.
pub fn install(prefix: &Path) -> Result<Vec<PathBuf>, String> {
    let lib = prefix.join("lib/urxe");
    std::fs::create_dir_all(&lib).map_err(|e| format!("cannot create {}: {e}", lib.display()))?;
    let mut written = Vec::new();
    if !bundled().is_empty() {
        write_libs(&lib)?;
    } else {
        let (src, _) = find_lib_dir(None)?;
        for name in LIBS {
            let from = src.join(name);
            if !from.is_file() {
                return Err(format!("{}: missing (build it with `bash provider/build.sh`)", from.display()));
            }
            if from.canonicalize().ok() != lib.join(name).canonicalize().ok() {
                std::fs::copy(&from, lib.join(name))
                    .map_err(|e| format!("{} -> {}: {e}", from.display(), lib.display()))?;
            }
        }
    }
    written.extend(LIBS.iter().map(|n| lib.join(n)));
    let man = prefix.join("share/man/man1");
    written.extend(crate::cli::write_man_pages(&man).map_err(|e| format!("{}: {e}", man.display()))?);
    Ok(written)
}
