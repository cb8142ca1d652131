#!/usr/bin/env python3
"""Keeps the house: import circles between source files, arrows running back up the layers,
and source files over 900 lines, in every crate of the workspace.

    python3 scripts/house_check.py              # report; exit 1 if anything is found
    python3 scripts/house_check.py --report     # report only, exit 0
    python3 scripts/house_check.py --self-test  # the checker finds a fabricated circle, arrow
                                                # back up and 901-line file; exit 1 if not

What it reads: every crate of the workspace, found from the manifests: each package's library
(`src/lib.rs` and its module tree), each binary (`src/main.rs`, `src/bin/NAME.rs` with its
modules in `src/bin/NAME/`, `src/bin/NAME/main.rs`) and, if it has sources, the fuzz crate's
targets. Test code is left out of the import graph (`#[cfg(test)]` modules, inline or in their
own file) but counts for the line limit when it sits inside a source file, as the issue that
introduced this check asks. Files under tests/, benches, bench/ and examples are not source
files of the shipped crates and are not measured.

An arrow is file A -> file B when A names an item of B through `use crate::…`, `super::…`,
`self::…` or a `crate::…` path in code; `pub use` re-exports are followed to the file that
defines the item, so a facade does not make a circle of its own.
"""
import os
import re
import sys
from collections import defaultdict

MAX_LINES = 900
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Package directories (relative to ROOT) whose crates are checked: the workspace's members
# (read from Cargo.toml) and fuzz/. A member missing from this checkout is skipped.
def package_dirs(root):
    dirs = []
    try:
        with open(os.path.join(root, "Cargo.toml"), encoding="utf-8") as f:
            text = f.read()
        m = re.search(r"^members\s*=\s*\[([^\]]*)\]", text, re.M)
        if m:
            dirs = re.findall(r'"([^"]+)"', m.group(1))
    except OSError:
        pass
    if "." not in dirs:
        dirs.insert(0, ".")
    if "fuzz" not in dirs:
        dirs.append("fuzz")
    return [d for d in dirs if os.path.isfile(os.path.join(root, d, "Cargo.toml"))]


def package_name(root, pkg):
    try:
        with open(os.path.join(root, pkg, "Cargo.toml"), encoding="utf-8") as f:
            m = re.search(r'^\[package\][^\[]*?^name\s*=\s*"([^"]+)"', f.read(), re.M | re.S)
    except OSError:
        m = None
    return m.group(1) if m else os.path.basename(os.path.abspath(os.path.join(root, pkg)))


def crates_of(root, pkg):
    """(name, root file, module directory) of each crate of the package in `pkg`."""
    out = []
    name = package_name(root, pkg)
    src = os.path.normpath(os.path.join(pkg, "src"))
    if os.path.isfile(os.path.join(root, src, "lib.rs")):
        out.append((name, os.path.join(src, "lib.rs"), src))
    if os.path.isfile(os.path.join(root, src, "main.rs")):
        out.append((name + " (bin)", os.path.join(src, "main.rs"), src))
    bindir = os.path.join(src, "bin")
    if os.path.isdir(os.path.join(root, bindir)):
        for fn in sorted(os.listdir(os.path.join(root, bindir))):
            full = os.path.join(bindir, fn)
            if fn.endswith(".rs"):
                out.append((f"{name} (bin {fn[:-3]})", full, full[:-3]))
            elif os.path.isfile(os.path.join(root, full, "main.rs")) and not os.path.isfile(os.path.join(root, full + ".rs")):
                out.append((f"{name} (bin {fn})", os.path.join(full, "main.rs"), full))
    if os.path.basename(os.path.normpath(pkg)) == "fuzz":
        targets = os.path.join(pkg, "fuzz_targets")
        if os.path.isdir(os.path.join(root, targets)):
            for fn in sorted(os.listdir(os.path.join(root, targets))):
                if fn.endswith(".rs"):
                    full = os.path.join(targets, fn)
                    out.append((f"{name} (fuzz {fn[:-3]})", full, full[:-3]))
    return out


def all_crates(root):
    return [c for pkg in package_dirs(root) for c in crates_of(root, pkg)]


# The layers of the urxe crate, bottom up. A module may use modules of its own rank or below;
# an arrow to a higher rank runs back up. Modules not listed are reported as unplaced.
LAYERS = {
    "urxe": {
        "wire": 0,
        "engine": 1,
        "cm": 1,
        "sys": 1,
        "spawn": 1,
        "host": 2,
        "observe": 2,
        "transport": 3,
        "runtime": 4,
    },
    # The tools (cli/): the verifier, the scenarios that report with its JSON helper, the view.
    "urxe-cli": {
        "check": 0,
        "hostview": 0,
        "conform": 1,
    },
}
# Within the urxe crate engine and cm are siblings: neither may use the other.
SIBLINGS_APART = {"urxe": [("engine", "cm"), ("cm", "engine")]}


def strip_comments_and_strings(text):
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            close = '"' + m.group(1)
            j = text.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:])
            out.append("' '")
            i += len(m.group(0))
        elif c == "'" and re.match(r"'\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\})'", text[i:i + 12]):
            m = re.match(r"'\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\})'", text[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_modules(code):
    """Removes `#[cfg(test)] mod x { … }` blocks; returns (code, names of test module files)."""
    test_files = set(re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code))
    out, i = [], 0
    pat = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")
    while True:
        m = pat.search(code, i)
        if not m:
            out.append(code[i:])
            break
        out.append(code[i:m.start()])
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        out.append("\n" * code.count("\n", m.start(), j))
        i = j
    return "".join(out), test_files


def expand_use_tree(tree):
    """`a::{b, c::{d, e as f}, self}` -> [[a,b],[a,c,d],[a,c,e],[a]]."""
    tree = re.sub(r"\s+", "", tree)

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return parts

    def walk(s, prefix):
        s = re.sub(r"as\w+$", "", s) if False else s
        if "{" in s:
            k = s.index("{")
            head = [p for p in s[:k].split("::") if p]
            inner = s[k + 1:s.rindex("}")]
            res = []
            for part in split_top(inner):
                res.extend(walk(part, prefix + head))
            return res
        s = s.split("as")[0] if re.search(r"[a-zA-Z0-9_]as[A-Za-z_]", s) and "::" not in s.split("as")[-1] else s
        segs = [p for p in s.split("::") if p]
        if segs and segs[-1] == "self":
            segs = segs[:-1]
        return [prefix + segs]

    return walk(tree, [])


class Crate:
    def __init__(self, name, root_file, mod_dir, root=None):
        self.name, self.root_file, self.mod_dir = name, root_file, mod_dir
        self.root = root or ROOT
        self.files = {}  # module path tuple -> relative file path
        self.code = {}  # rel file -> code without comments/strings/test modules
        self.lines = {}  # rel file -> raw line count
        self.test_only = set()
        self._load()

    def _sources(self):
        """(full path, module path) of the crate root and every .rs file under its module
        directory; a library's src/bin/ and src/main.rs belong to crates of their own."""
        yield os.path.join(self.root, self.root_file), ()
        base = os.path.join(self.root, self.mod_dir)
        if not os.path.isdir(base):
            return
        own_root = os.path.normpath(os.path.join(self.root, self.root_file))
        for dirpath, dirs, names in os.walk(base):
            if os.path.normpath(dirpath) == os.path.normpath(base):
                dirs[:] = [d for d in dirs if d != "bin"] if os.path.basename(self.root_file) == "lib.rs" else dirs
            for fn in names:
                full = os.path.join(dirpath, fn)
                if not fn.endswith(".rs") or os.path.normpath(full) == own_root:
                    continue
                inner = os.path.relpath(full, base)[:-3].split(os.sep)
                if len(inner) == 1 and inner[0] in ("lib", "main"):
                    continue
                yield full, tuple(inner[:-1]) if inner[-1] == "mod" else tuple(inner)

    def _load(self):
        for full, mod in self._sources():
            rel = os.path.relpath(full, self.root)
            with open(full, encoding="utf-8") as f:
                raw = f.read()
            self.lines[rel] = raw.count("\n") + (0 if raw.endswith("\n") or not raw else 1)
            code, tests = drop_test_modules(strip_comments_and_strings(raw))
            for t in tests:
                self.test_only.add(mod + (t,))
            self.files[mod] = rel
            self.code[rel] = code
        # a test-only file and everything below it is out of the graph
        for mod in list(self.files):
            if any(mod[:len(t)] == t for t in self.test_only):
                self.code.pop(self.files[mod], None)
                del self.files[mod]

    def module_of(self, rel):
        for mod, r in self.files.items():
            if r == rel:
                return mod
        return None

    def resolve(self, segs):
        """Longest prefix of segs that is a module file -> (module, rest)."""
        for k in range(len(segs), -1, -1):
            if tuple(segs[:k]) in self.files:
                return tuple(segs[:k]), segs[k:]
        return None, segs

    def reexports(self):
        """module -> {name: absolute path of what it re-exports}."""
        out = defaultdict(dict)
        for mod, rel in self.files.items():
            for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", self.code[rel]):
                for path in expand_use_tree(m.group(1)):
                    ab = self.absolute(mod, rel, path)
                    if ab and ab[-1] not in ("*",):
                        out[mod][ab[-1]] = ab
        return out

    def absolute(self, mod, rel, segs):
        if not segs:
            return None
        is_mod_rs = rel.endswith("mod.rs") or rel == os.path.normpath(self.root_file)
        here = list(mod)
        if segs[0] == "crate":
            return segs[1:]
        if segs[0] == "self":
            return here + segs[1:]
        if segs[0] == "super":
            cur = here if is_mod_rs else here
            i = 0
            while i < len(segs) and segs[i] == "super":
                cur = cur[:-1]
                i += 1
            return cur + segs[i:]
        # a path relative to this module: a child module declared here
        if tuple(here + [segs[0]]) in self.files:
            return here + segs
        return None

    def edges(self):
        rex = self.reexports()
        edges = defaultdict(set)
        for mod, rel in self.files.items():
            code = self.code[rel]
            paths = []
            # `pub use` re-exports are followed (reexports()), not counted as arrows: a
            # facade that re-exports a child's items does not depend on the child.
            for m in re.finditer(r"(?<![\w:])(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", code):
                if not m.group(1):
                    paths.extend(expand_use_tree(m.group(2)))
            code_no_use = re.sub(r"(?<![\w:])(pub(?:\([^)]*\))?\s+)?use\s+[^;]+;", "", code)
            for m in re.finditer(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", code_no_use):
                paths.append(m.group(1).split("::"))
            for p in paths:
                ab = self.absolute(mod, rel, p)
                if ab is None:
                    continue
                for _hop in range(4):
                    tmod, rest = self.resolve(ab)
                    if tmod is None:
                        break
                    if rest and rest[0] in rex.get(tmod, {}) and rex[tmod][rest[0]] != ab[: len(tmod) + 1]:
                        ab = rex[tmod][rest[0]] + rest[1:]
                        continue
                    break
                tmod, rest = self.resolve(ab)
                if tmod is None:
                    continue
                target = self.files[tmod]
                if target == rel:
                    continue
                # naming a child module itself (`use self::child;`) with nothing taken is a
                # declaration, not an arrow; naming an ancestor module's items is an arrow.
                if not rest and len(tmod) > len(mod) and tmod[: len(mod)] == mod:
                    continue
                if not rest and rest == [] and tmod == tuple(mod[: len(tmod)]):
                    continue
                edges[rel].add(target)
        return edges


def sccs(nodes, edges):
    index, low, onstack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        onstack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in onstack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                onstack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return out


def check(root, out=print):
    """Prints every problem of the crates under `root`; returns (problems, crate names)."""
    problems = 0
    names = []
    for name, root_file, mod_dir in all_crates(root):
        names.append(name)
        crate = Crate(name, root_file, mod_dir, root)
        edges = crate.edges()
        circles = sccs(crate.code.keys(), edges)
        for c in circles:
            problems += 1
            out(f"circle in {name}: {len(c)} files: {', '.join(c)}")
            members = set(c)
            for a in c:
                for b in sorted(edges.get(a, ())):
                    if b in members:
                        out(f"    {a} -> {b}")
        layers = LAYERS.get(name)
        if layers:
            for a, targets in sorted(edges.items()):
                ma = crate.module_of(a)
                if not ma:
                    continue
                for b in sorted(targets):
                    mb = crate.module_of(b)
                    if not mb or ma[0] == mb[0]:
                        continue
                    ra, rb = layers.get(ma[0]), layers.get(mb[0])
                    if ra is None or rb is None:
                        continue
                    if rb > ra or (ma[0], mb[0]) in SIBLINGS_APART.get(name, []):
                        problems += 1
                        out(f"arrow back up in {name}: {a} ({ma[0]}) -> {b} ({mb[0]})")
            for mod in sorted({m[0] for m in crate.files if m}):
                if mod not in layers:
                    problems += 1
                    out(f"unplaced module in {name}: {mod} (add it to LAYERS in scripts/house_check.py)")
        for rel, n in sorted(crate.lines.items()):
            if n > MAX_LINES:
                problems += 1
                out(f"over {MAX_LINES} lines: {rel} ({n})")
    return problems, names


def self_test():
    """Fabricates a workspace with a clean crate, then with each fault the check exists for,
    and asserts the check is silent on the first and names each fault."""
    import tempfile

    def write(root, rel, text):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def run(root):
        lines = []
        n, names = check(root, lines.append)
        return n, names, lines

    failures = []

    def expect(cond, what, lines):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)
            for line in lines:
                print("     | " + line)

    with tempfile.TemporaryDirectory(prefix="house-self-test-") as root:
        write(root, "Cargo.toml", '[workspace]\nmembers = [".", "tool"]\n\n[package]\nname = "urxe"\n')
        write(root, "src/lib.rs", "pub mod wire;\npub mod engine;\n")
        write(root, "src/wire.rs", "pub struct Header;\n")
        write(root, "src/engine/mod.rs", "mod qp;\nuse crate::wire::Header;\npub fn f(_: Header) {}\n")
        write(root, "src/engine/qp.rs", "use super::f;\n")
        write(root, "tool/Cargo.toml", '[package]\nname = "tool"\n')
        write(root, "tool/src/lib.rs", "pub mod a;\npub mod b;\n")
        write(root, "tool/src/a.rs", "pub fn a() {}\n")
        write(root, "tool/src/b.rs", "use crate::a::a;\npub fn b() { a() }\n")
        write(root, "tool/src/bin/t.rs", "#[path = \"t/x.rs\"]\nmod x;\nfn main() { x::x() }\n")
        write(root, "tool/src/bin/t/x.rs", "pub fn x() {}\n")
        write(root, "fuzz/Cargo.toml", '[package]\nname = "fuzz"\n')
        write(root, "fuzz/fuzz_targets/one.rs", "fn main() {}\n")
        n, names, lines = run(root)
        expect(n == 0, "a clean fabricated workspace has no problem", lines)
        expect({"urxe", "tool", "tool (bin t)", "fuzz (fuzz one)"} <= set(names),
               f"every crate is read: {', '.join(names)}", lines)

        write(root, "tool/src/a.rs", "use crate::b::b;\npub fn a() { b() }\n")
        n, _, lines = run(root)
        expect(n >= 1 and any(l.startswith("circle in tool:") and "tool/src/a.rs" in l for l in lines),
               "a fabricated circle in a second crate (tool: a <-> b) is found", lines)
        write(root, "tool/src/a.rs", "pub fn a() {}\n")

        write(root, "src/bin/u/y.rs", "use super::z;\npub fn y() {}\n")
        write(root, "src/bin/u/z.rs", "use super::y;\npub fn z() {}\n")
        write(root, "src/bin/u.rs", "mod y;\nmod z;\nfn main() {}\n")
        n, _, lines = run(root)
        expect(any(l.startswith("circle in urxe (bin u):") for l in lines),
               "a fabricated circle between a binary's modules is found", lines)
        for f in ("src/bin/u/y.rs", "src/bin/u/z.rs", "src/bin/u.rs"):
            os.remove(os.path.join(root, f))

        write(root, "src/wire.rs", "use crate::engine::f;\npub struct Header;\n")
        n, _, lines = run(root)
        expect(any(l.startswith("arrow back up in urxe: src/wire.rs (wire) -> src/engine/mod.rs") for l in lines),
               "a fabricated arrow back up (wire -> engine) is found", lines)
        write(root, "src/wire.rs", "pub struct Header;\n")

        for rel in ("tool/src/bin/t/x.rs", "fuzz/fuzz_targets/one.rs", "src/engine/qp.rs"):
            write(root, rel, "// filler\n" * (MAX_LINES + 1))
            n, _, lines = run(root)
            expect(n == 1 and lines == [f"over {MAX_LINES} lines: {rel} ({MAX_LINES + 1})"],
                   f"a fabricated {MAX_LINES + 1}-line file ({rel}) is found", lines)
            write(root, rel, "// filler\n" * MAX_LINES)
            n, _, lines = run(root)
            expect(n == 0, f"{MAX_LINES} lines ({rel}) pass", lines)
            write(root, rel, "pub fn x() {}\n" if rel.endswith("x.rs") else "fn main() {}\n")
    print(f"house check self-test: {len(failures)} failure(s)")
    return 1 if failures else 0


def main():
    if "--self-test" in sys.argv:
        return self_test()
    report_only = "--report" in sys.argv
    problems, names = check(ROOT)
    if problems:
        print(f"house check: {problems} problem(s)")
        return 0 if report_only else 1
    print("house check: 0 import circles, 0 arrows back up, no source file over "
          f"{MAX_LINES} lines ({', '.join(names)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
