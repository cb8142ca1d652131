//! The CM's inputs: received MADs and timers, one handler per message.

use std::net::IpAddr;

use super::*;

impl Cm {
    // ---- inputs ---------------------------------------------------------------------------

    /// A MAD arrived on QP1 from `peer` (the IP source of its packet).
    pub fn handle_mad(&mut self, now: Nanos, peer: IpAddr, mad: &[u8]) {
        self.counters.mads_received += 1;
        let Ok((hdr, msg)) = CmMessage::parse(mad) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        // Every CM message is a SEND (IBTA 12.6): a GET, a SET or a response (method bit 7) to
        // the CM class is not a message to act on. The kernel's MAD layer never hands them to
        // its CM as SENDs.
        if hdr.method != crate::wire::mad::METHOD_SEND {
            self.counters.bad_method_dropped += 1;
            return;
        }
        let tid = hdr.transaction_id;
        match msg {
            CmMessage::Req(m) => self.on_req(now, peer, tid, &m),
            CmMessage::Mra(m) => self.on_mra(now, &m),
            CmMessage::Rej(m) => self.on_rej(now, &m),
            CmMessage::Rep(m) => self.on_rep(peer, tid, &m),
            CmMessage::Rtu(m) => self.on_rtu(&m),
            CmMessage::Dreq(m) => self.on_dreq(peer, tid, &m),
            CmMessage::Drep(m) => self.on_drep(now, &m),
            CmMessage::SidrReq(m) => self.on_sidr_req(now, peer, tid, &m),
            CmMessage::SidrRep(m) => self.on_sidr_rep(&m),
        }
    }

    /// Runs every timer due at `now`: retransmissions, give-ups, the end of timewait.
    pub fn handle_timeout(&mut self, now: Nanos) {
        // The timer index is ordered by deadline: only what is due is looked at. A timer armed
        // by a handler below is later than `now`, so the loop ends.
        while let Some(&(at, id)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            if self.conns.get(&id).is_some_and(|c| c.deadline == Some(at)) {
                self.on_timer(now, id);
            }
        }
    }

    // ---- receive handlers -----------------------------------------------------------------

    fn on_req(&mut self, now: Nanos, peer: IpAddr, tid: u64, m: &Req<'_>) {
        if let Some(&id) = self.by_remote.get(&(peer, m.local_comm_id)) {
            self.counters.duplicates_received += 1;
            self.answer_duplicate(id, &[State::MraReqSent, State::RepSent, State::MraRepRcvd]);
            // The requester is still waiting: so does its unanswered request.
            if let Some(c) = self.conns.get(&id).filter(|c| matches!(c.state, State::ReqRcvd | State::MraReqSent)) {
                let at = now + c.request_wait;
                self.set_deadline(id, Some(at));
            }
            if self.conns.get(&id).is_some_and(|c| c.state == State::Timewait) {
                let c = &self.conns[&id];
                let (tid, remote) = (c.tid, c.remote_comm_id);
                self.send_rej(peer, tid, id, remote, message_kind::REQ, reject::STALE_CONN, &[]);
            }
            return;
        }
        // A REQ naming a QP that already has a live connection with us is stale: refuse it and
        // end the old one (the kernel: REJ "stale connection" and a DREQ on the old).
        // Looked up in the index of remote QPs, not by a scan of every connection.
        let stale = self.by_qp.get(&(peer, m.local_qpn, m.local_ca_guid)).copied().filter(|id| {
            self.conns
                .get(id)
                .is_some_and(|c| matches!(c.state, State::Established | State::RepSent | State::MraRepRcvd))
        });
        if let Some(old) = stale {
            self.send_rej(peer, tid, 0, m.local_comm_id, message_kind::REQ, reject::STALE_CONN, &[]);
            if self.conns[&old].state == State::Established {
                let _ = self.disconnect(now, old, &[]);
            }
            return;
        }
        let Some(&qp) = self.listeners.get(&m.service_id) else {
            self.send_rej(peer, tid, 0, m.local_comm_id, message_kind::REQ, reject::INVALID_SERVICE_ID, &[]);
            return;
        };
        if m.transport_service_type > 1 {
            self.send_rej(peer, tid, 0, m.local_comm_id, message_kind::REQ, reject::INVALID_TRANSPORT_TYPE, &[]);
            return;
        }
        // The kernel's cma_check_req_qp_type: a listener takes requests for its own QP type
        // only; the kernel refuses the others with REJ "consumer defined".
        if !qp.takes_req(m.transport_service_type) {
            self.counters.qp_type_rejected += 1;
            self.send_rej(peer, tid, 0, m.local_comm_id, message_kind::REQ, reject::CONSUMER_DEFINED, &[]);
            return;
        }
        let Ok(id) = self.alloc_id() else {
            self.send_rej(peer, tid, 0, m.local_comm_id, message_kind::REQ, reject::NO_RESOURCES, &[]);
            return;
        };
        let mut c = Conn::new(State::ReqRcvd, peer, tid);
        c.remote_comm_id = m.local_comm_id;
        c.remote_qpn = m.local_qpn;
        c.remote_ca_guid = m.local_ca_guid;
        // Our REP waits for the peer's response time; each try as long as the peer said.
        c.retry_timeout =
            2 * cm_timeout_nanos(self.config.packet_life_time) + cm_timeout_nanos(m.local_cm_response_timeout);
        c.max_retries = m.max_cm_retries;
        c.retries_left = m.max_cm_retries;
        c.timewait = cm_timeout_nanos(m.primary.local_ack_timeout.max(self.config.packet_life_time));
        // Nobody waits for an answer longer than the requester: each of its 1 + max_cm_retries
        // tries waits 2 × packet life time + the response time it gives us. A request the
        // user has not answered by then is released (see on_timer).
        c.request_wait = (1 + u64::from(m.max_cm_retries))
            * (2 * cm_timeout_nanos(self.config.packet_life_time) + cm_timeout_nanos(m.remote_cm_response_timeout));
        let wait = c.request_wait;
        self.conns.insert(id, c);
        self.by_remote.insert((peer, m.local_comm_id), id);
        self.by_qp.insert((peer, m.local_qpn, m.local_ca_guid), id);
        self.set_deadline(id, Some(now + wait));
        let req = ReqInfo {
            remote_comm_id: m.local_comm_id,
            service_id: m.service_id,
            remote_ca_guid: m.local_ca_guid,
            remote_qpn: m.local_qpn,
            starting_psn: m.starting_psn,
            responder_resources: m.responder_resources,
            initiator_depth: m.initiator_depth,
            transport_service_type: m.transport_service_type,
            retry_count: m.retry_count,
            rnr_retry_count: m.rnr_retry_count,
            path_mtu: m.path_mtu,
            srq: m.srq,
            primary: m.primary,
            local_cm_response_timeout: m.local_cm_response_timeout,
            private_data: m.private_data.to_vec(),
        };
        self.events.push_back(CmEvent::ReqReceived { comm_id: id, peer, req: Box::new(req) });
    }

    fn on_rep(&mut self, peer: IpAddr, tid: u64, m: &Rep<'_>) {
        let Some(c) = self.conns.get_mut(&m.remote_comm_id) else {
            // The kernel answers a REP for no connection with REJ "invalid comm ID".
            self.counters.stray_dropped += 1;
            self.send_rej(peer, tid, 0, m.local_comm_id, message_kind::REP, reject::INVALID_COMM_ID, &[]);
            return;
        };
        match c.state {
            State::ReqSent | State::MraReqRcvd => {
                c.state = State::RepRcvd;
                c.sent = None;
                c.remote_comm_id = m.local_comm_id;
                c.remote_qpn = m.local_qpn;
                c.remote_ca_guid = m.local_ca_guid;
                let id = m.remote_comm_id;
                let peer = c.peer;
                self.by_remote.insert((peer, m.local_comm_id), id);
                self.by_qp.insert((peer, m.local_qpn, m.local_ca_guid), id);
                self.set_deadline(id, None);
                let rep = RepInfo {
                    remote_comm_id: m.local_comm_id,
                    remote_qpn: m.local_qpn,
                    starting_psn: m.starting_psn,
                    responder_resources: m.responder_resources,
                    initiator_depth: m.initiator_depth,
                    rnr_retry_count: m.rnr_retry_count,
                    srq: m.srq,
                    remote_ca_guid: m.local_ca_guid,
                    private_data: m.private_data.to_vec(),
                };
                self.events.push_back(CmEvent::RepReceived { comm_id: id, rep: Box::new(rep) });
            }
            _ if c.remote_comm_id != m.local_comm_id => self.counters.stray_dropped += 1,
            // A duplicate REP: our RTU (or MRA) was lost; send it again.
            _ => {
                self.counters.duplicates_received += 1;
                self.answer_duplicate(m.remote_comm_id, &[State::Established, State::MraRepSent]);
            }
        }
    }

    fn on_rtu(&mut self, m: &CommIds<'_>) {
        match self.conns.get_mut(&m.remote_comm_id) {
            Some(c) if c.remote_comm_id == m.local_comm_id && matches!(c.state, State::RepSent | State::MraRepRcvd) => {
                c.state = State::Established;
                c.sent = None;
                self.set_deadline(m.remote_comm_id, None);
                self.events.push_back(CmEvent::Established { comm_id: m.remote_comm_id });
            }
            Some(c) if c.remote_comm_id == m.local_comm_id && c.state == State::Established => {
                self.counters.duplicates_received += 1;
            }
            _ => self.counters.stray_dropped += 1,
        }
    }

    fn on_mra(&mut self, now: Nanos, m: &Mra<'_>) {
        let life = cm_timeout_nanos(self.config.packet_life_time);
        let Some(c) = self.conns.get_mut(&m.remote_comm_id) else {
            self.counters.stray_dropped += 1;
            return;
        };
        let next = match (c.state, m.message_mraed) {
            (State::ReqSent, message_kind::REQ) => State::MraReqRcvd,
            (State::RepSent, message_kind::REP) => State::MraRepRcvd,
            (State::MraReqRcvd | State::MraRepRcvd, _) => {
                self.counters.duplicates_received += 1;
                return;
            }
            _ => {
                self.counters.stray_dropped += 1;
                return;
            }
        };
        if next == State::MraRepRcvd && c.remote_comm_id != m.local_comm_id {
            self.counters.stray_dropped += 1;
            return;
        }
        c.state = next;
        c.retries_left = 0;
        // Stop retransmitting; wait as long as the peer asked, plus the path's life time.
        self.set_deadline(m.remote_comm_id, Some(now + cm_timeout_nanos(m.service_timeout) + life));
    }

    fn on_rej(&mut self, now: Nanos, m: &Rej<'_>) {
        self.counters.rejects_received += 1;
        let Some(c) = self.conns.get(&m.remote_comm_id) else {
            self.counters.stray_dropped += 1;
            return;
        };
        // A REJ to our REQ carries no remote comm ID of ours yet (the peer never allocated one).
        let ours = match c.state {
            State::ReqSent | State::MraReqRcvd => true,
            // The requester giving up (the kernel's cm_rej_handler takes it in REQ_RCVD and
            // MRA_REQ_SENT too).
            State::ReqRcvd
            | State::MraReqSent
            | State::RepSent
            | State::MraRepRcvd
            | State::RepRcvd
            | State::MraRepSent
            | State::Established => c.remote_comm_id == m.local_comm_id,
            _ => false,
        };
        if !ours {
            self.counters.stray_dropped += 1;
            return;
        }
        let id = m.remote_comm_id;
        let was_up = c.state == State::Established;
        self.events.push_back(CmEvent::Rejected {
            comm_id: id,
            reason: m.reason,
            ari: m.ari[..usize::from(m.reject_info_length).min(m.ari.len())].to_vec(),
            private_data: m.private_data.to_vec(),
        });
        if m.reason == reject::TIMEOUT || was_up {
            self.enter_timewait(now, id, None);
        } else {
            self.forget(id);
        }
    }

    fn on_dreq(&mut self, peer: IpAddr, tid: u64, m: &Dreq<'_>) {
        let Some(c) = self.conns.get_mut(&m.remote_comm_id) else {
            // The kernel answers a DREQ for no connection with a DREP.
            self.counters.stray_dropped += 1;
            let drep = CmMessage::Drep(CommIds {
                local_comm_id: m.remote_comm_id,
                remote_comm_id: m.local_comm_id,
                private_data: &[],
            });
            let mad = self.emit(tid, &drep);
            self.push(peer, mad);
            return;
        };
        if c.remote_comm_id != m.local_comm_id {
            self.counters.stray_dropped += 1;
            return;
        }
        // The kernel's cm_dreq_handler: a DREQ must name our QP (its "remote QPN" field), or it
        // is ignored whatever the state: comm IDs alone are guessable.
        if c.local_qpn != m.remote_qpn {
            self.counters.dreq_wrong_qpn += 1;
            return;
        }
        match c.state {
            State::Established | State::DreqSent | State::RepSent | State::MraRepRcvd => {
                c.state = State::DreqRcvd;
                c.sent = None;
                self.set_deadline(m.remote_comm_id, None);
                self.events.push_back(CmEvent::DreqReceived {
                    comm_id: m.remote_comm_id,
                    private_data: m.private_data.to_vec(),
                });
            }
            State::Timewait => {
                self.counters.duplicates_received += 1;
                self.answer_duplicate(m.remote_comm_id, &[State::Timewait]);
            }
            _ => self.counters.duplicates_received += 1,
        }
    }

    fn on_drep(&mut self, now: Nanos, m: &CommIds<'_>) {
        match self.conns.get(&m.remote_comm_id) {
            Some(c) if c.state == State::DreqSent && c.remote_comm_id == m.local_comm_id => {
                let id = m.remote_comm_id;
                self.events.push_back(CmEvent::Disconnected {
                    comm_id: id,
                    private_data: m.private_data.to_vec(),
                    timed_out: false,
                });
                self.enter_timewait(now, id, None);
            }
            Some(c) if c.state == State::Timewait => self.counters.duplicates_received += 1,
            _ => self.counters.stray_dropped += 1,
        }
    }

    fn on_sidr_req(&mut self, now: Nanos, peer: IpAddr, tid: u64, m: &SidrReq<'_>) {
        if self.by_remote.contains_key(&(peer, m.request_id)) {
            self.counters.duplicates_received += 1;
            return;
        }
        let status = match self.listeners.get(&m.service_id) {
            None => Some(sidr_status::SERVICE_ID_NOT_SUPPORTED),
            // cma_check_req_qp_type: a SIDR_REQ is for a UD listener (the kernel rejects it
            // with IB_SIDR_REJECT, and the application never sees it).
            Some(qp) if !qp.takes_sidr() => {
                self.counters.qp_type_rejected += 1;
                Some(sidr_status::REJECTED)
            }
            Some(_) => None,
        };
        if let Some(status) = status {
            self.send_sidr_status(peer, tid, m.request_id, m.service_id, status);
            return;
        }
        let Ok(id) = self.alloc_id() else { return };
        let mut c = Conn::new(State::SidrReqRcvd, peer, tid);
        c.remote_comm_id = m.request_id;
        c.service_id = m.service_id;
        c.request_wait = SIDR_REQ_RCVD_WAIT;
        self.conns.insert(id, c);
        self.by_remote.insert((peer, m.request_id), id);
        self.set_deadline(id, Some(now + SIDR_REQ_RCVD_WAIT));
        self.events.push_back(CmEvent::SidrReqReceived {
            request_id: id,
            peer,
            service_id: m.service_id,
            pkey: m.pkey,
            private_data: m.private_data.to_vec(),
        });
    }

    fn on_sidr_rep(&mut self, m: &SidrRep<'_>) {
        match self.conns.get(&m.request_id) {
            Some(c) if c.state == State::SidrReqSent => {
                let id = m.request_id;
                self.events.push_back(CmEvent::SidrRepReceived {
                    request_id: id,
                    status: m.status,
                    qpn: m.qpn,
                    qkey: m.qkey,
                    private_data: m.private_data.to_vec(),
                });
                self.forget(id);
            }
            _ => self.counters.stray_dropped += 1,
        }
    }

    fn on_timer(&mut self, now: Nanos, id: CommId) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        c.deadline = None;
        if c.state == State::Timewait {
            self.forget(id);
            self.events.push_back(CmEvent::TimewaitExit { comm_id: id });
            return;
        }
        if matches!(c.state, State::ReqRcvd | State::MraReqSent | State::SidrReqRcvd) {
            // The requester has given up waiting: the request, unanswered, goes (the user
            // learns it from RequestExpired).
            self.counters.requests_expired += 1;
            self.forget(id);
            self.events.push_back(CmEvent::RequestExpired { comm_id: id });
            return;
        }
        if c.retries_left > 0 {
            if let Some(mad) = c.sent {
                c.retries_left -= 1;
                let (peer, at) = (c.peer, now + c.retry_timeout);
                self.set_deadline(id, Some(at));
                self.counters.retransmits += 1;
                self.push(peer, mad);
                return;
            }
        }
        // Out of retries (or an MRA's extra time ran out).
        self.counters.timeouts += 1;
        let (state, peer, tid, remote) = (c.state, c.peer, c.tid, c.remote_comm_id);
        match state {
            State::ReqSent | State::MraReqRcvd => {
                self.send_rej(peer, tid, id, 0, message_kind::REQ, reject::TIMEOUT, &[]);
                self.events.push_back(CmEvent::Unreachable { comm_id: id, awaiting: state });
                self.forget(id);
            }
            State::RepSent | State::MraRepRcvd => {
                self.send_rej(peer, tid, id, remote, message_kind::REP, reject::TIMEOUT, &[]);
                self.events.push_back(CmEvent::Unreachable { comm_id: id, awaiting: state });
                self.enter_timewait(now, id, None);
            }
            State::DreqSent => {
                self.events.push_back(CmEvent::Disconnected { comm_id: id, private_data: Vec::new(), timed_out: true });
                self.enter_timewait(now, id, None);
            }
            State::SidrReqSent => {
                self.events.push_back(CmEvent::SidrTimeout { request_id: id });
                self.forget(id);
            }
            _ => {}
        }
    }
}
