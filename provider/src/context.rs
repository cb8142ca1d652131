//! Provider layer, ground floor: the one device `urxe0` and its contexts, and the way back
//! from the C handles to them ([`device`], [`device_from`], [`ctx_from`], [`dev_of`]). Every
//! other provider room that needs the device imports it from here; this room imports no verb.
//!
//! Ownership:
//! - The device is a `Box<UrxeDevice>` leaked on the first `ibv_get_device_list` and never
//!   freed: its pointer stays the same for the life of the process (librdmacm compares device
//!   pointers across list calls) and outlives every list (pyverbs frees the list right after
//!   `ibv_open_device`). `verbs_device.refcount` still counts lists and contexts for anyone who
//!   looks, but reaching zero frees nothing.
//! - A process forked after its parent created the device gets a device of its own on its
//!   first call (a new member of the address's group: its own slot, QPNs and progress
//!   thread), as a child opening a kernel device after fork gets its own context; the
//!   inherited one is the parent's and stays untouched (its slot lock is the parent's).
//! - A context is a `Box<UrxeContext>` (verbs_context first, so `&ctx.vctx.context` is the
//!   `ibv_context *` applications hold, 320 bytes in) from `ibv_open_device` /
//!   `ibv_import_device` until `ibv_close_device` ([`crate::device`]). It owns `cmd_fd` (an
//!   eventfd), and both ends of the async-event pipe.
//!
//! Must not: implement protocol behaviour or fill the ops table (that is [`crate::device`],
//! which sits above the verbs).

use crate::abi::*;
use crate::config::{self, ConfigError, IfAddr};
use crate::export::non_null;
use libc::{c_char, c_int, c_void};
use std::ffi::CStr;
use std::mem::offset_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use urxe::engine::{Limits, Mtu};
use urxe::transport::group::{GroupConfig, Member};
pub const DEVICE_NAME: &str = "urxe0";
/// rxe's vendor id (IEEE "unassigned"), never Mellanox 0x02c9 or Amazon 0x1d0f: perftest and
/// the rdma-core tests would switch to mlx5dv/efadv paths.
pub const VENDOR_ID: u32 = 0x00ff_ffff;
/// The port's `gid_tbl_len`: 16 slots, as a device whose table has room beyond the entries
/// its addresses fill (rxe: 1024, ConnectX: 255). Only the first [`GID_ENTRIES`] are populated;
/// the rest are empty as on the kernel's devices (`ibv_query_gid` gives a zero GID,
/// `ibv_query_gid_ex` ENODATA, an AH or QP path naming one EINVAL).
pub const GID_TABLE_LEN: u32 = 16;
/// The populated GID entries: indices 0–3 all hold the device's RoCE v2 GID, so both the rxe
/// habit (`-g 1`) and the mlx5 one (`-x 3`) work.
pub const GID_ENTRIES: u32 = 4;
pub const PORT_NUM: u8 = 1;
pub const PKEY_DEFAULT: u16 = 0xffff;
/// Device capability flags: what rxe advertises, less IBV_DEVICE_AUTO_PATH_MIG (urxe has no
/// alternate path; setting one raises IBV_EVENT_PATH_MIG_ERR).
pub const DEVICE_CAP_FLAGS: u64 = IBV_DEVICE_BAD_PKEY_CNTR
    | IBV_DEVICE_BAD_QKEY_CNTR
    | IBV_DEVICE_CHANGE_PHY_PORT
    | IBV_DEVICE_UD_AV_PORT_ENFORCE
    | IBV_DEVICE_PORT_ACTIVE_EVENT
    | IBV_DEVICE_SYS_IMAGE_GUID
    | IBV_DEVICE_RC_RNR_NAK_GEN
    | IBV_DEVICE_SRQ_RESIZE
    | IBV_DEVICE_MEM_WINDOW
    | IBV_DEVICE_MEM_MGT_EXTENSIONS
    | IBV_DEVICE_MEM_WINDOW_TYPE_2B
    | IBV_DEVICE_XRC;
/// Completion timestamps are nanoseconds: a 1 GHz "core clock" (kHz units).
pub const HCA_CORE_CLOCK_KHZ: u64 = 1_000_000;
const CONTEXT_MAGIC: u64 = 0x7572_7865_6374_7821; // "urxectx!"

/// What the address decision produced; fixed for the life of the process.
#[derive(Debug)]
pub struct DeviceInfo {
    pub addr: IpAddr,
    pub gid: [u8; 16],
    /// Node GUID in network byte order.
    pub guid: [u8; 8],
    pub ifname: Option<String>,
    pub ifindex: u32,
    pub netdev_mtu: u32,
    pub active_mtu: Mtu,
    pub limits: Limits,
    /// This process's slot of the group sharing `addr:4791` (joined now, so the choice is
    /// real and conflicts show at device discovery); the transport started by `glue` takes it.
    pub group: std::sync::Mutex<Option<Member>>,
}

/// The device as handed to C. `vdev` first: an `ibv_device *` is a pointer to this.
#[repr(C)]
pub struct UrxeDevice {
    pub vdev: verbs_device,
    pub info: DeviceInfo,
    /// The engine, sockets and progress thread, started by the first verb that needs them
    /// (`glue::transport`); the error, if starting failed, is kept and returned every time.
    pub transport: std::sync::OnceLock<Result<urxe::runtime::Device, i32>>,
}

impl UrxeDevice {
    /// An application thread is about to wait on a completion channel: the running device (if
    /// any) makes sure its progress thread will run the engine's timers meanwhile.
    pub fn app_waits(&self) {
        if let Some(Ok(t)) = self.transport.get() {
            t.app_waits();
        }
    }
}

/// A device pointer that may live in a static.
struct DevPtr(*mut UrxeDevice);
// SAFETY: the device is immutable after creation except `refcount`, which is only touched
// through AtomicI32 views; the pointee is never freed.
unsafe impl Send for DevPtr {}
// SAFETY: as above.
unsafe impl Sync for DevPtr {}

type DeviceResult = Result<DevPtr, (String, i32)>;

static DEVICE: OnceLock<DeviceResult> = OnceLock::new();
/// The process that created `DEVICE`.
static DEVICE_PID: AtomicU32 = AtomicU32::new(0);
/// The device of a process forked after `DEVICE` was created, with that process's pid.
static FORK_DEVICE: Mutex<Option<(u32, &'static DeviceResult)>> = Mutex::new(None);

/// Marker `verbs_device.ops` points at: non-NULL and never equal to a system provider's table.
static URXE_DEVICE_OPS_MARKER: [u8; 8] = *b"urxe-ops";

pub(crate) fn copy_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

/// Every local interface address with its netdev MTU and index.
pub fn system_interfaces() -> Vec<IfAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free with freeifaddrs below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned();
        // SAFETY: ifa_addr/ifa_netmask point to sockaddrs of the family they announce.
        let (addr, mask) = unsafe { (sockaddr_ip(ifa.ifa_addr), sockaddr_ip(ifa.ifa_netmask)) };
        let (Some(addr), Some(netmask)) = (addr, mask) else {
            continue;
        };
        // SAFETY: ifa_name is a valid C string.
        let index = unsafe { libc::if_nametoindex(ifa.ifa_name) };
        let mtu = netdev_mtu(&name).unwrap_or(1500);
        out.push(IfAddr { name, index, addr, netmask, mtu });
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// # Safety
/// `sa` is NULL or points to a sockaddr whose `sa_family` tells its real type.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: caller guarantees `sa` is a valid sockaddr of its announced family.
    unsafe {
        match (*sa).sa_family as c_int {
            libc::AF_INET => {
                let sin = &*(sa as *const libc::sockaddr_in);
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))))
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa as *const libc::sockaddr_in6);
                Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}

fn netdev_mtu(ifname: &str) -> Option<u32> {
    // SAFETY: plain socket(2) call; the fd is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    let mut req = libc::ifreq::zeroed();
    for (d, b) in req.ifr_name.iter_mut().zip(ifname.bytes().take(libc::IFNAMSIZ - 1)) {
        *d = b as c_char;
    }
    // SAFETY: SIOCGIFMTU reads ifr_name and writes ifru_mtu of our local ifreq.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut req) };
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return None;
    }
    // SAFETY: after a successful SIOCGIFMTU the union holds the MTU.
    Some(unsafe { req.ifr_ifru.ifru_mtu } as u32)
}

fn build_device() -> Result<DevPtr, (String, i32)> {
    let env = std::env::var("URXE_ADDR").ok();
    let ifaces = system_interfaces();
    // Every process of this user on the address joins its group. Zero configuration: all of
    // the user's processes share one loopback address derived from the uid (docs/DESIGN.md).
    let mut why: Option<String> = None;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    // Addresses another user holds are skipped without a bind (zero configuration only).
    let taken = if env.is_none() { urxe::transport::group::slots::held_by_others_v4() } else { Default::default() };
    let chosen = config::choose_skipping(
        env.as_deref(),
        config::zero_config_seed(uid),
        &ifaces,
        |a| taken.contains(&a),
        |a| {
            Member::join(&GroupConfig::from_env(a)).map_err(|e| {
                let errno = e.errno();
                why = Some(e.to_string());
                std::io::Error::from_raw_os_error(errno)
            })
        },
    )
    .map_err(|e: ConfigError| {
        let msg = match (&e, &why) {
            (ConfigError::LoopbackExhausted, _) | (_, None) => format!("urxe: {e}"),
            (_, Some(w)) => format!("urxe: {w}"),
        };
        (msg, e.errno())
    })?;
    let active_mtu = Mtu::for_netdev(chosen.netdev_mtu).ok_or_else(|| {
        (
            format!(
                "urxe: the MTU {} of {} is too small for RoCE (URXE_ADDR={})",
                chosen.netdev_mtu,
                chosen.ifname.as_deref().unwrap_or("?"),
                chosen.addr
            ),
            libc::EINVAL,
        )
    })?;
    let info = DeviceInfo {
        addr: chosen.addr,
        gid: config::gid_of(chosen.addr),
        guid: config::node_guid_of(chosen.addr),
        ifname: chosen.ifname,
        ifindex: chosen.ifindex,
        netdev_mtu: chosen.netdev_mtu,
        active_mtu,
        limits: Limits::default(),
        group: std::sync::Mutex::new(Some(chosen.bound)),
    };
    let mut vdev = verbs_device::zeroed();
    vdev.device.node_type = IBV_NODE_CA as c_int;
    vdev.device.transport_type = IBV_TRANSPORT_IB as c_int;
    copy_cstr(&mut vdev.device.name, DEVICE_NAME);
    copy_cstr(&mut vdev.device.dev_name, "uverbs0");
    copy_cstr(&mut vdev.device.dev_path, "/sys/class/infiniband_verbs/uverbs0");
    copy_cstr(&mut vdev.device.ibdev_path, "/sys/class/infiniband/urxe0");
    vdev.ops = URXE_DEVICE_OPS_MARKER.as_ptr() as *const c_void;
    vdev.refcount = 1;
    Ok(DevPtr(Box::into_raw(Box::new(UrxeDevice { vdev, info, transport: std::sync::OnceLock::new() }))))
}

/// This process's device result, created on first use; true if this call created it.
fn this_process_device() -> (&'static DeviceResult, bool) {
    let pid = std::process::id();
    let mut first = false;
    let r = DEVICE.get_or_init(|| {
        first = true;
        DEVICE_PID.store(pid, Ordering::Release);
        build_device()
    });
    if DEVICE_PID.load(Ordering::Acquire) == pid {
        return (r, first);
    }
    // A forked child: the inherited device holds the parent's slot (shared sockets, the same
    // QPN and comm-ID range) and a transport whose progress thread did not survive the fork.
    let mut g = FORK_DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((p, r)) = *g {
        if p == pid {
            return (r, false);
        }
    }
    let r: &'static DeviceResult = Box::leak(Box::new(build_device()));
    *g = Some((pid, r));
    (r, true)
}

/// The device, creating it (address choice + bind) on first use in this process. The error
/// (message, errno) is decided once; the message is printed once.
pub fn device() -> Result<&'static UrxeDevice, i32> {
    let (r, first) = this_process_device();
    match r {
        // SAFETY: the device is leaked and never freed.
        Ok(p) => Ok(unsafe { &*p.0 }),
        Err((msg, e)) => {
            if first {
                eprintln!("{msg}");
            }
            Err(*e)
        }
    }
}

/// This process's device if it was already created (no side effects).
pub fn device_if_created() -> Option<&'static UrxeDevice> {
    let pid = std::process::id();
    let r = if DEVICE_PID.load(Ordering::Acquire) == pid {
        DEVICE.get()?
    } else {
        match *FORK_DEVICE.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((p, r)) if p == pid => r,
            _ => return None,
        }
    };
    match r {
        // SAFETY: the device is leaked and never freed.
        Ok(p) => Some(unsafe { &*p.0 }),
        Err(_) => None,
    }
}

pub(crate) fn refcount(dev: &UrxeDevice) -> &AtomicI32 {
    // SAFETY: `refcount` is an aligned c_int inside the leaked device; C never writes it
    // (libibverbs' own code is us), so viewing it as an AtomicI32 is sound.
    unsafe { AtomicI32::from_ptr(ptr::addr_of!(dev.vdev.refcount) as *mut i32) }
}

/// Our device behind an `ibv_device *`, or EINVAL for anything else.
pub fn device_from(dev: *mut ibv_device) -> Result<&'static UrxeDevice, i32> {
    let d = device_if_created().ok_or(libc::EINVAL)?;
    if ptr::eq(dev as *const u8, d as *const UrxeDevice as *const u8) {
        Ok(d)
    } else {
        Err(libc::EINVAL)
    }
}

/// The context as handed to C. `vctx` first; `&vctx.context` is the `ibv_context *`.
#[repr(C)]
pub struct UrxeContext {
    pub vctx: verbs_context,
    magic: u64,
    pub dev: *const UrxeDevice,
    /// Write end of the async-event pipe (`vctx.context.async_fd` is the read end).
    pub async_write: c_int,
}

// SAFETY: repr(C) plain data: a verbs_context (Zeroable), a u64, a raw pointer and a c_int.
unsafe impl Zeroable for UrxeContext {}

impl UrxeContext {
    /// A zeroed context of `dev` carrying the magic [`ctx_from`] checks; the caller fills the
    /// C-visible part and the ops table.
    pub fn new(dev: &'static UrxeDevice, async_write: c_int) -> Box<Self> {
        let mut b = Box::new(Self::zeroed());
        b.magic = CONTEXT_MAGIC;
        b.dev = dev;
        b.async_write = async_write;
        b
    }
    pub fn ibv(&self) -> *mut ibv_context {
        ptr::addr_of!(self.vctx.context) as *mut ibv_context
    }
    pub fn device(&self) -> &'static UrxeDevice {
        // SAFETY: `dev` is the leaked device, set at creation and never freed.
        unsafe { &*self.dev }
    }
}

/// The `UrxeContext` behind an `ibv_context *` we created.
///
/// # Safety
/// `ctx` is NULL or a pointer returned by our `ibv_open_device`/`ibv_import_device` and not
/// yet closed.
pub unsafe fn ctx_from<'a>(ctx: *mut ibv_context) -> Result<&'a UrxeContext, i32> {
    let ctx = non_null(ctx)?;
    // SAFETY: caller contract: a live context of ours, so `abi_compat` is readable.
    if unsafe { (*ctx).abi_compat } as usize != usize::MAX {
        return Err(libc::EINVAL);
    }
    let base = (ctx as *mut u8).wrapping_sub(offset_of!(verbs_context, context)) as *mut UrxeContext;
    // SAFETY: a context of ours sits 320 bytes into a UrxeContext allocation.
    let u = unsafe { &*base };
    if u.magic != CONTEXT_MAGIC {
        return Err(libc::EINVAL);
    }
    Ok(u)
}

/// The device behind any object's `context`.
///
/// # Safety
/// `ctx` is NULL or a live context of ours.
pub unsafe fn dev_of(ctx: *mut ibv_context) -> Result<&'static UrxeDevice, i32> {
    // SAFETY: forwarded contract.
    unsafe { ctx_from(ctx) }.map(|u| u.device())
}

/// For the async-event machinery: the write end of a context's async pipe.
///
/// # Safety
/// As [`ctx_from`].
pub unsafe fn async_write_fd(ctx: *mut ibv_context) -> Result<c_int, i32> {
    // SAFETY: forwarded contract.
    unsafe { ctx_from(ctx) }.map(|u| u.async_write)
}
