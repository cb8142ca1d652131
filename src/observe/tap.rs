//! Capture tap: with `URXE_PCAP=path` the device writes every RoCEv2 packet it sends and
//! receives to a pcapng file, one record per packet (GSO trains and GRO super-packets are
//! recorded as the packets they carry), with the IP and UDP headers the packet has on the wire.
//!
//! - Link type raw IP (LINKTYPE_RAW); interface 0 of each device is what it sends (`urxe-tx`),
//!   interface 1 what it receives (`urxe-rx`); every record also carries the pcapng direction
//!   flag. Timestamps are wall-clock nanoseconds.
//! - IPv4 headers are those the socket sends: ID 0, DF, TTL = `ip_default_ttl`, TOS 0 — the
//!   fields the ICRC was computed for. A receiving UDP socket cannot see the sender's IP ID,
//!   TTL or UDP checksum: received IPv4 packets are recorded with ID 0, UDP checksum 0, and a
//!   record comment ([`IP_ID_UNKNOWN`]) telling `urxe check` that the ID is not known.
//! - IPv6: traffic class 0, the flow label sent (`sin6_flowinfo` of the destination), hop limit 64, UDP checksum 0 (the ICRC masks the
//!   first three; the socket sends checksum 0).
//! - Bounded: `URXE_PCAP_MAX=bytes` (suffix K, M or G allowed) caps the file; records that do
//!   not fit are dropped whole and counted.
//! - Whole blocks only ever reach the file: records collect in a buffer written when it holds
//!   64 KiB or its oldest record is 100 ms old, when the device closes, and at process exit.
//! - One writer per file: a process locks the file it writes (an open-file-description lock,
//!   gone when the file closes or the process dies). A second process given the same
//!   `URXE_PCAP` (an MPI job's ranks, a server and its client) finds it locked, leaves it
//!   alone and writes `<stem>.<pid>.<ext>` beside it, saying so on stderr; two writers never
//!   interleave blocks in one file.
//! - Off (no `URXE_PCAP`): the device holds `None` and pays one branch per batch.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Once, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use crate::wire::checksum::TAP_IP_ID_UNKNOWN as IP_ID_UNKNOWN;
use crate::wire::checksum::{fold, ones_complement_sum};

/// Buffered bytes that trigger a write.
const FLUSH_BYTES: usize = 64 << 10;
/// Age of the oldest buffered record that triggers a write.
const FLUSH_AGE: Duration = Duration::from_millis(100);
/// Smallest `URXE_PCAP_MAX`: the headers and a few packets.
pub const MIN_MAX: u64 = 4096;
const LINKTYPE_RAW: u16 = 101;
/// Fault notes: private use (DLT_USER0), the note's text as data.
const LINKTYPE_USER0: u16 = 147;

const BT_SHB: u32 = 0x0A0D_0D0A;
const BT_IDB: u32 = 1;
const BT_EPB: u32 = 6;
const OPT_COMMENT: u16 = 1;
const OPT_EPB_FLAGS: u16 = 2;
const OPT_IF_NAME: u16 = 2;
const OPT_IF_TSRESOL: u16 = 9;
const FLAG_INBOUND: u32 = 1;
const FLAG_OUTBOUND: u32 = 2;

/// The tap of one device: two interfaces of a (possibly shared) capture file.
pub struct Tap {
    file: Arc<Mutex<Writer>>,
    tx_if: u32,
    rx_if: u32,
    ttl: u8,
    /// The interface of this device's fault notes ([`Tap::note`]), added at the first one.
    notes_if: std::sync::OnceLock<u32>,
}

/// One capture file, shared by every device of the process that names the same path.
struct Writer {
    path: PathBuf,
    file: File,
    buf: Vec<u8>,
    /// Bytes written to the file plus bytes buffered.
    size: u64,
    max: u64,
    interfaces: u32,
    oldest: Option<Instant>,
    dropped: u64,
    failed: bool,
}

/// Every open capture file, for the flush at exit.
static FILES: Mutex<Vec<Weak<Mutex<Writer>>>> = Mutex::new(Vec::new());
static AT_EXIT: Once = Once::new();

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// `URXE_PCAP_MAX`: a byte count, optionally with K, M or G (powers of 1024).
fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mul) = match v.char_indices().last()? {
        (i, 'K' | 'k') => (&v[..i], 1u64 << 10),
        (i, 'M' | 'm') => (&v[..i], 1 << 20),
        (i, 'G' | 'g') => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

/// Reads `URXE_PCAP_MAX`; `None` when unset.
fn max_setting() -> io::Result<Option<u64>> {
    match std::env::var("URXE_PCAP_MAX") {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(invalid("URXE_PCAP_MAX is not valid UTF-8".into())),
        Ok(v) => match parse_size(&v) {
            Some(n) if n >= MIN_MAX => Ok(Some(n)),
            _ => Err(invalid(format!(
                "URXE_PCAP_MAX={v}: expected a size in bytes of at least {MIN_MAX} (suffix K, M or G allowed)"
            ))),
        },
    }
}

fn default_ttl() -> u8 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_default_ttl").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(64)
}

impl Tap {
    /// The tap `URXE_PCAP` asks for (`None` when unset). `%p` in the path becomes the process
    /// id, so processes started with one setting write one file each. Bad values are errors
    /// naming the variable.
    pub fn from_env(local: IpAddr) -> io::Result<Option<Tap>> {
        let max = max_setting()?;
        let path = match std::env::var_os("URXE_PCAP") {
            None => return Ok(None),
            Some(p) if p.is_empty() => return Err(invalid("URXE_PCAP is set but empty: expected a file path".into())),
            Some(p) => p,
        };
        let path = match path.to_str() {
            Some(s) => PathBuf::from(s.replace("%p", &std::process::id().to_string())),
            None => PathBuf::from(path),
        };
        Tap::open(path, max.unwrap_or(u64::MAX), local).map(Some)
    }

    /// Opens (or joins, when this process already writes it) the capture file `path` and adds
    /// this device's two interfaces.
    pub fn open(path: PathBuf, max: u64, local: IpAddr) -> io::Result<Tap> {
        let mut files = FILES.lock().unwrap_or_else(|p| p.into_inner());
        files.retain(|w| w.strong_count() > 0);
        let existing =
            files.iter().filter_map(Weak::upgrade).find(|w| w.lock().map(|w| w.path == path).unwrap_or(false));
        let file = match existing {
            Some(f) => f,
            None => {
                let (file, path) = open_own(path)?;
                let mut w = Writer {
                    path,
                    file,
                    buf: Vec::with_capacity(FLUSH_BYTES * 2),
                    size: 0,
                    max,
                    interfaces: 0,
                    oldest: None,
                    dropped: 0,
                    failed: false,
                };
                w.section_header();
                let f = Arc::new(Mutex::new(w));
                files.push(Arc::downgrade(&f));
                spawn_flusher(Arc::downgrade(&f))?;
                f
            }
        };
        drop(files);
        AT_EXIT.call_once(|| {
            // SAFETY: `flush_at_exit` is an `extern "C" fn()` that never unwinds (it catches
            // panics) and touches only Rust statics, as atexit handlers must.
            unsafe {
                libc::atexit(flush_at_exit);
            }
        });
        let (tx_if, rx_if) = {
            let mut w = file.lock().unwrap_or_else(|p| p.into_inner());
            let tx = w.interface(&format!("urxe-tx {local}"));
            let rx = w.interface(&format!("urxe-rx {local}"));
            w.flush();
            (tx, rx)
        };
        Ok(Tap { file, tx_if, rx_if, ttl: default_ttl(), notes_if: std::sync::OnceLock::new() })
    }

    /// Records packets the device has just sent from `src` to `dst` with IP TOS / traffic
    /// class `tos`, each with the IPv4 ID it left with (its place in a GSO train).
    pub fn sent<'a>(&self, src: SocketAddr, dst: SocketAddr, tos: u8, packets: impl Iterator<Item = (u16, &'a [u8])>) {
        let mut w = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let ts = now_ns();
        for (id, p) in packets {
            w.packet(self.tx_if, ts, FLAG_OUTBOUND, src, dst, (self.ttl, tos, id), true, p);
        }
        w.maybe_flush();
    }

    /// Records one packet the device received from `src` on `dst` with IP TOS / traffic class
    /// `tos`.
    pub fn received(&self, src: SocketAddr, dst: SocketAddr, tos: u8, packet: &[u8]) {
        let mut w = self.file.lock().unwrap_or_else(|p| p.into_inner());
        w.packet(self.rx_if, now_ns(), FLAG_INBOUND, src, dst, (self.ttl, tos, 0), false, packet);
        w.maybe_flush();
    }

    /// Records a fault the plan injected (`URXE_FAULTS`): one record on this device's
    /// `urxe-faults` interface (link type USER0, added with the first note), whose data and
    /// pcapng comment (`frame.comment` in tshark) are `text`, e.g. `urxe: fault injected:
    /// drop:every=3 -> Drop at Tx qp 0x11 psn 7 (t=… ns)`. Among the packets in time order: a
    /// dropped packet is missing from the capture and its note names its QP and PSN; a
    /// duplicated, corrupted or delayed one appears as sent, with the note beside it. `urxe
    /// check` counts notes as frames of another link type.
    pub fn note(&self, text: &str) {
        let mut w = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let iface = *self
            .notes_if
            .get_or_init(|| w.interface_of(LINKTYPE_USER0, &format!("urxe-faults of interface {}", self.tx_if)));
        w.note(iface, now_ns(), text.as_bytes());
        w.maybe_flush();
    }

    /// Records that did not fit under `URXE_PCAP_MAX` so far.
    pub fn dropped(&self) -> u64 {
        self.file.lock().map(|w| w.dropped).unwrap_or(0)
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        if let Ok(mut w) = self.file.lock() {
            w.flush();
        }
    }
}

/// Writes out records older than [`FLUSH_AGE`] even when no further packet comes to do it, so
/// a process that stops sending and then dies loses at most about `2 * FLUSH_AGE` of capture.
/// Ends when the file is closed.
fn spawn_flusher(file: Weak<Mutex<Writer>>) -> io::Result<()> {
    crate::spawn::spawn_started("urxe-pcap", move || loop {
        std::thread::sleep(FLUSH_AGE);
        let Some(f) = file.upgrade() else { return };
        let mut w = f.lock().unwrap_or_else(|p| p.into_inner());
        if w.oldest.is_some_and(|t| t.elapsed() >= FLUSH_AGE) {
            w.flush();
        }
    })?;
    Ok(())
}

/// Opens `path` as this process's own capture file: locked, then emptied. If another process
/// holds the lock, `path` is left untouched and `<stem>.<pid>.<ext>` is used instead (said on
/// stderr, naming `URXE_PCAP`). Returns the file and the path it has.
fn open_own(path: PathBuf) -> io::Result<(File, PathBuf)> {
    let named = |p: &Path, e: io::Error| io::Error::new(e.kind(), format!("URXE_PCAP={}: {e}", p.display()));
    let open = |p: &Path| OpenOptions::new().write(true).create(true).truncate(false).open(p);
    let file = open(&path).map_err(|e| named(&path, e))?;
    if lock_whole(&file).map_err(|e| named(&path, e))? {
        file.set_len(0).map_err(|e| named(&path, e))?;
        return Ok((file, path));
    }
    let alt = per_process_path(&path, std::process::id());
    let _ = writeln!(
        io::stderr(),
        "urxe: URXE_PCAP={}: another process is writing that file; this process writes {} instead (put %p in URXE_PCAP to name one file per process)",
        path.display(),
        alt.display()
    );
    let file = open(&alt).map_err(|e| named(&alt, e))?;
    if !lock_whole(&file).map_err(|e| named(&alt, e))? {
        return Err(named(&alt, io::Error::new(io::ErrorKind::WouldBlock, "locked by another process")));
    }
    file.set_len(0).map_err(|e| named(&alt, e))?;
    Ok((file, alt))
}

/// `dir/cap.pcapng` -> `dir/cap.<pid>.pcapng` (`dir/cap` -> `dir/cap.<pid>`).
pub fn per_process_path(path: &Path, pid: u32) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = match path.extension() {
        Some(e) => format!("{stem}.{pid}.{}", e.to_string_lossy()),
        None => format!("{stem}.{pid}"),
    };
    path.with_file_name(name)
}

/// Takes a write lock on the whole file without waiting: `Ok(false)` when another open file
/// description (another process) holds one.
pub fn lock_whole(file: &File) -> io::Result<bool> {
    // SAFETY: `libc::flock` is plain integers; all-zero is a valid value (and l_pid must be 0
    // for OFD locks).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // l_start 0, l_len 0: the whole file, however long it grows.
    // SAFETY: `fl` is a valid flock living across the call; F_OFD_SETLK only reads it; the fd
    // is open for as long as `file` is borrowed.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut fl as *mut libc::flock) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

extern "C" fn flush_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        // try_lock: a thread stopped by exit() while holding a lock must not hang the exit.
        let Ok(files) = FILES.try_lock() else { return };
        for f in files.iter().filter_map(Weak::upgrade) {
            if let Ok(mut w) = f.try_lock() {
                w.flush();
                if w.dropped > 0 {
                    let _ = writeln!(
                        io::stderr(),
                        "urxe: {}: {} packets not recorded (URXE_PCAP_MAX={} bytes reached)",
                        w.path.display(),
                        w.dropped,
                        w.max
                    );
                }
            }
        }
    });
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

fn pad4(n: usize) -> usize {
    (4 - n % 4) % 4
}

impl Writer {
    fn put_option(&mut self, code: u16, value: &[u8]) {
        self.buf.extend_from_slice(&code.to_le_bytes());
        self.buf.extend_from_slice(&(value.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(value);
        self.buf.extend(std::iter::repeat_n(0u8, pad4(value.len())));
    }

    /// Appends a block of type `bt` whose body `body` writes into `buf`; fixes its length.
    fn block(&mut self, bt: u32, body: impl FnOnce(&mut Writer)) -> usize {
        let start = self.buf.len();
        self.buf.extend_from_slice(&bt.to_le_bytes());
        self.buf.extend_from_slice(&[0; 4]);
        body(self);
        let len = (self.buf.len() - start + 4) as u32;
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf[start + 4..start + 8].copy_from_slice(&len.to_le_bytes());
        len as usize
    }

    fn section_header(&mut self) {
        let n = self.block(BT_SHB, |w| {
            w.buf.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
            w.buf.extend_from_slice(&1u16.to_le_bytes());
            w.buf.extend_from_slice(&0u16.to_le_bytes());
            w.buf.extend_from_slice(&u64::MAX.to_le_bytes());
            w.put_option(4, b"urxe capture tap"); // shb_userappl
            w.put_option(0, &[]);
        });
        self.size += n as u64;
    }

    fn interface(&mut self, name: &str) -> u32 {
        self.interface_of(LINKTYPE_RAW, name)
    }

    fn interface_of(&mut self, linktype: u16, name: &str) -> u32 {
        let n = self.block(BT_IDB, |w| {
            w.buf.extend_from_slice(&linktype.to_le_bytes());
            w.buf.extend_from_slice(&0u16.to_le_bytes());
            w.buf.extend_from_slice(&0u32.to_le_bytes()); // snaplen: none
            w.put_option(OPT_IF_NAME, name.as_bytes());
            w.put_option(OPT_IF_TSRESOL, &[9]);
            w.put_option(0, &[]);
        });
        self.size += n as u64;
        self.interfaces += 1;
        self.interfaces - 1
    }

    /// One Enhanced Packet Block of `text` on `iface`, with `text` as its comment too.
    fn note(&mut self, iface: u32, ts: u64, text: &[u8]) {
        let text = &text[..text.len().min(4096)];
        let block_len = 28 + 2 * (text.len() + pad4(text.len())) + 4 + 4 + 4;
        if self.failed || self.size + block_len as u64 > self.max {
            self.dropped += 1;
            return;
        }
        let n = self.block(BT_EPB, |w| {
            let b = &mut w.buf;
            b.extend_from_slice(&iface.to_le_bytes());
            b.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
            b.extend_from_slice(&(ts as u32).to_le_bytes());
            b.extend_from_slice(&(text.len() as u32).to_le_bytes());
            b.extend_from_slice(&(text.len() as u32).to_le_bytes());
            b.extend_from_slice(text);
            b.extend(std::iter::repeat_n(0u8, pad4(text.len())));
            w.put_option(OPT_COMMENT, text);
            w.put_option(0, &[]);
        });
        self.size += n as u64;
        self.oldest.get_or_insert_with(Instant::now);
    }

    /// One Enhanced Packet Block: IP header, UDP header, `payload`.
    #[allow(clippy::too_many_arguments)]
    fn packet(
        &mut self,
        iface: u32,
        ts: u64,
        flags: u32,
        src: SocketAddr,
        dst: SocketAddr,
        (ttl, tos, id): (u8, u8, u16),
        sent: bool,
        payload: &[u8],
    ) {
        if self.failed {
            return;
        }
        let v4 = matches!((src.ip(), dst.ip()), (IpAddr::V4(_), IpAddr::V4(_)));
        let ip_len = if v4 { 20 } else { 40 };
        let cap = ip_len + 8 + payload.len();
        let unknown_id = v4 && !sent;
        let comment_len = if unknown_id { 4 + IP_ID_UNKNOWN.len() + pad4(IP_ID_UNKNOWN.len()) } else { 0 };
        let block_len = 28 + cap + pad4(cap) + 8 + comment_len + 4 + 4;
        if self.size + block_len as u64 > self.max {
            self.dropped += 1;
            return;
        }
        let start = self.buf.len();
        self.block(BT_EPB, |w| {
            let b = &mut w.buf;
            b.extend_from_slice(&iface.to_le_bytes());
            b.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
            b.extend_from_slice(&(ts as u32).to_le_bytes());
            b.extend_from_slice(&(cap as u32).to_le_bytes());
            b.extend_from_slice(&(cap as u32).to_le_bytes());
            let ip_at = b.len();
            let udp_len = (8 + payload.len()) as u16;
            match (src.ip(), dst.ip()) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    let mut h = [0u8; 20];
                    h[0] = 0x45;
                    h[1] = tos;
                    h[2..4].copy_from_slice(&((20 + udp_len as usize) as u16).to_be_bytes());
                    h[4..6].copy_from_slice(&id.to_be_bytes());
                    h[6] = 0x40; // DF
                    h[8] = ttl;
                    h[9] = 17;
                    h[12..16].copy_from_slice(&s.octets());
                    h[16..20].copy_from_slice(&d.octets());
                    let c = !fold(ones_complement_sum(0, &h));
                    h[10..12].copy_from_slice(&c.to_be_bytes());
                    b.extend_from_slice(&h);
                }
                (s, d) => {
                    let to6 = |a: IpAddr| match a {
                        IpAddr::V6(a) => a,
                        IpAddr::V4(a) => a.to_ipv6_mapped(),
                    };
                    let mut h = [0u8; 40];
                    let label = match dst {
                        SocketAddr::V6(a) if sent => u32::from_be(a.flowinfo()) & 0xF_FFFF,
                        _ => 0,
                    };
                    h[0..4].copy_from_slice(&(0x6000_0000 | u32::from(tos) << 20 | label).to_be_bytes());
                    h[4..6].copy_from_slice(&udp_len.to_be_bytes());
                    h[6] = 17;
                    h[7] = 64;
                    h[8..24].copy_from_slice(&to6(s).octets());
                    h[24..40].copy_from_slice(&to6(d).octets());
                    b.extend_from_slice(&h);
                }
            }
            let udp_at = b.len();
            b.extend_from_slice(&src.port().to_be_bytes());
            b.extend_from_slice(&dst.port().to_be_bytes());
            b.extend_from_slice(&udp_len.to_be_bytes());
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(payload);
            if v4 && sent {
                // The kernel fills in the IPv4 UDP checksum of what the socket sends.
                let mut acc = ones_complement_sum(0, &b[ip_at + 12..ip_at + 20]);
                acc += 17 + udp_len as u32;
                acc = ones_complement_sum(acc, &b[udp_at..]);
                let c = match !fold(acc) {
                    0 => 0xFFFF,
                    c => c,
                };
                b[udp_at + 6..udp_at + 8].copy_from_slice(&c.to_be_bytes());
            }
            b.extend(std::iter::repeat_n(0u8, pad4(cap)));
            w.put_option(OPT_EPB_FLAGS, &flags.to_le_bytes());
            if unknown_id {
                w.put_option(OPT_COMMENT, IP_ID_UNKNOWN.as_bytes());
            }
            w.put_option(0, &[]);
        });
        debug_assert_eq!(self.buf.len() - start, block_len);
        self.size += (self.buf.len() - start) as u64;
        self.oldest.get_or_insert_with(Instant::now);
    }

    fn maybe_flush(&mut self) {
        if self.buf.len() >= FLUSH_BYTES || self.oldest.is_some_and(|t| t.elapsed() >= FLUSH_AGE) {
            self.flush();
        }
    }

    /// Writes the buffered blocks (whole blocks only). A write error stops the tap for good:
    /// the capture must not continue with a hole in it.
    fn flush(&mut self) {
        self.oldest = None;
        if self.buf.is_empty() || self.failed {
            return;
        }
        // A raw write: this runs inside verbs, which must not be cancellation points (see
        // `sys`).
        if let Err(e) = crate::sys::write_all(self.file.as_raw_fd(), &self.buf) {
            self.failed = true;
            let _ = writeln!(io::stderr(), "urxe: URXE_PCAP={}: {e}; the capture stops here", self.path.display());
        }
        self.buf.clear();
    }
}

#[cfg(test)]
mod tests {
    // The tests that write a capture and read it back with `urxe check` are in
    // cli/tests/observe_tap.rs: the verifier is the cli crate's.
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes_and_reject_junk() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("100m"), Some(100 << 20));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        for bad in ["", "K", "abc", "-5", "1.5M", "99999999999999999999G"] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }
}
