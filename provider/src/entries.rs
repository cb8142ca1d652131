//! Provider layer: THE entry-point table. Every C symbol libibverbs.so.1 exports, with the
//! version node it is bound to (`name@@VERSION`). `provider/build.sh` generates the linker
//! version script from this table ([`version_script`]); `tests/abi_symbols.rs` checks that the
//! built library exports exactly this set and that it equals Debian rdma-core 44's default
//! exports (tests/data/symbols-libibverbs.txt).
//!
//! Adding an export = one `export!` definition + one line here.

/// `(symbol, version node)`, grouped by node.
pub const ENTRY_POINTS: &[(&str, &str)] = &[
    ("ibv_copy_path_rec_from_kern", "IBVERBS_1.0"),
    ("ibv_copy_path_rec_to_kern", "IBVERBS_1.0"),
    ("ibv_copy_qp_attr_from_kern", "IBVERBS_1.0"),
    ("ibv_create_comp_channel", "IBVERBS_1.0"),
    ("ibv_destroy_comp_channel", "IBVERBS_1.0"),
    ("ibv_get_sysfs_path", "IBVERBS_1.0"),
    ("ibv_rate_to_mult", "IBVERBS_1.0"),
    ("ibv_read_sysfs_file", "IBVERBS_1.0"),
    ("mult_to_ibv_rate", "IBVERBS_1.0"),
    ("ibv_ack_async_event", "IBVERBS_1.1"),
    ("ibv_ack_cq_events", "IBVERBS_1.1"),
    ("ibv_alloc_pd", "IBVERBS_1.1"),
    ("ibv_attach_mcast", "IBVERBS_1.1"),
    ("ibv_close_device", "IBVERBS_1.1"),
    ("ibv_copy_ah_attr_from_kern", "IBVERBS_1.1"),
    ("ibv_create_ah", "IBVERBS_1.1"),
    ("ibv_create_ah_from_wc", "IBVERBS_1.1"),
    ("ibv_create_cq", "IBVERBS_1.1"),
    ("ibv_create_qp", "IBVERBS_1.1"),
    ("ibv_create_srq", "IBVERBS_1.1"),
    ("ibv_dealloc_pd", "IBVERBS_1.1"),
    ("ibv_dereg_mr", "IBVERBS_1.1"),
    ("ibv_destroy_ah", "IBVERBS_1.1"),
    ("ibv_destroy_cq", "IBVERBS_1.1"),
    ("ibv_destroy_qp", "IBVERBS_1.1"),
    ("ibv_destroy_srq", "IBVERBS_1.1"),
    ("ibv_detach_mcast", "IBVERBS_1.1"),
    ("ibv_dofork_range", "IBVERBS_1.1"),
    ("ibv_dontfork_range", "IBVERBS_1.1"),
    ("ibv_event_type_str", "IBVERBS_1.1"),
    ("ibv_fork_init", "IBVERBS_1.1"),
    ("ibv_free_device_list", "IBVERBS_1.1"),
    ("ibv_get_async_event", "IBVERBS_1.1"),
    ("ibv_get_cq_event", "IBVERBS_1.1"),
    ("ibv_get_device_guid", "IBVERBS_1.1"),
    ("ibv_get_device_list", "IBVERBS_1.1"),
    ("ibv_get_device_name", "IBVERBS_1.1"),
    ("ibv_init_ah_from_wc", "IBVERBS_1.1"),
    ("ibv_modify_qp", "IBVERBS_1.1"),
    ("ibv_modify_srq", "IBVERBS_1.1"),
    ("ibv_node_type_str", "IBVERBS_1.1"),
    ("ibv_open_device", "IBVERBS_1.1"),
    ("ibv_port_state_str", "IBVERBS_1.1"),
    ("ibv_query_device", "IBVERBS_1.1"),
    ("ibv_query_gid", "IBVERBS_1.1"),
    ("ibv_query_pkey", "IBVERBS_1.1"),
    ("ibv_query_port", "IBVERBS_1.1"),
    ("ibv_query_qp", "IBVERBS_1.1"),
    ("ibv_query_srq", "IBVERBS_1.1"),
    ("ibv_rate_to_mbps", "IBVERBS_1.1"),
    ("ibv_reg_mr", "IBVERBS_1.1"),
    ("ibv_rereg_mr", "IBVERBS_1.1"),
    ("ibv_resize_cq", "IBVERBS_1.1"),
    ("ibv_resolve_eth_l2_from_gid", "IBVERBS_1.1"),
    ("ibv_wc_status_str", "IBVERBS_1.1"),
    ("mbps_to_ibv_rate", "IBVERBS_1.1"),
    ("ibv_import_device", "IBVERBS_1.10"),
    ("ibv_import_mr", "IBVERBS_1.10"),
    ("ibv_import_pd", "IBVERBS_1.10"),
    ("ibv_query_ece", "IBVERBS_1.10"),
    ("ibv_set_ece", "IBVERBS_1.10"),
    ("ibv_unimport_mr", "IBVERBS_1.10"),
    ("ibv_unimport_pd", "IBVERBS_1.10"),
    ("_ibv_query_gid_ex", "IBVERBS_1.11"),
    ("_ibv_query_gid_table", "IBVERBS_1.11"),
    ("ibv_reg_dmabuf_mr", "IBVERBS_1.12"),
    ("ibv_import_dm", "IBVERBS_1.13"),
    ("ibv_is_fork_initialized", "IBVERBS_1.13"),
    ("ibv_unimport_dm", "IBVERBS_1.13"),
    ("ibv_query_qp_data_in_order", "IBVERBS_1.14"),
    ("ibv_get_pkey_index", "IBVERBS_1.5"),
    ("ibv_qp_to_qp_ex", "IBVERBS_1.6"),
    ("ibv_reg_mr_iova", "IBVERBS_1.7"),
    ("ibv_reg_mr_iova2", "IBVERBS_1.8"),
    ("ibv_get_device_index", "IBVERBS_1.9"),
    ("__ioctl_final_num_attrs", "IBVERBS_PRIVATE_34"),
    ("__verbs_log", "IBVERBS_PRIVATE_34"),
    ("_verbs_init_and_alloc_context", "IBVERBS_PRIVATE_34"),
    ("execute_ioctl", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_advise_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_alloc_dm", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_alloc_mw", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_alloc_pd", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_attach_mcast", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_close_xrcd", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_ah", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_counters", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_cq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_cq_ex", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_cq_ex2", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_flow", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_flow_action_esp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_qp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_qp_ex", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_qp_ex2", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_rwq_ind_table", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_srq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_srq_ex", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_create_wq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_dealloc_mw", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_dealloc_pd", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_dereg_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_ah", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_counters", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_cq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_flow", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_flow_action", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_qp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_rwq_ind_table", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_srq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_destroy_wq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_detach_mcast", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_free_dm", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_get_context", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_modify_cq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_modify_flow_action_esp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_modify_qp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_modify_qp_ex", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_modify_srq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_modify_wq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_open_qp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_open_xrcd", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_poll_cq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_post_recv", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_post_send", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_post_srq_recv", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_query_context", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_query_device", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_query_device_any", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_query_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_query_port", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_query_qp", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_query_srq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_read_counters", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_reg_dm_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_reg_dmabuf_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_reg_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_req_notify_cq", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_rereg_mr", "IBVERBS_PRIVATE_34"),
    ("ibv_cmd_resize_cq", "IBVERBS_PRIVATE_34"),
    ("ibv_query_gid_type", "IBVERBS_PRIVATE_34"),
    ("ibv_read_ibdev_sysfs_file", "IBVERBS_PRIVATE_34"),
    ("ibv_wr_opcode_str", "IBVERBS_PRIVATE_34"),
    ("verbs_allow_disassociate_destroy", "IBVERBS_PRIVATE_34"),
    ("verbs_init_cq", "IBVERBS_PRIVATE_34"),
    ("verbs_open_device", "IBVERBS_PRIVATE_34"),
    ("verbs_register_driver_34", "IBVERBS_PRIVATE_34"),
    ("verbs_set_ops", "IBVERBS_PRIVATE_34"),
    ("verbs_uninit_context", "IBVERBS_PRIVATE_34"),
    // urxe's own: the GSI calls librdmacm.so.1 uses (provider/src/gsi.rs).
    ("urxe_gsi_comm_id_base", "URXE_PRIVATE_1"),
    ("urxe_gsi_fd", "URXE_PRIVATE_1"),
    ("urxe_gsi_listen", "URXE_PRIVATE_1"),
    ("urxe_gsi_recv", "URXE_PRIVATE_1"),
    ("urxe_gsi_send", "URXE_PRIVATE_1"),
    ("urxe_gsi_unlisten", "URXE_PRIVATE_1"),
    ("urxe_gsi_cm_counters", "URXE_PRIVATE_1"),
    ("urxe_gsi_fault_note", "URXE_PRIVATE_1"),
];

/// `(symbol, non-default version node)` of every entry defined here.
pub const COMPAT_ENTRIES: &[(&str, &str)] = &[
    ("ibv_ack_async_event", "IBVERBS_1.0"),
    ("ibv_ack_cq_events", "IBVERBS_1.0"),
    ("ibv_alloc_pd", "IBVERBS_1.0"),
    ("ibv_attach_mcast", "IBVERBS_1.0"),
    ("ibv_close_device", "IBVERBS_1.0"),
    ("ibv_create_ah", "IBVERBS_1.0"),
    ("ibv_create_cq", "IBVERBS_1.0"),
    ("ibv_create_qp", "IBVERBS_1.0"),
    ("ibv_create_srq", "IBVERBS_1.0"),
    ("ibv_dealloc_pd", "IBVERBS_1.0"),
    ("ibv_dereg_mr", "IBVERBS_1.0"),
    ("ibv_destroy_ah", "IBVERBS_1.0"),
    ("ibv_destroy_cq", "IBVERBS_1.0"),
    ("ibv_destroy_qp", "IBVERBS_1.0"),
    ("ibv_destroy_srq", "IBVERBS_1.0"),
    ("ibv_detach_mcast", "IBVERBS_1.0"),
    ("ibv_free_device_list", "IBVERBS_1.0"),
    ("ibv_get_async_event", "IBVERBS_1.0"),
    ("ibv_get_cq_event", "IBVERBS_1.0"),
    ("ibv_get_device_guid", "IBVERBS_1.0"),
    ("ibv_get_device_list", "IBVERBS_1.0"),
    ("ibv_get_device_name", "IBVERBS_1.0"),
    ("ibv_modify_qp", "IBVERBS_1.0"),
    ("ibv_modify_srq", "IBVERBS_1.0"),
    ("ibv_open_device", "IBVERBS_1.0"),
    ("ibv_query_device", "IBVERBS_1.0"),
    ("ibv_query_gid", "IBVERBS_1.0"),
    ("ibv_query_pkey", "IBVERBS_1.0"),
    ("ibv_query_port", "IBVERBS_1.0"),
    ("ibv_query_qp", "IBVERBS_1.0"),
    ("ibv_query_srq", "IBVERBS_1.0"),
    ("ibv_reg_mr", "IBVERBS_1.0"),
    ("ibv_register_driver", "IBVERBS_1.1"),
    ("ibv_resize_cq", "IBVERBS_1.0"),
];

/// The `objcopy --redefine-syms` lines provider/build.sh applies to the archive: each name that
/// also has a `@IBVERBS_1.0` compat entry gets its default version by name (`name@@NODE`, the
/// node of [`ENTRY_POINTS`]), as rdma-core's own `.symver` does; a plain definition would take
/// the name from the compat entry.
pub fn default_renames() -> String {
    let mut s = String::new();
    for (name, node) in COMPAT_ENTRIES.iter().filter(|(_, n)| *n == "IBVERBS_1.0") {
        let (_, default) = ENTRY_POINTS.iter().find(|(n, _)| n == name).expect("compat name without a default");
        debug_assert!(*default != *node);
        s.push_str(&format!("{name} {name}@@{default}\n"));
    }
    s
}

/// Version nodes in the order rdma-core defines them; each 1.x node inherits the previous one.
/// IBVERBS_PRIVATE_34 and urxe's URXE_PRIVATE_1 stand alone.
pub const VERSION_NODES: &[&str] = &[
    "IBVERBS_1.0",
    "IBVERBS_1.1",
    "IBVERBS_1.5",
    "IBVERBS_1.6",
    "IBVERBS_1.7",
    "IBVERBS_1.8",
    "IBVERBS_1.9",
    "IBVERBS_1.10",
    "IBVERBS_1.11",
    "IBVERBS_1.12",
    "IBVERBS_1.13",
    "IBVERBS_1.14",
    "IBVERBS_PRIVATE_34",
    "URXE_PRIVATE_1",
];

/// The GNU ld version script for [`ENTRY_POINTS`]: every listed symbol global in its node,
/// everything else (all of Rust's std and the engine) local.
pub fn version_script() -> String {
    let mut s = String::from("/* generated from provider/src/entries.rs by provider/build.sh */\n");
    let mut prev: Option<&str> = None;
    for (i, node) in VERSION_NODES.iter().enumerate() {
        s.push_str(node);
        s.push_str(" {\n  global:\n");
        let compat = COMPAT_ENTRIES.iter().filter(|(_, v)| v == node && *node == "IBVERBS_1.0");
        for (name, _) in ENTRY_POINTS.iter().filter(|(_, v)| v == node).chain(compat) {
            s.push_str("    ");
            s.push_str(name);
            s.push_str(";\n");
        }
        if i == 0 {
            s.push_str("  local: *;\n");
        }
        s.push('}');
        match prev {
            Some(p) if node.starts_with("IBVERBS_1.") => {
                s.push(' ');
                s.push_str(p);
            }
            _ => {}
        }
        s.push_str(";\n");
        if node.starts_with("IBVERBS_1.") {
            prev = Some(node);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_entry_uses_a_known_node_and_names_are_unique() {
        let mut seen = HashSet::new();
        for (name, node) in ENTRY_POINTS {
            assert!(VERSION_NODES.contains(node), "{name}: unknown node {node}");
            assert!(seen.insert(*name), "{name} listed twice");
        }
        assert_eq!(ENTRY_POINTS.len(), 157);
    }

    #[test]
    fn version_script_puts_each_symbol_in_its_node() {
        let s = version_script();
        let ver = s.find("IBVERBS_1.14 {").unwrap();
        let sym = s.find("ibv_query_qp_data_in_order;").unwrap();
        assert!(sym > ver);
        assert!(s.contains("} IBVERBS_1.13;"));
        assert!(s.contains("local: *;"));
        assert!(s.matches(';').count() >= ENTRY_POINTS.len());
    }
}
