//! The scenarios. Each one sets up fresh peer QPs, puts crafted packets on the wire, and records
//! checks against the IBTA Vol 1 rule it names (RoCEv2 = annex A17). Section numbers are given
//! only where we checked them (BTH 9.2, AETH and NAK codes 9.3.5, ICRC 7.8.1, RNR timer
//! 9.7.5.2.8, local ACK timeout 9.7.6.1.3); otherwise the part of chapter 9.7 (reliable
//! service) the rule belongs to. A check's text says what was expected and, when it failed,
//! what was seen.

use std::io;
use std::time::{Duration, Instant};

use super::peer::{pattern, QPS_ERR, QPS_RTS, WC_RECV, WC_RETRY_EXC_ERR, WC_SEND, WC_SUCCESS};
use super::{describe, Ctx, Rc, RcOpts, Rx};
use urxe::wire::aeth::{AethRepr, CreditCode, NakCode, RnrTimer, Syndrome};
use urxe::wire::atomic_eth::AtomicEthRepr;
use urxe::wire::bth::BthRepr;
use urxe::wire::deth::DethRepr;
use urxe::wire::opcode::op;
use urxe::wire::packet::Headers;
use urxe::wire::reth::RethRepr;
use urxe::wire::{Msn, Psn};

pub struct Scenario {
    pub id: &'static str,
    /// Where the rule is (IBTA Vol 1 section).
    pub ibta: &'static str,
    /// The rule, in one line.
    pub statement: &'static str,
    pub run: fn(&mut Ctx) -> io::Result<()>,
}

pub fn all() -> Vec<Scenario> {
    macro_rules! s {
        ($id:ident, $ibta:expr, $st:expr) => {
            Scenario { id: stringify!($id), ibta: $ibta, statement: $st, run: $id }
        };
    }
    vec![
        s!(
            psn_seq_error,
            "9.7 responder PSN check; AETH 9.3.5",
            "PSN gap: one NAK-sequence-error at the expected PSN; the resend from it completes"
        ),
        s!(
            nak_seq_resend,
            "9.7 requester NAK handling; AETH 9.3.5",
            "NAK-sequence-error to a requester: it resends from the NAKed PSN, not before"
        ),
        s!(dup_send, "9.7 duplicate requests", "duplicate SEND: re-ACKed, not delivered again"),
        s!(dup_write, "9.7 duplicate requests", "duplicate RDMA WRITE: re-ACKed, memory not written again"),
        s!(
            dup_read_whole,
            "9.7 duplicate requests (READ)",
            "duplicate RDMA READ: re-executed, data read from memory again"
        ),
        s!(
            dup_read_partial,
            "9.7 duplicate requests (READ)",
            "duplicate READ of a sub-range at a later PSN: responses from that PSN"
        ),
        s!(
            dup_atomic,
            "9.7 duplicate requests (atomics)",
            "duplicate atomic: the saved original value, not executed again"
        ),
        s!(
            rnr_nak_codes,
            "RNR timer 9.7.5.2.8; AETH 9.3.5",
            "no receive WQE: RNR NAK carrying the QP's min_rnr_timer, every code"
        ),
        s!(
            rnr_timer_wait,
            "RNR timer 9.7.5.2.8",
            "after an RNR NAK the requester waits at least the coded time, every code"
        ),
        s!(
            access_bad_rkey,
            "9.7 responder errors; NAK codes 9.3.5",
            "invalid R_Key: NAK remote access error, responder QP to error"
        ),
        s!(
            access_va_oob,
            "9.7 responder errors; NAK codes 9.3.5",
            "VA range outside the MR: NAK remote access error, memory untouched"
        ),
        s!(
            access_len_beyond_mr,
            "9.7 responder errors; NAK codes 9.3.5",
            "READ length beyond the MR: NAK remote access error"
        ),
        s!(
            access_no_write_right,
            "9.7 responder errors; NAK codes 9.3.5",
            "WRITE to an MR without remote write: NAK remote access error"
        ),
        s!(opcode_out_of_seq, "9.7 opcode sequence; NAK codes 9.3.5", "SEND MIDDLE without FIRST: NAK invalid request"),
        s!(
            psn_wrap,
            "9.7 PSN arithmetic; BTH 9.2",
            "PSNs across 2^24 (0xfffffe..1): in order both ways, ACKs at the wrapped PSNs"
        ),
        s!(
            ack_coalescing,
            "9.7 ACK generation; BTH AckReq 9.2",
            "unrequested ACKs may coalesce; AckReq is answered; the last ACK covers all, MSN counts"
        ),
        s!(migreq, "BTH MigReq 9.2; automatic path migration", "MigReq 0 and 1 both accepted by a QP without APM"),
        s!(icrc_corrupt, "ICRC 7.8.1 (C7-47..48); annex A17", "bad ICRC: silently dropped, no ACK/NAK, no completion"),
        s!(ghost_ack, "9.7 requester ACK handling", "ACK for a PSN never sent: ignored, the real ACK still completes"),
        s!(
            ud_qkey,
            "Q_Key check (UD datagrams)",
            "UD SEND with a wrong Q_Key: dropped without completion; right Q_Key delivered"
        ),
        s!(
            retry_cnt,
            "local ACK timeout 9.7.6.1.3",
            "unanswered request: retried retry_cnt times, then IBV_WC_RETRY_EXC_ERR"
        ),
    ]
}

fn bth(rc: &Rc, opcode: u8, psn: Psn, ack_req: bool) -> BthRepr {
    BthRepr { opcode, dest_qp: rc.peer_qpn, ack_req, psn, ..BthRepr::default() }
}

fn plain(rc: &Rc, opcode: u8, psn: Psn, ack_req: bool) -> Headers {
    Headers { bth: bth(rc, opcode, psn, ack_req), ..Headers::default() }
}

fn write_only(rc: &Rc, psn: Psn, ack_req: bool, rkey: u32, va: u64, len: u32) -> Headers {
    Headers { reth: Some(RethRepr { va, rkey, dma_len: len }), ..plain(rc, op::RC_RDMA_WRITE_ONLY, psn, ack_req) }
}

fn read_req(rc: &Rc, psn: Psn, rkey: u32, va: u64, len: u32) -> Headers {
    Headers { reth: Some(RethRepr { va, rkey, dma_len: len }), ..plain(rc, op::RC_RDMA_READ_REQUEST, psn, true) }
}

fn ack_to(rc: &Rc, psn: Psn, syndrome: Syndrome, msn: u32) -> Headers {
    Headers {
        bth: BthRepr { opcode: op::RC_ACKNOWLEDGE, dest_qp: rc.peer_qpn, psn, ..BthRepr::default() },
        aeth: Some(AethRepr { syndrome, msn: Msn::new(msn) }),
        ..Headers::default()
    }
}

fn is_ack(r: &Rx) -> bool {
    r.opcode() == op::RC_ACKNOWLEDGE && matches!(r.syndrome(), Some(Syndrome::Ack { .. }))
}

fn nak(r: &Rx) -> Option<NakCode> {
    match r.syndrome() {
        Some(Syndrome::Nak(c)) if r.opcode() == op::RC_ACKNOWLEDGE => Some(c),
        _ => None,
    }
}

fn seen(r: &Option<Rx>) -> String {
    r.as_ref().map(describe).unwrap_or_else(|| "nothing".into())
}

fn ok_recvs(wcs: &[super::Wc]) -> usize {
    wcs.iter().filter(|w| w.status == WC_SUCCESS && w.opcode == WC_RECV).count()
}

fn wcs_text(wcs: &[super::Wc]) -> String {
    let v: Vec<String> = wcs.iter().map(|w| format!("{}:{}:{}", w.status, w.opcode, w.byte_len)).collect();
    format!("[{}] (status:opcode:len)", v.join(" "))
}

/// Sends `h` and expects an ACK at its PSN; records the check.
fn expect_ack(ctx: &mut Ctx, rc: &Rc, h: &Headers, payload: &[u8], what: &str) -> io::Result<bool> {
    ctx.wire.send(h, payload, false)?;
    let r = ctx.response_at(rc, h.bth.psn)?;
    let ok = r.as_ref().is_some_and(is_ack);
    Ok(ctx.check(ok, format!("{what}: ACK psn {:#x} (saw {})", h.bth.psn.value(), seen(&r))))
}

/// Sends `h` and expects NAK `code` at its PSN, then the QP state `state`.
fn expect_nak(ctx: &mut Ctx, rc: &Rc, h: &Headers, payload: &[u8], code: NakCode) -> io::Result<()> {
    ctx.wire.send(h, payload, false)?;
    let r = ctx.response(rc)?;
    let ok = r.as_ref().is_some_and(|r| nak(r) == Some(code) && r.psn() == h.bth.psn);
    ctx.check(ok, format!("NAK {code:?} at psn {:#x} (saw {})", h.bth.psn.value(), seen(&r)));
    Ok(())
}

fn psn_seq_error(ctx: &mut Ctx) -> io::Result<()> {
    let rc = ctx.connect(RcOpts::default())?;
    ctx.peer.post_recv(4, 1024)?;
    let b = rc.our_psn;
    let msg = [0x11u8; 64];
    ctx.wire.send(&plain(&rc, op::RC_SEND_ONLY, b.add(1), true), &msg, false)?;
    let r = ctx.response(&rc)?;
    let ok = r.as_ref().is_some_and(|r| nak(r) == Some(NakCode::PsnSequenceError) && r.psn() == b);
    ctx.check(ok, format!("NAK-sequence-error at the expected psn {:#x} (saw {})", b.value(), seen(&r)));
    // A second packet beyond the gap: no second NAK until the expected PSN arrives.
    ctx.wire.send(&plain(&rc, op::RC_SEND_ONLY, b.add(2), true), &msg, false)?;
    let more = ctx.wire.gather(ctx.quiet)?;
    let naks = more.iter().filter(|r| nak(r).is_some()).count();
    ctx.check(naks == 0, format!("one NAK per sequence error: no second NAK for psn +2 (saw {naks})"));
    // The resend it asked for: b, b+1, b+2.
    for i in 0..3 {
        ctx.wire.send(&plain(&rc, op::RC_SEND_ONLY, b.add(i), i == 2), &msg, false)?;
    }
    let r = ctx.response_at(&rc, b.add(2))?;
    ctx.check(r.as_ref().is_some_and(is_ack), format!("resend from the NAKed PSN ACKed up to +2 (saw {})", seen(&r)));
    let wcs = ctx.completions(3)?;
    ctx.check(ok_recvs(&wcs) == 3 && wcs.len() == 3, format!("3 receive completions, each once: {}", wcs_text(&wcs)));
    Ok(())
}

fn nak_seq_resend(ctx: &mut Ctx) -> io::Result<()> {
    // A long local ACK timeout (1.07 s): only the NAK may cause a resend within the test.
    let rc = ctx.connect(RcOpts { timeout: 18, ..RcOpts::default() })?;
    for _ in 0..3 {
        ctx.peer.post_send(0, 32)?;
    }
    let (p, q) = (rc.peer_psn, rc.our_qpn);
    let is_send = move |r: &Rx| r.headers.bth.dest_qp == q && r.opcode() == op::RC_SEND_ONLY;
    let mut first = Vec::new();
    for _ in 0..3 {
        match ctx.wire.wait_for(ctx.wait, is_send)? {
            Some(r) => first.push(r.psn().value()),
            None => break,
        }
    }
    let want: Vec<u32> = (0..3).map(|i| p.add(i).value()).collect();
    if !ctx.check(first == want, format!("the peer sends its 3 SENDs at psn {want:#x?} (saw {first:#x?})")) {
        return Ok(());
    }
    // "Expected PSN +1": this acknowledges +0 and asks for everything from +1 again.
    ctx.wire.send(&ack_to(&rc, p.add(1), Syndrome::Nak(NakCode::PsnSequenceError), 1), &[], false)?;
    let mut again = Vec::new();
    for _ in 0..2 {
        match ctx.wire.wait_for(ctx.wait, is_send)? {
            Some(r) => again.push(r.psn().value()),
            None => break,
        }
    }
    again.extend(ctx.wire.gather(ctx.quiet)?.iter().filter(|r| is_send(r)).map(|r| r.psn().value()));
    let want: Vec<u32> = (1..3).map(|i| p.add(i).value()).collect();
    ctx.check(again == want, format!("resent exactly psn {want:#x?}, in order (saw {again:#x?})"));
    ctx.wire.send(&ack_to(&rc, p.add(2), Syndrome::Ack { credits: CreditCode::new(31) }, 3), &[], false)?;
    let wcs = ctx.completions(3)?;
    let ok = wcs.len() == 3 && wcs.iter().all(|w| w.opcode == WC_SEND && w.status == WC_SUCCESS);
    ctx.check(ok, format!("all 3 SENDs complete successfully, once each: {}", wcs_text(&wcs)));
    Ok(())
}

fn dup_send(ctx: &mut Ctx) -> io::Result<()> {
    let rc = ctx.connect(RcOpts::default())?;
    ctx.peer.post_recv(3, 1024)?;
    let b = rc.our_psn;
    let h = plain(&rc, op::RC_SEND_ONLY, b, true);
    expect_ack(ctx, &rc, &h, &[0x22; 32], "SEND")?;
    let first = ctx.completions(1)?;
    expect_ack(ctx, &rc, &h, &[0x33; 32], "duplicate SEND re-ACKed")?;
    let again = ctx.completions(0)?;
    ctx.check(
        ok_recvs(&first) == 1 && again.is_empty(),
        format!("delivered once: first {}, after the duplicate {}", wcs_text(&first), wcs_text(&again)),
    );
    expect_ack(ctx, &rc, &plain(&rc, op::RC_SEND_ONLY, b.add(1), true), &[0x44; 32], "next SEND after the duplicate")?;
    let next = ctx.completions(1)?;
    ctx.check(ok_recvs(&next) == 1, format!("next SEND delivered: {}", wcs_text(&next)));
    Ok(())
}

fn dup_write(ctx: &mut Ctx) -> io::Result<()> {
    let rc = ctx.connect(RcOpts::default())?;
    let (b, m) = (rc.our_psn, ctx.mem);
    ctx.peer.fill(0, 64, 0)?;
    let data = pattern(64, 0xA0);
    expect_ack(ctx, &rc, &write_only(&rc, b, true, m.rkey, m.addr, 64), &data, "WRITE")?;
    let got = ctx.peer.dump(0, 64)?;
    ctx.check(got == data, "WRITE landed in memory");
    // The application changes the memory; a duplicate must not overwrite it.
    ctx.peer.fill(0, 64, 7)?;
    expect_ack(
        ctx,
        &rc,
        &write_only(&rc, b, true, m.rkey, m.addr, 64),
        &pattern(64, 0xC0),
        "duplicate WRITE re-ACKed",
    )?;
    let got = ctx.peer.dump(0, 64)?;
    ctx.check(got == pattern(64, 7), "duplicate WRITE not executed (memory keeps the application's bytes)");
    Ok(())
}

/// Collects READ responses at PSNs `first..first+n`: their joined payload and, per PSN, the
/// opcode seen (None = nothing arrived).
fn read_responses(ctx: &mut Ctx, rc: &Rc, first: Psn, n: u32) -> io::Result<(Vec<u8>, Vec<Option<u8>>)> {
    let mut data = Vec::new();
    let mut ops = Vec::new();
    for i in 0..n {
        let r = ctx.response_at(rc, first.add(i))?;
        if let Some(r) = &r {
            data.extend_from_slice(&r.payload);
        }
        ops.push(r.map(|r| r.opcode()));
    }
    Ok((data, ops))
}

/// The opcodes of a READ response of `n` packets: FIRST, MIDDLE..., LAST (or ONLY).
fn read_opcodes(n: u32) -> Vec<Option<u8>> {
    (0..n)
        .map(|i| {
            Some(match (n, i) {
                (1, _) => op::RC_RDMA_READ_RESPONSE_ONLY,
                (_, 0) => op::RC_RDMA_READ_RESPONSE_FIRST,
                (_, i) if i == n - 1 => op::RC_RDMA_READ_RESPONSE_LAST,
                _ => op::RC_RDMA_READ_RESPONSE_MIDDLE,
            })
        })
        .collect()
}

fn op_names(ops: &[Option<u8>]) -> String {
    let v: Vec<String> = ops.iter().map(|o| o.map_or("none".into(), |o| format!("{o:#04x}"))).collect();
    v.join(",")
}

fn dup_read_whole(ctx: &mut Ctx) -> io::Result<()> {
    let rc = ctx.connect(RcOpts::default())?;
    let (b, m) = (rc.our_psn, ctx.mem);
    ctx.peer.fill(1024, 3072, 1)?;
    ctx.wire.send(&read_req(&rc, b, m.rkey, m.addr + 1024, 3072), &[], false)?;
    let (d, ops) = read_responses(ctx, &rc, b, 3)?;
    let ok = ops == read_opcodes(3) && d == pattern(3072, 1);
    ctx.check(ok, format!("READ of 3072 bytes: FIRST, MIDDLE, LAST with the data (opcodes {})", op_names(&ops)));
    ctx.peer.fill(1024, 3072, 99)?;
    ctx.wire.send(&read_req(&rc, b, m.rkey, m.addr + 1024, 3072), &[], false)?;
    let (d, ops) = read_responses(ctx, &rc, b, 3)?;
    let ok = ops == read_opcodes(3);
    ctx.check(
        ok,
        format!("duplicate READ answered FIRST, MIDDLE, LAST at psn {:#x}..+2 ({})", b.value(), op_names(&ops)),
    );
    ctx.check(d == pattern(3072, 99), "duplicate READ re-read the memory (returns the bytes written since)");
    // The QP goes on from the PSN after the READ.
    expect_ack(ctx, &rc, &write_only(&rc, b.add(3), true, m.rkey, m.addr, 8), &[1; 8], "next request after the READ")?;
    Ok(())
}

fn dup_read_partial(ctx: &mut Ctx) -> io::Result<()> {
    let rc = ctx.connect(RcOpts::default())?;
    let (b, m) = (rc.our_psn, ctx.mem);
    ctx.peer.fill(1024, 3072, 3)?;
    ctx.wire.send(&read_req(&rc, b, m.rkey, m.addr + 1024, 3072), &[], false)?;
    let (d, ops) = read_responses(ctx, &rc, b, 3)?;
    let ok = ops == read_opcodes(3) && d == pattern(3072, 3);
    ctx.check(ok, format!("READ of 3072 bytes: FIRST, MIDDLE, LAST with the data (opcodes {})", op_names(&ops)));
    ctx.peer.fill(1024, 3072, 50)?;
    // The requester lost the first response only: it asks again from psn+1 for the rest.
    ctx.wire.send(&read_req(&rc, b.add(1), m.rkey, m.addr + 2048, 2048), &[], false)?;
    let (d, ops) = read_responses(ctx, &rc, b.add(1), 2)?;
    let want = read_opcodes(2);
    ctx.check(
        ops.iter().all(Option::is_some),
        format!("partial duplicate READ answered at psn+1 and psn+2 ({})", op_names(&ops)),
    );
    ctx.check(ops[1] == want[1], format!("the answer ends with LAST at psn+2 ({})", op_names(&ops)));
    ctx.check(
        ops[0] == want[0],
        format!("partial duplicate READ opens a new response: FIRST at psn+1 (opened with {})", op_names(&ops[..1])),
    );
    ctx.check(d == pattern(3072, 50)[1024..], "partial duplicate READ returns the current bytes of the sub-range");
    expect_ack(ctx, &rc, &write_only(&rc, b.add(3), true, m.rkey, m.addr, 8), &[1; 8], "next request after the READ")?;
    Ok(())
}

fn fetch_add(rc: &Rc, psn: Psn, rkey: u32, va: u64, add: u64) -> Headers {
    Headers {
        atomic_eth: Some(AtomicEthRepr { va, rkey, swap_add: add, compare: 0 }),
        ..plain(rc, op::RC_FETCH_ADD, psn, true)
    }
}

fn dup_atomic(ctx: &mut Ctx) -> io::Result<()> {
    let rc = ctx.connect(RcOpts::default())?;
    let (b, m) = (rc.our_psn, ctx.mem);
    ctx.peer.fill(256, 8, 0x10)?;
    let le = |v: &[u8]| u64::from_le_bytes(v.try_into().unwrap_or([0; 8]));
    let v0 = le(&ctx.peer.dump(256, 8)?);
    let orig = |r: &Option<Rx>| r.as_ref().and_then(|r| r.headers.atomic_ack_eth.map(|a| a.orig));
    ctx.wire.send(&fetch_add(&rc, b, m.rkey, m.addr + 256, 5), &[], false)?;
    let r = ctx.response_at(&rc, b)?;
    ctx.check(orig(&r) == Some(v0), format!("FETCH_ADD returns the original {v0:#x} (saw {})", seen(&r)));
    let v1 = le(&ctx.peer.dump(256, 8)?);
    ctx.check(v1 == v0.wrapping_add(5), format!("memory = original + 5 (is {v1:#x})"));
    // Same PSN, another operand: the responder must return the saved result and not execute.
    ctx.wire.send(&fetch_add(&rc, b, m.rkey, m.addr + 256, 100), &[], false)?;
    let r = ctx.response_at(&rc, b)?;
    ctx.check(orig(&r) == Some(v0), format!("duplicate returns the saved original {v0:#x} (saw {})", seen(&r)));
    let v2 = le(&ctx.peer.dump(256, 8)?);
    ctx.check(v2 == v1, format!("duplicate not executed (memory {v2:#x}, expected {v1:#x})"));
    Ok(())
}

fn rnr_nak_codes(ctx: &mut Ctx) -> io::Result<()> {
    let mut wrong = Vec::new();
    for code in 0..32u8 {
        let rc = ctx.connect(RcOpts { min_rnr: code, ..RcOpts::default() })?;
        ctx.wire.send(&plain(&rc, op::RC_SEND_ONLY, rc.our_psn, true), &[0x55; 16], false)?;
        let r = ctx.response(&rc)?;
        let want = Syndrome::RnrNak { timer: RnrTimer::new(code) };
        if !r.as_ref().is_some_and(|r| r.syndrome() == Some(want) && r.psn() == rc.our_psn) {
            wrong.push(format!("code {code}: {}", seen(&r)));
        }
    }
    ctx.check(wrong.is_empty(), format!("RNR NAK with the QP's timer code for all 32 codes {wrong:?}"));
    Ok(())
}

fn rnr_timer_wait(ctx: &mut Ctx) -> io::Result<()> {
    // A long local ACK timeout (4.3 s) so that only the RNR timer drives the retransmissions.
    let rc = ctx.connect(RcOpts { timeout: 20, rnr_retry: 7, ..RcOpts::default() })?;
    ctx.peer.post_send(0, 64)?;
    let p = rc.peer_psn;
    let q = rc.our_qpn;
    let is_send = move |r: &Rx| r.headers.bth.dest_qp == q && r.opcode() == op::RC_SEND_ONLY && r.psn() == p;
    let first = ctx.wire.wait_for(ctx.wait, is_send)?;
    if !ctx.check(first.is_some(), "the peer's SEND arrives") {
        return Ok(());
    }
    // Codes from the shortest to the longest, code 0 (655.36 ms) last.
    let mut codes: Vec<u8> = (1..32).collect();
    codes.push(0);
    let mut short = Vec::new();
    let mut late = Vec::new();
    let mut table = Vec::new();
    for code in codes {
        let t = RnrTimer::new(code);
        let nominal = Duration::from_nanos(t.nanos());
        let sent = ctx.wire.send(&ack_to(&rc, p, Syndrome::RnrNak { timer: t }, 0), &[], false)?;
        let r = ctx.wire.wait_for(nominal * 2 + ctx.wait, is_send)?;
        let Some(r) = r else {
            late.push(format!("code {code}: no retry within {:?}", nominal * 2 + ctx.wait));
            break;
        };
        let waited = r.at.saturating_duration_since(sent);
        table.push(format!("{code}:{}/{}us", waited.as_micros(), nominal.as_micros()));
        // The minimum is the rule. `sent` is taken before the NAK left and `r.at` after the retry
        // arrived, so a compliant peer can only look late here, never early: no slack.
        if waited < nominal {
            short.push(format!("code {code}: retried after {} us < {} us", waited.as_micros(), nominal.as_micros()));
        }
        if waited > nominal * 2 + Duration::from_millis(50) {
            late.push(format!("code {code}: {} us for {} us", waited.as_micros(), nominal.as_micros()));
        }
    }
    ctx.note(format!("measured/nominal: {}", table.join(" ")));
    ctx.check(short.is_empty(), format!("never retried before the RNR time {short:?}"));
    ctx.check(late.is_empty(), format!("retried within 2x the RNR time + 50 ms {late:?}"));
    ctx.wire.send(&ack_to(&rc, p, Syndrome::Ack { credits: CreditCode::new(31) }, 1), &[], false)?;
    let wcs = ctx.completions(1)?;
    let ok = wcs.iter().any(|w| w.opcode == WC_SEND && w.status == WC_SUCCESS);
    ctx.check(ok, format!("the SEND completes once ACKed: {}", wcs_text(&wcs)));
    Ok(())
}

/// A fresh QP, one bad request, the NAK, then the responder's QP state.
fn access_case(ctx: &mut Ctx, build: impl Fn(&Rc, &super::PeerMem) -> (Headers, Vec<u8>)) -> io::Result<()> {
    let rc = ctx.connect(RcOpts::default())?;
    let m = ctx.mem;
    ctx.peer.fill(0, 4096, 0x77)?;
    let (h, payload) = build(&rc, &m);
    expect_nak(ctx, &rc, &h, &payload, NakCode::RemoteAccessError)?;
    let st = ctx.peer.state()?;
    ctx.check(st == QPS_ERR, format!("responder QP in the error state (state {st})"));
    let mem = ctx.peer.dump(0, 4096)?;
    ctx.check(mem == pattern(4096, 0x77), "registered memory untouched");
    Ok(())
}

fn access_bad_rkey(ctx: &mut Ctx) -> io::Result<()> {
    access_case(ctx, |rc, m| (write_only(rc, rc.our_psn, true, m.rkey ^ 0x8000_0000, m.addr, 64), vec![0xEE; 64]))
}

fn access_va_oob(ctx: &mut Ctx) -> io::Result<()> {
    access_case(ctx, |rc, m| (write_only(rc, rc.our_psn, true, m.rkey, m.addr + m.len as u64 - 32, 64), vec![0xEE; 64]))
}

fn access_len_beyond_mr(ctx: &mut Ctx) -> io::Result<()> {
    access_case(ctx, |rc, m| (read_req(rc, rc.our_psn, m.rkey, m.addr, m.len + 1024), Vec::new()))
}

fn access_no_write_right(ctx: &mut Ctx) -> io::Result<()> {
    access_case(ctx, |rc, m| (write_only(rc, rc.our_psn, true, m.ro_rkey, m.ro_addr, 64), vec![0xEE; 64]))
}

fn opcode_out_of_seq(ctx: &mut Ctx) -> io::Result<()> {
    let rc = ctx.connect(RcOpts::default())?;
    ctx.peer.post_recv(2, 1024)?;
    let h = plain(&rc, op::RC_SEND_MIDDLE, rc.our_psn, true);
    expect_nak(ctx, &rc, &h, &[0x66; 1024], NakCode::InvalidRequest)?;
    let wcs = ctx.completions(0)?;
    ctx.check(ok_recvs(&wcs) == 0, format!("nothing delivered: {}", wcs_text(&wcs)));
    let st = ctx.peer.state()?;
    ctx.note(format!("responder QP state afterwards: {st} (3 RTS, 6 ERR)"));
    Ok(())
}

fn psn_wrap(ctx: &mut Ctx) -> io::Result<()> {
    let rc = ctx.connect(RcOpts { our_psn: 0xFF_FFFE, peer_psn: 0xFF_FFFF, ..RcOpts::default() })?;
    ctx.peer.post_recv(4, 1024)?;
    for i in 0..4 {
        let psn = rc.our_psn.add(i);
        expect_ack(ctx, &rc, &plain(&rc, op::RC_SEND_ONLY, psn, true), &[i as u8; 40], "SEND across the wrap")?;
    }
    let wcs = ctx.completions(4)?;
    ctx.check(ok_recvs(&wcs) == 4, format!("4 receives across the wrap: {}", wcs_text(&wcs)));
    // The peer as requester across the wrap: 0xffffff then 0.
    ctx.peer.post_send(0, 32)?;
    ctx.peer.post_send(0, 32)?;
    let q = rc.our_qpn;
    let mut got = Vec::new();
    for i in 0..2 {
        let psn = rc.peer_psn.add(i);
        let r = ctx
            .wire
            .wait_for(ctx.wait, |r| r.headers.bth.dest_qp == q && r.opcode() == op::RC_SEND_ONLY && r.psn() == psn)?;
        got.push(r.is_some());
    }
    ctx.check(got == [true, true], format!("peer sends psn 0xffffff then 0x000000 (seen {got:?})"));
    ctx.wire.send(&ack_to(&rc, rc.peer_psn.add(1), Syndrome::Ack { credits: CreditCode::new(31) }, 2), &[], false)?;
    let wcs = ctx.completions(2)?;
    let sends = wcs.iter().filter(|w| w.opcode == WC_SEND && w.status == WC_SUCCESS).count();
    ctx.check(sends == 2, format!("one ACK at psn 0 completes both SENDs: {}", wcs_text(&wcs)));
    Ok(())
}

fn ack_coalescing(ctx: &mut Ctx) -> io::Result<()> {
    let rc = ctx.connect(RcOpts::default())?;
    let (b, m) = (rc.our_psn, ctx.mem);
    for i in 0..5u32 {
        ctx.wire.send(&write_only(&rc, b.add(i), i == 4, m.rkey, m.addr + 64 * i as u64, 64), &[i as u8; 64], false)?;
    }
    let last = ctx.response_at(&rc, b.add(4))?;
    let ok = last.as_ref().is_some_and(|r| is_ack(r) && r.headers.aeth.map(|a| a.msn.value()) == Some(5));
    ctx.check(ok, format!("AckReq on the 5th WRITE answered: ACK psn +4 MSN 5 (saw {})", seen(&last)));
    let rest = ctx.wire.gather(ctx.quiet)?;
    let all: Vec<&Rx> = rest.iter().filter(|r| r.headers.bth.dest_qp == rc.our_qpn).collect();
    let beyond = all.iter().filter(|r| r.psn().after(b.add(4)) || r.psn().before(b)).count();
    let naks = all.iter().filter(|r| !is_ack(r)).count();
    ctx.check(
        beyond == 0 && naks == 0,
        format!("no NAK and no ACK outside the PSNs sent ({naks} NAKs, {beyond} outside)"),
    );
    ctx.note(format!("{} ACK(s) for 5 WRITEs (one AckReq)", 1 + all.len()));
    Ok(())
}

fn migreq(ctx: &mut Ctx) -> io::Result<()> {
    let rc = ctx.connect(RcOpts::default())?;
    ctx.peer.post_recv(2, 1024)?;
    let mut bits = Vec::new();
    for (i, mig) in [false, true].into_iter().enumerate() {
        let mut h = plain(&rc, op::RC_SEND_ONLY, rc.our_psn.add(i as u32), true);
        h.bth.mig_req = mig;
        ctx.wire.send(&h, &[0x42; 24], false)?;
        let r = ctx.response_at(&rc, h.bth.psn)?;
        ctx.check(r.as_ref().is_some_and(is_ack), format!("SEND with MigReq={} ACKed (saw {})", mig as u8, seen(&r)));
        if let Some(r) = r {
            bits.push(r.headers.bth.mig_req as u8);
        }
    }
    let wcs = ctx.completions(2)?;
    ctx.check(ok_recvs(&wcs) == 2, format!("both delivered: {}", wcs_text(&wcs)));
    ctx.note(format!("MigReq bit in the peer's ACKs: {bits:?}"));
    Ok(())
}

fn icrc_corrupt(ctx: &mut Ctx) -> io::Result<()> {
    let rc = ctx.connect(RcOpts::default())?;
    ctx.peer.post_recv(2, 1024)?;
    let h = plain(&rc, op::RC_SEND_ONLY, rc.our_psn, true);
    ctx.wire.send(&h, &[0x99; 48], true)?;
    let heard = ctx.wire.gather(ctx.quiet)?;
    let to_us = heard.iter().filter(|r| r.headers.bth.dest_qp == rc.our_qpn).count();
    ctx.check(to_us == 0, format!("no ACK or NAK for the corrupted packet (saw {to_us})"));
    let wcs = ctx.completions(0)?;
    ctx.check(wcs.is_empty(), format!("no completion for it: {}", wcs_text(&wcs)));
    expect_ack(ctx, &rc, &h, &[0x99; 48], "the same packet with a good ICRC")?;
    let wcs = ctx.completions(1)?;
    ctx.check(ok_recvs(&wcs) == 1, format!("then delivered once: {}", wcs_text(&wcs)));
    Ok(())
}

fn ghost_ack(ctx: &mut Ctx) -> io::Result<()> {
    let rc = ctx.connect(RcOpts::default())?;
    ctx.peer.post_send(0, 64)?;
    let (p, q) = (rc.peer_psn, rc.our_qpn);
    let first = ctx
        .wire
        .wait_for(ctx.wait, |r| r.headers.bth.dest_qp == q && r.opcode() == op::RC_SEND_ONLY && r.psn() == p)?;
    if !ctx.check(first.is_some(), "the peer's SEND arrives") {
        return Ok(());
    }
    let ack = Syndrome::Ack { credits: CreditCode::new(31) };
    ctx.wire.send(&ack_to(&rc, p.add(100), ack, 1), &[], false)?;
    let early = ctx.completions(0)?;
    ctx.check(
        early.is_empty(),
        format!("ghost: the ACK for psn +100 (never sent) completes nothing: {}", wcs_text(&early)),
    );
    let st = ctx.peer.state()?;
    ctx.check(st == QPS_RTS, format!("requester QP still in RTS (state {st})"));
    ctx.wire.send(&ack_to(&rc, p, ack, 1), &[], false)?;
    let mut wcs = early;
    wcs.extend(ctx.completions(1)?);
    let ok = wcs.len() == 1 && wcs[0].opcode == WC_SEND && wcs[0].status == WC_SUCCESS;
    ctx.check(ok, format!("after the real ACK the SEND has completed once, successfully: {}", wcs_text(&wcs)));
    Ok(())
}

fn ud_qkey(ctx: &mut Ctx) -> io::Result<()> {
    const QKEY: u32 = 0x1111_1111;
    let peer_qpn = ctx.peer.new_ud(QKEY)?;
    let our = ctx.fresh_qpn();
    let h = |qkey: u32, psn: u32| Headers {
        bth: BthRepr { opcode: op::UD_SEND_ONLY, dest_qp: peer_qpn, psn: Psn::new(psn), ..BthRepr::default() },
        deth: Some(DethRepr { qkey, src_qp: our }),
        ..Headers::default()
    };
    ctx.wire.send(&h(0x2222_2222, 1), &[0x31; 100], false)?;
    let wcs = ctx.completions(0)?;
    ctx.check(wcs.is_empty(), format!("wrong Q_Key: no completion {}", wcs_text(&wcs)));
    ctx.wire.send(&h(QKEY, 2), &[0x32; 100], false)?;
    let wcs = ctx.completions(1)?;
    let ok = wcs.len() == 1 && wcs[0].status == WC_SUCCESS && wcs[0].opcode == WC_RECV && wcs[0].byte_len == 140;
    ctx.check(ok, format!("right Q_Key: one receive of 40 (GRH) + 100 bytes {}", wcs_text(&wcs)));
    Ok(())
}

/// Counts the peer's transmissions of one unanswered SEND until its completion arrives.
fn count_retries(ctx: &mut Ctx, retry_cnt: u8, limit: Duration) -> io::Result<(usize, Option<super::Wc>)> {
    // timeout 10: 4.2 ms per try.
    let rc = ctx.connect(RcOpts { retry_cnt, timeout: 10, ..RcOpts::default() })?;
    ctx.peer.post_send(0, 16)?;
    let (p, q) = (rc.peer_psn, rc.our_qpn);
    let end = Instant::now() + limit;
    let mut sends = 0;
    let mut wc = None;
    while Instant::now() < end && wc.is_none() {
        let got = ctx.wire.gather(Duration::from_millis(20))?;
        sends +=
            got.iter().filter(|r| r.headers.bth.dest_qp == q && r.opcode() == op::RC_SEND_ONLY && r.psn() == p).count();
        wc = ctx.peer.poll()?.into_iter().next();
    }
    // Late copies that crossed the completion.
    let got = ctx.wire.gather(ctx.quiet / 2)?;
    sends +=
        got.iter().filter(|r| r.headers.bth.dest_qp == q && r.opcode() == op::RC_SEND_ONLY && r.psn() == p).count();
    Ok((sends, wc))
}

fn retry_cnt(ctx: &mut Ctx) -> io::Result<()> {
    for rc in [3u8, 7] {
        let (sends, wc) = count_retries(ctx, rc, Duration::from_secs(3))?;
        let want = rc as usize + 1;
        let status = wc.map(|w| w.status);
        ctx.check(
            sends == want && status == Some(WC_RETRY_EXC_ERR),
            format!("retry_cnt {rc}: {want} transmissions then RETRY_EXC_ERR (saw {sends}, completion {status:?} within 3 s)"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_ids_are_unique_and_cover_the_issue() {
        let v = all();
        let mut ids: Vec<&str> = v.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), v.len());
        for want in [
            "psn_seq_error",
            "nak_seq_resend",
            "dup_send",
            "dup_write",
            "dup_read_whole",
            "dup_read_partial",
            "dup_atomic",
            "rnr_nak_codes",
            "rnr_timer_wait",
            "access_bad_rkey",
            "access_va_oob",
            "access_len_beyond_mr",
            "access_no_write_right",
            "opcode_out_of_seq",
            "psn_wrap",
            "ack_coalescing",
            "migreq",
            "icrc_corrupt",
            "ghost_ack",
            "ud_qkey",
        ] {
            assert!(ids.contains(&want), "{want}");
        }
    }
}
