//! ATOMIC WRITE and FLUSH (IBTA 1.5 §9.4.6-§9.4.7) between two engines: both directions,
//! the READ RESPONSE ONLY that answers them, duplicates answered from the responder resource
//! and never executed twice, loss/duplication/reordering, and hostile requests (misaligned,
//! out of bounds, missing rights, malformed) NAKed and counted without touching memory.

mod sim;

use std::cell::RefCell;
use std::net::IpAddr;
use std::rc::Rc;

use sim::*;
use urxe::engine::*;
use urxe::wire::icrc::{icrc, store_icrc, IpFields, ICRC_LEN};
use urxe::wire::opcode::op;

const MS: u64 = 1_000_000;

const ALL_REMOTE: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

/// QP options whose access flags also allow FLUSH to global visibility.
fn flush_opts() -> QpOpts {
    QpOpts { access: ALL_REMOTE | AccessFlags::FLUSH_GLOBAL, ..QpOpts::default() }
}

/// `len` bytes on `end`'s node registered with `access`.
fn region(net: &mut Net, end: End, len: u64, access: AccessFlags) -> (u64, MrHandle) {
    let n = &mut net.nodes[end.node];
    let addr = n.eng.memory().alloc(len);
    let mr = n.eng.reg_mr(end.pd, addr, len, addr, access).unwrap();
    (addr, mr)
}

fn atomic_write(wr_id: u64, remote_addr: u64, rkey: u32, value: u64) -> SendWr<'static> {
    send_wr(wr_id, WrKind::AtomicWrite { remote_addr, rkey, value: value.to_ne_bytes() }, &[])
}

fn flush(wr_id: u64, remote_addr: u64, rkey: u32, len: u32, level: u8) -> SendWr<'static> {
    send_wr(wr_id, WrKind::Flush { remote_addr, rkey, len, placement: 1, level }, &[])
}

fn statuses(wc: &[WorkCompletion]) -> Vec<(u64, WcStatus, WcOpcode)> {
    wc.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect()
}

#[test]
fn atomic_write_lands_eight_bytes_in_both_directions() {
    let mut net = Net::new(2, 1, LinkCfg::default());
    net.trace = Some(Vec::new());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    // The pyverbs suite registers only REMOTE_WRITE (+ LOCAL_WRITE): that is the right needed.
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let (wa, wamr) = region(&mut net, a, 64, rw);
    let (wb, wbmr) = region(&mut net, b, 64, rw);
    net.nodes[0].eng.post_send(net.now, a.qpn, &atomic_write(1, wb + 8, wbmr.rkey, 0x1122_3344_5566_7788)).unwrap();
    net.nodes[1].eng.post_send(net.now, b.qpn, &atomic_write(2, wa + 16, wamr.rkey, u64::MAX - 5)).unwrap();
    net.run_idle(10 * MS);
    assert_eq!(statuses(&net.poll_all(0, a.cq)), vec![(1, WcStatus::Success, WcOpcode::AtomicWrite)]);
    assert_eq!(statuses(&net.poll_all(1, b.cq)), vec![(2, WcStatus::Success, WcOpcode::AtomicWrite)]);
    assert_eq!(net.nodes[1].mem().get_u64(wb + 8), 0x1122_3344_5566_7788);
    assert_eq!(net.nodes[0].mem().get_u64(wa + 16), u64::MAX - 5);
    // Neighbours untouched.
    assert_eq!(net.nodes[1].mem().get_u64(wb), 0);
    assert_eq!(net.nodes[1].mem().get_u64(wb + 16), 0);
    // On the wire: one ATOMIC WRITE each way, each answered by an empty READ RESPONSE ONLY.
    let t = net.trace.as_ref().unwrap();
    let reqs: Vec<_> = t.iter().filter(|(_, p)| p.opcode() == op::RC_ATOMIC_WRITE).collect();
    let resps: Vec<_> = t.iter().filter(|(_, p)| p.opcode() == op::RC_RDMA_READ_RESPONSE_ONLY).collect();
    assert_eq!((reqs.len(), resps.len()), (2, 2));
    for (_, r) in &resps {
        let p = urxe::wire::parse(&r.data).unwrap();
        assert!(p.payload.is_empty());
        assert!(p.headers.aeth.unwrap().syndrome.is_ack());
    }
    for (_, r) in &reqs {
        let p = urxe::wire::parse(&r.data).unwrap();
        assert_eq!(p.payload.len(), 8);
        assert_eq!(p.headers.reth.unwrap().dma_len, 8);
        assert!(p.headers.bth.ack_req);
    }
}

#[test]
fn flush_after_writes_completes_in_order_at_range_and_region_level() {
    let mut net = Net::new(2, 2, LinkCfg::default());
    net.trace = Some(Vec::new());
    let o = flush_opts();
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 4096);
    let (dst, dmr) = region(&mut net, b, 4096, ALL_REMOTE | AccessFlags::FLUSH_GLOBAL);
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    net.nodes[0].mem().set(src, &data);
    let e = &mut net.nodes[0].eng;
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    e.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, 4096, smr)])).unwrap();
    e.post_send(net.now, a.qpn, &flush(2, dst, dmr.rkey, 4096, 0)).unwrap();
    // The region level ignores the RETH's range: an address past the region is fine.
    e.post_send(net.now, a.qpn, &flush(3, dst + (1 << 30), dmr.rkey, 1, 1)).unwrap();
    net.run_idle(10 * MS);
    assert_eq!(
        statuses(&net.poll_all(0, a.cq)),
        vec![
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::Flush),
            (3, WcStatus::Success, WcOpcode::Flush)
        ]
    );
    assert_eq!(net.nodes[1].mem().get(dst, 4096), data);
    let t = net.trace.as_ref().unwrap();
    let flushes: Vec<_> = t.iter().filter(|(_, p)| p.opcode() == op::RC_FLUSH).collect();
    assert_eq!(flushes.len(), 2);
    let f = urxe::wire::parse(&flushes[0].1.data).unwrap();
    assert_eq!(f.headers.feth.map(|x| (x.placement, x.level)), Some((1, 0)));
    assert_eq!(f.headers.reth.map(|r| (r.va, r.dma_len)), Some((dst, 4096)));
    assert_eq!(net.nodes[1].eng.counters().flush_atomic_write_naks, 0);
}

/// Drops the first packet with `opcode` from `from`.
fn drop_first(opcode: u8, from: usize) -> (Interceptor, Rc<RefCell<usize>>) {
    let seen = Rc::new(RefCell::new(0usize));
    let s = seen.clone();
    let f: Interceptor = Box::new(move |p: &mut Packet| {
        if p.from == from && p.opcode() == opcode {
            *s.borrow_mut() += 1;
            if *s.borrow() == 1 {
                return Verdict::Drop;
            }
        }
        Verdict::Pass
    });
    (f, seen)
}

#[test]
fn lost_response_is_answered_again_without_writing_twice() {
    let mut net = Net::new(2, 3, LinkCfg::default());
    net.trace = Some(Vec::new());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (w, wmr) = buffer(&mut net, b, 64);
    let (f, seen) = drop_first(op::RC_RDMA_READ_RESPONSE_ONLY, 1);
    net.interceptor = Some(f);
    net.nodes[0].eng.post_send(net.now, a.qpn, &atomic_write(1, w, wmr.rkey, 0xAAAA)).unwrap();
    // Run until the responder executed it (and its answer was dropped).
    assert!(net.run_until(MS, |n| n.nodes[1].mem().get_u64(w) == 0xAAAA));
    // The host changes the word before the requester's retry arrives: a second execution
    // would put 0xAAAA back.
    net.nodes[1].mem().set_u64(w, 0xBBBB);
    net.run_idle(50 * MS);
    assert_eq!(statuses(&net.poll_all(0, a.cq)), vec![(1, WcStatus::Success, WcOpcode::AtomicWrite)]);
    assert_eq!(net.nodes[1].mem().get_u64(w), 0xBBBB, "the retried ATOMIC WRITE was not executed again");
    assert_eq!(*seen.borrow(), 2, "the duplicate was answered");
    let sent = net.trace.as_ref().unwrap().iter().filter(|(_, p)| p.opcode() == op::RC_ATOMIC_WRITE).count();
    assert_eq!(sent, 2);
    assert_eq!(net.nodes[1].eng.counters().duplicate_requests, 1);
    let _ = b;
}

#[test]
fn duplicated_flush_and_atomic_write_requests_are_answered_once_each() {
    let mut net = Net::new(2, 4, LinkCfg::default());
    let o = flush_opts();
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (w, wmr) = region(&mut net, b, 64, ALL_REMOTE | AccessFlags::FLUSH_GLOBAL);
    // Every ATOMIC WRITE and FLUSH request is sent twice; the copy arrives 3 µs later.
    let copies: Rc<RefCell<Vec<Packet>>> = Rc::new(RefCell::new(Vec::new()));
    let c2 = copies.clone();
    net.interceptor = Some(Box::new(move |p: &mut Packet| {
        if matches!(p.opcode(), op::RC_ATOMIC_WRITE | op::RC_FLUSH) {
            c2.borrow_mut().push(p.clone());
        }
        Verdict::Pass
    }));
    let e = &mut net.nodes[0].eng;
    e.post_send(net.now, a.qpn, &atomic_write(1, w, wmr.rkey, 1)).unwrap();
    e.post_send(net.now, a.qpn, &flush(2, w, wmr.rkey, 8, 0)).unwrap();
    e.post_send(net.now, a.qpn, &atomic_write(3, w + 8, wmr.rkey, 3)).unwrap();
    for _ in 0..200 {
        net.pump_tx();
        for p in copies.borrow_mut().drain(..) {
            net.inject(p, 3_000);
        }
        if !net.step() {
            break;
        }
    }
    net.run_idle(10 * MS);
    assert_eq!(
        statuses(&net.poll_all(0, a.cq)),
        vec![
            (1, WcStatus::Success, WcOpcode::AtomicWrite),
            (2, WcStatus::Success, WcOpcode::Flush),
            (3, WcStatus::Success, WcOpcode::AtomicWrite)
        ]
    );
    assert_eq!((net.nodes[1].mem().get_u64(w), net.nodes[1].mem().get_u64(w + 8)), (1, 3));
    let c = net.nodes[1].eng.counters();
    assert_eq!(c.duplicate_requests, 3);
    assert_eq!(c.flush_atomic_write_naks, 0);
    let c = net.nodes[0].eng.counters();
    assert!(c.unexpected_responses >= 1, "the second answers are ignored: {c:?}");
    assert_eq!(net.nodes[0].eng.query_qp(a.qpn).unwrap().0.qp_state, QpState::Rts);
    let _ = b;
}

#[test]
fn lossy_duplicating_reordering_link_keeps_every_word_exact() {
    let (mut lost, mut duplicated, mut dup_requests) = (0, 0, 0);
    for seed in 0..12u64 {
        let link = LinkCfg { loss: 0.08, dup: 0.08, reorder: 0.15, reorder_window: 20_000, ..LinkCfg::default() };
        let mut net = Net::new(2, 100 + seed, link);
        let o = QpOpts { max_rd_atomic: 4, ..flush_opts() };
        let (a, b) = connect(&mut net, 0, 1, &o);
        let (wa, wamr) = region(&mut net, a, 512, ALL_REMOTE | AccessFlags::FLUSH_GLOBAL);
        let (wb, wbmr) = region(&mut net, b, 512, ALL_REMOTE | AccessFlags::FLUSH_GLOBAL);
        let mut rng = Rng::new(seed);
        let mut want_a = [0u64; 64];
        let mut want_b = [0u64; 64];
        let mut posted = 0u64;
        for i in 0..40u64 {
            // Both sides write words of the other; every 5th request is a FLUSH.
            let (from, to_end, base, rkey, want) =
                if i % 2 == 0 { (a, 1, wb, wbmr.rkey, &mut want_b) } else { (b, 0, wa, wamr.rkey, &mut want_a) };
            let _ = to_end;
            let wr = if i % 5 == 4 {
                flush(i, base, rkey, 512, (i % 3 == 0) as u8)
            } else {
                let slot = rng.below(64) as usize;
                let v = rng.next_u64();
                want[slot] = v;
                atomic_write(i, base + 8 * slot as u64, rkey, v)
            };
            net.nodes[from.node].eng.post_send(net.now, from.qpn, &wr).unwrap();
            posted += 1;
        }
        net.run_idle(2_000 * MS);
        let mut wc = net.poll_all(0, a.cq);
        wc.extend(net.poll_all(1, b.cq));
        assert_eq!(wc.len() as u64, posted, "seed {seed}");
        assert!(wc.iter().all(|w| w.status == WcStatus::Success), "seed {seed}: {wc:?}");
        for s in 0..64 {
            assert_eq!(net.nodes[1].mem().get_u64(wb + 8 * s), want_b[s as usize], "seed {seed} b[{s}]");
            assert_eq!(net.nodes[0].mem().get_u64(wa + 8 * s), want_a[s as usize], "seed {seed} a[{s}]");
        }
        for n in 0..2 {
            assert_eq!(net.nodes[n].eng.counters().flush_atomic_write_naks, 0, "seed {seed}");
            dup_requests += net.nodes[n].eng.counters().duplicate_requests;
        }
        lost += net.stats.lost;
        duplicated += net.stats.duplicated;
    }
    // The link did its job: packets were lost and duplicated, and responders saw duplicates.
    assert!(lost > 10 && duplicated > 10 && dup_requests > 5, "{lost} {duplicated} {dup_requests}");
}

/// One hostile request from a fresh connection: the requester's completion status, the
/// responder's NAK counter, and the guard words around the target untouched.
fn hostile(
    opts: QpOpts,
    mr_access: AccessFlags,
    wr: impl Fn(u64, u32) -> SendWr<'static>,
) -> (WcStatus, Counters, u64) {
    let mut net = Net::new(2, 5, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &opts);
    let (w, wmr) = region(&mut net, b, 64, mr_access);
    for i in 0..8 {
        net.nodes[1].mem().set_u64(w + 8 * i, 0x5A5A_5A5A_5A5A_5A5A);
    }
    net.nodes[1].mem().start_log();
    net.nodes[0].eng.post_send(net.now, a.qpn, &wr(w, wmr.rkey)).unwrap();
    net.run_idle(10 * MS);
    let wc = net.poll_all(0, a.cq);
    assert_eq!(wc.len(), 1);
    let log = net.nodes[1].mem().take_log();
    let touched = log.iter().filter(|x| !matches!(x.kind, AccessKind::Read)).count() as u64;
    for i in 0..8 {
        assert_eq!(net.nodes[1].mem().get_u64(w + 8 * i), 0x5A5A_5A5A_5A5A_5A5A);
    }
    assert_eq!(net.nodes[1].eng.query_qp(b.qpn).unwrap().0.qp_state, QpState::Err);
    (wc[0].status, *net.nodes[1].eng.counters(), touched)
}

#[test]
fn hostile_atomic_writes_and_flushes_are_nakked_counted_and_touch_nothing() {
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let fl = ALL_REMOTE | AccessFlags::FLUSH_GLOBAL;
    type MakeWr = Box<dyn Fn(u64, u32) -> SendWr<'static>>;
    let cases: Vec<(&str, QpOpts, AccessFlags, MakeWr, WcStatus)> = vec![
        ("misaligned", QpOpts::default(), rw, Box::new(|w, k| atomic_write(1, w + 4, k, 9)), WcStatus::RemInvReqErr),
        ("past the end", QpOpts::default(), rw, Box::new(|w, k| atomic_write(1, w + 64, k, 9)), WcStatus::RemAccessErr),
        (
            "before the start",
            QpOpts::default(),
            rw,
            Box::new(|w, k| atomic_write(1, w - 8, k, 9)),
            WcStatus::RemAccessErr,
        ),
        (
            "no remote write on the MR",
            QpOpts::default(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
            Box::new(|w, k| atomic_write(1, w, k, 9)),
            WcStatus::RemAccessErr,
        ),
        (
            "no remote write on the QP",
            QpOpts { access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ, ..QpOpts::default() },
            rw,
            Box::new(|w, k| atomic_write(1, w, k, 9)),
            WcStatus::RemInvReqErr,
        ),
        ("bad rkey", QpOpts::default(), rw, Box::new(|w, k| atomic_write(1, w, k ^ 0x100, 9)), WcStatus::RemAccessErr),
        (
            "flush: no FLUSH_GLOBAL on the QP",
            QpOpts::default(),
            fl,
            Box::new(|w, k| flush(1, w, k, 8, 0)),
            WcStatus::RemInvReqErr,
        ),
        (
            "flush: no FLUSH_GLOBAL on the MR",
            flush_opts(),
            ALL_REMOTE,
            Box::new(|w, k| flush(1, w, k, 8, 0)),
            WcStatus::RemAccessErr,
        ),
        (
            "flush: range past the end",
            flush_opts(),
            fl,
            Box::new(|w, k| flush(1, w + 32, k, 64, 0)),
            WcStatus::RemAccessErr,
        ),
        (
            "flush: region level, bad rkey",
            flush_opts(),
            fl,
            Box::new(|w, k| flush(1, w, k ^ 0x100, 8, 1)),
            WcStatus::RemAccessErr,
        ),
        (
            "flush: persistence (no MR can grant it)",
            QpOpts {
                access: ALL_REMOTE | AccessFlags::FLUSH_GLOBAL | AccessFlags::FLUSH_PERSISTENT,
                ..QpOpts::default()
            },
            fl,
            Box::new(|w, k| send_wr(1, WrKind::Flush { remote_addr: w, rkey: k, len: 8, placement: 2, level: 0 }, &[])),
            WcStatus::RemAccessErr,
        ),
    ];
    for (name, opts, access, wr, want) in cases {
        let (status, c, touched) = hostile(opts, access, wr);
        assert_eq!(status, want, "{name}");
        assert_eq!(c.flush_atomic_write_naks, 1, "{name}");
        assert_eq!(c.naks_sent, 1, "{name}");
        assert_eq!(touched, 0, "{name}: no write reached host memory");
    }
}

/// Rewrites the first request with `opcode` from node 0 with `edit` (bytes BTH..payload) and
/// recomputes its ICRC, so the responder sees a well-formed packet with hostile fields.
fn rewrite_first(net: &Net, opcode: u8, edit: impl Fn(&mut Vec<u8>) + 'static) -> Interceptor {
    let (IpAddr::V4(s), IpAddr::V4(d)) = (net.nodes[0].addr, net.nodes[1].addr) else { panic!("IPv4 simulator") };
    let ip = IpFields::v4_df(s, d);
    let mut done = false;
    Box::new(move |p: &mut Packet| {
        if !done && p.from == 0 && p.opcode() == opcode {
            done = true;
            let mut body = p.data[..p.data.len() - ICRC_LEN].to_vec();
            edit(&mut body);
            body.extend_from_slice(&[0; ICRC_LEN]);
            let n = body.len();
            let c = icrc(&ip, p.src_port, 4791, &body[..n - ICRC_LEN]);
            store_icrc(&mut body, c);
            p.data = body;
        }
        Verdict::Pass
    })
}

#[test]
fn malformed_atomic_write_and_flush_packets_are_invalid_requests() {
    // (name, opcode to rewrite, edit, flush?)
    type Edit = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, u8, Edit)> = vec![
        // RETH DMA length 16 with 8 bytes of payload.
        ("DMA length 16", op::RC_ATOMIC_WRITE, Box::new(|b: &mut Vec<u8>| b[27] = 16)),
        // 4 bytes of payload (DMA length still 8).
        ("4-byte payload", op::RC_ATOMIC_WRITE, Box::new(|b: &mut Vec<u8>| b.truncate(b.len() - 4))),
        // FETH selectivity level 3 (reserved).
        ("FETH level 3", op::RC_FLUSH, Box::new(|b: &mut Vec<u8>| b[15] = 0x31)),
        // FETH placement type 0 (none).
        ("FETH placement 0", op::RC_FLUSH, Box::new(|b: &mut Vec<u8>| b[15] = 0x00)),
    ];
    for (name, opcode, edit) in cases {
        let mut net = Net::new(2, 6, LinkCfg::default());
        let o = flush_opts();
        let (a, b) = connect(&mut net, 0, 1, &o);
        let (w, wmr) = region(&mut net, b, 64, ALL_REMOTE | AccessFlags::FLUSH_GLOBAL);
        net.nodes[1].mem().set_u64(w, 77);
        net.interceptor = Some(rewrite_first(&net, opcode, edit));
        let wr = if opcode == op::RC_FLUSH { flush(1, w, wmr.rkey, 8, 0) } else { atomic_write(1, w, wmr.rkey, 9) };
        net.nodes[0].eng.post_send(net.now, a.qpn, &wr).unwrap();
        net.run_idle(10 * MS);
        let wc = net.poll_all(0, a.cq);
        assert_eq!(statuses(&wc), vec![(1, WcStatus::RemInvReqErr, wr.kind.opcode_wc())], "{name}");
        assert_eq!(net.nodes[1].mem().get_u64(w), 77, "{name}");
        assert_eq!(net.nodes[1].eng.counters().flush_atomic_write_naks, 1, "{name}");
    }
}

trait WcOf {
    fn opcode_wc(&self) -> WcOpcode;
}

impl WcOf for WrKind {
    fn opcode_wc(&self) -> WcOpcode {
        match self {
            WrKind::Flush { .. } => WcOpcode::Flush,
            _ => WcOpcode::AtomicWrite,
        }
    }
}

#[test]
fn posting_checks_kinds_transports_and_flush_fields() {
    let mut net = Net::new(2, 7, LinkCfg::default());
    let (a, _b) = connect(&mut net, 0, 1, &QpOpts::default());
    let e = &mut net.nodes[0].eng;
    // Undefined FETH values are refused at post time.
    let bad = send_wr(1, WrKind::Flush { remote_addr: 0, rkey: 0, len: 0, placement: 0, level: 0 }, &[]);
    assert_eq!(e.post_send(0, a.qpn, &bad), Err(Error::Invalid));
    let bad = send_wr(1, WrKind::Flush { remote_addr: 0, rkey: 0, len: 0, placement: 1, level: 2 }, &[]);
    assert_eq!(e.post_send(0, a.qpn, &bad), Err(Error::Invalid));
    // RC only.
    let uc = QpOpts { ty: QpType::Uc, ..QpOpts::default() };
    let (ua, _ub) = connect(&mut net, 0, 1, &uc);
    let e = &mut net.nodes[0].eng;
    assert_eq!(e.post_send(0, ua.qpn, &atomic_write(1, 0, 0, 0)), Err(Error::Invalid));
    assert_eq!(e.post_send(0, ua.qpn, &flush(1, 0, 0, 0, 0)), Err(Error::Invalid));
    // No MR can promise persistence.
    let pd = e.alloc_pd().unwrap();
    let addr = e.memory().alloc(64);
    let r = e.reg_mr(pd, addr, 64, addr, AccessFlags::LOCAL_WRITE | AccessFlags::FLUSH_PERSISTENT);
    assert_eq!(r.err(), Some(Error::NotSupported));
    assert!(e.reg_mr(pd, addr, 64, addr, AccessFlags::LOCAL_WRITE | AccessFlags::FLUSH_GLOBAL).is_ok());
}
