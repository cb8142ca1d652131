//! The layout facts of every `<rdma/rdma_cma.h>` mirror in [`crate::abi`] (the verbs structs it
//! embeds are the toolkit's, checked by tests/abi_layout.rs), one per line, in the format
//! tests/rdmacm_layout.rs turns into a C program against `<rdma/rdma_cma.h>`:
//! `type <c type> size N align A`, `field <c type>|<path> off N size S`, `const <name> V`.

use crate::abi::*;
use std::fmt::Write;
use std::mem::{align_of, offset_of, size_of};

macro_rules! ty {
    ($o:ident, $t:ty, $c:literal, [$($($f:ident).+ : $ft:ty),* $(,)?]) => {{
        let _ = writeln!($o, "type {} size {} align {}", $c, size_of::<$t>(), align_of::<$t>());
        $(let _ = writeln!(
            $o,
            "field {}|{} off {} size {}",
            $c,
            stringify!($($f).+).replace(' ', ""),
            offset_of!($t, $($f).+),
            size_of::<$ft>()
        );)*
    }};
}

macro_rules! consts {
    ($o:ident, [$($c:literal = $v:expr),* $(,)?]) => {
        $(let _ = writeln!($o, "const {} {}", $c, $v as i64);)*
    };
}

pub fn layout_report() -> String {
    let mut o = String::new();
    ty!(o, rdma_ib_addr, "struct rdma_ib_addr", [sgid: ibv_gid, dgid: ibv_gid, pkey: u16]);
    ty!(o, rdma_addr, "struct rdma_addr", [src_storage: libc::sockaddr_storage, dst_storage: libc::sockaddr_storage]);
    // The header wraps the IB view in a one-member union called `addr`.
    let _ = writeln!(
        o,
        "field struct rdma_addr|addr.ibaddr off {} size {}",
        offset_of!(rdma_addr, ibaddr),
        size_of::<rdma_ib_addr>()
    );
    ty!(o, rdma_route, "struct rdma_route", [addr: rdma_addr, path_rec: usize, num_paths: i32]);
    ty!(o, rdma_event_channel, "struct rdma_event_channel", [fd: i32]);
    ty!(o, rdma_cm_id, "struct rdma_cm_id", [
        verbs: usize, channel: usize, context: usize, qp: usize, route: rdma_route, ps: i32,
        port_num: u8, event: usize, send_cq_channel: usize, send_cq: usize, recv_cq_channel: usize,
        recv_cq: usize, srq: usize, pd: usize, qp_type: i32]);
    ty!(o, rdma_conn_param, "struct rdma_conn_param", [
        private_data: usize, private_data_len: u8, responder_resources: u8, initiator_depth: u8,
        flow_control: u8, retry_count: u8, rnr_retry_count: u8, srq: u8, qp_num: u32]);
    ty!(o, rdma_ud_param, "struct rdma_ud_param", [
        private_data: usize, private_data_len: u8, ah_attr: ibv_ah_attr, qp_num: u32, qkey: u32]);
    ty!(o, rdma_cm_event, "struct rdma_cm_event", [
        id: usize, listen_id: usize, event: i32, status: i32, param: rdma_cm_event_param,
        param.conn: rdma_conn_param, param.ud: rdma_ud_param]);
    ty!(o, rdma_addrinfo, "struct rdma_addrinfo", [
        ai_flags: i32, ai_family: i32, ai_qp_type: i32, ai_port_space: i32, ai_src_len: u32,
        ai_dst_len: u32, ai_src_addr: usize, ai_dst_addr: usize, ai_src_canonname: usize,
        ai_dst_canonname: usize, ai_route_len: usize, ai_route: usize, ai_connect_len: usize,
        ai_connect: usize, ai_next: usize]);
    ty!(o, rdma_cm_join_mc_attr_ex, "struct rdma_cm_join_mc_attr_ex", [
        comp_mask: u32, join_flags: u32, addr: usize]);
    consts!(
        o,
        [
            "RDMA_CM_EVENT_ADDR_RESOLVED" = event::ADDR_RESOLVED,
            "RDMA_CM_EVENT_ADDR_ERROR" = event::ADDR_ERROR,
            "RDMA_CM_EVENT_ROUTE_RESOLVED" = event::ROUTE_RESOLVED,
            "RDMA_CM_EVENT_ROUTE_ERROR" = event::ROUTE_ERROR,
            "RDMA_CM_EVENT_CONNECT_REQUEST" = event::CONNECT_REQUEST,
            "RDMA_CM_EVENT_CONNECT_RESPONSE" = event::CONNECT_RESPONSE,
            "RDMA_CM_EVENT_CONNECT_ERROR" = event::CONNECT_ERROR,
            "RDMA_CM_EVENT_UNREACHABLE" = event::UNREACHABLE,
            "RDMA_CM_EVENT_REJECTED" = event::REJECTED,
            "RDMA_CM_EVENT_ESTABLISHED" = event::ESTABLISHED,
            "RDMA_CM_EVENT_DISCONNECTED" = event::DISCONNECTED,
            "RDMA_CM_EVENT_DEVICE_REMOVAL" = event::DEVICE_REMOVAL,
            "RDMA_CM_EVENT_MULTICAST_JOIN" = event::MULTICAST_JOIN,
            "RDMA_CM_EVENT_MULTICAST_ERROR" = event::MULTICAST_ERROR,
            "RDMA_CM_EVENT_ADDR_CHANGE" = event::ADDR_CHANGE,
            "RDMA_CM_EVENT_TIMEWAIT_EXIT" = event::TIMEWAIT_EXIT,
            "RDMA_PS_IPOIB" = ps::IPOIB,
            "RDMA_PS_TCP" = ps::TCP,
            "RDMA_PS_UDP" = ps::UDP,
            "RDMA_PS_IB" = ps::IB,
            "RDMA_UDP_QKEY" = RDMA_UDP_QKEY,
            "RDMA_MAX_RESP_RES" = RDMA_MAX_RESP_RES,
            "RDMA_MAX_INIT_DEPTH" = RDMA_MAX_INIT_DEPTH,
            "RAI_PASSIVE" = RAI_PASSIVE,
            "RAI_NUMERICHOST" = RAI_NUMERICHOST,
            "RAI_NOROUTE" = RAI_NOROUTE,
            "RAI_FAMILY" = RAI_FAMILY,
            "RDMA_OPTION_ID" = RDMA_OPTION_ID,
            "RDMA_OPTION_IB" = RDMA_OPTION_IB,
            "RDMA_OPTION_ID_TOS" = RDMA_OPTION_ID_TOS,
            "RDMA_OPTION_ID_REUSEADDR" = RDMA_OPTION_ID_REUSEADDR,
            "RDMA_OPTION_ID_AFONLY" = RDMA_OPTION_ID_AFONLY,
            "RDMA_OPTION_ID_ACK_TIMEOUT" = RDMA_OPTION_ID_ACK_TIMEOUT,
            "RDMA_OPTION_IB_PATH" = RDMA_OPTION_IB_PATH,
        ]
    );
    o
}
