//! Provider layer: the device verbs (list, open/import/close, device/port/GID/P_Key queries)
//! and the context ops table. This room sits above the verbs: it fills `ibv_context.ops` and
//! the `verbs_context` extensions with the entry points of [`crate::verbs`]; the device and
//! context themselves live on the ground floor, [`crate::context`].
//!
//! Ownership: a device list is a `calloc`ed NULL-terminated array owned by the caller until
//! `ibv_free_device_list` (`free`); a context from `ibv_open_device` / `ibv_import_device`
//! until `ibv_close_device`.
//!
//! Must not: implement protocol behaviour; everything that needs the engine goes through
//! [`crate::glue`].

use crate::abi::*;
use crate::context::*;
use crate::export::{non_null, set_errno};
use crate::verbs;
use libc::{c_char, c_int, c_void};
use std::mem::size_of;
use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// Live cmd_fd identities `(st_dev, st_ino)`, for `ibv_import_device`.
static CMD_FDS: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

fn fd_identity(fd: c_int) -> Option<(u64, u64)> {
    let mut st = libc::stat::zeroed();
    // SAFETY: fstat writes only into `st`.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

fn new_cmd_fd() -> Result<c_int, i32> {
    // SAFETY: eventfd(2) creates a new fd we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(crate::export::errno());
    }
    Ok(fd)
}

/// Create a context over `cmd_fd` (taken over: closed by `ibv_close_device`).
fn open_context(dev: &'static UrxeDevice, cmd_fd: c_int) -> Result<*mut ibv_context, i32> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 writes two new fds into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(crate::export::errno());
    }
    // The engine side must never block on a full pipe (nobody reading async events).
    // SAFETY: fcntl on our own fd.
    unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
    let mut b = UrxeContext::new(dev, fds[1]);
    crate::events::register_context_pipe(fds[1]);
    let v = &mut b.vctx;
    v.sz = size_of::<verbs_context>();
    v.query_port = Some(query_port_op);
    v.query_device_ex = Some(query_device_ex_op);
    v.query_rt_values = Some(query_rt_values_op);
    v.alloc_td = Some(verbs::pd::alloc_td_op);
    v.dealloc_td = Some(verbs::pd::dealloc_td_op);
    v.alloc_parent_domain = Some(verbs::pd::alloc_parent_domain_op);
    v.alloc_dm = Some(verbs::dm::alloc_dm_op);
    v.free_dm = Some(verbs::dm::free_dm_op);
    v.reg_dm_mr = Some(verbs::dm::reg_dm_mr_op);
    v.advise_mr = Some(verbs::mr::advise_mr_op);
    v.create_cq_ex = Some(verbs::cq::create_cq_ex_op);
    v.create_qp_ex = Some(verbs::qp::create_qp_ex_op);
    v.open_qp = Some(verbs::qp::open_qp_op);
    v.create_srq_ex = Some(verbs::srq::create_srq_ex_op);
    v.get_srq_num = Some(verbs::srq::get_srq_num_op);
    v.open_xrcd = Some(verbs::srq::open_xrcd_op);
    v.close_xrcd = Some(verbs::srq::close_xrcd_op);
    let c = &mut v.context;
    c.device = dev as *const UrxeDevice as *mut ibv_device;
    c.cmd_fd = cmd_fd;
    c.async_fd = fds[0];
    c.num_comp_vectors = 1;
    c.abi_compat = usize::MAX as *mut c_void;
    c.ops._compat_query_device = Some(ibv_query_device);
    c.ops._compat_query_port = Some(ibv_query_port);
    c.ops.poll_cq = Some(verbs::cq::poll_cq_op);
    c.ops.req_notify_cq = Some(verbs::cq::req_notify_cq_op);
    c.ops.post_send = Some(verbs::post::post_send_op);
    c.ops.post_recv = Some(verbs::post::post_recv_op);
    c.ops.post_srq_recv = Some(verbs::post::post_srq_recv_op);
    c.ops.alloc_mw = Some(verbs::mw::alloc_mw_op);
    c.ops.bind_mw = Some(verbs::mw::bind_mw_op);
    c.ops.dealloc_mw = Some(verbs::mw::dealloc_mw_op);
    let raw = Box::into_raw(b);
    // SAFETY: `raw` is a live, pinned (boxed) allocation; the mutex is initialised in place
    // and never moved.
    unsafe { libc::pthread_mutex_init(ptr::addr_of_mut!((*raw).vctx.context.mutex), ptr::null()) };
    if let Some(id) = fd_identity(cmd_fd) {
        CMD_FDS.lock().unwrap_or_else(|e| e.into_inner()).push(id);
    }
    refcount(dev).fetch_add(1, Ordering::Relaxed);
    // SAFETY: `raw` is live.
    Ok(unsafe { (*raw).ibv() })
}

/// `ibv_get_device_list(3)`: one device, `urxe0`. NULL + EINVAL/EADDRINUSE (with a message
/// on stderr naming URXE_ADDR) when the address configuration is unusable.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    let dev = device()?;
    // SAFETY: calloc of two pointer slots; freed by ibv_free_device_list.
    let list = unsafe { libc::calloc(2, size_of::<*mut ibv_device>()) } as *mut *mut ibv_device;
    if list.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: `list` has two zeroed slots; slot 1 stays NULL (terminator).
    unsafe { *list = dev as *const UrxeDevice as *mut ibv_device };
    refcount(dev).fetch_add(1, Ordering::Relaxed);
    if !num_devices.is_null() {
        // SAFETY: caller passes a writable int or NULL.
        unsafe { *num_devices = 1 };
    }
    Ok(list)
}

/// `ibv_free_device_list(3)`: drops the list's device references and frees the array.
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    if list.is_null() {
        return;
    }
    let mut i = 0;
    loop {
        // SAFETY: `list` is a NULL-terminated array from ibv_get_device_list.
        let d = unsafe { *list.add(i) };
        if d.is_null() {
            break;
        }
        if let Ok(dev) = device_from(d) {
            refcount(dev).fetch_sub(1, Ordering::Relaxed);
        }
        i += 1;
    }
    // SAFETY: allocated with calloc in ibv_get_device_list.
    unsafe { libc::free(list as *mut c_void) };
}

/// `ibv_get_device_name(3)`.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    let d = device_from(device)?;
    Ok(d.vdev.device.name.as_ptr())
}

/// `ibv_get_device_guid(3)`: node GUID in network byte order (0 + EINVAL on a bad device).
#[urxe_cabi::export(value(0))]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    match device_from(device) {
        Ok(d) => u64::from_ne_bytes(d.info.guid),
        Err(e) => {
            set_errno(e);
            0
        }
    }
}

/// `ibv_get_device_index(3)`: 0 for urxe0, -1 for anything else.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    device_from(device).map(|_| 0)
}

/// `ibv_open_device(3)`.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    let dev = device_from(device)?;
    let fd = new_cmd_fd()?;
    open_context(dev, fd).inspect_err(|_| {
        // SAFETY: fd is ours and unused.
        unsafe { libc::close(fd) };
    })
}

/// `ibv_import_device(3)`: a new context over a (dup of a) `cmd_fd` of one of our
/// contexts; the fd is owned by the new context.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    let id = fd_identity(cmd_fd).ok_or(libc::EBADF)?;
    let known = CMD_FDS.lock().unwrap_or_else(|e| e.into_inner()).contains(&id);
    if !known {
        return Err(libc::EINVAL);
    }
    let dev = device()?;
    open_context(dev, cmd_fd)
}

/// `ibv_close_device(3)`: 0, or -1 + errno.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    // SAFETY: caller passes a context of ours.
    let u = unsafe { ctx_from(context) }? as *const UrxeContext as *mut UrxeContext;
    // SAFETY: `u` came from Box::into_raw in open_context and is closed once.
    let b = unsafe { Box::from_raw(u) };
    let c = &b.vctx.context;
    if let Some(id) = fd_identity(c.cmd_fd) {
        let mut fds = CMD_FDS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = fds.iter().position(|x| *x == id) {
            fds.swap_remove(i);
        }
    }
    crate::events::unregister_context_pipe(b.async_write);
    // SAFETY: these fds belong to the context being destroyed.
    unsafe {
        libc::close(c.cmd_fd);
        libc::close(c.async_fd);
        libc::close(b.async_write);
        libc::pthread_mutex_destroy(ptr::addr_of!(c.mutex) as *mut libc::pthread_mutex_t);
    }
    refcount(b.device()).fetch_sub(1, Ordering::Relaxed);
    Ok(0)
}

/// `ibv_device_attr` of urxe0.
pub fn device_attr(dev: &UrxeDevice) -> ibv_device_attr {
    let l = &dev.info.limits;
    let clamp = |v: u32| v.min(i32::MAX as u32) as c_int;
    let mut a = ibv_device_attr::zeroed();
    copy_cstr(&mut a.fw_ver, concat!("urxe ", env!("CARGO_PKG_VERSION")));
    a.node_guid = u64::from_ne_bytes(dev.info.guid);
    a.sys_image_guid = a.node_guid;
    a.max_mr_size = l.max_mr_size;
    a.page_size_cap = 0xffff_f000;
    a.vendor_id = VENDOR_ID;
    a.vendor_part_id = 0;
    a.hw_ver = 0;
    a.max_qp = clamp(l.max_qp);
    a.max_qp_wr = clamp(l.max_qp_wr);
    a.device_cap_flags = DEVICE_CAP_FLAGS as u32;
    a.max_sge = clamp(l.max_sge);
    a.max_sge_rd = clamp(l.max_sge_rd);
    a.max_cq = clamp(l.max_cq);
    a.max_cqe = clamp(l.max_cqe);
    a.max_mr = clamp(l.max_mr);
    a.max_pd = clamp(l.max_pd);
    a.max_qp_rd_atom = clamp(l.max_qp_rd_atom);
    a.max_res_rd_atom = clamp(l.max_res_rd_atom);
    a.max_qp_init_rd_atom = clamp(l.max_qp_init_rd_atom);
    a.atomic_cap = IBV_ATOMIC_HCA as u32;
    a.max_mw = clamp(l.max_mw);
    a.max_ah = clamp(l.max_ah);
    a.max_mcast_grp = clamp(l.max_mcast_grp);
    a.max_mcast_qp_attach = clamp(l.max_mcast_qp_attach);
    a.max_total_mcast_qp_attach = clamp(l.max_total_mcast_qp_attach);
    a.max_srq = clamp(l.max_srq);
    a.max_srq_wr = clamp(l.max_srq_wr);
    a.max_srq_sge = clamp(l.max_srq_sge);
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    a
}

/// `ibv_device_attr_ex` of urxe0.
pub fn device_attr_ex(dev: &UrxeDevice) -> ibv_device_attr_ex {
    let mut a = ibv_device_attr_ex::zeroed();
    a.orig_attr = device_attr(dev);
    a.completion_timestamp_mask = u64::MAX;
    a.hca_core_clock = HCA_CORE_CLOCK_KHZ;
    a.max_dm_size = verbs::dm::MAX_DM_SIZE;
    a.device_cap_flags_ex = DEVICE_CAP_FLAGS | crate::abi::DEVICE_CAPS_FLUSH_ATOMIC_WRITE;
    a.phys_port_cnt_ex = 1;
    (a.odp_caps, a.xrc_odp_caps) = verbs::mr::odp_caps(a.orig_attr.device_cap_flags);
    a
}

/// `ibv_port_attr` of port 1.
pub fn port_attr_of(dev: &UrxeDevice) -> ibv_port_attr {
    // Down only while a fault plan's `port-down` holds it (URXE_FAULTS); a device not started
    // yet is up.
    let up = !matches!(dev.transport.get(), Some(Ok(t)) if !t.port_active());
    ibv_port_attr {
        state: if up { IBV_PORT_ACTIVE as u32 } else { IBV_PORT_DOWN as u32 },
        max_mtu: IBV_MTU_4096 as u32,
        active_mtu: dev.info.active_mtu as u32,
        gid_tbl_len: GID_TABLE_LEN as c_int,
        port_cap_flags: (IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS) as u32,
        max_msg_sz: dev.info.limits.max_msg_size,
        pkey_tbl_len: 1,
        max_vl_num: 1,
        // 4X EDR (the 100 Gb/s class). A soft device's link is the host's memory: every byte
        // it moves is copied by the CPU, so its rate is that of a memcpy (~10 GB/s), not of a
        // NIC. Programs size protocols by this figure: UCX's model weighs an extra copy
        // (eager bcopy) against the link, and with 4X QDR (5 GB/s, below its memcpy estimate)
        // it took copies for free and sent 64 KiB messages eagerly in 8 KiB copies (ucx_perftest
        // tag_bw 1.3 GB/s here); with EDR it switches to rendezvous (RDMA READ into the user's
        // buffer, no copy in UCX) above ~30 KB: 2.2 GB/s (README, UCX).
        active_width: IB_WIDTH_4X,
        active_speed: IB_SPEED_EDR,
        phys_state: if up { 5 } else { 3 }, // LinkUp; Disabled
        link_layer: IBV_LINK_LAYER_ETHERNET as u8,
        ..Default::default()
    }
}

/// Copy the first `len` bytes of `src` into `dst` after zeroing `len` bytes of `dst`.
///
/// # Safety
/// `dst` is writable for `len` bytes.
unsafe fn copy_prefix<T>(dst: *mut u8, len: usize, src: &T) {
    let n = len.min(size_of::<T>());
    // SAFETY: caller: dst writable for len bytes; src is a live T of size_of::<T>() >= n bytes.
    unsafe {
        ptr::write_bytes(dst, 0, len);
        ptr::copy_nonoverlapping(src as *const T as *const u8, dst, n);
    }
}

/// `ibv_query_device(3)`: 0 or errno.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_query_device(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int {
    // SAFETY: caller passes a context of ours.
    let u = unsafe { ctx_from(context) }?;
    let out = non_null(device_attr)?;
    // SAFETY: caller passes a writable ibv_device_attr.
    unsafe { out.write(self::device_attr(u.device())) };
    Ok(())
}

/// `verbs_context.query_device_ex`: fills `attr_size` bytes (older binaries pass less
/// than 400), EINVAL for unknown input bits or a buffer smaller than
/// `ibv_device_attr`.
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn query_device_ex_op(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    // SAFETY: caller passes a context of ours.
    let u = unsafe { ctx_from(context) }?;
    // SAFETY: `input` is NULL or readable.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return Err(libc::EINVAL);
    }
    let attr = non_null(attr)?;
    if attr_size < size_of::<ibv_device_attr>() {
        return Err(libc::EINVAL);
    }
    let a = device_attr_ex(u.device());
    // SAFETY: the caller's buffer is `attr_size` bytes.
    unsafe { copy_prefix(attr as *mut u8, attr_size, &a) };
    Ok(())
}

/// `verbs_context.query_rt_values` (`ibv_query_rt_values_ex(3)`): with
/// IBV_VALUES_MASK_RAW_CLOCK asked, the device clock in `raw_clock.tv_nsec` (one tick per
/// ns, `hca_core_clock` 1 GHz; `tv_sec` 0, as completion timestamps read it); `comp_mask`
/// comes back with what was filled. EINVAL for unknown mask bits.
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn query_rt_values_op(context: *mut ibv_context, values: *mut ibv_values_ex) -> c_int {
    // SAFETY: caller passes a context of ours.
    let u = unsafe { ctx_from(context) }?;
    let values = non_null(values)?;
    // SAFETY: caller passes a readable and writable ibv_values_ex.
    let v = unsafe { &mut *values };
    if u64::from(v.comp_mask) & !IBV_VALUES_MASK_RAW_CLOCK != 0 {
        return Err(libc::EINVAL);
    }
    let mut filled = 0;
    if u64::from(v.comp_mask) & IBV_VALUES_MASK_RAW_CLOCK != 0 {
        let t = crate::glue::clock(u.device())?;
        v.raw_clock = libc::timespec { tv_sec: 0, tv_nsec: t as libc::c_long };
        filled |= IBV_VALUES_MASK_RAW_CLOCK as u32;
    }
    v.comp_mask = filled;
    Ok(())
}

/// Write port `port_num`'s attributes as the first `len` bytes of `out` (the one body behind
/// both query_port entries).
///
/// # Safety
/// `context` is NULL or a live context of ours; `out` is NULL or writable for `len` bytes.
unsafe fn query_port_into(context: *mut ibv_context, port_num: u8, out: *mut u8, len: usize) -> Result<(), i32> {
    // SAFETY: caller contract.
    let u = unsafe { ctx_from(context) }?;
    let out = non_null(out)?;
    if port_num != PORT_NUM {
        return Err(libc::EINVAL);
    }
    let a = port_attr_of(u.device());
    // SAFETY: caller contract: `out` is writable for `len` bytes.
    unsafe { copy_prefix(out, len, &a) };
    Ok(())
}

/// `verbs_context.query_port`: honours `port_attr_len` (52 today, 48 for old binaries).
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn query_port_op(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    // SAFETY: caller passes a context of ours and a buffer of `port_attr_len` bytes.
    unsafe { query_port_into(context, port_num, port_attr as *mut u8, port_attr_len) }
}

/// `ibv_query_port@@IBVERBS_1.1`: the exported compat entry, 48-byte attribute struct.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut _compat_ibv_port_attr,
) -> c_int {
    // SAFETY: caller passes a context of ours; old and new callers both pass at least 48
    // writable bytes.
    unsafe { query_port_into(context, port_num, port_attr as *mut u8, COMPAT_PORT_ATTR_SIZE) }
}

fn check_gid(port: u32, index: u32) -> Result<(), i32> {
    if port != PORT_NUM as u32 || index >= GID_TABLE_LEN {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// `ibv_query_gid(3)`: 0, or -1 + EINVAL for a bad port/index.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    // SAFETY: caller passes a context of ours.
    let u = unsafe { ctx_from(context) }?;
    let out = non_null(gid)?;
    let index = u32::try_from(index).map_err(|_| libc::EINVAL)?;
    check_gid(port_num as u32, index)?;
    // An empty entry reads as the zero GID (rdma-core's behaviour for ENODATA).
    let raw = if index < GID_ENTRIES { u.device().info.gid } else { [0; 16] };
    // SAFETY: caller passes a writable ibv_gid.
    unsafe { out.write(ibv_gid { raw }) };
    Ok(0)
}

/// rdma-core private `ibv_query_gid_type`: every populated GID is RoCE v2 (sysfs encoding 1).
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: libc::c_uint,
    gid_type: *mut u32,
) -> c_int {
    // SAFETY: caller passes a context of ours.
    unsafe { ctx_from(context) }?;
    let out = non_null(gid_type)?;
    check_gid(port_num as u32, index)?;
    // An empty entry reports IB/RoCE v1, as rdma-core does for ENODATA.
    let t = if index < GID_ENTRIES { IBV_GID_TYPE_SYSFS_ROCE_V2 } else { IBV_GID_TYPE_SYSFS_IB_ROCE_V1 };
    // SAFETY: caller passes a writable enum slot.
    unsafe { out.write(t) };
    Ok(0)
}

fn gid_entry(dev: &UrxeDevice, index: u32) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: ibv_gid { raw: dev.info.gid },
        gid_index: index,
        port_num: PORT_NUM as u32,
        gid_type: IBV_GID_TYPE_ROCE_V2 as u32,
        ndev_ifindex: dev.info.ifindex,
    }
}

/// `ibv_query_gid_ex(3)` (the exported half): 0 or a positive errno.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    // SAFETY: caller passes a context of ours.
    let u = unsafe { ctx_from(context) }?;
    let out = non_null(entry)?;
    if flags != 0 {
        return Err(libc::EINVAL);
    }
    check_gid(port_num, gid_index)?;
    if gid_index >= GID_ENTRIES {
        return Err(libc::ENODATA);
    }
    let e = gid_entry(u.device(), gid_index);
    // SAFETY: the caller's entry is `entry_size` bytes.
    unsafe { copy_prefix(out as *mut u8, entry_size, &e) };
    Ok(())
}

/// `ibv_query_gid_table(3)` (the exported half): number of entries, or a negative errno.
#[urxe_cabi::export(value(-(libc::EIO as isize)))]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let r = (|| {
        // SAFETY: caller passes a context of ours.
        let u = unsafe { ctx_from(context) }?;
        let out = non_null(entries)?;
        if flags != 0 || entry_size == 0 || (max_entries as u64) < GID_ENTRIES as u64 {
            return Err(libc::EINVAL);
        }
        for i in 0..GID_ENTRIES {
            let e = gid_entry(u.device(), i);
            // SAFETY: the caller's array holds `max_entries` entries of `entry_size` bytes.
            unsafe { copy_prefix((out as *mut u8).add(i as usize * entry_size), entry_size, &e) };
        }
        Ok(GID_ENTRIES as isize)
    })();
    r.unwrap_or_else(|e| {
        set_errno(e);
        -(e as isize)
    })
}

/// `ibv_query_pkey(3)`: index 0 holds the default P_Key 0xFFFF; 0 or -1 + EINVAL.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: caller passes a context of ours.
    unsafe { ctx_from(context) }?;
    let out = non_null(pkey)?;
    if port_num != PORT_NUM || index != 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: caller passes a writable __be16.
    unsafe { out.write(PKEY_DEFAULT.to_be()) };
    Ok(0)
}

/// `ibv_get_pkey_index(3)`: the index of `pkey` (network order), or -1 + ENOENT.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn ibv_get_pkey_index(context: *mut ibv_context, port_num: u8, pkey: u16) -> c_int {
    // SAFETY: caller passes a context of ours.
    unsafe { ctx_from(context) }?;
    if port_num != PORT_NUM {
        return Err(libc::EINVAL);
    }
    if u16::from_be(pkey) == PKEY_DEFAULT {
        Ok(0)
    } else {
        Err(libc::ENOENT)
    }
}
