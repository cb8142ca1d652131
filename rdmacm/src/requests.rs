//! Connection requests on a listener: the new ID and its CONNECT_REQUEST, the listener's
//! backlog (how many CONNECT_REQUESTs it holds undelivered: the kernel's ucma takes
//! `rdma_listen`'s backlog, at most [`crate::core::MAX_BACKLOG`]; beyond it
//! `urxe::cm::Cm::refuse_request`), what happens to a request the CM releases unanswered, and
//! the CM's counters handed to `urxe stat`.

use crate::abi::*;
use crate::core::*;
use std::net::{IpAddr, SocketAddr};
use std::ptr;
use urxe::cm::rdma_id::parse_request;
use urxe::cm::{reject, sidr_status, CommId, ReqInfo};

impl Lib {
    /// The CONNECT_REQUEST of `child` left its listener's channel (delivered, or dropped with
    /// the child): the listener's backlog has room for one more.
    pub fn request_taken(&mut self, child: IdKey) {
        let Some(l) = self.ids.get_mut(&child).map(|c| std::mem::take(&mut c.request_of)) else { return };
        if let Some(l) = self.ids.get_mut(&l) {
            l.pending = l.pending.saturating_sub(1);
        }
    }

    /// Whether `listen` holds as many undelivered CONNECT_REQUESTs as its backlog allows.
    pub(crate) fn backlog_full(&self, listen: IdKey) -> bool {
        self.ids.get(&listen).is_some_and(|l| l.pending >= l.backlog)
    }

    /// A request the CM gave up on (its requester stopped waiting): if the application has not
    /// taken its CONNECT_REQUEST yet, the event and the new ID go as if they had never been;
    /// otherwise the ID gets UNREACHABLE (ETIMEDOUT), as the kernel's CMA reports a passive
    /// connection that timed out.
    pub(crate) fn on_request_expired(&mut self, comm_id: CommId) {
        let Some(id) = self.forget_comm(comm_id) else { return };
        let Some(st) = self.ids.get(&id) else { return };
        if st.request_of == 0 {
            self.set_state(id, IdState::Disconnected);
            self.post(id, 0, crate::abi::event::UNREACHABLE, -libc::ETIMEDOUT, |_| {});
            return;
        }
        self.request_taken(id);
        let c = self.id_ptr(id);
        for ch in self.channels_mut() {
            drop(ch.retain(|b| b.ev.id != c));
        }
        let Some(st) = self.remove_id(id) else { return };
        if st.sync {
            self.free_channel(st.channel);
        }
        if !st.path_rec.is_null() {
            // SAFETY: the child's own boxed path record; nothing else refers to it (its
            // CONNECT_REQUEST, the one event that did, is gone).
            drop(unsafe { Box::from_raw(st.path_rec) });
        }
        // SAFETY: the ID box came from new_id_box in `child`, the application never saw it,
        // and it is in no map any more.
        drop(unsafe { Box::from_raw(st.c) });
    }

    /// Hands the CM's counters, and the CM faults injected, to the device's `urxe stat` when
    /// they changed.
    pub(crate) fn report_counters(&mut self) {
        let (Some(cm), Some(dev)) = (self.cm.as_ref(), self.dev.as_ref()) else { return };
        let c = cm.counters();
        let faults = crate::faults::unreported_counts();
        if c == self.reported && faults.is_none() {
            return;
        }
        self.reported = c;
        if let Some(f) = dev.gsi.counters {
            let faults = faults.unwrap_or_else(crate::faults::counts);
            let mut v = [0u64; urxe::observe::cmstat::CM_VALUES];
            for (d, s) in v.iter_mut().zip(c.named().map(|(_, v)| v).into_iter().chain(faults)) {
                *d = s;
            }
            // SAFETY: `v` is a live array of `v.len()` u64s for the call (verbs::GsiApi).
            unsafe { f(v.as_ptr(), v.len() as u32) };
        }
    }

    /// A child ID for a request on `listen`: same channel (or a private one for a synchronous
    /// listener), context, port space; route filled from the request.
    fn child(&mut self, listen: IdKey, local: SocketAddr, remote: SocketAddr) -> Result<IdKey, i32> {
        let (ps, sync, lch, lc) = {
            let l = self.ids.get(&listen).ok_or(libc::EINVAL)?;
            (l.ps, l.sync, l.channel, l.c)
        };
        let ch = if sync { self.new_channel()? as usize } else { lch };
        // SAFETY: `lc` is the live ID box of `listen` (it is in `ids`).
        let context = unsafe { (*lc).context };
        let ctx = self.ctx();
        let b = new_id_box(ch as *mut rdma_event_channel, context, ps, ctx);
        let mut st = Id::new(ps, ch, sync);
        st.src = Some(local);
        st.dst = Some(remote);
        st.state = IdState::RequestReceived;
        let key = self.insert_id(b, st);
        self.fill_route(key);
        Ok(key)
    }

    pub(crate) fn on_req(&mut self, comm_id: CommId, peer: IpAddr, req: &ReqInfo) {
        let listen = self.listener(req.service_id);
        let dev = self.dev.as_ref().map(|d| d.addr);
        let addrs = parse_request(&req.private_data, peer, req.service_id, dev);
        let (Some(listen), Ok(addrs)) = (listen, addrs) else {
            let _ = self.cm.as_mut().map(|cm| cm.reject(comm_id, reject::CONSUMER_DEFINED, &[]));
            return;
        };
        if let Some(r) = crate::faults::reject(self.ids.get(&listen).map_or(u64::MAX, |l| l.created)) {
            let _ = self.cm.as_mut().map(|cm| cm.reject(comm_id, r, &[]));
            return;
        }
        if self.backlog_full(listen) {
            let _ = self.cm.as_mut().map(|cm| cm.refuse_request(comm_id));
            return;
        }
        // The path MTU: the REQ's, as the kernel's passive side keeps it (its QP's RTR takes the
        // REQ's path record). A REQ larger than our interface carries is refused with REJ 26
        // (invalid path MTU): the peer would send packets our link drops, and the REP has no
        // field to tell it a smaller one.
        let own_mtu = self.dev.as_ref().map_or(3, |d| d.active_mtu);
        let mtu = req.path_mtu.max(1);
        if mtu > own_mtu {
            let _ = self.cm.as_mut().map(|cm| cm.reject(comm_id, reject::INVALID_MTU, &[]));
            return;
        }
        let pdata = addrs.user.to_vec();
        let Ok(id) = self.child(listen, addrs.local, addrs.remote) else {
            let _ = self.cm.as_mut().map(|cm| cm.reject(comm_id, reject::NO_RESOURCES, &[]));
            return;
        };
        // The PSN we expect to receive first: random, as the kernel's CMA picks it.
        let local_psn = self.psn();
        if let Some(st) = self.ids.get_mut(&id) {
            st.comm = Some(comm_id);
            st.agreed = Agreed {
                remote_qpn: req.remote_qpn,
                remote_psn: req.starting_psn,
                local_psn,
                responder_resources: req.initiator_depth,
                initiator_depth: req.responder_resources,
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
                path_mtu: mtu,
            };
        }
        self.set_comm_owner(comm_id, id);
        let mut conn = conn_param(&self.ids[&id].agreed, req.srq);
        conn.responder_resources = req.responder_resources;
        conn.initiator_depth = req.initiator_depth;
        self.post(id, listen, crate::abi::event::CONNECT_REQUEST, 0, |b| {
            b.ev.param.conn = conn;
            b.private_data = pdata;
        });
        // The kernel's CMA asks for time while its user decides (CMA_CM_MRA_SETTING).
        let _ = self.cm.as_mut().map(|cm| cm.send_mra(now(), comm_id, MRA_SERVICE_TIMEOUT));
    }

    pub(crate) fn on_sidr_req(&mut self, request_id: CommId, peer: IpAddr, service_id: u64, pdata: Vec<u8>) {
        let listen = self.listener(service_id);
        let dev = self.dev.as_ref().map(|d| d.addr);
        let addrs = parse_request(&pdata, peer, service_id, dev);
        let (Some(listen), Ok(addrs)) = (listen, addrs) else {
            let _ = self.cm.as_mut().map(|cm| cm.send_sidr_rep(request_id, sidr_status::REJECTED, 0, 0, &[]));
            return;
        };
        if self.backlog_full(listen) {
            let _ = self.cm.as_mut().map(|cm| cm.refuse_request(request_id));
            return;
        }
        let rest = addrs.user.to_vec();
        let Ok(id) = self.child(listen, addrs.local, addrs.remote) else {
            let _ = self.cm.as_mut().map(|cm| cm.send_sidr_rep(request_id, sidr_status::NO_QP, 0, 0, &[]));
            return;
        };
        if let Some(st) = self.ids.get_mut(&id) {
            st.comm = Some(request_id);
        }
        self.set_comm_owner(request_id, id);
        let ah = self.ah_to_peer(id);
        self.post(id, listen, crate::abi::event::CONNECT_REQUEST, 0, |b| {
            b.ev.param.ud =
                rdma_ud_param { private_data: ptr::null(), private_data_len: 0, ah_attr: ah, qp_num: 0, qkey: 0 };
            b.private_data = rest;
        });
    }
}
