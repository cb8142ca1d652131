//! Randomised sweep: for each seed, a mixed workload (SEND / SEND+IMM / WRITE / WRITE+IMM /
//! READ / CMP_SWP / FETCH_ADD on several RC QPs in both directions, sizes 0 B .. 1 MiB, path
//! MTUs 256..4096) over a link with 1 %, 5 % or 10 % loss, half as much duplication, and
//! reordering. Every WR must complete exactly once with SUCCESS and memory must be
//! byte-identical to the expected result. A failure prints its seed. Each seed also runs
//! loss-free, and the sweep prints goodput (bytes over virtual time to the last completion)
//! relative to the loss-free runs.
//!
//! `cargo test` runs a short sweep; the long one (1000 seeds per loss rate) is
//! `URXE_SEEDS=1000 cargo test --release --test sim_sweep -- --ignored --nocapture`.

mod sim;

use std::collections::BTreeMap;

use sim::*;
use urxe::engine::*;

/// The harshest link of the sweep; [`link`] derives the others from it.
const LINK: LinkCfg = LinkCfg {
    loss: 0.10,
    dup: 0.05,
    reorder: 0.05,
    reorder_window: 20_000,
    delay: 2_000,
    jitter: 2_000,
    bitflip: 0.0,
    mtu: 9000,
    gbps: 100,
    queue_ns: 100_000,
};

/// `loss` with half as much duplication and [`LINK`]'s reordering (0: a loss-free link with
/// the same delay, jitter and bandwidth).
fn link(loss: f64) -> LinkCfg {
    let reorder = if loss > 0.0 { LINK.reorder } else { 0.0 };
    LinkCfg { loss, dup: loss / 2.0, reorder, ..LINK }
}

/// Bytes moved per seed at most (a 1 MiB op still fits).
const BUDGET: u64 = 1_200_000;

fn describe(l: &LinkCfg) -> String {
    format!(
        "loss {:.0}%, dup {:.1}%, reorder {:.0}% within {} µs, delay {} µs + jitter {} µs, {} Gbit/s with {} µs of queue, path MTU 256..4096, sizes 0 B..1 MiB in 1..4 SGEs, ≤ {} KiB per seed",
        l.loss * 100.0,
        l.dup * 100.0,
        l.reorder * 100.0,
        l.reorder_window / 1000,
        l.delay / 1000,
        l.jitter / 1000,
        l.gbps,
        l.queue_ns / 1000,
        BUDGET / 1024
    )
}

/// Splits `[addr, addr+len)` into 1..=4 SGEs at random points (some possibly empty).
fn split(rng: &mut Rng, addr: u64, len: u32, mr: MrHandle) -> Vec<Sge> {
    let k = 1 + rng.below(4) as usize;
    let mut cuts: Vec<u32> = (1..k).map(|_| rng.below(len as u64 + 1) as u32).collect();
    cuts.sort();
    let mut out = Vec::with_capacity(k);
    let mut at = 0;
    for c in cuts.into_iter().chain(std::iter::once(len)) {
        out.push(sge(addr + at as u64, c - at, mr));
        at = c;
    }
    out
}

fn pick_size(rng: &mut Rng, left: u64) -> u32 {
    let r = rng.below(1000);
    let s = match r {
        0..300 => rng.below(65),
        300..650 => 64 + rng.below(4096),
        650..900 => 4096 + rng.below(61_440),
        900..995 => 65_536 + rng.below(196_608),
        _ => 262_144 + rng.below(786_433),
    };
    if s > left {
        rng.below(left.min(4096) + 1) as u32
    } else {
        s as u32
    }
}

/// A receive completion as checked: (wr_id, byte_len, immediate).
type RecvSeen = (u64, u32, Option<u32>);

/// What one seed must end with.
struct Expect {
    /// (node, addr, bytes)
    mem: Vec<(usize, u64, Vec<u8>)>,
    /// (node, cq) -> wr_ids of send completions
    send_ids: BTreeMap<(usize, CqId), Vec<u64>>,
    /// (node, cq) -> (wr_id, byte_len, imm) of receive completions
    recv: BTreeMap<(usize, CqId), Vec<RecvSeen>>,
}

/// What a seed exercised (summed over the sweep and printed).
#[derive(Default, Clone, Copy)]
struct Seen {
    ops: u64,
    bytes: u64,
    max_size: u64,
    zero_len: u64,
    packets: u64,
    retransmitted: u64,
    duplicates: u64,
    seq_naks: u64,
    timeouts: u64,
    early_rtos: u64,
    window_reductions: u64,
    /// Virtual time from the first post to the last completion.
    elapsed_ns: u64,
    /// The same workload's time on a loss-free link.
    clean_ns: u64,
}

impl Seen {
    fn add(&mut self, x: &Seen) {
        self.ops += x.ops;
        self.bytes += x.bytes;
        self.max_size = self.max_size.max(x.max_size);
        self.zero_len += x.zero_len;
        self.packets += x.packets;
        self.retransmitted += x.retransmitted;
        self.duplicates += x.duplicates;
        self.seq_naks += x.seq_naks;
        self.timeouts += x.timeouts;
        self.early_rtos += x.early_rtos;
        self.window_reductions += x.window_reductions;
        self.elapsed_ns += x.elapsed_ns;
        self.clean_ns += x.clean_ns;
    }
}

/// One seed over `link`, and the same workload loss-free (for the goodput ratio).
fn run_seed(seed: u64, link: LinkCfg) -> Result<Seen, String> {
    let clean = run_seed_on(seed, self::link(0.0)).map_err(|e| format!("loss-free: {e}"))?;
    let mut seen = run_seed_on(seed, link)?;
    seen.clean_ns = clean.elapsed_ns;
    Ok(seen)
}

fn run_seed_on(seed: u64, link: LinkCfg) -> Result<Seen, String> {
    let mut seen = Seen::default();
    let mut rng = Rng::new(seed);
    let nnodes = 2 + rng.below(2) as usize;
    let mut net = Net::with_memory(nnodes, seed, link, 4 << 20);
    let mut exp = Expect { mem: Vec::new(), send_ids: BTreeMap::new(), recv: BTreeMap::new() };
    let mut left = BUDGET;
    let nconn = 1 + rng.below(4) as usize;
    let mut next_id = 1u64;
    for _ in 0..nconn {
        let a = rng.below(nnodes as u64) as usize;
        let b = (a + 1 + rng.below(nnodes as u64 - 1) as usize) % nnodes;
        let mtu = Mtu::from_u32(1 + rng.below(5) as u32).unwrap();
        let o = QpOpts {
            mtu,
            a_psn: rng.below(1 << 24) as u32,
            b_psn: rng.below(1 << 24) as u32,
            max_rd_atomic: 1 + rng.below(16) as u8,
            ..QpOpts::default()
        };
        let (ea, eb) = connect(&mut net, a, b, &o);
        // One atomic counter per direction, on the responder.
        let mut counters = Vec::new();
        for (req, resp) in [(ea, eb), (eb, ea)] {
            let (c, cmr) = buffer(&mut net, resp, 8);
            let init = rng.next_u64();
            net.nodes[resp.node].mem().set_u64(c, init);
            counters.push((req, resp, c, cmr, init));
        }
        let nops = 4 + rng.below(13);
        for _ in 0..nops {
            let dir = rng.below(2) as usize;
            let (req, resp, ctr, ctrmr, cur) = counters[dir];
            let kind = rng.below(7);
            let id = next_id;
            next_id += 1;
            let sends = exp.send_ids.entry((req.node, req.cq)).or_default();
            sends.push(id);
            if kind >= 5 {
                // Atomics: executed in order on this QP, so the results are known.
                let (res, resmr) = buffer(&mut net, req, 8);
                let (wk, new) = if kind == 5 {
                    let compare = if rng.chance(0.7) { cur } else { cur ^ 1 };
                    let swap = rng.next_u64();
                    (
                        WrKind::AtomicCmpSwp { remote_addr: ctr, rkey: ctrmr.rkey, compare, swap },
                        if compare == cur { swap } else { cur },
                    )
                } else {
                    let add = rng.next_u64();
                    (WrKind::AtomicFetchAdd { remote_addr: ctr, rkey: ctrmr.rkey, add }, cur.wrapping_add(add))
                };
                exp.mem.push((req.node, res, cur.to_ne_bytes().to_vec()));
                counters[dir].4 = new;
                net.nodes[req.node].eng.post_send(net.now, req.qpn, &send_wr(id, wk, &[sge(res, 8, resmr)])).unwrap();
                continue;
            }
            let len = pick_size(&mut rng, left);
            left -= len as u64;
            seen.ops += 1;
            seen.bytes += len as u64;
            seen.max_size = seen.max_size.max(len as u64);
            seen.zero_len += (len == 0) as u64;
            let (src_end, dst_end) = if kind == 4 { (resp, req) } else { (req, resp) };
            let (src, smr) = buffer(&mut net, src_end, len as u64);
            let (dst, dmr) = buffer(&mut net, dst_end, len as u64);
            let mut data = vec![0u8; len as usize];
            rng.fill(&mut data);
            net.nodes[src_end.node].mem().set(src, &data);
            exp.mem.push((dst_end.node, dst, data));
            let imm = rng.next_u64() as u32;
            let wk = match kind {
                0 => WrKind::Send,
                1 => WrKind::SendWithImm { imm_data: imm },
                2 => WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey },
                3 => WrKind::RdmaWriteWithImm { remote_addr: dst, rkey: dmr.rkey, imm_data: imm },
                _ => WrKind::RdmaRead { remote_addr: src, rkey: smr.rkey },
            };
            if matches!(kind, 0 | 1 | 3) {
                // The responder consumes a receive WQE, in message order.
                let sg = if kind == 3 { vec![] } else { split(&mut rng, dst, len, dmr) };
                net.nodes[resp.node].eng.post_recv(resp.qpn, &RecvWr { wr_id: id, sg_list: &sg }).unwrap();
                let imm = (kind != 0).then_some(imm);
                exp.recv.entry((resp.node, resp.cq)).or_default().push((id, len, imm));
            }
            let sg = if kind == 4 { split(&mut rng, dst, len, dmr) } else { split(&mut rng, src, len, smr) };
            net.nodes[req.node].eng.post_send(net.now, req.qpn, &send_wr(id, wk, &sg)).unwrap();
        }
    }
    let total: usize =
        exp.send_ids.values().map(|v| v.len()).sum::<usize>() + exp.recv.values().map(|v| v.len()).sum::<usize>();
    let mut got: BTreeMap<(usize, CqId), Vec<WorkCompletion>> = BTreeMap::new();
    let keys: Vec<(usize, CqId)> = exp.send_ids.keys().chain(exp.recv.keys()).copied().collect();
    let mut n = 0;
    let start = net.now;
    let done = net.run_until(30_000_000_000, |net| {
        for &(node, cq) in &keys {
            let wcs = net.poll_all(node, cq);
            n += wcs.len();
            got.entry((node, cq)).or_default().extend(wcs);
        }
        n >= total
    });
    seen.elapsed_ns = net.now - start;
    // Let stray duplicates drain: nothing may complete twice.
    net.run_idle(5_000_000);
    for &(node, cq) in &keys {
        got.entry((node, cq)).or_default().extend(net.poll_all(node, cq));
    }
    if !done {
        return Err(format!("only {n}/{total} completions by t={} ns", net.now));
    }
    for (k, wcs) in &got {
        for w in wcs {
            if w.status != WcStatus::Success {
                return Err(format!("node {} wr {} completed with {:?}", k.0, w.wr_id, w.status));
            }
        }
        let mut sends: Vec<u64> = wcs.iter().filter(|w| (w.opcode as u32) < 128).map(|w| w.wr_id).collect();
        let want = exp.send_ids.get(k).cloned().unwrap_or_default();
        if sends != want {
            sends.sort();
            return Err(format!("node {} send completions {:?}, expected {:?}", k.0, sends, want));
        }
        let recvs: Vec<RecvSeen> = wcs
            .iter()
            .filter(|w| (w.opcode as u32) >= 128)
            .map(|w| (w.wr_id, w.byte_len, w.wc_flags.contains(WcFlags::WITH_IMM).then_some(w.imm_data)))
            .collect();
        if recvs != exp.recv.get(k).cloned().unwrap_or_default() {
            return Err(format!("node {} receive completions differ: {:?}", k.0, recvs));
        }
    }
    for (node, addr, bytes) in &exp.mem {
        if &net.nodes[*node].mem().get(*addr, bytes.len()) != bytes {
            return Err(format!("memory at node {node} {addr:#x} (+{} bytes) differs", bytes.len()));
        }
    }
    for n in &net.nodes {
        let c = n.eng.counters();
        seen.packets += c.sent_pkts;
        seen.retransmitted += c.retransmitted_pkts;
        seen.duplicates += c.duplicate_requests;
        seen.seq_naks += c.seq_naks_rcvd;
        seen.timeouts += c.ack_timeouts;
        seen.early_rtos += c.early_rtos;
        seen.window_reductions += c.window_reductions;
    }
    Ok(seen)
}

fn sweep(first: u64, count: u64, link: LinkCfg) -> u64 {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as u64;
    let ok = std::sync::atomic::AtomicU64::new(0);
    let total = std::sync::Mutex::new(Seen::default());
    std::thread::scope(|s| {
        for t in 0..threads {
            let ok = &ok;
            let total = &total;
            s.spawn(move || {
                let mut seed = first + t;
                while seed < first + count {
                    match run_seed(seed, link) {
                        Ok(x) => {
                            ok.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            total.lock().unwrap().add(&x);
                        }
                        Err(e) => eprintln!("seed {seed} FAILED: {e}"),
                    }
                    seed += threads;
                }
            });
        }
    });
    let ok = ok.into_inner();
    let t = total.into_inner().unwrap();
    println!(
        "exercised: {} data WRs ({} zero-length, largest {} B, {} MiB) + atomics; {} packets, {} retransmitted, {} duplicate requests, {} sequence NAKs, {} ACK timeouts, {} early RTOs, {} window reductions",
        t.ops,
        t.zero_len,
        t.max_size,
        t.bytes >> 20,
        t.packets,
        t.retransmitted,
        t.duplicates,
        t.seq_naks,
        t.timeouts,
        t.early_rtos,
        t.window_reductions
    );
    let mib_s = |ns: u64| t.bytes as f64 / 1_048_576.0 / (ns.max(1) as f64 / 1e9);
    println!(
        "goodput at {:.0}% loss: {:.3}x loss-free ({:.1} MiB/s vs {:.1} MiB/s of virtual time, {} seeds)",
        link.loss * 100.0,
        t.clean_ns as f64 / t.elapsed_ns.max(1) as f64,
        mib_s(t.elapsed_ns),
        mib_s(t.clean_ns),
        ok
    );
    println!("{ok}/{count} seeds ok ({})", describe(&link));
    ok
}

const LOSS_RATES: [f64; 3] = [0.01, 0.05, 0.10];

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn short_seed_sweep() {
    let n = env("URXE_SHORT_SEEDS", 12);
    for loss in LOSS_RATES {
        assert_eq!(sweep(env("URXE_SEED_START", 0), n, link(loss)), n, "at {loss} loss");
    }
}

#[test]
#[ignore = "long: URXE_SEEDS=1000 cargo test --release --test sim_sweep -- --ignored --nocapture"]
fn long_seed_sweep() {
    let n = env("URXE_SEEDS", 1000);
    for loss in LOSS_RATES {
        assert_eq!(sweep(env("URXE_SEED_START", 1_000_000), n, link(loss)), n, "at {loss} loss");
    }
}

/// UC and UD under the same faults: no delivery guarantee (and duplicated or late packets can
/// deliver a message again or out of order: neither transport detects them), but every
/// message that is delivered is whole and byte-identical to one that was sent, never a mix,
/// and the sender completes everything.
fn run_unreliable_seed(seed: u64) -> Result<(), String> {
    use QpAttrMask as A;
    let mut rng = Rng::new(seed);
    let mut net = Net::with_memory(2, seed, LINK, 4 << 20);
    let ty = if rng.below(2) == 0 { QpType::Uc } else { QpType::Ud };
    let mtu = Mtu::from_u32(1 + rng.below(5) as u32).unwrap();
    let o = QpOpts { ty, mtu, a_psn: rng.below(1 << 24) as u32, b_psn: rng.below(1 << 24) as u32, ..QpOpts::default() };
    let (a, b, ah) = if ty == QpType::Uc {
        let (a, b) = connect(&mut net, 0, 1, &o);
        (a, b, None)
    } else {
        let a = make_qp(&mut net, 0, &o);
        let b = make_qp(&mut net, 1, &o);
        for e in [a, b] {
            let n = &mut net.nodes[e.node].eng;
            let at = QpAttr { qp_state: QpState::Init, port_num: 1, qkey: 7, sq_psn: o.a_psn, ..QpAttr::default() };
            n.modify_qp(e.qpn, &at, A::STATE | A::PKEY_INDEX | A::PORT | A::QKEY).unwrap();
            n.modify_qp(e.qpn, &QpAttr { qp_state: QpState::Rtr, ..at }, A::STATE).unwrap();
            n.modify_qp(e.qpn, &QpAttr { qp_state: QpState::Rts, ..at }, A::STATE | A::SQ_PSN).unwrap();
        }
        let dgid = gid_of(net.nodes[1].addr);
        let ahattr = AhAttr {
            is_global: true,
            grh: GlobalRoute { dgid, ..Default::default() },
            port_num: 1,
            ..Default::default()
        };
        let ah = net.nodes[0].eng.create_ah(a.pd, &ahattr).unwrap();
        (a, b, Some(ah))
    };
    let grh = if ty == QpType::Ud { 40 } else { 0 };
    // UC messages of up to 4 packets: each is delivered only if all its packets are, so
    // longer ones would almost never make it through 10% loss.
    let max = if ty == QpType::Ud { mtu.bytes() as u32 } else { 4 * mtu.bytes() as u32 };
    let n = 10 + rng.below(40);
    let mut sent = Vec::new();
    let (rbuf, rmr) = buffer(&mut net, b, n * (max as u64 + 64));
    for i in 0..n {
        let len = rng.below(max as u64 + 1) as u32;
        let (src, smr) = buffer(&mut net, a, len as u64);
        let mut data = vec![0u8; len as usize];
        rng.fill(&mut data);
        net.nodes[0].mem().set(src, &data);
        let slot = rbuf + i * (max as u64 + 64);
        net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: i, sg_list: &[sge(slot, max + grh, rmr)] }).unwrap();
        let ud = ah.map(|ah| UdDest { ah, remote_qpn: b.qpn, remote_qkey: 7 });
        let sg = split(&mut rng, src, len, smr);
        let wr = SendWr { wr_id: i, kind: WrKind::Send, flags: SendFlags::SIGNALED, sg_list: &sg, ud };
        net.nodes[0].eng.post_send(net.now, a.qpn, &wr).unwrap();
        sent.push(data);
    }
    net.run_idle(100_000_000);
    let wa = net.poll_all(0, a.cq);
    if wa.len() as u64 != n || wa.iter().any(|w| w.status != WcStatus::Success) {
        return Err(format!("{ty:?}: sender completions {:?}", wa.iter().map(|w| w.status).collect::<Vec<_>>()));
    }
    let wb = net.poll_all(1, b.cq);
    if (wb.len() as u64) < n / 4 {
        return Err(format!("{ty:?}: only {} of {n} messages delivered", wb.len()));
    }
    for (k, w) in wb.iter().enumerate() {
        if w.status != WcStatus::Success {
            return Err(format!("{ty:?}: receive {k} completed with {:?}", w.status));
        }
        let slot = rbuf + w.wr_id * (max as u64 + 64);
        let got = net.nodes[1].mem().get(slot + grh as u64, w.byte_len as usize - grh as usize);
        if !sent.contains(&got) {
            return Err(format!("{ty:?}: receive {k} ({} bytes) is not a message that was sent", got.len()));
        }
    }
    Ok(())
}

#[test]
fn unreliable_transports_deliver_only_whole_messages() {
    let n = env("URXE_SHORT_SEEDS", 12) * 3;
    let first = env("URXE_SEED_START", 0);
    let fails: Vec<String> =
        (first..first + n).filter_map(|s| run_unreliable_seed(s).err().map(|e| format!("seed {s}: {e}"))).collect();
    assert!(fails.is_empty(), "{fails:#?}");
}

/// Several RC QPs whose receiver shares one SRQ, under the same faults: every SEND is
/// received exactly once, whole, on the QP it was sent to.
fn run_srq_seed(seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let mut net = Net::with_memory(2, seed, LINK, 4 << 20);
    let mtu = Mtu::from_u32(1 + rng.below(5) as u32).unwrap();
    let o = QpOpts { mtu, ..QpOpts::default() };
    // Receiver side: one PD, CQ and SRQ shared by every QP.
    let e = &mut net.nodes[1].eng;
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(1024).unwrap();
    let (srq, _) = e.create_srq(pd, &SrqAttr { max_wr: 512, max_sge: 4, srq_limit: 0 }).unwrap();
    let nqp = 2 + rng.below(3) as usize;
    let mut senders = Vec::new();
    for i in 0..nqp {
        let a = make_qp(&mut net, 0, &o);
        let init = QpInitAttr {
            pd,
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            srq: Some(srq),
            cap: QpCap { max_send_wr: 8, max_recv_wr: 0, max_send_sge: 1, max_recv_sge: 0, max_inline_data: 0 },
            sq_sig_all: true,
        };
        let (qpn, _) = net.nodes[1].eng.create_qp(&init).unwrap();
        let b = End { node: 1, pd, cq, qpn };
        let (pa, pb) = (rng.below(1 << 24) as u32, rng.below(1 << 24) as u32);
        bring_up(&mut net, a, 1, b.qpn, pa, pb, &o);
        bring_up(&mut net, b, 0, a.qpn, pb, pa, &o);
        senders.push((a, b, i));
    }
    let max = 3 * mtu.bytes() as u32;
    let nmsg = 20 + rng.below(60);
    let slot = max as u64 + 64;
    let rbase = net.nodes[1].mem().alloc(nmsg * slot);
    let rmr = net.nodes[1].eng.reg_mr(pd, rbase, nmsg * slot, rbase, AccessFlags::LOCAL_WRITE).unwrap();
    for i in 0..nmsg {
        let sg = split(&mut rng, rbase + i * slot, max, rmr);
        net.nodes[1].eng.post_srq_recv(srq, &RecvWr { wr_id: i, sg_list: &sg }).unwrap();
    }
    // (qpn on the receiver, content) of every message.
    let mut sent: Vec<(Qpn, Vec<u8>)> = Vec::new();
    let mut per_qp = vec![0u64; nqp];
    for id in 0..nmsg {
        let (a, b, i) = senders[rng.below(nqp as u64) as usize];
        let len = rng.below(max as u64 + 1) as u32;
        let (src, smr) = buffer(&mut net, a, len as u64);
        let mut data = vec![0u8; len as usize];
        rng.fill(&mut data);
        net.nodes[0].mem().set(src, &data);
        net.nodes[0]
            .eng
            .post_send(net.now, a.qpn, &send_wr(id, WrKind::Send, &[sge(src, len, smr)]))
            .map_err(|e| format!("post: {e}"))?;
        per_qp[i] += 1;
        sent.push((b.qpn, data));
        // Keep each send queue within its 8 WRs: let the network drain now and then.
        if per_qp[i].is_multiple_of(8) {
            net.run_idle(50_000_000);
        }
    }
    net.run_idle(1_000_000_000);
    let mut sends = 0;
    for (a, _, _) in &senders {
        for w in net.poll_all(0, a.cq) {
            if w.status != WcStatus::Success {
                return Err(format!("send {} completed with {:?}", w.wr_id, w.status));
            }
            sends += 1;
        }
    }
    if sends != nmsg {
        return Err(format!("{sends} of {nmsg} sends completed"));
    }
    let recvs = net.poll_all(1, cq);
    if recvs.len() as u64 != nmsg {
        return Err(format!("{} of {nmsg} receives completed", recvs.len()));
    }
    let mut seen: Vec<(Qpn, Vec<u8>)> = Vec::new();
    for w in &recvs {
        if w.status != WcStatus::Success {
            return Err(format!("receive {} completed with {:?}", w.wr_id, w.status));
        }
        let got = net.nodes[1].mem().get(rbase + w.wr_id * slot, w.byte_len as usize);
        seen.push((w.qp_num, got));
    }
    let mut want = sent.clone();
    want.sort();
    seen.sort();
    if seen != want {
        return Err("received messages differ from those sent (per QP)".into());
    }
    Ok(())
}

#[test]
fn srq_shared_by_several_qps_receives_every_send_exactly_once() {
    let n = env("URXE_SHORT_SEEDS", 12);
    let first = env("URXE_SEED_START", 0);
    let fails: Vec<String> =
        (first..first + n).filter_map(|s| run_srq_seed(s).err().map(|e| format!("seed {s}: {e}"))).collect();
    assert!(fails.is_empty(), "{fails:#?}");
}
