//! The layout facts of every mirror in [`crate::abi`], one per line, in the format
//! tests/rdmacm_layout.rs turns into a C program against `<rdma/rdma_cma.h>`:
//! `type <c type> size N align A`, `field <c type>|<path> off N size S`, `const <name> V`.

use crate::abi::*;
use crate::verbs::*;
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
    ty!(o, ibv_sa_path_rec, "struct ibv_sa_path_rec", [
        dgid: ibv_gid, sgid: ibv_gid, dlid: u16, slid: u16, raw_traffic: i32, flow_label: u32,
        hop_limit: u8, traffic_class: u8, reversible: i32, numb_path: u8, pkey: u16, sl: u8,
        mtu_selector: u8, mtu: u8, rate_selector: u8, rate: u8, packet_life_time_selector: u8,
        packet_life_time: u8, preference: u8]);
    {
        use crate::rsockets::dp::*;
        ty!(o, ibv_sge, "struct ibv_sge", [addr: u64, length: u32, lkey: u32]);
        ty!(o, ibv_send_wr, "struct ibv_send_wr", [wr_id: u64, next: *mut ibv_send_wr, sg_list: *mut ibv_sge,
            num_sge: i32, opcode: i32, send_flags: u32, imm_data: u32]);
        // The `wr.rdma` view of the header's `wr` union.
        for (c, off, size) in [
            ("wr.rdma.remote_addr", offset_of!(ibv_send_wr, remote_addr), 8),
            ("wr.rdma.rkey", offset_of!(ibv_send_wr, rkey), 4),
        ] {
            let _ = writeln!(o, "field struct ibv_send_wr|{c} off {off} size {size}");
        }
        ty!(o, ibv_recv_wr, "struct ibv_recv_wr", [wr_id: u64, next: *mut ibv_recv_wr, sg_list: *mut ibv_sge, num_sge: i32]);
        ty!(o, ibv_wc, "struct ibv_wc", [wr_id: u64, status: i32, opcode: i32, vendor_err: u32, byte_len: u32,
            imm_data: u32, qp_num: u32, src_qp: u32, wc_flags: u32, pkey_index: u16, slid: u16, sl: u8,
            dlid_path_bits: u8]);
        ty!(o, ibv_comp_channel, "struct ibv_comp_channel", [context: *mut libc::c_void, fd: i32, refcnt: i32]);
    }
    ty!(o, ibv_ece, "struct ibv_ece", [vendor_id: u32, options: u32, comp_mask: u32]);
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
    verbs_report(&mut o);
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

/// The `<infiniband/verbs.h>` structs this library fills or reads in libibverbs' objects
/// (crate::verbs), and the enum values it passes.
fn verbs_report(o: &mut String) {
    ty!(o, ibv_qp_cap, "struct ibv_qp_cap", [
        max_send_wr: u32, max_recv_wr: u32, max_send_sge: u32, max_recv_sge: u32, max_inline_data: u32]);
    ty!(o, ibv_qp_init_attr, "struct ibv_qp_init_attr", [
        qp_context: usize, send_cq: usize, recv_cq: usize, srq: usize, cap: ibv_qp_cap, qp_type: i32,
        sq_sig_all: i32]);
    ty!(o, ibv_qp_init_attr_ex, "struct ibv_qp_init_attr_ex", [
        qp_context: usize, send_cq: usize, recv_cq: usize, srq: usize, cap: ibv_qp_cap, qp_type: i32,
        sq_sig_all: i32, comp_mask: u32, pd: usize, xrcd: usize, create_flags: u32, max_tso_header: u16,
        rwq_ind_tbl: usize, rx_hash_conf: ibv_rx_hash_conf, source_qpn: u32, send_ops_flags: u64]);
    ty!(o, ibv_qp_attr, "struct ibv_qp_attr", [
        qp_state: i32, cur_qp_state: i32, path_mtu: i32, path_mig_state: i32, qkey: u32, rq_psn: u32,
        sq_psn: u32, dest_qp_num: u32, qp_access_flags: u32, cap: ibv_qp_cap, ah_attr: ibv_ah_attr,
        alt_ah_attr: ibv_ah_attr, pkey_index: u16, alt_pkey_index: u16, en_sqd_async_notify: u8,
        sq_draining: u8, max_rd_atomic: u8, max_dest_rd_atomic: u8, min_rnr_timer: u8, port_num: u8,
        timeout: u8, retry_cnt: u8, rnr_retry: u8, alt_port_num: u8, alt_timeout: u8, rate_limit: u32]);
    ty!(o, ibv_srq_init_attr, "struct ibv_srq_init_attr", [srq_context: usize, attr: ibv_srq_attr]);
    // Heads of libibverbs' objects: only the fields read here (their full size is not ours).
    for (c, f, off, size) in [
        ("struct ibv_qp", "context", std::mem::offset_of!(ibv_qp_head, context), 8),
        ("struct ibv_qp", "qp_num", std::mem::offset_of!(ibv_qp_head, qp_num), 4),
        ("struct ibv_pd", "context", std::mem::offset_of!(ibv_object_head, context), 8),
        ("struct ibv_port_attr", "active_mtu", std::mem::offset_of!(ibv_port_attr_head, active_mtu), 4),
    ] {
        let _ = writeln!(o, "field {c}|{f} off {off} size {size}");
    }
    assert!(size_of::<ibv_port_attr_head>() >= 72, "room for all of struct ibv_port_attr");
    consts!(
        o,
        [
            "IBV_QPS_INIT" = qp_state::INIT,
            "IBV_QPS_RTR" = qp_state::RTR,
            "IBV_QPS_RTS" = qp_state::RTS,
            "IBV_QPS_ERR" = qp_state::ERR,
            "IBV_QPT_RC" = qp_type::RC,
            "IBV_QPT_UC" = qp_type::UC,
            "IBV_QPT_UD" = qp_type::UD,
            "IBV_QP_STATE" = mask::STATE,
            "IBV_QP_ACCESS_FLAGS" = mask::ACCESS_FLAGS,
            "IBV_QP_PKEY_INDEX" = mask::PKEY_INDEX,
            "IBV_QP_PORT" = mask::PORT,
            "IBV_QP_QKEY" = mask::QKEY,
            "IBV_QP_AV" = mask::AV,
            "IBV_QP_PATH_MTU" = mask::PATH_MTU,
            "IBV_QP_TIMEOUT" = mask::TIMEOUT,
            "IBV_QP_RETRY_CNT" = mask::RETRY_CNT,
            "IBV_QP_RNR_RETRY" = mask::RNR_RETRY,
            "IBV_QP_RQ_PSN" = mask::RQ_PSN,
            "IBV_QP_MAX_QP_RD_ATOMIC" = mask::MAX_QP_RD_ATOMIC,
            "IBV_QP_MIN_RNR_TIMER" = mask::MIN_RNR_TIMER,
            "IBV_QP_SQ_PSN" = mask::SQ_PSN,
            "IBV_QP_MAX_DEST_RD_ATOMIC" = mask::MAX_DEST_RD_ATOMIC,
            "IBV_QP_DEST_QPN" = mask::DEST_QPN,
            "IBV_ACCESS_LOCAL_WRITE" = access::LOCAL_WRITE,
            "IBV_ACCESS_REMOTE_WRITE" = access::REMOTE_WRITE,
            "IBV_ACCESS_REMOTE_READ" = access::REMOTE_READ,
            "IBV_ACCESS_REMOTE_ATOMIC" = access::REMOTE_ATOMIC,
            "IBV_QP_INIT_ATTR_PD" = QP_INIT_ATTR_PD,
        ]
    );
}
