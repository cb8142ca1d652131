//! A peer with random keys and addresses against a responder whose host memory has holes.
//!
//! The target registers four regions: R0 with every remote right and a page-sized hole
//! unmapped after registration, R1 remote-read only, R2 remote-write only, R3 deregistered (its
//! key is stale). The peer is an ordinary engine posting RDMA WRITE, READ and atomics whose
//! rkey is a live key, a live key with bits flipped, a random word or the stale key, at
//! addresses in, around and far from the regions. For every operation the property is exact:
//! it completes successfully iff the key names a live region that grants the access and the
//! whole range lies in it, clear of the hole (atomics: 8 aligned bytes); and every access the
//! target's engine made to its memory (the simulated host records them) was to mapped bytes of
//! a region that grants it. Nothing may panic.

mod sim;

use proptest::prelude::*;
use sim::*;
use urxe::engine::*;

const REGION: u64 = 4096;
const HOLE: (u64, u64) = (1024, 1024);
const MS: u64 = 1_000_000;

#[derive(Clone, Copy, Debug)]
enum KeyChoice {
    Live(usize),
    Flipped(usize, u32),
    Random(u32),
    Stale,
}

#[derive(Clone, Copy, Debug)]
struct Op {
    verb: Verb,
    key: KeyChoice,
    /// Address relative to the start of the key's region (`region` for keys that name none),
    /// possibly before or after it; atomics round it down to 8 bytes when `align` ...
    region: usize,
    off: i64,
    align: bool,
    /// ... or anywhere.
    far: Option<u64>,
    len: u32,
}

fn key_choice() -> impl Strategy<Value = KeyChoice> {
    prop_oneof![
        4 => (0usize..3).prop_map(KeyChoice::Live),
        2 => ((0usize..3), 1u32..=u32::MAX).prop_map(|(r, b)| KeyChoice::Flipped(r, b)),
        1 => any::<u32>().prop_map(KeyChoice::Random),
        1 => Just(KeyChoice::Stale),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let verb = proptest::sample::select(Verb::ALL.to_vec());
    let off = prop_oneof![4 => 0i64..REGION as i64, 1 => -300i64..(REGION as i64 + 300)];
    let len = prop_oneof![2 => 1u32..128, 1 => 1u32..3000];
    let where_ = (0usize..4, off, any::<bool>(), proptest::option::weighted(0.05, any::<u64>()));
    (verb, key_choice(), where_, len).prop_map(|(verb, key, (region, off, align, far), len)| Op {
        verb,
        key,
        region,
        off,
        align,
        far,
        len,
    })
}

/// One target region as registered.
#[derive(Clone, Copy)]
struct Region {
    id: MrId,
    addr: u64,
    rkey: u32,
    access: AccessFlags,
    live: bool,
}

struct Setup {
    net: Net,
    regions: [Region; 4],
    target_pd: PdId,
    peer_pd: PdId,
    /// The peer's local buffer (source of WRITEs, sink of READs and atomics).
    local: (u64, MrHandle),
}

fn setup(seed: u64) -> Setup {
    let mut net = Net::new(2, seed, LinkCfg::default());
    let e = &mut net.nodes[1].eng;
    let pd = e.alloc_pd().unwrap();
    let all =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let rights = [
        all,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        all,
    ];
    let regions = rights.map(|access| {
        let e = &mut net.nodes[1].eng;
        let addr = e.memory().alloc(REGION);
        // Unregistered bytes between regions.
        e.memory().alloc(512);
        let mr = e.reg_mr(pd, addr, REGION, addr, access).unwrap();
        Region { id: mr.id, addr, rkey: mr.rkey, access, live: true }
    });
    let mut regions = regions;
    // R0 loses a page after registration; R3 is deregistered (its key goes stale).
    net.nodes[1].mem().punch_hole(regions[0].addr + HOLE.0, HOLE.1);
    net.nodes[1].eng.dereg_mr(regions[3].id).unwrap();
    regions[3].live = false;
    net.nodes[1].mem().start_log();
    let pd0 = net.nodes[0].eng.alloc_pd().unwrap();
    let local = {
        let e = &mut net.nodes[0].eng;
        let addr = e.memory().alloc(REGION);
        (addr, e.reg_mr(pd0, addr, REGION, addr, all).unwrap())
    };
    Setup { net, regions, target_pd: pd, peer_pd: pd0, local }
}

/// Whether `[addr, addr + len)` lies inside region `r`.
fn inside(r: &Region, addr: u64, len: u64) -> bool {
    addr.checked_add(len).is_some_and(|end| addr >= r.addr && end <= r.addr + REGION)
}

/// Whether `[addr, addr + len)` is clear of the page unmapped from R0.
fn mapped(regions: &[Region; 4], addr: u64, len: u64) -> bool {
    let hole = (regions[0].addr + HOLE.0, regions[0].addr + HOLE.0 + HOLE.1);
    addr.checked_add(len).is_some_and(|end| !(addr < hole.1 && hole.0 < end))
}

/// Whether the target may touch `[addr, addr + len)` for an access needing `right`.
fn allowed(regions: &[Region; 4], right: AccessFlags, addr: u64, len: u64) -> bool {
    regions.iter().any(|r| r.live && r.access.contains(right) && inside(r, addr, len)) && mapped(regions, addr, len)
}

/// Runs one operation on a fresh QP pair; returns its completion status and the rkey, address
/// and length it used.
fn run_op(s: &mut Setup, o: &Op) -> (WcStatus, u32, u64, u64) {
    let opts = QpOpts::default();
    let a = make_qp_in(&mut s.net, 0, s.peer_pd, &opts);
    let b = make_qp_in(&mut s.net, 1, s.target_pd, &opts);
    bring_up(&mut s.net, a, 1, b.qpn, opts.a_psn, opts.b_psn, &opts);
    bring_up(&mut s.net, b, 0, a.qpn, opts.b_psn, opts.a_psn, &opts);
    let rkey = match o.key {
        KeyChoice::Live(r) => s.regions[r].rkey,
        KeyChoice::Flipped(r, bits) => s.regions[r].rkey ^ bits,
        KeyChoice::Random(k) => k,
        KeyChoice::Stale => s.regions[3].rkey,
    };
    let region = match o.key {
        KeyChoice::Live(r) | KeyChoice::Flipped(r, _) => r,
        KeyChoice::Random(_) | KeyChoice::Stale => o.region,
    };
    let atomic = o.verb.is_atomic();
    let mut va = o.far.unwrap_or_else(|| s.regions[region].addr.wrapping_add_signed(o.off));
    if atomic && o.align {
        va &= !7;
    }
    let len = if atomic { 8 } else { o.len };
    let kind = o.verb.wr(va, rkey);
    let sg = [sge(s.local.0, len, s.local.1)];
    let posted = s.net.nodes[0].eng.post_send(s.net.now, a.qpn, &send_wr(1, kind, &sg));
    if atomic && !va.is_multiple_of(8) {
        // Our requester refuses a misaligned atomic itself; nothing reaches the target.
        assert_eq!(posted, Err(Error::Invalid), "misaligned atomic posted");
        return (WcStatus::LocQpOpErr, rkey, va, len as u64);
    }
    posted.unwrap();
    let mut got = Vec::new();
    let done = s.net.run_until(200 * MS, |n| {
        got.extend(n.poll_all(0, a.cq));
        !got.is_empty()
    });
    assert!(done, "no completion for {o:?} within 200 ms of virtual time");
    s.net.run_idle(5 * MS);
    // Leave nothing behind that a later operation could trip over.
    s.net.nodes[0].eng.destroy_qp(a.qpn).unwrap();
    s.net.nodes[1].eng.destroy_qp(b.qpn).unwrap();
    (got[0].status, rkey, va, len as u64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn responder_touches_only_mapped_registered_bytes(seed in any::<u64>(), ops in proptest::collection::vec(op(), 1..10)) {
        let mut s = setup(seed);
        for o in &ops {
            let (status, rkey, va, len) = run_op(&mut s, o);
            let region = s.regions.iter().find(|r| r.live && r.rkey == rkey).copied();
            let right = o.verb.need();
            let aligned = !o.verb.is_atomic() || va.is_multiple_of(8);
            let expect_ok = region.is_some_and(|r| r.access.contains(right) && inside(&r, va, len))
                && mapped(&s.regions, va, len)
                && aligned;
            prop_assert_eq!(status == WcStatus::Success, expect_ok,
                "{:?} rkey {:#x} va {:#x} len {} -> {:?}", o, rkey, va, len, status);
            for acc in s.net.nodes[1].mem().take_log() {
                let right = match acc.kind {
                    AccessKind::Read => AccessFlags::REMOTE_READ,
                    AccessKind::Write => AccessFlags::REMOTE_WRITE,
                    AccessKind::Atomic => AccessFlags::REMOTE_ATOMIC,
                };
                prop_assert!(allowed(&s.regions, right, acc.addr, acc.len),
                    "target accessed {:?} outside mapped, registered bytes granting it (op {:?})", acc, o);
            }
        }
    }
}
