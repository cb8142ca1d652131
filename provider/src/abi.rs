//! Provider layer: hand-written `#[repr(C)]` mirrors of the parts of `<infiniband/verbs.h>`
//! (rdma-core 44, x86-64 LP64) that urxe's libibverbs.so.1 reads or writes, plus the two
//! private `driver.h` structs system provider libraries reach into (`verbs_device`).
//!
//! Written from the measured layout facts (../shared/abi/layout.txt), not copied from the
//! header. `tests/abi_layout.rs` compiles a C program against the installed header and checks
//! every size, offset and constant named in [`crate::layout::layout_report`].
//!
//! No behaviour here: plain data. Field and type names are the C names so the mirrors read like
//! the man pages.
#![allow(non_camel_case_types, non_snake_case)]

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t};

// ------------------------------------------------------------------------------------------
// Device and context
// ------------------------------------------------------------------------------------------

pub const IBV_SYSFS_NAME_MAX: usize = 64;
pub const IBV_SYSFS_PATH_MAX: usize = 256;

/// `struct _ibv_device_ops`: two obsolete pointers, kept NULL.
#[repr(C)]
pub struct _ibv_device_ops {
    pub _dummy1: *mut c_void,
    pub _dummy2: *mut c_void,
}

/// `struct ibv_device`.
#[repr(C)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// rdma-core's private `struct verbs_device` (driver.h). libmlx5/libefa cast an `ibv_device *`
/// to it and compare `ops` with their own table, so every device we hand out must be this big.
#[repr(C)]
pub struct verbs_device {
    pub device: ibv_device,
    pub ops: *const c_void,
    pub refcount: c_int,
    pub entry: [*mut c_void; 2],
    pub sysfs: *mut c_void,
    pub core_support: u64,
}

pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
pub type PostSrqRecvFn = unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type PostSendFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub type PostRecvFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type AllocMwFn = unsafe extern "C" fn(*mut ibv_pd, c_uint) -> *mut ibv_mw;
pub type BindMwFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int;
pub type DeallocMwFn = unsafe extern "C" fn(*mut ibv_mw) -> c_int;
pub type CompatQueryDeviceFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
pub type CompatQueryPortFn = unsafe extern "C" fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int;

/// `struct ibv_context_ops`. Only the data-path entries (and the two compat queries rdma-core
/// also fills) are set; the `_compat_*` rest are NULL as for any modern provider.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: Option<CompatQueryDeviceFn>,
    pub _compat_query_port: Option<CompatQueryPortFn>,
    pub _compat_alloc_pd: *mut c_void,
    pub _compat_dealloc_pd: *mut c_void,
    pub _compat_reg_mr: *mut c_void,
    pub _compat_rereg_mr: *mut c_void,
    pub _compat_dereg_mr: *mut c_void,
    pub alloc_mw: Option<AllocMwFn>,
    pub bind_mw: Option<BindMwFn>,
    pub dealloc_mw: Option<DeallocMwFn>,
    pub _compat_create_cq: *mut c_void,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    pub _compat_cq_event: *mut c_void,
    pub _compat_resize_cq: *mut c_void,
    pub _compat_destroy_cq: *mut c_void,
    pub _compat_create_srq: *mut c_void,
    pub _compat_modify_srq: *mut c_void,
    pub _compat_query_srq: *mut c_void,
    pub _compat_destroy_srq: *mut c_void,
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_create_qp: *mut c_void,
    pub _compat_query_qp: *mut c_void,
    pub _compat_modify_qp: *mut c_void,
    pub _compat_destroy_qp: *mut c_void,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: *mut c_void,
    pub _compat_destroy_ah: *mut c_void,
    pub _compat_attach_mcast: *mut c_void,
    pub _compat_detach_mcast: *mut c_void,
    pub _compat_async_event: *mut c_void,
}

/// `struct ibv_context`.
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    /// `(void *)-1` (`__VERBS_ABI_IS_EXTENDED`): tells the inline helpers a `verbs_context`
    /// surrounds this struct.
    pub abi_compat: *mut c_void,
}

pub type QueryPortFn = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;
pub type QueryDeviceExFn =
    unsafe extern "C" fn(*mut ibv_context, *const ibv_query_device_ex_input, *mut ibv_device_attr_ex, usize) -> c_int;
pub type CreateCqExFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
pub type CreateQpExFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
pub type CreateSrqExFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq;
pub type GetSrqNumFn = unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int;
pub type OpenXrcdFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd;
pub type CloseXrcdFn = unsafe extern "C" fn(*mut ibv_xrcd) -> c_int;
pub type OpenQpFn = unsafe extern "C" fn(*mut ibv_context, *mut c_void) -> *mut ibv_qp;
pub type AllocTdFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td;
pub type DeallocTdFn = unsafe extern "C" fn(*mut ibv_td) -> c_int;
pub type AllocParentDomainFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd;
pub type PdAllocFn = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void;
pub type PdFreeFn = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64);
pub type AllocDmFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_alloc_dm_attr) -> *mut ibv_dm;
pub type FreeDmFn = unsafe extern "C" fn(*mut ibv_dm) -> c_int;
pub type AdviseMrFn = unsafe extern "C" fn(*mut ibv_pd, c_uint, u32, *mut ibv_sge, u32) -> c_int;
pub type RegDmMrFn = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_dm, u64, usize, c_uint) -> *mut ibv_mr;
pub type QueryRtValuesFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int;
pub type ModifyCqFn = unsafe extern "C" fn(*mut ibv_cq, *mut c_void) -> c_int;

/// `struct ibv_td_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_td_init_attr {
    pub comp_mask: u32,
}

/// `struct ibv_td`: a thread domain.
#[repr(C)]
pub struct ibv_td {
    pub context: *mut ibv_context,
}

/// `struct ibv_parent_domain_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_parent_domain_init_attr {
    pub pd: *mut ibv_pd,
    pub td: *mut ibv_td,
    pub comp_mask: u32,
    pub alloc: Option<PdAllocFn>,
    pub free: Option<PdFreeFn>,
    pub pd_context: *mut c_void,
}

/// `struct ibv_dm`: device memory; the copy functions are what `ibv_memcpy_to_dm` /
/// `ibv_memcpy_from_dm` (inline) call.
#[repr(C)]
pub struct ibv_dm {
    pub context: *mut ibv_context,
    pub memcpy_to_dm: Option<unsafe extern "C" fn(*mut ibv_dm, u64, *const c_void, usize) -> c_int>,
    pub memcpy_from_dm: Option<unsafe extern "C" fn(*mut c_void, *mut ibv_dm, u64, usize) -> c_int>,
    pub comp_mask: u32,
    pub handle: u32,
}

/// `struct ibv_alloc_dm_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_alloc_dm_attr {
    pub length: usize,
    pub log_align_req: u32,
    pub comp_mask: u32,
}

/// `struct ibv_values_ex` (`ibv_query_rt_values_ex(3)`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_values_ex {
    pub comp_mask: u32,
    pub raw_clock: libc::timespec,
}

/// `struct verbs_context`: the extended ops live *before* the `ibv_context`, at negative
/// offsets from the pointer applications hold. Unset ops stay NULL so the inline wrappers
/// report EOPNOTSUPP themselves.
#[repr(C)]
pub struct verbs_context {
    pub query_port: Option<QueryPortFn>,
    pub advise_mr: Option<AdviseMrFn>,
    pub alloc_null_mr: *mut c_void,
    pub read_counters: *mut c_void,
    pub attach_counters_point_flow: *mut c_void,
    pub create_counters: *mut c_void,
    pub destroy_counters: *mut c_void,
    pub reg_dm_mr: Option<RegDmMrFn>,
    pub alloc_dm: Option<AllocDmFn>,
    pub free_dm: Option<FreeDmFn>,
    pub modify_flow_action_esp: *mut c_void,
    pub destroy_flow_action: *mut c_void,
    pub create_flow_action_esp: *mut c_void,
    pub modify_qp_rate_limit: *mut c_void,
    pub alloc_parent_domain: Option<AllocParentDomainFn>,
    pub dealloc_td: Option<DeallocTdFn>,
    pub alloc_td: Option<AllocTdFn>,
    pub modify_cq: Option<ModifyCqFn>,
    pub post_srq_ops: *mut c_void,
    pub destroy_rwq_ind_table: *mut c_void,
    pub create_rwq_ind_table: *mut c_void,
    pub destroy_wq: *mut c_void,
    pub modify_wq: *mut c_void,
    pub create_wq: *mut c_void,
    pub query_rt_values: Option<QueryRtValuesFn>,
    pub create_cq_ex: Option<CreateCqExFn>,
    pub priv_: *mut c_void,
    pub query_device_ex: Option<QueryDeviceExFn>,
    pub ibv_destroy_flow: *mut c_void,
    pub ABI_placeholder2: *mut c_void,
    pub ibv_create_flow: *mut c_void,
    pub ABI_placeholder1: *mut c_void,
    pub open_qp: Option<OpenQpFn>,
    pub create_qp_ex: Option<CreateQpExFn>,
    pub get_srq_num: Option<GetSrqNumFn>,
    pub create_srq_ex: Option<CreateSrqExFn>,
    pub open_xrcd: Option<OpenXrcdFn>,
    pub close_xrcd: Option<CloseXrcdFn>,
    pub _ABI_placeholder3: u64,
    /// Must be `size_of::<verbs_context>()` (648) for `query_port`, the first op, to be used.
    pub sz: usize,
    pub context: ibv_context,
}

// ------------------------------------------------------------------------------------------
// Device and port attributes, GIDs
// ------------------------------------------------------------------------------------------

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_uint,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_odp_caps_per_transport {
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_odp_caps {
    pub general_caps: u64,
    pub per_transport_caps: ibv_odp_caps_per_transport,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_tso_caps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_packet_pacing_caps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_tm_caps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_cq_moderation_caps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_pci_atomic_caps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

/// `struct ibv_device_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: ibv_tso_caps,
    pub rss_caps: ibv_rss_caps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    pub raw_packet_caps: u32,
    pub tm_caps: ibv_tm_caps,
    pub cq_mod_caps: ibv_cq_moderation_caps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `struct ibv_port_attr` (52 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct ibv_port_attr {
    pub state: c_uint,
    pub max_mtu: c_uint,
    pub active_mtu: c_uint,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// The 48-byte `ibv_port_attr` of old binaries: what the exported `ibv_query_port@@IBVERBS_1.1`
/// writes (everything up to, not including, `port_cap_flags2`). Not in the public header.
#[repr(C)]
pub struct _compat_ibv_port_attr {
    pub bytes: [u8; 48],
}

#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct ibv_gid_global {
    pub subnet_prefix: u64,
    pub interface_id: u64,
}

/// `union ibv_gid`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    pub raw: [u8; 16],
    pub global: ibv_gid_global,
}

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

// ------------------------------------------------------------------------------------------
// Objects
// ------------------------------------------------------------------------------------------

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_xrcd`.
#[repr(C)]
pub struct ibv_xrcd {
    pub context: *mut ibv_context,
}

/// `struct ibv_xrcd_init_attr`.
#[repr(C)]
pub struct ibv_xrcd_init_attr {
    pub comp_mask: u32,
    pub fd: c_int,
    pub oflags: c_int,
}

/// `struct ibv_qp_open_attr` (`ibv_open_qp(3)`).
#[repr(C)]
pub struct ibv_qp_open_attr {
    pub comp_mask: u32,
    pub qp_num: u32,
    pub xrcd: *mut ibv_xrcd,
    pub qp_context: *mut c_void,
    pub qp_type: c_uint,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    /// Number of CQs attached; destroy fails with EBUSY while non-zero.
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

/// `struct ibv_wc_tm_info`.
#[repr(C)]
pub struct ibv_wc_tm_info {
    pub tag: u64,
    pub priv_: u32,
}

/// `struct ibv_cq_ex`: `ibv_cq` followed by the poll cursor and the accessor table. Every CQ
/// urxe creates is one of these (`ibv_cq_ex_to_cq` is a cast).
#[repr(C)]
pub struct ibv_cq_ex {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub comp_mask: u32,
    pub status: c_uint,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex)>,
    pub read_opcode: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_uint>,
    pub read_vendor_err: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_imm_data: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_qp_num: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_uint>,
    pub read_slid: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    pub read_completion_ts: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
    pub read_cvlan: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u16>,
    pub read_flow_tag: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_tm_info: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_wc_tm_info)>,
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex`.
#[repr(C)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: c_uint,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_uint,
    pub qp_type: c_uint,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_data_buf`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct ibv_qp_ex`: `ibv_qp` plus the work-request builder table (`ibv_wr_*` inlines call
/// these with no NULL check, so every slot is filled).
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
    pub wr_bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_mw, u32, *const ibv_mw_bind_info)>,
    pub wr_local_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_tso: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u16, u16)>,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize)>,
    pub wr_set_inline_data_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_complete: Option<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void)>,
}

/// `IBV_QP_EX_WITH_FLUSH` (rdma-core 45's `enum ibv_qp_create_send_ops_flags`, after
/// `IBV_QP_EX_WITH_ATOMIC_WRITE`; not in rdma-core 44's header, so named here).
pub const IBV_QP_EX_WITH_FLUSH: u64 = 1 << 13;
/// `IBV_DEVICE_FLUSH_GLOBAL` and `IBV_DEVICE_ATOMIC_WRITE` of `device_cap_flags_ex`
/// (= the kernel's `IB_UVERBS_DEVICE_FLUSH_GLOBAL`, `_ATOMIC_WRITE`; rdma-core 45). urxe does
/// not offer `IBV_DEVICE_FLUSH_PERSISTENT` (1 << 39): it has no persistence domain.
pub const DEVICE_CAPS_FLUSH_ATOMIC_WRITE: u64 = (1 << 38) | (1 << 40);

/// `ibv_wr_flush`'s entry: rdma-core 45 appends `wr_flush` to `struct ibv_qp_ex`, right after
/// `wr_atomic_write`; rdma-core 44's struct (mirrored by `ibv_qp_ex`) ends before it, so the
/// slot is the field that follows `ibv` in `UrxeQp`.
pub type WrFlushFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, usize, u8, u8);

/// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` (`enum ibv_qp_create_flags`): the UD QP does not
/// receive the multicast it sends itself.
pub const IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: u32 = 1 << 1;

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_attr {
    pub qp_state: c_uint,
    pub cur_qp_state: c_uint,
    pub path_mtu: c_uint,
    pub path_mig_state: c_uint,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`.
#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_ah`.
#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    pub type_: c_uint,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind`.
#[repr(C)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_xrc {
    pub remote_srqn: u32,
}

/// The `qp_type` union of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_qp_type {
    pub xrc: ibv_send_wr_xrc,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The anonymous `{bind_mw, tso}` union at the end of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_ext {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

/// `imm_data` / `invalidate_rkey` share one slot.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_imm_or_rkey {
    /// Big-endian on the wire; stored as the application wrote it.
    pub imm_data: u32,
    pub invalidate_rkey: u32,
}

/// `struct ibv_send_wr`. The anonymous unions are named `imm` and `ext` here; the layout test
/// checks their members at the C names' offsets.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_uint,
    pub send_flags: c_uint,
    pub imm: ibv_imm_or_rkey,
    pub wr: ibv_send_wr_wr,
    pub qp_type: ibv_send_wr_qp_type,
    pub ext: ibv_send_wr_ext,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_wc`. `imm_data` and `invalidated_rkey` share one slot (`imm`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_uint,
    pub opcode: c_uint,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm: ibv_wc_imm,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_wc_imm {
    pub imm_data: u32,
    pub invalidated_rkey: u32,
}

/// The `element` union of `ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub wq: *mut c_void,
    pub port_num: c_int,
}

/// `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: ibv_async_event_element,
    pub event_type: c_uint,
}

/// `struct ibv_ece`.
#[repr(C)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

// ------------------------------------------------------------------------------------------
// Constants. Every one is listed in `CONSTANTS` so the layout test checks its value against
// the header.
// ------------------------------------------------------------------------------------------

macro_rules! constants {
    ($($name:ident = $val:expr;)*) => {
        $(pub const $name: u64 = $val;)*
        /// Every constant above, by its C name, for the layout test.
        pub const CONSTANTS: &[(&str, u64)] = &[$((stringify!($name), $val)),*];
    };
}

constants! {
    IBV_NODE_CA = 1;
    IBV_TRANSPORT_IB = 0;

    IBV_PORT_DOWN = 1;
    IBV_PORT_ACTIVE = 4;
    IBV_MTU_256 = 1;
    IBV_MTU_1024 = 3;
    IBV_MTU_4096 = 5;
    IBV_LINK_LAYER_ETHERNET = 2;
    IBV_ATOMIC_HCA = 1;

    IBV_DEVICE_BAD_PKEY_CNTR = 1 << 1;
    IBV_DEVICE_BAD_QKEY_CNTR = 1 << 2;
    IBV_DEVICE_AUTO_PATH_MIG = 1 << 4;
    IBV_DEVICE_CHANGE_PHY_PORT = 1 << 5;
    IBV_DEVICE_UD_AV_PORT_ENFORCE = 1 << 6;
    IBV_DEVICE_PORT_ACTIVE_EVENT = 1 << 10;
    IBV_DEVICE_SYS_IMAGE_GUID = 1 << 11;
    IBV_DEVICE_RC_RNR_NAK_GEN = 1 << 12;
    IBV_DEVICE_SRQ_RESIZE = 1 << 13;
    IBV_DEVICE_MEM_WINDOW = 1 << 17;
    IBV_DEVICE_MEM_MGT_EXTENSIONS = 1 << 21;
    IBV_DEVICE_MEM_WINDOW_TYPE_2B = 1 << 24;
    IBV_DEVICE_XRC = 1 << 20;

    IBV_GID_TYPE_ROCE_V2 = 2;
    IBV_PORT_CM_SUP = 1 << 16;
    IBV_PORT_IP_BASED_GIDS = 1 << 26;

    IBV_QPT_RC = 2;
    IBV_QPT_UC = 3;
    IBV_QPT_UD = 4;
    IBV_QPT_RAW_PACKET = 8;
    IBV_QPT_XRC_SEND = 9;
    IBV_QPT_XRC_RECV = 10;
    IBV_QPT_DRIVER = 0xff;

    IBV_QP_STATE = 1;
    IBV_QP_CUR_STATE = 1 << 1;
    IBV_QP_AV = 1 << 7;
    IBV_QP_PATH_MTU = 1 << 8;
    IBV_QP_ALT_PATH = 1 << 14;
    IBV_QP_CAP = 1 << 19;
    IBV_QP_DEST_QPN = 1 << 20;
    IBV_QP_RATE_LIMIT = 1 << 25;

    IBV_QP_INIT_ATTR_PD = 1;
    IBV_QP_INIT_ATTR_XRCD = 1 << 1;
    IBV_QP_INIT_ATTR_CREATE_FLAGS = 1 << 2;
    IBV_QP_INIT_ATTR_MAX_TSO_HEADER = 1 << 3;
    IBV_QP_INIT_ATTR_IND_TABLE = 1 << 4;
    IBV_QP_INIT_ATTR_RX_HASH = 1 << 5;
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS = 1 << 6;

    IBV_QP_EX_WITH_RDMA_WRITE = 1;
    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM = 1 << 1;
    IBV_QP_EX_WITH_SEND = 1 << 2;
    IBV_QP_EX_WITH_SEND_WITH_IMM = 1 << 3;
    IBV_QP_EX_WITH_RDMA_READ = 1 << 4;
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP = 1 << 5;
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD = 1 << 6;
    IBV_QP_EX_WITH_LOCAL_INV = 1 << 7;
    IBV_QP_EX_WITH_BIND_MW = 1 << 8;
    IBV_QP_EX_WITH_SEND_WITH_INV = 1 << 9;
    IBV_QP_EX_WITH_TSO = 1 << 10;
    IBV_QP_EX_WITH_ATOMIC_WRITE = 1 << 12;

    IBV_WR_RDMA_WRITE = 0;
    IBV_WR_RDMA_WRITE_WITH_IMM = 1;
    IBV_WR_SEND = 2;
    IBV_WR_SEND_WITH_IMM = 3;
    IBV_WR_RDMA_READ = 4;
    IBV_WR_ATOMIC_CMP_AND_SWP = 5;
    IBV_WR_ATOMIC_FETCH_AND_ADD = 6;
    IBV_WR_LOCAL_INV = 7;
    IBV_WR_BIND_MW = 8;
    IBV_WR_SEND_WITH_INV = 9;
    IBV_WR_TSO = 10;
    IBV_WR_DRIVER1 = 11;
    IBV_WR_ATOMIC_WRITE = 15;

    IBV_SEND_FENCE = 1;
    IBV_SEND_SIGNALED = 1 << 1;
    IBV_SEND_SOLICITED = 1 << 2;
    IBV_SEND_INLINE = 1 << 3;
    IBV_SEND_IP_CSUM = 1 << 4;

    IBV_WC_SUCCESS = 0;
    IBV_WC_GENERAL_ERR = 21;
    IBV_WC_TM_RNDV_INCOMPLETE = 23;
    IBV_WC_SEND = 0;
    IBV_WC_RDMA_WRITE = 1;
    IBV_WC_LOCAL_INV = 6;
    IBV_WC_ATOMIC_WRITE = 9;
    IBV_WC_RECV = 128;
    IBV_WC_RECV_RDMA_WITH_IMM = 129;
    IBV_WC_GRH = 1;
    IBV_WC_WITH_IMM = 1 << 1;
    IBV_WC_WITH_INV = 1 << 3;

    IBV_WC_EX_WITH_BYTE_LEN = 1;
    IBV_WC_EX_WITH_IMM = 1 << 1;
    IBV_WC_EX_WITH_QP_NUM = 1 << 2;
    IBV_WC_EX_WITH_SRC_QP = 1 << 3;
    IBV_WC_EX_WITH_SLID = 1 << 4;
    IBV_WC_EX_WITH_SL = 1 << 5;
    IBV_WC_EX_WITH_DLID_PATH_BITS = 1 << 6;
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP = 1 << 7;
    IBV_WC_EX_WITH_CVLAN = 1 << 8;
    IBV_WC_EX_WITH_FLOW_TAG = 1 << 9;
    IBV_WC_EX_WITH_TM_INFO = 1 << 10;
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK = 1 << 11;

    IBV_VALUES_MASK_RAW_CLOCK = 1;

    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS = 1;
    IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT = 1 << 1;

    IBV_REREG_MR_CHANGE_TRANSLATION = 1;
    IBV_REREG_MR_CHANGE_PD = 1 << 1;
    IBV_REREG_MR_CHANGE_ACCESS = 1 << 2;
    IBV_REREG_MR_ERR_INPUT = (-1i64) as u64;
    IBV_REREG_MR_ERR_CMD = (-4i64) as u64;

    IBV_CQ_INIT_ATTR_MASK_FLAGS = 1;
    IBV_CQ_INIT_ATTR_MASK_PD = 1 << 1;
    IBV_CREATE_CQ_ATTR_SINGLE_THREADED = 1;
    IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN = 1 << 1;

    IBV_SRQ_INIT_ATTR_TYPE = 1;
    IBV_SRQ_INIT_ATTR_PD = 1 << 1;
    IBV_SRQ_INIT_ATTR_XRCD = 1 << 2;
    IBV_SRQ_INIT_ATTR_CQ = 1 << 3;
    IBV_SRQ_INIT_ATTR_TM = 1 << 4;
    IBV_XRCD_INIT_ATTR_FD = 1;
    IBV_XRCD_INIT_ATTR_OFLAGS = 1 << 1;
    IBV_QP_OPEN_ATTR_NUM = 1;
    IBV_QP_OPEN_ATTR_XRCD = 1 << 1;
    IBV_QP_OPEN_ATTR_CONTEXT = 1 << 2;
    IBV_QP_OPEN_ATTR_TYPE = 1 << 3;
    IBV_SRQT_BASIC = 0;
    IBV_SRQT_XRC = 1;
    IBV_SRQT_TM = 2;
    IBV_SRQ_MAX_WR = 1;
    IBV_SRQ_LIMIT = 1 << 1;

    IBV_MW_TYPE_1 = 1;
    IBV_MW_TYPE_2 = 2;

    IBV_ACCESS_LOCAL_WRITE = 1;
    IBV_ACCESS_REMOTE_WRITE = 1 << 1;
    IBV_ACCESS_REMOTE_READ = 1 << 2;
    IBV_ACCESS_REMOTE_ATOMIC = 1 << 3;
    IBV_ACCESS_MW_BIND = 1 << 4;
    IBV_ACCESS_ZERO_BASED = 1 << 5;
    IBV_ACCESS_ON_DEMAND = 1 << 6;
    IBV_ACCESS_RELAXED_ORDERING = 1 << 20;

    IBV_ADVISE_MR_ADVICE_PREFETCH = 0;
    IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE = 1;
    IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT = 2;
    IBV_ADVISE_MR_FLAG_FLUSH = 1;
    IBV_ODP_SUPPORT = 1;
    IBV_ODP_SUPPORT_IMPLICIT = 1 << 1;
    IBV_ODP_SUPPORT_SEND = 1;
    IBV_ODP_SUPPORT_RECV = 1 << 1;
    IBV_ODP_SUPPORT_WRITE = 1 << 2;
    IBV_ODP_SUPPORT_READ = 1 << 3;
    IBV_ODP_SUPPORT_ATOMIC = 1 << 4;
    IBV_ODP_SUPPORT_SRQ_RECV = 1 << 5;

    IBV_EVENT_CQ_ERR = 0;
    IBV_EVENT_QP_FATAL = 1;
    IBV_EVENT_QP_REQ_ERR = 2;
    IBV_EVENT_QP_ACCESS_ERR = 3;
    IBV_EVENT_COMM_EST = 4;
    IBV_EVENT_SQ_DRAINED = 5;
    IBV_EVENT_PATH_MIG = 6;
    IBV_EVENT_PATH_MIG_ERR = 7;
    IBV_EVENT_DEVICE_FATAL = 8;
    IBV_EVENT_PORT_ACTIVE = 9;
    IBV_EVENT_PORT_ERR = 10;
    IBV_EVENT_LID_CHANGE = 11;
    IBV_EVENT_PKEY_CHANGE = 12;
    IBV_EVENT_SM_CHANGE = 13;
    IBV_EVENT_SRQ_ERR = 14;
    IBV_EVENT_SRQ_LIMIT_REACHED = 15;
    IBV_EVENT_QP_LAST_WQE_REACHED = 16;
    IBV_EVENT_CLIENT_REREGISTER = 17;
    IBV_EVENT_GID_CHANGE = 18;
    IBV_EVENT_WQ_FATAL = 19;

    IBV_RATE_MAX = 0;
    IBV_RATE_2_5_GBPS = 2;
    IBV_RATE_10_GBPS = 3;
    IBV_RATE_30_GBPS = 4;
    IBV_RATE_5_GBPS = 5;
    IBV_RATE_20_GBPS = 6;
    IBV_RATE_40_GBPS = 7;
    IBV_RATE_60_GBPS = 8;
    IBV_RATE_80_GBPS = 9;
    IBV_RATE_120_GBPS = 10;
    IBV_RATE_14_GBPS = 11;
    IBV_RATE_56_GBPS = 12;
    IBV_RATE_112_GBPS = 13;
    IBV_RATE_168_GBPS = 14;
    IBV_RATE_25_GBPS = 15;
    IBV_RATE_100_GBPS = 16;
    IBV_RATE_200_GBPS = 17;
    IBV_RATE_300_GBPS = 18;
    IBV_RATE_28_GBPS = 19;
    IBV_RATE_50_GBPS = 20;
    IBV_RATE_400_GBPS = 21;
    IBV_RATE_600_GBPS = 22;
    IBV_RATE_800_GBPS = 23;
    IBV_RATE_1200_GBPS = 24;

    IBV_FORK_DISABLED = 0;
    IBV_FORK_ENABLED = 1;
    IBV_FORK_UNNEEDED = 2;
}

/// `enum ibv_gid_type_sysfs` (rdma-core private driver.h): what `ibv_query_gid_type` reports.
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: u32 = 0;
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: u32 = 1;
/// Port width/speed codes as ibv_devinfo decodes them (IB PortInfo encoding; no header enum).
pub const IB_WIDTH_4X: u8 = 2;
pub const IB_SPEED_EDR: u8 = 32;
/// `IBV_WR_FLUSH` (rdma-core 45+, not in the 44 header).
pub const IBV_WR_FLUSH: u32 = 14;

/// `ibv_port_attr` size of old binaries (no `port_cap_flags2`).
pub const COMPAT_PORT_ATTR_SIZE: usize = 48;

// ------------------------------------------------------------------------------------------
// All-zero values
// ------------------------------------------------------------------------------------------

/// Types whose all-zero bit pattern is a valid value, so [`Zeroable::zeroed`] is safe to call.
/// C code builds these structs with `calloc`/`memset(0)`; Rust may only do so when the type
/// says it is allowed.
///
/// # Safety
/// Implement only for `#[repr(C)]` plain data whose every field (recursively) is an integer,
/// a raw pointer, an `Option` of a function pointer, an array or union of those, or a libc
/// `pthread_*_t` (whose all-zero value is the one `PTHREAD_*_INITIALIZER` gives on glibc).
/// Never for a type holding a reference, `NonNull`, `Box`, `bool`, a Rust `enum`, or anything
/// with a destructor.
pub unsafe trait Zeroable: Sized {
    /// The all-zero value.
    fn zeroed() -> Self {
        // SAFETY: the trait's contract: every implementer accepts the all-zero bit pattern.
        unsafe { std::mem::MaybeUninit::zeroed().assume_init() }
    }
}

/// `unsafe impl Zeroable` for C mirrors (and libc structs) that follow the trait's contract.
macro_rules! zeroable {
    ($($t:ty),* $(,)?) => {$(
        // SAFETY: `$t` is a `#[repr(C)]` plain-data mirror of a C struct made only of
        // integers, raw pointers, `Option<fn>`, arrays/unions of those and pthread types.
        unsafe impl Zeroable for $t {}
    )*};
}

zeroable!(
    verbs_device,
    verbs_context,
    ibv_device_attr,
    ibv_device_attr_ex,
    ibv_port_attr,
    ibv_cq_ex,
    ibv_cq_init_attr_ex,
    ibv_qp_ex,
    ibv_qp_init_attr_ex,
    ibv_qp_attr,
    ibv_srq,
    ibv_ah_attr,
    ibv_wc,
    ibv_send_wr,
    ibv_recv_wr,
    ibv_async_event,
    libc::stat,
    libc::ifreq,
);
