//! Transmit arbitration inside one QP: which of its responder's and requester's packets goes
//! next. (Between QPs the engine's `poll_transmit` takes turns of `TX_BURST` packets.)

use super::qp::Qp;
use super::req;
use super::resp;
use super::shared::EngineShared;
use super::types::*;

/// Produces this QP's next packet: responder output first (ACKs and READ responses keep
/// the peer's requester moving), then the requester's.
///
/// One exception: a plain positive ACK lets one ready request packet go first. A peer that
/// busy-polls its send CQ for that ACK then finds the request already there when the ACK
/// arrives and handles both in one poll (ib_write_lat: it places our WRITE itself instead of
/// its progress thread being woken for it). One packet only, so ACKs never wait behind a
/// long message.
#[must_use]
pub(crate) fn poll_qp<M: HostMemory>(
    q: &mut Qp,
    sh: &mut EngineShared<M>,
    now: Nanos,
    buf: &mut [u8],
) -> Option<Transmit> {
    if !q.resp.ack_yielded && !q.resp.out.is_empty() && req::only_plain_acks_queued(q) {
        if let Some(t) = req::poll_request(q, sh, now, buf) {
            q.resp.ack_yielded = true;
            return Some(t);
        }
    }
    q.resp.ack_yielded = false;
    if !q.resp.out.is_empty() {
        if let Some(t) = resp::poll_out(q, sh, buf) {
            return Some(t);
        }
    }
    req::poll_request(q, sh, now, buf)
}
