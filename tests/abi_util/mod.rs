//! Shared helpers of the `abi_*` integration tests: build the drop-in library once per test
//! binary (provider/build.sh --debug into target/urxe/test-lib) and run things against it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

/// Directory holding the freshly built `libibverbs.so.1` (built on first call).
pub fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = target_dir().join("urxe").join("test-lib");
        let st = Command::new(root().join("provider/build.sh"))
            .arg("--debug")
            .env("URXE_OUT", &out)
            .status()
            .expect("run provider/build.sh");
        assert!(st.success(), "provider/build.sh failed");
        assert!(out.join("libibverbs.so.1").is_file());
        out
    })
}

pub fn lib_path() -> PathBuf {
    lib_dir().join("libibverbs.so.1")
}

/// `Command` with LD_LIBRARY_PATH pointing at our library only.
pub fn with_lib(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.env("LD_LIBRARY_PATH", lib_dir());
    c
}

pub fn run(c: &mut Command) -> Output {
    c.output().unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"))
}

pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Signs that the dynamic linker refused our library.
pub fn load_error(out: &str) -> Option<&'static str> {
    [
        "symbol lookup error",
        "undefined symbol",
        "version `IBVERBS",
        "error while loading shared libraries",
        "ImportError",
    ]
    .into_iter()
    .find(|p| out.contains(p))
}
pub mod layout;

/// Runs section `section` of the C test program `exe` (built from tests/c/`name`.c) in its own
/// process, without `URXE_ADDR` and with ASan's leak check; it must exit 0 and print "all
/// checks passed". Returns its output.
pub fn run_c_section(exe: &Path, name: &str, section: &str) -> String {
    let o = run(with_lib(exe).arg(section).env_remove("URXE_ADDR").env("ASAN_OPTIONS", "detect_leaks=1"));
    let out = text(&o);
    assert!(o.status.success() && out.contains("all checks passed"), "{name} {section}:\n{out}");
    out
}

/// Compiles `tests/c/<name>.c` (see [`compile_c`]) into `target/urxe/c-tests/<name>`.
pub fn compile_c_test(name: &str) -> PathBuf {
    compile_c(&format!("tests/c/{name}.c"))
}

/// Compiles the C program at `src` (relative to the repository) against the installed header
/// and the freshly built library (-Wall -Wextra -Werror, ASan/UBSan) into
/// `target/urxe/c-tests/<file stem>`; panics with gcc's output if it does not compile.
pub fn compile_c(src: &str) -> PathBuf {
    let dir = target_dir().join("urxe").join("c-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let src = root().join(src);
    let exe = dir.join(src.file_stem().expect("a C file"));
    let o = run(Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g", "-fsanitize=address,undefined"])
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg(format!("-L{}", lib_dir().display()))
        .arg("-l:libibverbs.so.1"));
    assert!(o.status.success(), "gcc failed:\n{}", text(&o));
    exe
}
