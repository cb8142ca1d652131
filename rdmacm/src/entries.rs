//! THE entry-point table of librdmacm.so.1: every exported symbol with its version node, as
//! Debian rdma-core 44 exports them. rdmacm/build.sh generates the linker version script from
//! it ([`version_script`]); tests/rdmacm_symbols.rs checks the built library against it and
//! against tests/data/symbols-librdmacm.txt.

/// `(symbol, version node)`.
pub const ENTRY_POINTS: &[(&str, &str)] = &[
    ("raccept", "RDMACM_1.0"),
    ("rbind", "RDMACM_1.0"),
    ("rclose", "RDMACM_1.0"),
    ("rconnect", "RDMACM_1.0"),
    ("rdma_accept", "RDMACM_1.0"),
    ("rdma_ack_cm_event", "RDMACM_1.0"),
    ("rdma_bind_addr", "RDMACM_1.0"),
    ("rdma_connect", "RDMACM_1.0"),
    ("rdma_create_ep", "RDMACM_1.0"),
    ("rdma_create_event_channel", "RDMACM_1.0"),
    ("rdma_create_id", "RDMACM_1.0"),
    ("rdma_create_qp", "RDMACM_1.0"),
    ("rdma_create_qp_ex", "RDMACM_1.0"),
    ("rdma_create_srq", "RDMACM_1.0"),
    ("rdma_create_srq_ex", "RDMACM_1.0"),
    ("rdma_destroy_ep", "RDMACM_1.0"),
    ("rdma_destroy_event_channel", "RDMACM_1.0"),
    ("rdma_destroy_id", "RDMACM_1.0"),
    ("rdma_destroy_qp", "RDMACM_1.0"),
    ("rdma_destroy_srq", "RDMACM_1.0"),
    ("rdma_disconnect", "RDMACM_1.0"),
    ("rdma_event_str", "RDMACM_1.0"),
    ("rdma_free_devices", "RDMACM_1.0"),
    ("rdma_freeaddrinfo", "RDMACM_1.0"),
    ("rdma_get_cm_event", "RDMACM_1.0"),
    ("rdma_get_devices", "RDMACM_1.0"),
    ("rdma_get_dst_port", "RDMACM_1.0"),
    ("rdma_get_request", "RDMACM_1.0"),
    ("rdma_get_src_port", "RDMACM_1.0"),
    ("rdma_getaddrinfo", "RDMACM_1.0"),
    ("rdma_join_multicast", "RDMACM_1.0"),
    ("rdma_leave_multicast", "RDMACM_1.0"),
    ("rdma_listen", "RDMACM_1.0"),
    ("rdma_migrate_id", "RDMACM_1.0"),
    ("rdma_notify", "RDMACM_1.0"),
    ("rdma_reject", "RDMACM_1.0"),
    ("rdma_resolve_addr", "RDMACM_1.0"),
    ("rdma_resolve_route", "RDMACM_1.0"),
    ("rdma_set_option", "RDMACM_1.0"),
    ("rfcntl", "RDMACM_1.0"),
    ("rgetpeername", "RDMACM_1.0"),
    ("rgetsockname", "RDMACM_1.0"),
    ("rgetsockopt", "RDMACM_1.0"),
    ("riomap", "RDMACM_1.0"),
    ("riounmap", "RDMACM_1.0"),
    ("riowrite", "RDMACM_1.0"),
    ("rlisten", "RDMACM_1.0"),
    ("rpoll", "RDMACM_1.0"),
    ("rread", "RDMACM_1.0"),
    ("rreadv", "RDMACM_1.0"),
    ("rrecv", "RDMACM_1.0"),
    ("rrecvfrom", "RDMACM_1.0"),
    ("rrecvmsg", "RDMACM_1.0"),
    ("rselect", "RDMACM_1.0"),
    ("rsend", "RDMACM_1.0"),
    ("rsendmsg", "RDMACM_1.0"),
    ("rsendto", "RDMACM_1.0"),
    ("rsetsockopt", "RDMACM_1.0"),
    ("rshutdown", "RDMACM_1.0"),
    ("rsocket", "RDMACM_1.0"),
    ("rwrite", "RDMACM_1.0"),
    ("rwritev", "RDMACM_1.0"),
    ("rdma_join_multicast_ex", "RDMACM_1.1"),
    ("rdma_establish", "RDMACM_1.2"),
    ("rdma_init_qp_attr", "RDMACM_1.2"),
    ("rdma_get_remote_ece", "RDMACM_1.3"),
    ("rdma_reject_ece", "RDMACM_1.3"),
    ("rdma_set_local_ece", "RDMACM_1.3"),
];

/// Version nodes in order; each inherits the previous one.
pub const VERSION_NODES: &[&str] = &["RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2", "RDMACM_1.3"];

/// The GNU ld version script for [`ENTRY_POINTS`]: every listed symbol global in its node,
/// everything else (Rust's std, urxe's CM) local.
pub fn version_script() -> String {
    let mut s = String::from("/* generated from rdmacm/src/entries.rs by rdmacm/build.sh */\n");
    for (i, node) in VERSION_NODES.iter().enumerate() {
        s.push_str(node);
        s.push_str(" {\n  global:\n");
        for (name, _) in ENTRY_POINTS.iter().filter(|(_, v)| v == node) {
            s.push_str(&format!("    {name};\n"));
        }
        if i == 0 {
            s.push_str("  local: *;\n}");
        } else {
            s.push_str(&format!("}} {}", VERSION_NODES[i - 1]));
        }
        s.push_str(";\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_debians_counts_per_node() {
        let count = |n: &str| ENTRY_POINTS.iter().filter(|(_, v)| *v == n).count();
        assert_eq!([count("RDMACM_1.0"), count("RDMACM_1.1"), count("RDMACM_1.2"), count("RDMACM_1.3")], [62, 1, 2, 3]);
        let mut names: Vec<_> = ENTRY_POINTS.iter().map(|(n, _)| n).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ENTRY_POINTS.len());
    }

    #[test]
    fn script_chains_the_nodes() {
        let s = version_script();
        assert!(s.contains("} RDMACM_1.2;"));
        assert!(s.find("RDMACM_1.3 {").unwrap() < s.find("rdma_set_local_ece;").unwrap());
    }
}
