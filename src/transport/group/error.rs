//! [`JoinError`]: why a process cannot join the group of an address, with the errno and the
//! message naming the setting that changes it.

use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Largest slot count (the slot index is one byte of the QPN; slot 255 stays unused so a QPN
/// can never be 0xFFFFxx... up to 0xFFFFFF).
pub const MAX_SLOTS: u8 = 255;
/// How long a join waits for the join lock.
pub(super) const SETUP_WAIT: Duration = Duration::from_secs(5);

/// Why a process cannot join the group of an address. Every message names the cause and the
/// setting that changes it.
#[derive(Debug)]
pub enum JoinError {
    /// The registry directory is missing, foreign or not writable.
    RegistryDir { path: PathBuf, why: String },
    /// Another user's process holds `addr:4791` (groups are per user: the kernel refuses to
    /// put sockets of different UIDs in one SO_REUSEPORT group).
    OtherUser { addr: IpAddr, uid: Option<u32> },
    /// A kernel socket (rdma_rxe, or a UDP tunnel on port 4791) holds UDP 4791 there.
    KernelRxe { addr: IpAddr },
    /// A process of this user holds `addr:4791` without SO_REUSEPORT.
    NotShared { addr: IpAddr },
    /// The address is not assigned to this host (in this network namespace).
    NotLocal { addr: IpAddr },
    /// Every slot is taken.
    Full { addr: IpAddr, slots: u8 },
    /// Another process held the join lock for too long.
    Busy { path: PathBuf },
    /// The slot sockets do not answer probes as they should (a group still closing).
    Probe { addr: IpAddr, slot: u8 },
    /// A system call failed.
    Io { what: &'static str, source: io::Error },
}

impl JoinError {
    /// The errno rdma-core programs expect for this outcome.
    pub fn errno(&self) -> i32 {
        match self {
            JoinError::RegistryDir { .. } => libc::EACCES,
            JoinError::OtherUser { .. } | JoinError::KernelRxe { .. } | JoinError::NotShared { .. } => libc::EADDRINUSE,
            JoinError::NotLocal { .. } => libc::EADDRNOTAVAIL,
            JoinError::Full { .. } => libc::EUSERS,
            JoinError::Busy { .. } => libc::EBUSY,
            JoinError::Probe { .. } => libc::EIO,
            JoinError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    pub(super) fn io(what: &'static str) -> impl FnOnce(io::Error) -> JoinError {
        move |source| JoinError::Io { what, source }
    }
}

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JoinError::RegistryDir { path, why } => write!(
                f,
                "urxe group registry directory {}: {why}; set URXE_RUNTIME_DIR to a directory of your own (mode 0700)",
                path.display()
            ),
            JoinError::OtherUser { addr, uid: Some(uid) } => write!(
                f,
                "UDP {addr}:4791 is held by uid {uid}{}; one address is shared only among processes of one user: run as uid {uid} or set URXE_ADDR to another address",
                if *uid == 0 { " (root, or the kernel: rdma_rxe or a UDP tunnel on port 4791)" } else { "" }
            ),
            JoinError::OtherUser { addr, uid: None } => write!(
                f,
                "UDP {addr}:4791 is held by a socket this user cannot join (another user's or one without SO_REUSEPORT); set URXE_ADDR to another address"
            ),
            JoinError::KernelRxe { addr } => write!(
                f,
                "UDP port 4791 on {addr} is held by a kernel socket (kernel rdma_rxe, or a UDP tunnel such as VXLAN on port 4791): remove the rxe device (`rdma link delete <rxe>`) or the tunnel, or set URXE_ADDR to another address"
            ),
            JoinError::NotShared { addr } => write!(
                f,
                "UDP {addr}:4791 is held by a process of this user that does not share it (no SO_REUSEPORT: an older urxe or another program); stop it or set URXE_ADDR to another address"
            ),
            JoinError::NotLocal { addr } => {
                write!(f, "URXE_ADDR={addr}: that address is not assigned to this host (network namespace)")
            }
            JoinError::Full { addr, slots } => write!(
                f,
                "all {slots} slots of {addr}:4791 are taken; a group created with URXE_GROUP_SLOTS=<n> (up to {MAX_SLOTS}) by its first process holds more"
            ),
            JoinError::Busy { path } => write!(
                f,
                "the urxe group registry {} stayed locked by another process for {} s (a member stopped while joining?)",
                path.display(),
                SETUP_WAIT.as_secs()
            ),
            JoinError::Probe { addr, slot } => write!(
                f,
                "slot {slot} of {addr}:4791 did not receive its probe: the group's sockets are not where they should be (a previous group still closing?); retry"
            ),
            JoinError::Io { what, source } => write!(f, "urxe group: {what}: {source}"),
        }
    }
}

impl std::error::Error for JoinError {}
