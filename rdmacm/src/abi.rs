//! `#[repr(C)]` mirrors of rdma-core 44's `<rdma/rdma_cma.h>` (the `<infiniband/verbs.h>` /
//! `<infiniband/sa.h>` pieces it embeds are the toolkit's, `urxe_cabi::verbs`), written from
//! the header's declarations, not copied. tests/rdmacm_layout.rs checks every size, alignment, offset and
//! constant against the installed header.
//!
//! `<rdma/rdma_verbs.h>`'s inline helpers (`rdma_post_send`, `rdma_reg_msgs`,
//! `rdma_get_send_comp`, …) read `rdma_cm_id`'s fields directly in the application, so its
//! layout is ABI: `qp`, `pd`, `srq`, the CQs and their channels must be where the header puts
//! them, and filled in as librdmacm does.
#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_void, sockaddr, sockaddr_storage, socklen_t};

/// The `<infiniband/verbs.h>` / `<infiniband/sa.h>` structs the header embeds or points at,
/// from the toolkit both C libraries share (its layout test checks them against the headers).
pub use urxe_cabi::verbs::{
    ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_ece, ibv_gid, ibv_global_route, ibv_pd, ibv_qp,
    ibv_sa_path_rec, ibv_srq,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    /// Network byte order.
    pub pkey: u16,
}

/// `struct rdma_addr`: the source and destination as `sockaddr_storage` (the header's unions
/// of `sockaddr`, `sockaddr_in`, `sockaddr_in6`, `sockaddr_storage` are all views of it), then
/// the IB view.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    pub src_storage: sockaddr_storage,
    pub dst_storage: sockaddr_storage,
    pub ibaddr: rdma_ib_addr,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

/// The event channel: applications poll `fd` and may set O_NONBLOCK on it.
#[repr(C)]
#[derive(Debug)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    /// `enum rdma_port_space`.
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    /// `enum rdma_cm_event_type`.
    pub event: c_int,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: socklen_t,
    pub ai_dst_len: socklen_t,
    pub ai_src_addr: *mut sockaddr,
    pub ai_dst_addr: *mut sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

#[repr(C)]
#[derive(Debug)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut sockaddr,
}

/// `enum rdma_cm_event_type`: the sans-IO core's (it decides which event follows which).
pub use urxe::cm::rdma_conn::event;

/// `enum rdma_port_space`.
pub mod ps {
    pub const IPOIB: i32 = 0x0002;
    pub const TCP: i32 = 0x0106;
    pub const UDP: i32 = 0x0111;
    pub const IB: i32 = 0x013F;
}

pub const RDMA_UDP_QKEY: u32 = urxe::cm::rdma_conn::RDMA_UDP_QKEY;
pub const RDMA_MAX_RESP_RES: u8 = 0xFF;
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xFF;

/// `rdma_addrinfo.ai_flags`.
pub const RAI_PASSIVE: i32 = 0x1;
pub const RAI_NUMERICHOST: i32 = 0x2;
pub const RAI_NOROUTE: i32 = 0x4;
pub const RAI_FAMILY: i32 = 0x8;

/// `rdma_set_option` levels and names.
pub const RDMA_OPTION_ID: i32 = 0;
pub const RDMA_OPTION_IB: i32 = 1;
pub const RDMA_OPTION_ID_TOS: i32 = 0;
pub const RDMA_OPTION_ID_REUSEADDR: i32 = 1;
pub const RDMA_OPTION_ID_AFONLY: i32 = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: i32 = 3;
pub const RDMA_OPTION_IB_PATH: i32 = 1;
