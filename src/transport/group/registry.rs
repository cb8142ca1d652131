//! The registry of a shared address: one small file per (network namespace, address) in a
//! per-user directory, holding slot claims, per-slot counters and the CM listener table.
//!
//! - Slot `i` is claimed by an OFD write lock (`F_OFD_SETLK`) on byte `i`. The kernel drops
//!   the lock when the last descriptor of the open file description closes, i.e. when the
//!   process exits or crashes: a slot can never stay claimed by a dead process.
//! - Byte [`SETUP_LOCK`] is the join lock: held while a process creates the group, takes a
//!   slot or rewrites the listener table, so these steps never interleave.
//! - Slot records (pid, owner count, QPN and comm-ID high-water marks, takeover drops) live
//!   at [`RECORDS`] + 64·i and outlive their owners, so a new owner of slot `i` continues its
//!   counters instead of reusing numbers a peer may still hold.
//! - The listener table (service ID -> slot, stamped with the slot's owner count so an entry
//!   of a dead owner is recognised) lives at [`LISTENERS`].
//!
//! The file is only ever read or written with `pread`/`pwrite` of whole fields; a torn
//! record is impossible to act on wrongly because every field is re-read under a lock.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::error::JoinError;

/// Byte whose lock serialises joins, group creation and listener-table changes.
pub const SETUP_LOCK: u64 = 1024;
/// File offset of the header.
const HEADER: u64 = 2048;
const MAGIC: &[u8; 8] = b"URXEGRP1";
/// File offset of slot record 0; records are [`RECORD_LEN`] bytes apart.
pub const RECORDS: u64 = 4096;
const RECORD_LEN: u64 = 64;
/// File offset of the listener table: [`LISTENER_LEN`]-byte entries.
pub const LISTENERS: u64 = RECORDS + 256 * RECORD_LEN;
const LISTENER_LEN: u64 = 24;

/// A slot's persistent record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotRecord {
    /// Pid of the current (or last) owner; 0 after a clean leave.
    pub pid: u32,
    /// How many processes have owned the slot (stamps listener entries).
    pub owners: u32,
    /// QPN counters below this value (low 16 bits of `slot << 16 | n`) may have been used.
    pub qpn_mark: u32,
    /// Comm-ID counters below this (low 24 bits of `slot << 24 | n`) may have been used.
    pub comm_mark: u32,
    /// Datagrams the owners found queued for a dead predecessor and dropped, in total.
    pub takeover_drops: u64,
}

/// One entry of the listener table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listener {
    pub service_id: u64,
    pub slot: u8,
    /// The slot's owner count when the listener started.
    pub owner: u32,
}

/// Where registries live: `$URXE_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/urxe`, else the first
/// of these whose parent only this user can write to, so that no other local user can create
/// it first (issue #37: a squatted `/tmp/urxe-<uid>` denied service):
/// - `/run/user/<uid>/urxe` (the session's runtime directory, made by systemd-logind);
/// - for root, `/run/urxe` (only root creates entries in `/run`);
/// - `<home>/.cache/urxe`, the home directory from the password database;
///
/// and only when none exists (a uid with no home and no session), the first of `/tmp/urxe-<uid>`,
/// `/tmp/urxe-<uid>-1` ... `/tmp/urxe-<uid>-`[`TMP_NAMES`]` - 1` that is this user's own
/// directory or does not exist: every process of the user walks the same names, and another
/// user (or the real root's directory, seen from `unshare --map-root-user`) must hold them all
/// to deny it. [`prepare_dir`] then refuses a directory that is not this user's own: the error
/// names `URXE_RUNTIME_DIR`.
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("URXE_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return Path::new(&d).join("urxe");
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let session = PathBuf::from(format!("/run/user/{uid}"));
    if private_to(&session, uid) {
        return session.join("urxe");
    }
    if uid == 0 && private_to(Path::new("/run"), 0) {
        return PathBuf::from("/run/urxe");
    }
    if let Some(home) = home_of(uid).filter(|h| private_to(h, uid)) {
        let cache = home.join(".cache");
        if !cache.exists() || private_to(&cache, uid) {
            return cache.join("urxe");
        }
    }
    let name = |k: u32| PathBuf::from(if k == 0 { format!("/tmp/urxe-{uid}") } else { format!("/tmp/urxe-{uid}-{k}") });
    (0..TMP_NAMES)
        .map(name)
        .find(|p| {
            private_to(p, uid) || std::fs::symlink_metadata(p).is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
        })
        .unwrap_or_else(|| name(0))
}

/// Names the /tmp fallback of [`default_dir`] walks.
pub const TMP_NAMES: u32 = 4096;

/// Whether `dir` is a real directory (not a symbolic link) owned by `uid` that nobody else
/// may write to: no other user can create or replace an entry in it.
fn private_to(dir: &Path, uid: u32) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0)
}

/// The home directory of `uid` from the password database.
fn home_of(uid: u32) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: passwd is plain data; zeroed is a valid value for getpwuid_r to overwrite.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer refers to a live local; `buf.len()` is the size of `buf`, where
    // getpwuid_r stores the strings `pw` points to.
    let r = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if r != 0 || out.is_null() || pw.pw_dir.is_null() {
        return None;
    }
    // SAFETY: on success pw_dir points to a NUL-terminated string inside `buf`, alive here.
    let dir = unsafe { std::ffi::CStr::from_ptr(pw.pw_dir) };
    let p = PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes()));
    (p.is_absolute() && p != Path::new("/")).then_some(p)
}

fn dir_error(path: &Path, why: String) -> JoinError {
    JoinError::RegistryDir { path: path.to_path_buf(), why }
}

/// Creates `dir` (mode 0700) if missing and checks that it is a real directory owned by this
/// user and closed to others: anyone who can write there could take our slots' locks.
pub fn prepare_dir(dir: &Path) -> Result<(), JoinError> {
    match DirBuilder::new().mode(0o700).recursive(true).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(dir_error(dir, format!("cannot create it: {e}"))),
    }
    let md = std::fs::symlink_metadata(dir).map_err(|e| dir_error(dir, e.to_string()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if !md.is_dir() {
        return Err(dir_error(dir, "it is not a directory (or is a symbolic link)".into()));
    }
    if md.uid() != uid {
        return Err(dir_error(dir, format!("it belongs to uid {}, not to uid {uid}", md.uid())));
    }
    if md.mode() & 0o022 != 0 {
        return Err(dir_error(dir, format!("others may write to it (mode {:o})", md.mode() & 0o7777)));
    }
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| dir_error(dir, "the path contains a NUL byte".into()))?;
    // SAFETY: `path` is a valid NUL-terminated string that lives across the call.
    if unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(dir_error(dir, format!("it is not writable: {}", io::Error::last_os_error())));
    }
    Ok(())
}

/// The inode of this process's network namespace: groups in different namespaces are
/// different groups even on the same address.
pub fn netns_id() -> u64 {
    std::fs::metadata("/proc/self/ns/net").map(|m| m.ino()).unwrap_or(0)
}

/// File name of the registry of `addr` in network namespace `netns`.
pub fn file_name(netns: u64, addr: IpAddr) -> String {
    format!("group-{netns}-{addr}")
}

/// An open registry file.
pub struct Registry {
    file: File,
    path: PathBuf,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Lock {
    Write,
    Unlock,
}

fn ofd_setlk(fd: i32, start: u64, kind: Lock) -> io::Result<bool> {
    // SAFETY: flock is plain data; zeroed is a valid value (l_pid must be 0 for OFD locks).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = match kind {
        Lock::Write => libc::F_WRLCK,
        Lock::Unlock => libc::F_UNLCK,
    } as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start as libc::off_t;
    fl.l_len = 1;
    // SAFETY: `fl` is a valid flock that lives across the call; F_OFD_SETLK only reads it.
    let r = unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl as *mut libc::flock) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

impl Registry {
    /// Opens (creating if needed) the registry of `addr` in `dir`.
    pub fn open(dir: &Path, addr: IpAddr) -> Result<Registry, JoinError> {
        prepare_dir(dir)?;
        let path = dir.join(file_name(netns_id(), addr));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| dir_error(dir, format!("cannot open {}: {e}", path.display())))?;
        let md = file.metadata().map_err(|e| dir_error(dir, e.to_string()))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        if md.uid() != uid {
            return Err(dir_error(dir, format!("{} belongs to uid {}", path.display(), md.uid())));
        }
        Ok(Registry { file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn fd(&self) -> i32 {
        self.file.as_raw_fd()
    }

    /// Takes the join lock, retrying for up to `timeout`. `false` if another process held it
    /// all that time (a member stopped mid-join, e.g. by a debugger).
    pub fn lock_setup(&self, timeout: std::time::Duration) -> io::Result<bool> {
        let end = std::time::Instant::now() + timeout;
        loop {
            if ofd_setlk(self.fd(), SETUP_LOCK, Lock::Write)? {
                return Ok(true);
            }
            if std::time::Instant::now() >= end {
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    pub fn unlock_setup(&self) -> io::Result<()> {
        ofd_setlk(self.fd(), SETUP_LOCK, Lock::Unlock).map(|_| ())
    }

    /// Tries to claim slot `i`; `true` if this registry handle now holds it.
    pub fn claim(&self, i: u8) -> io::Result<bool> {
        ofd_setlk(self.fd(), i as u64, Lock::Write)
    }

    pub fn release(&self, i: u8) -> io::Result<()> {
        ofd_setlk(self.fd(), i as u64, Lock::Unlock).map(|_| ())
    }

    /// Whether slot `i` is held through another open file description (a live process; our
    /// own locks never conflict with themselves).
    pub fn held_by_other(&self, i: u8) -> io::Result<bool> {
        // SAFETY: flock is plain data; zeroed is a valid value (l_pid must be 0 for OFD locks).
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = i as libc::off_t;
        fl.l_len = 1;
        // SAFETY: `fl` is a valid flock living across the call; F_OFD_GETLK writes into it.
        let r = unsafe { libc::fcntl(self.fd(), libc::F_OFD_GETLK, &mut fl as *mut libc::flock) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
    }

    /// The slot count recorded by the group's creator, if any.
    pub fn slots(&self) -> io::Result<Option<u8>> {
        let mut h = [0u8; 16];
        let n = self.file.read_at(&mut h, HEADER)?;
        if n < 16 || &h[..8] != MAGIC || h[8] == 0 {
            return Ok(None);
        }
        Ok(Some(h[8]))
    }

    pub fn set_slots(&self, n: u8) -> io::Result<()> {
        let mut h = [0u8; 16];
        h[..8].copy_from_slice(MAGIC);
        h[8] = n;
        self.file.write_all_at(&h, HEADER)
    }

    pub fn record(&self, i: u8) -> io::Result<SlotRecord> {
        let mut b = [0u8; 24];
        let n = self.file.read_at(&mut b, RECORDS + i as u64 * RECORD_LEN)?;
        if n < b.len() {
            return Ok(SlotRecord::default());
        }
        let u = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        Ok(SlotRecord {
            pid: u(0),
            owners: u(4),
            qpn_mark: u(8),
            comm_mark: u(12),
            takeover_drops: u64::from(u(16)) | u64::from(u(20)) << 32,
        })
    }

    pub fn write_record(&self, i: u8, r: &SlotRecord) -> io::Result<()> {
        let mut b = [0u8; 24];
        b[0..4].copy_from_slice(&r.pid.to_le_bytes());
        b[4..8].copy_from_slice(&r.owners.to_le_bytes());
        b[8..12].copy_from_slice(&r.qpn_mark.to_le_bytes());
        b[12..16].copy_from_slice(&r.comm_mark.to_le_bytes());
        b[16..24].copy_from_slice(&r.takeover_drops.to_le_bytes());
        self.file.write_all_at(&b, RECORDS + i as u64 * RECORD_LEN)
    }

    /// The listener table (valid entries only; stale ones are filtered by the caller).
    pub fn listeners(&self) -> io::Result<Vec<Listener>> {
        // One read for the whole table (a CM request for an unknown service reads it).
        let mut table = vec![0u8; super::steer::MAX_LISTENERS * LISTENER_LEN as usize];
        let mut got = 0;
        while got < table.len() {
            match self.file.read_at(&mut table[got..], LISTENERS + got as u64)? {
                0 => break,
                n => got += n,
            }
        }
        let mut out = Vec::new();
        for b in table[..got].chunks_exact(LISTENER_LEN as usize) {
            if b[0] != 1 {
                continue;
            }
            let mut sid = [0u8; 8];
            sid.copy_from_slice(&b[8..16]);
            out.push(Listener {
                service_id: u64::from_le_bytes(sid),
                slot: b[1],
                owner: u32::from_le_bytes([b[16], b[17], b[18], b[19]]),
            });
        }
        Ok(out)
    }

    /// Rewrites the listener table.
    pub fn write_listeners(&self, ls: &[Listener]) -> io::Result<()> {
        let mut buf = vec![0u8; super::steer::MAX_LISTENERS * LISTENER_LEN as usize];
        for (l, b) in ls.iter().zip(buf.chunks_exact_mut(LISTENER_LEN as usize)) {
            b[0] = 1;
            b[1] = l.slot;
            b[8..16].copy_from_slice(&l.service_id.to_le_bytes());
            b[16..20].copy_from_slice(&l.owner.to_le_bytes());
        }
        self.file.write_all_at(&buf, LISTENERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("urxe-reg-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn slot_locks_exclude_other_open_files_and_not_our_own() {
        let d = tempdir("locks");
        let addr: IpAddr = "127.0.0.1".parse().unwrap();
        let a = Registry::open(&d, addr).unwrap();
        let b = Registry::open(&d, addr).unwrap();
        assert!(a.claim(3).unwrap());
        assert!(a.claim(3).unwrap(), "re-locking our own byte succeeds");
        assert!(!b.claim(3).unwrap());
        assert!(b.held_by_other(3).unwrap());
        assert!(!a.held_by_other(3).unwrap());
        assert!(b.claim(4).unwrap());
        drop(a);
        assert!(b.claim(3).unwrap(), "closing the file releases its locks");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn records_and_listeners_round_trip() {
        let d = tempdir("records");
        let r = Registry::open(&d, "::1".parse().unwrap()).unwrap();
        assert_eq!(r.slots().unwrap(), None);
        r.set_slots(64).unwrap();
        assert_eq!(r.slots().unwrap(), Some(64));
        assert_eq!(r.record(5).unwrap(), SlotRecord::default());
        let rec = SlotRecord { pid: 42, owners: 3, qpn_mark: 0x1234, comm_mark: 0x56789a, takeover_drops: 1 << 40 };
        r.write_record(5, &rec).unwrap();
        assert_eq!(r.record(5).unwrap(), rec);
        let ls = vec![
            Listener { service_id: 0x0106_0000_0000_1c06, slot: 5, owner: 3 },
            Listener { service_id: 7, slot: 0, owner: 1 },
        ];
        r.write_listeners(&ls).unwrap();
        assert_eq!(r.listeners().unwrap(), ls);
        r.write_listeners(&ls[1..]).unwrap();
        assert_eq!(r.listeners().unwrap(), ls[1..]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_directory_open_to_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempdir("mode");
        prepare_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare_dir(&d).unwrap_err();
        assert!(e.to_string().contains("others may write"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
