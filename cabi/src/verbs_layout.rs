//! The C-ABI toolkit: the Rust side of the ABI layout check. [`layout_report`] lists every
//! mirrored struct with its size and alignment, every field with its offset and size, and
//! every constant, as lines keyed by the C spelling. `tests/abi_layout.rs` turns the same keys
//! into a C program compiled against the installed `<infiniband/verbs.h>` and compares.
//!
//! Line format (one fact per line, stable):
//! `type <C type> size <n> align <n>` / `field <C type>|<member path> off <n> size <n>` /
//! `const <NAME> <value>`.

use crate::verbs::*;
use std::fmt::Write as _;
use std::mem::{align_of, size_of, MaybeUninit};

/// Size of the pointee type of a raw pointer, without reading it.
fn pointee_size<T>(_: *const T) -> usize {
    size_of::<T>()
}

macro_rules! report {
    ($out:ident, $t:ty, $cname:literal, [$($($f:ident).+ => $cf:literal),* $(,)?]) => {{
        let _ = writeln!($out, "type {} size {} align {}", $cname, size_of::<$t>(), align_of::<$t>());
        $({
            let u = MaybeUninit::<$t>::uninit();
            let base = u.as_ptr();
            // SAFETY: `base` points to a live (uninitialised) value; `addr_of!` only computes
            // the field address and never reads or creates a reference.
            let fp = unsafe { std::ptr::addr_of!((*base).$($f).+) };
            let off = fp as usize - base as usize;
            let _ = writeln!($out, "field {}|{} off {} size {}", $cname, $cf, off, pointee_size(fp));
        })*
    }};
}

/// The layout facts of every mirror in [`crate::verbs`]; see the module doc for the format.
pub fn layout_report() -> String {
    let mut o = String::new();
    report!(o, _ibv_device_ops, "struct _ibv_device_ops", [_dummy1 => "_dummy1", _dummy2 => "_dummy2"]);
    report!(o, ibv_device, "struct ibv_device", [
        _ops => "_ops", node_type => "node_type", transport_type => "transport_type", name => "name",
        dev_name => "dev_name", dev_path => "dev_path", ibdev_path => "ibdev_path"]);
    report!(o, verbs_device, "struct verbs_device", [
        device => "device", ops => "ops", refcount => "refcount", entry => "entry", sysfs => "sysfs",
        core_support => "core_support"]);
    report!(o, ibv_context_ops, "struct ibv_context_ops", [
        _compat_query_device => "_compat_query_device", _compat_query_port => "_compat_query_port",
        _compat_alloc_pd => "_compat_alloc_pd", _compat_dealloc_pd => "_compat_dealloc_pd",
        _compat_reg_mr => "_compat_reg_mr", _compat_rereg_mr => "_compat_rereg_mr",
        _compat_dereg_mr => "_compat_dereg_mr", alloc_mw => "alloc_mw", bind_mw => "bind_mw",
        dealloc_mw => "dealloc_mw", _compat_create_cq => "_compat_create_cq", poll_cq => "poll_cq",
        req_notify_cq => "req_notify_cq", _compat_cq_event => "_compat_cq_event",
        _compat_resize_cq => "_compat_resize_cq", _compat_destroy_cq => "_compat_destroy_cq",
        _compat_create_srq => "_compat_create_srq", _compat_modify_srq => "_compat_modify_srq",
        _compat_query_srq => "_compat_query_srq", _compat_destroy_srq => "_compat_destroy_srq",
        post_srq_recv => "post_srq_recv", _compat_create_qp => "_compat_create_qp",
        _compat_query_qp => "_compat_query_qp", _compat_modify_qp => "_compat_modify_qp",
        _compat_destroy_qp => "_compat_destroy_qp", post_send => "post_send", post_recv => "post_recv",
        _compat_create_ah => "_compat_create_ah", _compat_destroy_ah => "_compat_destroy_ah",
        _compat_attach_mcast => "_compat_attach_mcast", _compat_detach_mcast => "_compat_detach_mcast",
        _compat_async_event => "_compat_async_event"]);
    report!(o, ibv_context, "struct ibv_context", [
        device => "device", ops => "ops", ops.poll_cq => "ops.poll_cq", ops.post_send => "ops.post_send",
        cmd_fd => "cmd_fd", async_fd => "async_fd", num_comp_vectors => "num_comp_vectors",
        mutex => "mutex", abi_compat => "abi_compat"]);
    report!(o, verbs_context, "struct verbs_context", [
        query_port => "query_port", advise_mr => "advise_mr", alloc_null_mr => "alloc_null_mr",
        read_counters => "read_counters", attach_counters_point_flow => "attach_counters_point_flow",
        create_counters => "create_counters", destroy_counters => "destroy_counters",
        reg_dm_mr => "reg_dm_mr", alloc_dm => "alloc_dm", free_dm => "free_dm",
        modify_flow_action_esp => "modify_flow_action_esp", destroy_flow_action => "destroy_flow_action",
        create_flow_action_esp => "create_flow_action_esp", modify_qp_rate_limit => "modify_qp_rate_limit",
        alloc_parent_domain => "alloc_parent_domain", dealloc_td => "dealloc_td", alloc_td => "alloc_td",
        modify_cq => "modify_cq", post_srq_ops => "post_srq_ops",
        destroy_rwq_ind_table => "destroy_rwq_ind_table", create_rwq_ind_table => "create_rwq_ind_table",
        destroy_wq => "destroy_wq", modify_wq => "modify_wq", create_wq => "create_wq",
        query_rt_values => "query_rt_values", create_cq_ex => "create_cq_ex", priv_ => "priv",
        query_device_ex => "query_device_ex", ibv_destroy_flow => "ibv_destroy_flow",
        ABI_placeholder2 => "ABI_placeholder2", ibv_create_flow => "ibv_create_flow",
        ABI_placeholder1 => "ABI_placeholder1", open_qp => "open_qp", create_qp_ex => "create_qp_ex",
        get_srq_num => "get_srq_num", create_srq_ex => "create_srq_ex", open_xrcd => "open_xrcd",
        close_xrcd => "close_xrcd", _ABI_placeholder3 => "_ABI_placeholder3", sz => "sz",
        context => "context"]);
    report!(o, ibv_device_attr, "struct ibv_device_attr", [
        fw_ver => "fw_ver", node_guid => "node_guid", sys_image_guid => "sys_image_guid",
        max_mr_size => "max_mr_size", page_size_cap => "page_size_cap", vendor_id => "vendor_id",
        vendor_part_id => "vendor_part_id", hw_ver => "hw_ver", max_qp => "max_qp",
        max_qp_wr => "max_qp_wr", device_cap_flags => "device_cap_flags", max_sge => "max_sge",
        max_sge_rd => "max_sge_rd", max_cq => "max_cq", max_cqe => "max_cqe", max_mr => "max_mr",
        max_pd => "max_pd", max_qp_rd_atom => "max_qp_rd_atom", max_ee_rd_atom => "max_ee_rd_atom",
        max_res_rd_atom => "max_res_rd_atom", max_qp_init_rd_atom => "max_qp_init_rd_atom",
        max_ee_init_rd_atom => "max_ee_init_rd_atom", atomic_cap => "atomic_cap", max_ee => "max_ee",
        max_rdd => "max_rdd", max_mw => "max_mw", max_raw_ipv6_qp => "max_raw_ipv6_qp",
        max_raw_ethy_qp => "max_raw_ethy_qp", max_mcast_grp => "max_mcast_grp",
        max_mcast_qp_attach => "max_mcast_qp_attach",
        max_total_mcast_qp_attach => "max_total_mcast_qp_attach", max_ah => "max_ah",
        max_fmr => "max_fmr", max_map_per_fmr => "max_map_per_fmr", max_srq => "max_srq",
        max_srq_wr => "max_srq_wr", max_srq_sge => "max_srq_sge", max_pkeys => "max_pkeys",
        local_ca_ack_delay => "local_ca_ack_delay", phys_port_cnt => "phys_port_cnt"]);
    report!(o, ibv_odp_caps, "struct ibv_odp_caps", [
        general_caps => "general_caps", per_transport_caps.rc_odp_caps => "per_transport_caps.rc_odp_caps",
        per_transport_caps.ud_odp_caps => "per_transport_caps.ud_odp_caps"]);
    report!(o, ibv_tso_caps, "struct ibv_tso_caps", [max_tso => "max_tso", supported_qpts => "supported_qpts"]);
    report!(o, ibv_rss_caps, "struct ibv_rss_caps", [
        supported_qpts => "supported_qpts", max_rwq_indirection_tables => "max_rwq_indirection_tables",
        max_rwq_indirection_table_size => "max_rwq_indirection_table_size",
        rx_hash_fields_mask => "rx_hash_fields_mask", rx_hash_function => "rx_hash_function"]);
    report!(o, ibv_packet_pacing_caps, "struct ibv_packet_pacing_caps", [
        qp_rate_limit_min => "qp_rate_limit_min", qp_rate_limit_max => "qp_rate_limit_max",
        supported_qpts => "supported_qpts"]);
    report!(o, ibv_tm_caps, "struct ibv_tm_caps", [
        max_rndv_hdr_size => "max_rndv_hdr_size", max_num_tags => "max_num_tags", flags => "flags",
        max_ops => "max_ops", max_sge => "max_sge"]);
    report!(o, ibv_cq_moderation_caps, "struct ibv_cq_moderation_caps", [
        max_cq_count => "max_cq_count", max_cq_period => "max_cq_period"]);
    report!(o, ibv_pci_atomic_caps, "struct ibv_pci_atomic_caps", [
        fetch_add => "fetch_add", swap => "swap", compare_swap => "compare_swap"]);
    report!(o, ibv_device_attr_ex, "struct ibv_device_attr_ex", [
        orig_attr => "orig_attr", comp_mask => "comp_mask", odp_caps => "odp_caps",
        completion_timestamp_mask => "completion_timestamp_mask", hca_core_clock => "hca_core_clock",
        device_cap_flags_ex => "device_cap_flags_ex", tso_caps => "tso_caps", rss_caps => "rss_caps",
        max_wq_type_rq => "max_wq_type_rq", packet_pacing_caps => "packet_pacing_caps",
        raw_packet_caps => "raw_packet_caps", tm_caps => "tm_caps", cq_mod_caps => "cq_mod_caps",
        max_dm_size => "max_dm_size", pci_atomic_caps => "pci_atomic_caps",
        xrc_odp_caps => "xrc_odp_caps", phys_port_cnt_ex => "phys_port_cnt_ex"]);
    report!(o, ibv_query_device_ex_input, "struct ibv_query_device_ex_input", [comp_mask => "comp_mask"]);
    report!(o, ibv_port_attr, "struct ibv_port_attr", [
        state => "state", max_mtu => "max_mtu", active_mtu => "active_mtu", gid_tbl_len => "gid_tbl_len",
        port_cap_flags => "port_cap_flags", max_msg_sz => "max_msg_sz", bad_pkey_cntr => "bad_pkey_cntr",
        qkey_viol_cntr => "qkey_viol_cntr", pkey_tbl_len => "pkey_tbl_len", lid => "lid",
        sm_lid => "sm_lid", lmc => "lmc", max_vl_num => "max_vl_num", sm_sl => "sm_sl",
        subnet_timeout => "subnet_timeout", init_type_reply => "init_type_reply",
        active_width => "active_width", active_speed => "active_speed", phys_state => "phys_state",
        link_layer => "link_layer", flags => "flags", port_cap_flags2 => "port_cap_flags2"]);
    report!(o, ibv_gid, "union ibv_gid", [
        raw => "raw", global.subnet_prefix => "global.subnet_prefix",
        global.interface_id => "global.interface_id"]);
    report!(o, ibv_gid_entry, "struct ibv_gid_entry", [
        gid => "gid", gid_index => "gid_index", port_num => "port_num", gid_type => "gid_type",
        ndev_ifindex => "ndev_ifindex"]);
    report!(o, ibv_pd, "struct ibv_pd", [context => "context", handle => "handle"]);
    report!(o, ibv_xrcd, "struct ibv_xrcd", [context => "context"]);
    report!(o, ibv_qp_open_attr, "struct ibv_qp_open_attr", [comp_mask => "comp_mask", qp_num => "qp_num",
        xrcd => "xrcd", qp_context => "qp_context", qp_type => "qp_type"]);
    report!(o, ibv_xrcd_init_attr, "struct ibv_xrcd_init_attr", [
        comp_mask => "comp_mask", fd => "fd", oflags => "oflags"]);
    report!(o, ibv_mr, "struct ibv_mr", [
        context => "context", pd => "pd", addr => "addr", length => "length", handle => "handle",
        lkey => "lkey", rkey => "rkey"]);
    report!(o, ibv_comp_channel, "struct ibv_comp_channel", [
        context => "context", fd => "fd", refcnt => "refcnt"]);
    report!(o, ibv_cq, "struct ibv_cq", [
        context => "context", channel => "channel", cq_context => "cq_context", handle => "handle",
        cqe => "cqe", mutex => "mutex", cond => "cond",
        comp_events_completed => "comp_events_completed",
        async_events_completed => "async_events_completed"]);
    report!(o, ibv_td_init_attr, "struct ibv_td_init_attr", [comp_mask => "comp_mask"]);
    report!(o, ibv_td, "struct ibv_td", [context => "context"]);
    report!(o, ibv_parent_domain_init_attr, "struct ibv_parent_domain_init_attr", [
        pd => "pd", td => "td", comp_mask => "comp_mask", alloc => "alloc", free => "free",
        pd_context => "pd_context"]);
    report!(o, ibv_dm, "struct ibv_dm", [
        context => "context", memcpy_to_dm => "memcpy_to_dm", memcpy_from_dm => "memcpy_from_dm",
        comp_mask => "comp_mask", handle => "handle"]);
    report!(o, ibv_alloc_dm_attr, "struct ibv_alloc_dm_attr", [
        length => "length", log_align_req => "log_align_req", comp_mask => "comp_mask"]);
    report!(o, ibv_values_ex, "struct ibv_values_ex", [comp_mask => "comp_mask", raw_clock => "raw_clock"]);
    report!(o, ibv_poll_cq_attr, "struct ibv_poll_cq_attr", [comp_mask => "comp_mask"]);
    report!(o, ibv_wc_tm_info, "struct ibv_wc_tm_info", [tag => "tag", priv_ => "priv"]);
    report!(o, ibv_cq_ex, "struct ibv_cq_ex", [
        context => "context", channel => "channel", cq_context => "cq_context", handle => "handle",
        cqe => "cqe", mutex => "mutex", cond => "cond",
        comp_events_completed => "comp_events_completed",
        async_events_completed => "async_events_completed", comp_mask => "comp_mask",
        status => "status", wr_id => "wr_id", start_poll => "start_poll", next_poll => "next_poll",
        end_poll => "end_poll", read_opcode => "read_opcode", read_vendor_err => "read_vendor_err",
        read_byte_len => "read_byte_len", read_imm_data => "read_imm_data",
        read_qp_num => "read_qp_num", read_src_qp => "read_src_qp", read_wc_flags => "read_wc_flags",
        read_slid => "read_slid", read_sl => "read_sl", read_dlid_path_bits => "read_dlid_path_bits",
        read_completion_ts => "read_completion_ts", read_cvlan => "read_cvlan",
        read_flow_tag => "read_flow_tag", read_tm_info => "read_tm_info",
        read_completion_wallclock_ns => "read_completion_wallclock_ns"]);
    report!(o, ibv_cq_init_attr_ex, "struct ibv_cq_init_attr_ex", [
        cqe => "cqe", cq_context => "cq_context", channel => "channel", comp_vector => "comp_vector",
        wc_flags => "wc_flags", comp_mask => "comp_mask", flags => "flags",
        parent_domain => "parent_domain"]);
    report!(o, ibv_srq, "struct ibv_srq", [
        context => "context", srq_context => "srq_context", pd => "pd", handle => "handle",
        mutex => "mutex", cond => "cond", events_completed => "events_completed"]);
    report!(o, ibv_srq_attr, "struct ibv_srq_attr", [
        max_wr => "max_wr", max_sge => "max_sge", srq_limit => "srq_limit"]);
    report!(o, ibv_srq_init_attr, "struct ibv_srq_init_attr", [srq_context => "srq_context", attr => "attr"]);
    report!(o, ibv_tm_cap, "struct ibv_tm_cap", [max_num_tags => "max_num_tags", max_ops => "max_ops"]);
    report!(o, ibv_srq_init_attr_ex, "struct ibv_srq_init_attr_ex", [
        srq_context => "srq_context", attr => "attr", comp_mask => "comp_mask", srq_type => "srq_type",
        pd => "pd", xrcd => "xrcd", cq => "cq", tm_cap => "tm_cap"]);
    report!(o, ibv_qp, "struct ibv_qp", [
        context => "context", qp_context => "qp_context", pd => "pd", send_cq => "send_cq",
        recv_cq => "recv_cq", srq => "srq", handle => "handle", qp_num => "qp_num", state => "state",
        qp_type => "qp_type", mutex => "mutex", cond => "cond", events_completed => "events_completed"]);
    report!(o, ibv_data_buf, "struct ibv_data_buf", [addr => "addr", length => "length"]);
    report!(o, ibv_qp_ex, "struct ibv_qp_ex", [
        qp_base => "qp_base", comp_mask => "comp_mask", wr_id => "wr_id", wr_flags => "wr_flags",
        wr_atomic_cmp_swp => "wr_atomic_cmp_swp", wr_atomic_fetch_add => "wr_atomic_fetch_add",
        wr_bind_mw => "wr_bind_mw", wr_local_inv => "wr_local_inv", wr_rdma_read => "wr_rdma_read",
        wr_rdma_write => "wr_rdma_write", wr_rdma_write_imm => "wr_rdma_write_imm",
        wr_send => "wr_send", wr_send_imm => "wr_send_imm", wr_send_inv => "wr_send_inv",
        wr_send_tso => "wr_send_tso", wr_set_ud_addr => "wr_set_ud_addr",
        wr_set_xrc_srqn => "wr_set_xrc_srqn", wr_set_inline_data => "wr_set_inline_data",
        wr_set_inline_data_list => "wr_set_inline_data_list", wr_set_sge => "wr_set_sge",
        wr_set_sge_list => "wr_set_sge_list", wr_start => "wr_start", wr_complete => "wr_complete",
        wr_abort => "wr_abort", wr_atomic_write => "wr_atomic_write"]);
    report!(o, ibv_qp_cap, "struct ibv_qp_cap", [
        max_send_wr => "max_send_wr", max_recv_wr => "max_recv_wr", max_send_sge => "max_send_sge",
        max_recv_sge => "max_recv_sge", max_inline_data => "max_inline_data"]);
    report!(o, ibv_global_route, "struct ibv_global_route", [
        dgid => "dgid", flow_label => "flow_label", sgid_index => "sgid_index",
        hop_limit => "hop_limit", traffic_class => "traffic_class"]);
    report!(o, ibv_ah_attr, "struct ibv_ah_attr", [
        grh => "grh", dlid => "dlid", sl => "sl", src_path_bits => "src_path_bits",
        static_rate => "static_rate", is_global => "is_global", port_num => "port_num"]);
    report!(o, ibv_qp_attr, "struct ibv_qp_attr", [
        qp_state => "qp_state", cur_qp_state => "cur_qp_state", path_mtu => "path_mtu",
        path_mig_state => "path_mig_state", qkey => "qkey", rq_psn => "rq_psn", sq_psn => "sq_psn",
        dest_qp_num => "dest_qp_num", qp_access_flags => "qp_access_flags", cap => "cap",
        ah_attr => "ah_attr", alt_ah_attr => "alt_ah_attr", pkey_index => "pkey_index",
        alt_pkey_index => "alt_pkey_index", en_sqd_async_notify => "en_sqd_async_notify",
        sq_draining => "sq_draining", max_rd_atomic => "max_rd_atomic",
        max_dest_rd_atomic => "max_dest_rd_atomic", min_rnr_timer => "min_rnr_timer",
        port_num => "port_num", timeout => "timeout", retry_cnt => "retry_cnt",
        rnr_retry => "rnr_retry", alt_port_num => "alt_port_num", alt_timeout => "alt_timeout",
        rate_limit => "rate_limit"]);
    report!(o, ibv_qp_init_attr, "struct ibv_qp_init_attr", [
        qp_context => "qp_context", send_cq => "send_cq", recv_cq => "recv_cq", srq => "srq",
        cap => "cap", qp_type => "qp_type", sq_sig_all => "sq_sig_all"]);
    report!(o, ibv_rx_hash_conf, "struct ibv_rx_hash_conf", [
        rx_hash_function => "rx_hash_function", rx_hash_key_len => "rx_hash_key_len",
        rx_hash_key => "rx_hash_key", rx_hash_fields_mask => "rx_hash_fields_mask"]);
    report!(o, ibv_qp_init_attr_ex, "struct ibv_qp_init_attr_ex", [
        qp_context => "qp_context", send_cq => "send_cq", recv_cq => "recv_cq", srq => "srq",
        cap => "cap", qp_type => "qp_type", sq_sig_all => "sq_sig_all", comp_mask => "comp_mask",
        pd => "pd", xrcd => "xrcd", create_flags => "create_flags",
        max_tso_header => "max_tso_header", rwq_ind_tbl => "rwq_ind_tbl",
        rx_hash_conf => "rx_hash_conf", source_qpn => "source_qpn",
        send_ops_flags => "send_ops_flags"]);
    report!(o, ibv_ah, "struct ibv_ah", [context => "context", pd => "pd", handle => "handle"]);
    report!(o, ibv_mw, "struct ibv_mw", [
        context => "context", pd => "pd", rkey => "rkey", handle => "handle", type_ => "type"]);
    report!(o, ibv_mw_bind_info, "struct ibv_mw_bind_info", [
        mr => "mr", addr => "addr", length => "length", mw_access_flags => "mw_access_flags"]);
    report!(o, ibv_mw_bind, "struct ibv_mw_bind", [
        wr_id => "wr_id", send_flags => "send_flags", bind_info => "bind_info"]);
    report!(o, ibv_sge, "struct ibv_sge", [addr => "addr", length => "length", lkey => "lkey"]);
    report!(o, ibv_send_wr, "struct ibv_send_wr", [
        wr_id => "wr_id", next => "next", sg_list => "sg_list", num_sge => "num_sge",
        opcode => "opcode", send_flags => "send_flags", imm.imm_data => "imm_data",
        imm.invalidate_rkey => "invalidate_rkey", wr => "wr",
        wr.rdma.remote_addr => "wr.rdma.remote_addr", wr.rdma.rkey => "wr.rdma.rkey",
        wr.atomic.remote_addr => "wr.atomic.remote_addr",
        wr.atomic.compare_add => "wr.atomic.compare_add", wr.atomic.swap => "wr.atomic.swap",
        wr.atomic.rkey => "wr.atomic.rkey", wr.ud.ah => "wr.ud.ah",
        wr.ud.remote_qpn => "wr.ud.remote_qpn", wr.ud.remote_qkey => "wr.ud.remote_qkey",
        qp_type => "qp_type", qp_type.xrc.remote_srqn => "qp_type.xrc.remote_srqn",
        ext.bind_mw => "bind_mw", ext.bind_mw.mw => "bind_mw.mw", ext.bind_mw.rkey => "bind_mw.rkey",
        ext.bind_mw.bind_info => "bind_mw.bind_info", ext.tso.hdr => "tso.hdr",
        ext.tso.hdr_sz => "tso.hdr_sz", ext.tso.mss => "tso.mss"]);
    report!(o, ibv_recv_wr, "struct ibv_recv_wr", [
        wr_id => "wr_id", next => "next", sg_list => "sg_list", num_sge => "num_sge"]);
    report!(o, ibv_wc, "struct ibv_wc", [
        wr_id => "wr_id", status => "status", opcode => "opcode", vendor_err => "vendor_err",
        byte_len => "byte_len", imm.imm_data => "imm_data",
        imm.invalidated_rkey => "invalidated_rkey", qp_num => "qp_num", src_qp => "src_qp",
        wc_flags => "wc_flags", pkey_index => "pkey_index", slid => "slid", sl => "sl",
        dlid_path_bits => "dlid_path_bits"]);
    report!(o, ibv_async_event, "struct ibv_async_event", [
        element => "element", element.cq => "element.cq", element.qp => "element.qp",
        element.srq => "element.srq", element.wq => "element.wq",
        element.port_num => "element.port_num", event_type => "event_type"]);
    report!(o, ibv_ece, "struct ibv_ece", [
        vendor_id => "vendor_id", options => "options", comp_mask => "comp_mask"]);
    report!(o, ibv_sa_path_rec, "struct ibv_sa_path_rec", [
        dgid => "dgid", sgid => "sgid", dlid => "dlid", slid => "slid", raw_traffic => "raw_traffic",
        flow_label => "flow_label", hop_limit => "hop_limit", traffic_class => "traffic_class",
        reversible => "reversible", numb_path => "numb_path", pkey => "pkey", sl => "sl",
        mtu_selector => "mtu_selector", mtu => "mtu", rate_selector => "rate_selector", rate => "rate",
        packet_life_time_selector => "packet_life_time_selector", packet_life_time => "packet_life_time",
        preference => "preference"]);
    for (name, value) in CONSTANTS {
        let _ = writeln!(o, "const {name} {value}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_has_the_anchor_facts_from_the_abi_report() {
        let r = layout_report();
        for line in [
            "type struct verbs_context size 648 align 8",
            "field struct verbs_context|context off 320 size 328",
            "field struct ibv_context|abi_compat off 320 size 8",
            "type struct ibv_cq_ex size 288 align 8",
            "type struct ibv_qp_ex size 352 align 8",
            "field struct ibv_qp_ex|wr_atomic_write off 344 size 8",
            "type struct ibv_send_wr size 128 align 8",
            "field struct ibv_send_wr|bind_mw.bind_info off 96 size 32",
            "type struct verbs_device size 712 align 8",
        ] {
            assert!(r.lines().any(|l| l == line), "missing: {line}");
        }
    }

    #[test]
    fn compat_port_attr_is_port_attr_without_cap_flags2() {
        assert_eq!(size_of::<_compat_ibv_port_attr>(), COMPAT_PORT_ATTR_SIZE);
        assert_eq!(std::mem::offset_of!(ibv_port_attr, port_cap_flags2), COMPAT_PORT_ATTR_SIZE);
    }
}
