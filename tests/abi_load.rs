//! Every program of ibverbs-utils, perftest and rdmacm-utils, and every pyverbs module, loads
//! against urxe's libibverbs.so.1 (all are linked BIND_NOW, so one missing symbol or version
//! node fails at start with "symbol lookup error" / "version `IBVERBS_x' not found" / exit 127,
//! or an ImportError in Python).

mod abi_util;
use abi_util::*;
use std::path::PathBuf;
use std::process::Command;

fn package_programs(pkgs: &[&str]) -> Vec<PathBuf> {
    let o = run(Command::new("dpkg").arg("-L").args(pkgs));
    assert!(o.status.success(), "dpkg -L {pkgs:?} failed: {}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with("/usr/bin/"))
        .map(PathBuf::from)
        // run_perftest_* are shell scripts: only ELF programs link libibverbs
        .filter(|p| std::fs::read(p).map(|b| b.starts_with(b"\x7fELF")).unwrap_or(false))
        .collect()
}

#[test]
fn debian_verbs_programs_load_our_library() {
    let progs = package_programs(&["ibverbs-utils", "perftest", "rdmacm-utils"]);
    assert!(progs.len() >= 30, "expected the Debian programs, found {progs:?}");
    let ours = lib_path().canonicalize().unwrap();
    let mut failures = vec![];
    for p in &progs {
        // 1. the dynamic linker resolves libibverbs.so.1 to ours
        let o = run(with_lib("ldd").arg(p));
        let l = text(&o);
        let line = l.lines().find(|x| x.contains("libibverbs.so.1")).unwrap_or("").to_string();
        if !line.contains(ours.to_str().unwrap()) {
            failures.push(format!("{}: libibverbs resolves elsewhere: {line:?}", p.display()));
            continue;
        }
        // 2. it starts (BIND_NOW: every symbol bound) and prints its usage
        let o = run(with_lib("timeout").args(["-s", "KILL", "5"]).arg(p).arg("--help"));
        let out = text(&o);
        let code = o.status.code();
        if let Some(pat) = load_error(&out) {
            failures.push(format!("{}: {pat}: {out}", p.display()));
        } else if code == Some(127) {
            failures.push(format!("{}: exit 127: {out}", p.display()));
        } else if code.is_none() {
            failures.push(format!("{}: killed by a signal ({:?}): {out}", p.display(), o.status));
        }
    }
    assert!(failures.is_empty(), "{} of {} programs failed:\n{}", failures.len(), progs.len(), failures.join("\n"));
}

#[test]
fn every_pyverbs_module_imports() {
    let base = PathBuf::from("/usr/lib/python3/dist-packages");
    let mut mods = vec![];
    let mut stack = vec![base.join("pyverbs")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "so") {
                let rel = p.strip_prefix(&base).unwrap().to_str().unwrap().to_string();
                let m = rel.split(".cpython").next().unwrap().replace('/', ".");
                mods.push(m);
            }
        }
    }
    mods.sort();
    assert!(mods.len() >= 35, "pyverbs modules: {mods:?}");
    let script = format!(
        "import importlib, sys\nfails = []\nfor m in {mods:?}:\n    try:\n        importlib.import_module(m)\n    except Exception as e:\n        fails.append(f'{{m}}: {{e!r}}')\nmaps = open('/proc/self/maps').read()\nprint('OURS' if {lib:?} in maps else 'NOT-OURS')\nprint('\\n'.join(fails))\nsys.exit(1 if fails else 0)\n",
        lib = lib_path().canonicalize().unwrap().to_str().unwrap()
    );
    let o = run(with_lib("/usr/bin/python3").arg("-c").arg(&script));
    let out = text(&o);
    assert!(out.contains("OURS"), "python did not load our libibverbs:\n{out}");
    assert!(o.status.success(), "imports failed:\n{out}");
}
