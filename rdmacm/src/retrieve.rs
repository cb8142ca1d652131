//! What taking an event does: the application's own `rdma_get_cm_event` (or a synchronous
//! call's wait) is the only place where CM events reach the application's QP.

use crate::channel::EventBox;
use crate::core::{IdState, Lib};
use urxe::cm::reject;

impl Lib {
    /// An event the application is taking, in its own `rdma_get_cm_event` (or a synchronous
    /// call's wait), under the lock: the only place the CM's events touch the application's QP,
    /// as librdmacm's `rdma_get_cm_event` is. The CM thread never does (the QP may be gone).
    ///
    /// - CONNECT_RESPONSE of an ID with a QP: RTR, RTS and the RTU; the event becomes
    ///   ESTABLISHED, or CONNECT_ERROR (the connection rejected) if the QP refuses.
    /// - REJECTED: the ID's QP (if any) goes to ERR.
    pub fn on_retrieved(&mut self, b: &mut EventBox) {
        use crate::abi::event as E;
        let Some(id) = self.ids.key_of(b.ev.id) else { return };
        match b.ev.event {
            E::REJECTED => self.qp_to_err(id),
            E::CONNECT_RESPONSE => {
                let Some(comm) = b.rep.take() else { return };
                // SAFETY: `b.ev.id` is a live ID box (its handle is in `ids`); its qp is the
                // application's.
                if unsafe { (*b.ev.id).qp }.is_null() {
                    return; // rdma_establish sends the RTU
                }
                let r = self.qp_to_rts(id).and_then(|()| {
                    let cm = self.cm.as_mut().ok_or(libc::EINVAL)?;
                    cm.send_rtu(comm, &[]).map_err(|e| e.errno())
                });
                match r {
                    Ok(()) => {
                        if let Some(st) = self.ids.get_mut(&id) {
                            st.state = IdState::Connected;
                        }
                        b.ev.event = E::ESTABLISHED;
                    }
                    Err(e) => {
                        let _ = self.cm.as_mut().map(|cm| cm.reject(comm, reject::CONSUMER_DEFINED, &[]));
                        self.forget_comm(comm);
                        if let Some(st) = self.ids.get_mut(&id) {
                            st.comm = None;
                            st.state = IdState::Disconnected;
                        }
                        b.ev.event = E::CONNECT_ERROR;
                        b.ev.status = -e;
                    }
                }
                self.flush();
            }
            _ => {}
        }
    }
}
