//! An ID's path and its QP's attributes: the route librdmacm reports (GIDs, P_Key, one path
//! record), the AH toward the peer, the QP attributes for each state and the moves through
//! them, and the CM parameters of a connect or accept. A second `impl Lib` block.

use crate::abi::*;
use crate::core::*;
use crate::verbs::*;
use libc::c_int;
use std::net::{IpAddr, Ipv4Addr};
use std::ptr;

impl Lib {
    /// Fills `route` of an ID from its addresses and the device: GIDs, P_Key, one path record.
    pub fn fill_route(&mut self, id: IdKey) {
        // As librdmacm once an ID has a device: `pd` is the device's PD until a QP brings its own.
        let pd = self.shared_pd().unwrap_or(ptr::null_mut());
        let (Some(dev), Some(st)) = (self.dev.as_ref(), self.ids.get_mut(&id)) else { return };
        // SAFETY: `st.c` is the live ID box of `id` (it is in `ids`); only this library writes
        // its route.
        let c = unsafe { &mut *st.c };
        if let Some(s) = st.src {
            store_sockaddr(&mut c.route.addr.src_storage, s);
        }
        c.route.addr.ibaddr.sgid = ibv_gid { raw: dev.gid };
        c.route.addr.ibaddr.pkey = 0xFFFFu16.to_be();
        if let Some(d) = st.dst {
            store_sockaddr(&mut c.route.addr.dst_storage, d);
            c.route.addr.ibaddr.dgid = ibv_gid { raw: gid_of(d.ip()) };
            if st.path_rec.is_null() {
                st.path_rec = Box::into_raw(Box::new(ibv_sa_path_rec::default()));
            }
            let sport = st.src.map_or(0, |s| s.port());
            // SAFETY: our own boxed path record.
            let p = unsafe { &mut *st.path_rec };
            *p = ibv_sa_path_rec {
                dgid: ibv_gid { raw: gid_of(d.ip()) },
                sgid: ibv_gid { raw: dev.gid },
                dlid: 0xFFFFu16.to_be(),
                slid: 0xFFFFu16.to_be(),
                raw_traffic: 0,
                flow_label: flow_label(sport, d.port()).to_be(),
                hop_limit: HOP_LIMIT,
                traffic_class: st.tos,
                reversible: 1,
                numb_path: 1,
                pkey: 0xFFFFu16.to_be(),
                sl: 0,
                mtu_selector: 2,
                mtu: dev.active_mtu,
                rate_selector: 2,
                rate: 0,
                packet_life_time_selector: 2,
                packet_life_time: PACKET_LIFE_TIME,
                preference: 0,
            };
            c.route.path_rec = st.path_rec;
            c.route.num_paths = 1;
        }
        c.port_num = 1;
        c.verbs = dev.ctx;
        if c.pd.is_null() {
            c.pd = pd;
        }
    }

    pub fn ah_to_peer(&self, id: IdKey) -> ibv_ah_attr {
        let st = &self.ids[&id];
        let dst = st.dst.map(|d| d.ip()).unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let flow = flow_label(st.src.map_or(0, |s| s.port()), st.dst.map_or(0, |d| d.port()));
        ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid { raw: gid_of(dst) },
                flow_label: flow,
                sgid_index: 0,
                hop_limit: HOP_LIMIT,
                traffic_class: st.tos,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: 1,
        }
    }

    /// The attributes of `state` for an ID's QP (`rdma_init_qp_attr` and our own transitions).
    pub fn qp_attr(&self, id: IdKey, state: u32) -> Result<(ibv_qp_attr, c_int), i32> {
        let st = self.ids.get(&id).ok_or(libc::EINVAL)?;
        let mut a = ibv_qp_attr { qp_state: state, ..Default::default() };
        let ud = st.qp_type == qp_type::UD;
        let m = match state {
            qp_state::INIT => {
                a.pkey_index = 0;
                a.port_num = 1;
                if ud {
                    a.qkey = RDMA_UDP_QKEY;
                    mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::QKEY
                } else {
                    a.qp_access_flags = access::LOCAL_WRITE | access::REMOTE_WRITE;
                    if st.agreed.responder_resources > 0 || st.state == IdState::Idle {
                        a.qp_access_flags |= access::REMOTE_READ | access::REMOTE_ATOMIC;
                    }
                    mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS
                }
            }
            qp_state::RTR if ud => mask::STATE,
            qp_state::RTR => {
                a.path_mtu = u32::from(st.agreed.path_mtu.max(1));
                a.dest_qp_num = st.agreed.remote_qpn;
                a.rq_psn = st.agreed.local_psn;
                a.max_dest_rd_atomic = st.agreed.responder_resources;
                a.min_rnr_timer = 12;
                a.ah_attr = self.ah_to_peer(id);
                mask::STATE
                    | mask::AV
                    | mask::PATH_MTU
                    | mask::DEST_QPN
                    | mask::RQ_PSN
                    | mask::MAX_DEST_RD_ATOMIC
                    | mask::MIN_RNR_TIMER
            }
            qp_state::RTS if ud => {
                a.sq_psn = 0;
                mask::STATE | mask::SQ_PSN
            }
            qp_state::RTS => {
                a.sq_psn = st.agreed.remote_psn;
                a.timeout = st.ack_timeout.unwrap_or(PACKET_LIFE_TIME + 1);
                a.retry_cnt = st.agreed.retry_count;
                a.rnr_retry = st.agreed.rnr_retry_count;
                a.max_rd_atomic = st.agreed.initiator_depth;
                mask::STATE | mask::SQ_PSN | mask::TIMEOUT | mask::RETRY_CNT | mask::RNR_RETRY | mask::MAX_QP_RD_ATOMIC
            }
            qp_state::ERR => mask::STATE,
            _ => return Err(libc::EINVAL),
        };
        Ok((a, m))
    }

    pub fn modify(&self, id: IdKey, state: u32) -> Result<(), i32> {
        let c = self.id_ptr(id);
        if c.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: `c` is the live ID box of `id` (it is in `ids`).
        let qp = unsafe { (*c).qp };
        if qp.is_null() {
            return Err(libc::EINVAL);
        }
        let (mut a, m) = self.qp_attr(id, state)?;
        // SAFETY: a QP this ID owns; attr is ours.
        match unsafe { ibv_modify_qp(qp, &mut a, m) } {
            0 => Ok(()),
            e if e > 0 => Err(e),
            _ => Err(libc::EINVAL),
        }
    }

    /// RTR then RTS with the agreed values (RC/UC: INIT again first, for the access flags).
    pub fn qp_to_rts(&self, id: IdKey) -> Result<(), i32> {
        self.modify(id, qp_state::INIT)?;
        self.modify(id, qp_state::RTR)?;
        let uc = self.ids.get(&id).is_some_and(|s| s.qp_type == qp_type::UC);
        if uc {
            // SAFETY: a live ID box with a QP (modify succeeded, so `id` is in `ids`).
            let qp = unsafe { (*self.id_ptr(id)).qp };
            let mut a =
                ibv_qp_attr { qp_state: qp_state::RTS, sq_psn: self.ids[&id].agreed.remote_psn, ..Default::default() };
            // SAFETY: as above.
            let r = unsafe { ibv_modify_qp(qp, &mut a, mask::STATE | mask::SQ_PSN) };
            return if r == 0 { Ok(()) } else { Err(r.max(libc::EINVAL)) };
        }
        self.modify(id, qp_state::RTS)
    }

    pub fn qp_to_err(&self, id: IdKey) {
        let c = self.id_ptr(id);
        // SAFETY: a non-NULL `c` is the live ID box of `id` (it is in `ids`).
        if !c.is_null() && !unsafe { (*c).qp }.is_null() {
            let _ = self.modify(id, qp_state::ERR);
        }
    }
}
