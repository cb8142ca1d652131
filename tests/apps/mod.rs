//! Shared machinery for `tests/apps.rs`: locate (or build) urxe's `libibverbs.so.1`, compile the
//! C programs of `tests/verbs_c/`, and run a server and a client as two processes with bounded
//! waits everywhere.

use std::collections::HashSet;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long a server or a client may run before it is killed and the test fails.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the server gets to start listening on its TCP port.
pub const LISTEN_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `provider/build.sh` may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(1800);

/// The device every run names explicitly.
pub const DEV: &str = "urxe0";
/// The loopback address clients connect to for the out-of-band TCP exchange.
pub const HOST: &str = "127.0.0.1";

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding urxe's `libibverbs.so.1`, building it with `provider/build.sh` when it
/// is missing. Panics (fails the test) with a clear message if it cannot be had: never skips.
pub fn lib_dir() -> PathBuf {
    static LIB: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    LIB.get_or_init(find_or_build_lib).clone().unwrap_or_else(|e| panic!("{e}"))
}

fn find_or_build_lib() -> Result<PathBuf, String> {
    let root = repo_root();
    let dir = root.join("target/urxe/lib");
    let lib = dir.join("libibverbs.so.1");
    if lib.is_file() {
        return Ok(dir);
    }
    let script = root.join("provider/build.sh");
    if !script.is_file() {
        return Err(format!(
            "urxe's libibverbs.so.1 is missing ({}) and the script that builds it ({}) does not exist: \
             the drop-in library is not available, so no application test can run",
            lib.display(),
            script.display()
        ));
    }
    eprintln!("{} missing; running bash {}", lib.display(), script.display());
    let out = run_bounded(Command::new("bash").arg(&script).current_dir(&root), BUILD_TIMEOUT)
        .map_err(|e| format!("could not run bash {}: {e}", script.display()))?;
    if !out.success() {
        return Err(format!("bash {} failed:\n{out}", script.display()));
    }
    if !lib.is_file() {
        return Err(format!("bash {} succeeded but {} still does not exist:\n{out}", script.display(), lib.display()));
    }
    Ok(dir)
}

/// urxe's librdmacm.so.1 next to its libibverbs.so.1 (rdmacm/build.sh if it is missing).
#[allow(dead_code)] // the rdmacm test binaries use it; tests/apps.rs does not
pub fn ensure_rdmacm() {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        if lib_dir().join("librdmacm.so.1").is_file() {
            return Ok(());
        }
        let mut cmd = Command::new("bash");
        cmd.arg(repo_root().join("rdmacm/build.sh")).current_dir(repo_root());
        let out = run_bounded(&mut cmd, Duration::from_secs(900)).map_err(|e| e.to_string())?;
        if out.success() {
            Ok(())
        } else {
            Err(format!("rdmacm/build.sh failed:\n{out}"))
        }
    })
    .clone()
    .unwrap_or_else(|e| panic!("{e}"));
}

/// The C programs of tests/verbs_c, compiled once per test binary.
pub fn c_program(name: &str) -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = BIN.get_or_init(compile_c_programs).clone().unwrap_or_else(|e| panic!("{e}"));
    dir.join(name)
}

pub const C_PROGRAMS: [&str; 7] = [
    "rc_client_server",
    "ud_client_server",
    "events",
    "mr_faults",
    "invalidate",
    "atomic_write_flush",
    "faults_device",
];

fn compile_c_programs() -> Result<PathBuf, String> {
    let src = repo_root().join("tests/verbs_c");
    let dir = std::env::temp_dir().join(format!("urxe-apps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    for name in C_PROGRAMS {
        let mut cmd = Command::new("gcc");
        cmd.args(["-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined", "-g", "-o"])
            .arg(dir.join(name))
            .arg(src.join(format!("{name}.c")))
            .arg("-libverbs");
        let out = run_bounded(&mut cmd, Duration::from_secs(120)).map_err(|e| format!("could not run gcc: {e}"))?;
        if !out.success() {
            return Err(format!("gcc failed for tests/verbs_c/{name}.c:\n{out}"));
        }
    }
    Ok(dir)
}

/// Serializes the process-pair tests: the CI machine has 2 cores and perftest busy-polls.
pub fn heavy_lock() -> MutexGuard<'static, ()> {
    static HEAVY: Mutex<()> = Mutex::new(());
    HEAVY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a finished (or killed) process left behind.
pub struct Output {
    pub what: String,
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        !self.timed_out && self.status.is_some_and(|s| s.success())
    }

    /// stdout and stderr together, for content checks.
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }

    pub fn signal(&self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        self.status.and_then(|s| s.signal())
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = match (self.timed_out, self.status) {
            (true, _) => "KILLED after timeout".to_string(),
            (false, Some(s)) => s.to_string(),
            (false, None) => "unknown".to_string(),
        };
        writeln!(f, "---- {} [{}]", self.what, status)?;
        writeln!(f, "---- stdout:\n{}", self.stdout.trim_end())?;
        write!(f, "---- stderr:\n{}", self.stderr.trim_end())
    }
}

struct Running {
    what: String,
    child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

fn spawn(cmd: &mut Command) -> std::io::Result<Running> {
    let what = describe(cmd);
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    Ok(Running { what, child, stdout, stderr })
}

fn describe(cmd: &Command) -> String {
    let mut s = String::new();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            s.push_str(&format!("{}={} ", k.to_string_lossy(), v.to_string_lossy()));
        }
    }
    s.push_str(&cmd.get_program().to_string_lossy());
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

impl Running {
    /// Waits until `deadline`; kills the process if it is still running then.
    fn finish(mut self, deadline: Instant) -> Output {
        let mut timed_out = false;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() >= deadline => {
                    timed_out = true;
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
                Ok(None) => thread::sleep(Duration::from_millis(20)),
                Err(_) => break None,
            }
        };
        let stdout = self.stdout.join().unwrap_or_default();
        let stderr = self.stderr.join().unwrap_or_default();
        Output { what: self.what, status, timed_out, stdout, stderr }
    }

    fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }
}

/// Runs one command to completion (killed after `timeout`).
pub fn run_bounded(cmd: &mut Command, timeout: Duration) -> std::io::Result<Output> {
    Ok(spawn(cmd)?.finish(Instant::now() + timeout))
}

/// A command that runs against urxe's library.
pub fn urxe_cmd(program: impl AsRef<Path>) -> Command {
    let mut cmd = Command::new(program.as_ref());
    cmd.env("LD_LIBRARY_PATH", lib_dir())
        // Every failing verb and its errno on stderr: shown with the outputs when a test fails.
        .env("URXE_TRACE", "1")
        // Our C programs are built with ASan/UBSan: make UBSan findings fatal and keep reports short.
        .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
        .env("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=1");
    cmd
}

/// TCP ports in LISTEN state on any address (IPv4 and IPv6), from /proc/net/tcp{,6}.
fn listening_ports() -> HashSet<u16> {
    let mut ports = HashSet::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 3 && fields[3] == "0A" {
                if let Some(port) = fields[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) {
                    ports.insert(port);
                }
            }
        }
    }
    ports
}

/// Runs `server` until it listens on TCP `port` (checked without connecting: the tools accept
/// exactly one connection), then `client`; both are killed after [`RUN_TIMEOUT`]. Fails the test
/// with both outputs unless both exit 0; returns (server, client) for content checks.
pub fn run_pair(port: u16, server: Command, client: Command) -> (Output, Output) {
    let (s, mut c) = run_server_clients(port, server, vec![client]);
    (s, c.remove(0))
}

/// [`run_pair`] with several clients, all started once the server listens (a server that
/// serves N clients, as `ibv_xsrq_pingpong -c N`). Fails the test unless every process exits 0.
pub fn run_server_clients(port: u16, server: Command, clients: Vec<Command>) -> (Output, Vec<Output>) {
    let start = Instant::now();
    let (s, outs) = run_server_clients_any(port, server, clients);
    let all_ok = outs.iter().all(|c| c.success());
    let shown = outs.iter().map(|c| c.to_string()).collect::<Vec<_>>().join("\n");
    if !s.success() || !all_ok {
        panic!("server and clients must all exit 0 (took {:.1} s)\n{}\n{}", start.elapsed().as_secs_f64(), s, shown);
    }
    eprintln!("{}\n{}", s, shown);
    (s, outs)
}

/// [`run_server_clients`] that returns every output whether or not the programs succeeded
/// (for tests where a failure is the expected outcome). Still bounded: the clients are killed
/// after [`RUN_TIMEOUT`], and after a failed client the server gets a short grace.
pub fn run_server_clients_any(port: u16, mut server: Command, mut clients: Vec<Command>) -> (Output, Vec<Output>) {
    assert!(
        !listening_ports().contains(&port),
        "TCP port {port} is already in use by another process; this test needs it free"
    );
    let start = Instant::now();
    let mut srv = spawn(&mut server).unwrap_or_else(|e| panic!("cannot start {}: {e}", describe(&server)));
    let listen_deadline = start + LISTEN_TIMEOUT;
    loop {
        if listening_ports().contains(&port) {
            break;
        }
        if srv.exited() || Instant::now() >= listen_deadline {
            let why = if srv.exited() { "exited before listening" } else { "did not listen in time" };
            let out = srv.finish(Instant::now());
            panic!("server {why} on TCP port {port} (waited at most {LISTEN_TIMEOUT:?})\n{out}");
        }
        thread::sleep(Duration::from_millis(25));
    }
    let mut running = Vec::new();
    for client in clients.iter_mut() {
        match spawn(client) {
            Ok(c) => running.push(c),
            Err(e) => {
                let out = srv.finish(Instant::now());
                panic!("cannot start {}: {e}\n{out}", describe(client));
            }
        }
    }
    let deadline = Instant::now() + RUN_TIMEOUT;
    let outs: Vec<Output> = running.into_iter().map(|c| c.finish(deadline)).collect();
    let all_ok = outs.iter().all(|c| c.success());
    // After a failed client the server gets only a short grace (it may be waiting for it forever).
    let grace = Instant::now() + Duration::from_secs(5);
    let s = srv.finish(if all_ok { deadline.max(grace) } else { grace });
    (s, outs)
}

/// A Debian tool from /usr/bin (unmodified binaries of ibverbs-utils / perftest).
pub fn tool(name: &str) -> PathBuf {
    let p = Path::new("/usr/bin").join(name);
    assert!(p.is_file(), "{} is not installed (Debian packages ibverbs-utils and perftest are required)", p.display());
    p
}

/// Asserts that `text` contains `needle`, showing the outputs otherwise.
#[track_caller]
pub fn assert_contains(out: &Output, needle: &str) {
    assert!(out.all().contains(needle), "expected {needle:?} in the output of {}\n{out}", out.what);
}

#[track_caller]
pub fn assert_lacks(out: &Output, needle: &str) {
    assert!(!out.all().contains(needle), "unexpected {needle:?} in the output of {}\n{out}", out.what);
}
