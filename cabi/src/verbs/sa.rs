//! `<infiniband/sa.h>`: the subnet administrator's path record, which librdmacm hangs off
//! `rdma_route` (`rdma_cm_id.route.path_rec`).

use super::*;
use libc::c_int;

/// `struct ibv_sa_path_rec` (network byte order where the header says `__be`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}
