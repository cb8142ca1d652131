//! The host view behind `urxe run` and `urxe setup`: the files UCX and Open MPI look for before
//! they use a verbs device, which a userspace device does not get from the kernel.
//!
//! - `/dev/infiniband/<dev_name>`: UCX (`uct_ib_device_is_accessible`) skips a device unless
//!   this is a character device the process may open read/write. urxe never opens it; a bind
//!   of `/dev/null` (or, made by `urxe setup`, a node with `/dev/null`'s numbers) satisfies the
//!   check and is harmless.
//! - `/sys/class/infiniband/<ibdev>/ports/1/gid_attrs/{types,ndevs}/<index>`: UCX reads the GID
//!   type from sysfs, not through verbs; without it every GID counts as RoCE v1.
//! - `/sys/class/infiniband/<ibdev>/ports/1/pkeys/0`: the default P_Key (0xffff), which
//!   rdma-core 56's test suite reads to check `ibv_query_pkey`/`ibv_get_pkey_index`.
//! - `/sys/class/infiniband/<ibdev>/device/net/<ifname>/`: rdma-core's test suite (and other
//!   tools) find a device's network interface, and from it the IP address for RDMA-CM, by
//!   listing this directory, as the kernel shows it for rxe and RoCE NICs.
//!
//! [`enter_view`] builds both in a private mount namespace of this process (inside a new user
//! namespace when not root, so no privilege is needed where the host allows unprivileged user
//! namespaces), leaving the host untouched; the program executed afterwards and all its
//! children see them. A directory that does not exist on the host (`/dev/infiniband`,
//! `/sys/class/infiniband`) cannot be created in place (devtmpfs and sysfs refuse), so its
//! nearest existing parent is covered by a tmpfs that mirrors every entry of the original
//! (each one bind-mounted back, so devices, `/dev/shm` and the other class directories stay
//! the host's) plus the new one.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What the view must show: the device as the urxe library presents it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// `ibv_device.dev_name` (the node under /dev/infiniband).
    pub dev_name: String,
    /// `ibv_device.name` (the directory under /sys/class/infiniband).
    pub ibdev: String,
    /// Entries of the port's GID table.
    pub gid_count: u32,
    /// The network interface the device's address is on (`gid_attrs/ndevs`).
    pub ndev: String,
}

impl Spec {
    /// urxe's device (provider: `urxe0`, `uverbs0`, 4 GIDs) on interface `ndev`.
    pub fn urxe(ndev: &str) -> Spec {
        Spec { dev_name: "uverbs0".into(), ibdev: "urxe0".into(), gid_count: 4, ndev: ndev.into() }
    }

    /// `/dev/infiniband/<dev_name>`.
    pub fn dev_path(&self) -> PathBuf {
        Path::new("/dev/infiniband").join(&self.dev_name)
    }

    /// `/sys/class/infiniband/<ibdev>`.
    pub fn sys_path(&self) -> PathBuf {
        Path::new("/sys/class/infiniband").join(&self.ibdev)
    }

    /// The files of the sysfs directory, relative to it, with their contents.
    pub fn sys_files(&self) -> Vec<(PathBuf, String)> {
        let mut v = Vec::new();
        for i in 0..self.gid_count {
            v.push((PathBuf::from(format!("ports/1/gid_attrs/types/{i}")), "RoCE v2\n".to_string()));
            v.push((PathBuf::from(format!("ports/1/gid_attrs/ndevs/{i}")), format!("{}\n", self.ndev)));
        }
        v.push((PathBuf::from("node_type"), "1: CA\n".to_string()));
        v.push((PathBuf::from("ports/1/link_layer"), "Ethernet\n".to_string()));
        v.push((PathBuf::from("ports/1/state"), "4: ACTIVE\n".to_string()));
        // The P_Key table's one entry, the default full-member key that `ibv_query_pkey`
        // returns; rdma-core 56's suite (test_get_pkey_index) compares the two.
        v.push((PathBuf::from("ports/1/pkeys/0"), "0xffff\n".to_string()));
        v
    }

    /// The directories of the sysfs directory that hold no file of [`Spec::sys_files`],
    /// relative to it: `device/net/<ndev>` (the interface, listed as the kernel lists it).
    pub fn sys_dirs(&self) -> Vec<PathBuf> {
        vec![Path::new("device/net").join(&self.ndev)]
    }
}

/// Is `p` a character device this process may open read/write (UCX's test)?
pub fn usable_char_device(p: &Path) -> bool {
    let Ok(m) = fs::metadata(p) else { return false };
    if !m.file_type().is_char_device() {
        return false;
    }
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else { return false };
    sys::access_rw(&c)
}

/// What the host already shows of `spec`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Present {
    pub dev: bool,
    pub sys: bool,
}

impl Present {
    pub fn of(spec: &Spec) -> Present {
        let gid_types = spec.sys_path().join("ports/1/gid_attrs/types/0");
        Present { dev: usable_char_device(&spec.dev_path()), sys: gid_types.is_file() }
    }

    pub fn complete(self) -> bool {
        self.dev && self.sys
    }
}

/// How [`enter_view`] got its private mount namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Already root: a mount namespace alone.
    MountNamespace,
    /// Not root: a user namespace mapping only our own uid and gid, plus a mount namespace.
    UserNamespace,
}

/// Moves this process into a private mount namespace where `spec`'s files exist (only the
/// ones `Present::of` finds missing are added). Must be called while the process has a single
/// thread (user namespaces require it), before it executes the program.
pub fn enter_view(spec: &Spec) -> Result<Mode, String> {
    let have = Present::of(spec);
    let root = sys::geteuid() == 0;
    let (uid, gid) = (sys::geteuid(), sys::getegid());
    let mode = if root {
        sys::unshare(libc::CLONE_NEWNS).map_err(|e| format!("unshare(CLONE_NEWNS): {e}"))?;
        Mode::MountNamespace
    } else {
        sys::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS).map_err(|e| {
            format!("unshare(CLONE_NEWUSER|CLONE_NEWNS): {e} (unprivileged user namespaces are not allowed here)")
        })?;
        // Map only ourselves: the program keeps its identity (mpirun refuses to run as root).
        fs::write("/proc/self/setgroups", "deny").map_err(|e| format!("/proc/self/setgroups: {e}"))?;
        fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")).map_err(|e| format!("uid_map: {e}"))?;
        fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")).map_err(|e| format!("gid_map: {e}"))?;
        Mode::UserNamespace
    };
    // Nothing we mount may propagate back to the host.
    sys::mount(None, Path::new("/"), None, libc::MS_REC | libc::MS_PRIVATE, None)
        .map_err(|e| format!("making / private: {e}"))?;
    let stage = stage_dir().map_err(|e| format!("staging directory: {e}"))?;
    let r = build(spec, have, &stage);
    let _ = fs::remove_dir_all(&stage);
    r.map(|()| mode)
}

fn build(spec: &Spec, have: Present, stage: &Path) -> Result<(), String> {
    if !have.dev {
        provide(&spec.dev_path(), &stage.join("dev"), |p| {
            fs::File::create(p)?;
            sys::mount(Some(Path::new("/dev/null")), p, None, libc::MS_BIND, None)
        })
        .map_err(|e| format!("{}: {e}", spec.dev_path().display()))?;
    }
    if !have.sys {
        let (files, dirs) = (spec.sys_files(), spec.sys_dirs());
        provide(&spec.sys_path(), &stage.join("sys"), |dir| {
            for rel in &dirs {
                fs::create_dir_all(dir.join(rel))?;
            }
            for (rel, text) in &files {
                let p = dir.join(rel);
                fs::create_dir_all(p.parent().unwrap_or(dir))?;
                fs::write(&p, text)?;
                fs::set_permissions(&p, fs::Permissions::from_mode(0o444))?;
            }
            Ok(())
        })
        .map_err(|e| format!("{}: {e}", spec.sys_path().display()))?;
    }
    Ok(())
}

/// A fresh empty directory to mount staging tmpfs instances on.
fn stage_dir() -> io::Result<PathBuf> {
    let base = std::env::temp_dir();
    for n in 0..100u32 {
        let p = base.join(format!(".urxe-view-{}-{n}", std::process::id()));
        match fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(io::ErrorKind::AlreadyExists, "no free staging directory name"))
}

/// Makes `target` exist in this mount namespace, created by `make` (given the path to create).
/// The nearest existing ancestor of `target` is covered by a tmpfs mirroring its entries, in
/// which the missing part is created; an existing `target` (a file) is covered by a bind.
fn provide(target: &Path, stage: &Path, make: impl FnOnce(&Path) -> io::Result<()>) -> io::Result<()> {
    let mut anc = target.parent().ok_or_else(|| io::Error::other("no parent"))?;
    while !anc.is_dir() {
        anc = anc.parent().ok_or_else(|| io::Error::other("no existing ancestor"))?;
    }
    let rel = target.strip_prefix(anc).map_err(io::Error::other)?;
    fs::create_dir(stage)?;
    sys::mount(None, stage, Some("tmpfs"), libc::MS_NOSUID, Some("mode=0755"))?;
    let r = (|| {
        mirror(anc, stage)?;
        let new = stage.join(rel);
        if let Some(parent) = new.parent() {
            fs::create_dir_all(parent)?;
        }
        if let Ok(m) = fs::symlink_metadata(&new) {
            // The target itself existed (a file of the wrong kind, or one we cannot open): the
            // mirrored copy (a symlink, or a bind) is replaced by ours.
            if !m.file_type().is_symlink() {
                sys::umount(&new)?;
            }
            if m.is_dir() {
                fs::remove_dir(&new)?;
            } else {
                fs::remove_file(&new)?;
            }
        }
        make(&new)?;
        sys::mount(Some(stage), anc, None, libc::MS_BIND | libc::MS_REC, None)
    })();
    // The staging mount is no longer needed either way; what was bound over `anc` stays.
    let _ = sys::umount_detach(stage);
    let _ = fs::remove_dir(stage);
    r
}

/// Recreates every entry of `src` in `dst`: symlinks copied, directories and other files
/// bind-mounted (recursively, so mounts beneath them come along).
fn mirror(src: &Path, dst: &Path) -> io::Result<()> {
    for e in fs::read_dir(src)? {
        let e = e?;
        let (from, to) = (e.path(), dst.join(e.file_name()));
        let ft = fs::symlink_metadata(&from)?.file_type();
        if ft.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&from)?, &to)?;
            continue;
        }
        if ft.is_dir() {
            fs::create_dir(&to)?;
        } else {
            fs::File::create(&to)?;
        }
        sys::mount(Some(&from), &to, None, libc::MS_BIND | libc::MS_REC, None)?;
    }
    Ok(())
}

/// `urxe setup` (root, for hosts and containers): a character device with `/dev/null`'s numbers
/// (1:3) at `/dev/infiniband/<dev_name>`, mode 0666. Returns false when it already was usable.
pub fn make_device_node(spec: &Spec) -> Result<bool, String> {
    let p = spec.dev_path();
    if usable_char_device(&p) {
        return Ok(false);
    }
    let dir = p.parent().unwrap_or(Path::new("/dev"));
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if fs::symlink_metadata(&p).is_ok() {
        fs::remove_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let c = CString::new(p.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    sys::mknod_char(&c, 0o666, 1, 3).map_err(|e| format!("mknod {}: {e}", p.display()))?;
    // mknod applies the umask: set the mode explicitly.
    fs::set_permissions(&p, fs::Permissions::from_mode(0o666)).map_err(|e| format!("{}: {e}", p.display()))?;
    if !usable_char_device(&p) {
        return Err(format!(
            "{} was created but cannot be opened read/write (a device cgroup or a nodev mount?)",
            p.display()
        ));
    }
    Ok(true)
}

/// The system calls, each a thin wrapper returning `io::Result`.
mod sys {
    use std::ffi::{CStr, CString};
    use std::io;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    fn cpath(p: &Path) -> io::Result<CString> {
        CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
    }

    fn check(r: libc::c_int) -> io::Result<()> {
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub fn geteuid() -> u32 {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() }
    }

    pub fn getegid() -> u32 {
        // SAFETY: getegid has no preconditions and cannot fail.
        unsafe { libc::getegid() }
    }

    pub fn access_rw(p: &CStr) -> bool {
        // SAFETY: `p` is a NUL-terminated string that outlives the call.
        unsafe { libc::access(p.as_ptr(), libc::R_OK | libc::W_OK) == 0 }
    }

    pub fn unshare(flags: libc::c_int) -> io::Result<()> {
        // SAFETY: unshare only changes this process's namespaces; no memory is passed. The
        // caller is single-threaded (CLONE_NEWUSER fails otherwise, which we report).
        check(unsafe { libc::unshare(flags) })
    }

    pub fn mount(
        src: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: libc::c_ulong,
        data: Option<&str>,
    ) -> io::Result<()> {
        let src = src.map(cpath).transpose()?;
        let target = cpath(target)?;
        let fstype = fstype.map(CString::new).transpose().map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let data = data.map(CString::new).transpose().map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: every pointer is null or a NUL-terminated string alive for the call; `data`
        // is a string, as tmpfs (the only filesystem type we pass) expects.
        check(unsafe {
            libc::mount(ptr(&src), target.as_ptr(), ptr(&fstype), flags, ptr(&data) as *const libc::c_void)
        })
    }

    pub fn umount(target: &Path) -> io::Result<()> {
        let t = cpath(target)?;
        // SAFETY: `t` is a NUL-terminated string alive for the call.
        check(unsafe { libc::umount2(t.as_ptr(), 0) })
    }

    pub fn umount_detach(target: &Path) -> io::Result<()> {
        let t = cpath(target)?;
        // SAFETY: `t` is a NUL-terminated string alive for the call.
        check(unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) })
    }

    pub fn mknod_char(p: &CStr, mode: u32, major: u32, minor: u32) -> io::Result<()> {
        // SAFETY: `p` is a NUL-terminated string alive for the call; makedev is arithmetic.
        check(unsafe { libc::mknod(p.as_ptr(), libc::S_IFCHR | mode, libc::makedev(major, minor)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sys_files_name_every_gid_as_roce_v2_on_the_interface() {
        let s = Spec::urxe("veth0");
        let f = s.sys_files();
        assert_eq!(s.sys_path(), Path::new("/sys/class/infiniband/urxe0"));
        assert_eq!(s.dev_path(), Path::new("/dev/infiniband/uverbs0"));
        for i in 0..4 {
            let t = f.iter().find(|(p, _)| p == Path::new(&format!("ports/1/gid_attrs/types/{i}"))).unwrap();
            assert_eq!(t.1, "RoCE v2\n");
            let n = f.iter().find(|(p, _)| p == Path::new(&format!("ports/1/gid_attrs/ndevs/{i}"))).unwrap();
            assert_eq!(n.1, "veth0\n");
        }
        assert!(!f.iter().any(|(p, _)| p.ends_with("types/4")));
        assert_eq!(s.sys_dirs(), vec![PathBuf::from("device/net/veth0")]);
        let pkey = f.iter().find(|(p, _)| p == Path::new("ports/1/pkeys/0")).expect("pkeys/0");
        assert_eq!(pkey.1, "0xffff\n");
    }

    #[test]
    fn dev_null_passes_the_char_device_test_and_a_file_does_not() {
        assert!(usable_char_device(Path::new("/dev/null")));
        assert!(!usable_char_device(Path::new("/etc/hostname")));
        assert!(!usable_char_device(Path::new("/nonexistent/urxe")));
    }
}
