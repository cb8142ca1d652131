//! Two transport devices in one process, on two loopback addresses, moving data over real UDP
//! sockets with the process-memory accessor: SEND/RECV, RDMA WRITE, RDMA READ and atomics on
//! RC, byte for byte, in the caller's thread (fast path) and through the progress thread.

mod urxe_bin;
use std::net::IpAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use urxe::engine::*;
use urxe::observe::TransportCounters;
use urxe::runtime::Device;

struct Side {
    dev: Device,
    pd: PdId,
    cq: CqId,
    qpn: Qpn,
}

fn gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn cfg() -> EngineConfig {
    EngineConfig { local_addr: "127.0.0.1".parse().unwrap(), max_mtu: Mtu::Mtu4096, limits: Limits::default(), seed: 1 }
}

/// A free loopback address of our own for this test (tests run in parallel).
/// Opens a device on the first free address 127.90.x.`last`, its events going to a fresh
/// `sink()` (a failed open drops the one it was given).
fn open_with(last: u8, mut sink: impl FnMut() -> urxe::runtime::EventSink) -> Device {
    for b in 0..200u8 {
        let ip: IpAddr = format!("127.{}.{}.{}", 90, b, last).parse().unwrap();
        if let Ok(d) = Device::open(ip, cfg(), sink()) {
            return d;
        }
    }
    panic!("no free loopback address");
}

fn open(last: u8) -> (Device, mpsc::Receiver<Event>) {
    let (tx, rx) = mpsc::channel();
    let d = open_with(last, || {
        let t = tx.clone();
        Box::new(move |e| {
            let _ = t.send(e);
            None
        })
    });
    (d, rx)
}

/// A device whose event sink writes a byte per event to a socket pair, as a completion
/// channel's fd is written: the device and the pair's reading end (non-blocking).
fn open_channel(last: u8) -> (Device, std::os::unix::net::UnixStream) {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let (rx, tx) = std::os::unix::net::UnixStream::pair().unwrap();
    rx.set_nonblocking(true).unwrap();
    let chan = rx.as_raw_fd();
    let d = open_with(last, || {
        let mut w = tx.try_clone().unwrap();
        Box::new(move |_e| w.write(&[1]).ok().map(|_| chan))
    });
    (d, rx)
}

/// One wait of a socket owner on channel `chan` (between `channel_wait_begin` and
/// `channel_wait_end`, as ibv_get_cq_event runs it): steps and sleeps in poll(2) on the
/// channel and the receive socket until the channel is readable (true) or `deadline` passes.
fn owner_wait(dev: &Device, chan: std::os::fd::RawFd, deadline: Instant) -> bool {
    while Instant::now() < deadline {
        let (rx, ms, ready) = dev.channel_step(chan);
        if ready {
            // The step says its record is on the channel: it must be readable now.
            let mut p = libc::pollfd { fd: chan, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd that outlives the call; no wait.
            assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 1, "ready, yet the channel is not readable");
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now()).as_millis() as i32 + 1;
        let ms = if ms < 0 { left } else { ms.min(left) };
        let mut fds = [
            libc::pollfd { fd: chan, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: rx, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds that outlive the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if n > 0 && fds[0].revents != 0 {
            return true;
        }
    }
    false
}

fn side(dev: Device, ty: QpType) -> Side {
    let (pd, cq, qpn) = dev.control(|e, _| {
        let pd = e.alloc_pd().unwrap();
        let (cq, _) = e.create_cq(256).unwrap();
        let cap = QpCap { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 64 };
        let init = QpInitAttr { pd, qp_type: ty, send_cq: cq, recv_cq: cq, srq: None, cap, sq_sig_all: false };
        let (qpn, _) = e.create_qp(&init).unwrap();
        (pd, cq, qpn)
    });
    Side { dev, pd, cq, qpn }
}

fn connect(me: &Side, peer: &Side, my_psn: u32, peer_psn: u32) {
    use QpAttrMask as A;
    let dgid = gid(peer.dev.local_addr());
    let access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    me.dev.control(|e, _| {
        let a = QpAttr { qp_state: QpState::Init, port_num: 1, qp_access_flags: access, ..Default::default() };
        e.modify_qp(me.qpn, &a, A::STATE | A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS).unwrap();
        let a = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: Some(Mtu::Mtu1024),
            dest_qp_num: peer.qpn,
            rq_psn: peer_psn,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 1,
            ah_attr: AhAttr {
                is_global: true,
                grh: GlobalRoute { dgid, hop_limit: 64, ..Default::default() },
                port_num: 1,
                ..Default::default()
            },
            ..Default::default()
        };
        let m = A::STATE | A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN | A::MAX_DEST_RD_ATOMIC | A::MIN_RNR_TIMER;
        e.modify_qp(me.qpn, &a, m).unwrap();
        let a = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: my_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
            ..Default::default()
        };
        let m = A::STATE | A::SQ_PSN | A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::MAX_QP_RD_ATOMIC;
        e.modify_qp(me.qpn, &a, m).unwrap();
    });
}

fn reg(s: &Side, buf: &mut [u8]) -> MrHandle {
    let addr = buf.as_mut_ptr() as u64;
    let access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    s.dev.control(|e, _| e.reg_mr(s.pd, addr, buf.len() as u64, addr, access).unwrap())
}

/// Busy-polls `s`'s CQ (the fast path) for one completion, bounded in time.
fn wait_wc(s: &Side) -> WorkCompletion {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [WorkCompletion::default(); 1];
    while Instant::now() < deadline {
        if s.dev.poll_cq(s.cq, &mut wc).unwrap() == 1 {
            return wc[0];
        }
    }
    panic!("no completion within 10 s");
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn rc_send_write_read_atomic_over_loopback_udp() {
    let (da, _ea) = open(1);
    let (db, _eb) = open(2);
    let a = side(da, QpType::Rc);
    let b = side(db, QpType::Rc);
    connect(&a, &b, 0xFFFF00, 0x000100);
    connect(&b, &a, 0x000100, 0xFFFF00);

    // SEND of 100 KiB (100 packets at MTU 1024), received into a posted buffer.
    let n = 100 * 1024;
    let mut src = pattern(n, 7);
    let mut dst = vec![0u8; n];
    let smr = reg(&a, &mut src);
    let dmr = reg(&b, &mut dst);
    let rsge = [Sge { addr: dst.as_mut_ptr() as u64, length: n as u32, lkey: dmr.lkey }];
    b.dev.control(|e, _| e.post_recv(b.qpn, &RecvWr { wr_id: 9, sg_list: &rsge }).unwrap());
    let ssge = [Sge { addr: src.as_ptr() as u64, length: n as u32, lkey: smr.lkey }];
    let wr = SendWr { wr_id: 1, kind: WrKind::Send, flags: SendFlags::SIGNALED, sg_list: &ssge, ud: None };
    a.dev.post_send(a.qpn, |post| post(&wr)).unwrap();
    let wc = wait_wc(&a);
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (1, WcStatus::Success, WcOpcode::Send));
    let wc = wait_wc(&b);
    assert_eq!((wc.wr_id, wc.status, wc.opcode, wc.byte_len), (9, WcStatus::Success, WcOpcode::Recv, n as u32));
    assert_eq!(dst, src);

    // RDMA WRITE of 64 KiB into b's buffer, then READ it back into a fresh buffer on a.
    let w = pattern(65536, 99);
    src[..65536].copy_from_slice(&w);
    let sge = [Sge { addr: src.as_ptr() as u64, length: 65536, lkey: smr.lkey }];
    let kind = WrKind::RdmaWrite { remote_addr: dst.as_ptr() as u64 + 4096, rkey: dmr.rkey };
    let wr = SendWr { wr_id: 2, kind, flags: SendFlags::SIGNALED, sg_list: &sge, ud: None };
    a.dev.post_send(a.qpn, |post| post(&wr)).unwrap();
    assert_eq!(wait_wc(&a).status, WcStatus::Success);
    assert_eq!(&dst[4096..4096 + 65536], &w[..]);

    let mut back = vec![0u8; 65536];
    let bmr = reg(&a, &mut back);
    let sge = [Sge { addr: back.as_mut_ptr() as u64, length: 65536, lkey: bmr.lkey }];
    let kind = WrKind::RdmaRead { remote_addr: dst.as_ptr() as u64 + 4096, rkey: dmr.rkey };
    let wr = SendWr { wr_id: 3, kind, flags: SendFlags::SIGNALED, sg_list: &sge, ud: None };
    a.dev.post_send(a.qpn, |post| post(&wr)).unwrap();
    let wc = wait_wc(&a);
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (3, WcStatus::Success, WcOpcode::RdmaRead));
    assert_eq!(back, w);

    // FETCH_ADD then CMP_SWAP on an 8-byte aligned word of b's buffer.
    let mut word = vec![0u64; 2];
    word[0] = 40;
    let word_addr = word.as_mut_ptr() as u64;
    let wmr = b.dev.control(|e, _| {
        e.reg_mr(b.pd, word_addr, 16, word_addr, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC).unwrap()
    });
    let mut orig = vec![0u64; 1];
    let omr = reg(&a, bytemuck(&mut orig));
    let sge = [Sge { addr: orig.as_mut_ptr() as u64, length: 8, lkey: omr.lkey }];
    let kind = WrKind::AtomicFetchAdd { remote_addr: word_addr, rkey: wmr.rkey, add: 2 };
    let wr = SendWr { wr_id: 4, kind, flags: SendFlags::SIGNALED, sg_list: &sge, ud: None };
    a.dev.post_send(a.qpn, |post| post(&wr)).unwrap();
    assert_eq!(wait_wc(&a).status, WcStatus::Success);
    // SAFETY: plain reads of our own Vec after the completion (the engine wrote it).
    assert_eq!(unsafe { std::ptr::read_volatile(orig.as_ptr()) }, 40);
    assert_eq!(unsafe { std::ptr::read_volatile(word.as_ptr()) }, 42);
    let kind = WrKind::AtomicCmpSwp { remote_addr: word_addr, rkey: wmr.rkey, compare: 42, swap: 7 };
    let wr = SendWr { wr_id: 5, kind, flags: SendFlags::SIGNALED, sg_list: &sge, ud: None };
    a.dev.post_send(a.qpn, |post| post(&wr)).unwrap();
    assert_eq!(wait_wc(&a).status, WcStatus::Success);
    assert_eq!(unsafe { std::ptr::read_volatile(word.as_ptr()) }, 7);

    let ca = a.dev.transport_counters();
    assert!(ca.tx_datagrams >= 100 + 64 + 2, "{ca:?}");
    assert!(ca.tx_gso_sends > 0, "loopback trains use GSO: {ca:?}");
    // Every packet's ICRC, hashed by the receiving transport (GRO trains split into their
    // packets), verified: urxe sends IP ID 0, which a UDP socket's receiver assumes.
    for s in [&a, &b] {
        let c = s.dev.control(|e, _| *e.counters());
        assert!(c.rcvd_pkts >= 64, "{c:?}");
        assert_eq!((c.icrc_errors, c.icrc_unverified), (0, 0), "{c:?}");
    }
}

fn bytemuck(v: &mut [u64]) -> &mut [u8] {
    let len = std::mem::size_of_val(v);
    // SAFETY: u64 has no padding and any byte pattern is a valid u64; same allocation.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, len) }
}

#[test]
fn progress_thread_completes_work_and_signals_armed_cq() {
    // Nobody polls b: its progress thread must receive, place the data and ACK, and the armed
    // CQ must produce a completion event.
    let (da, _ea) = open(3);
    let (db, eb) = open(4);
    let a = side(da, QpType::Rc);
    let b = side(db, QpType::Rc);
    connect(&a, &b, 10, 20);
    connect(&b, &a, 20, 10);
    let mut src = pattern(5000, 3);
    let mut dst = vec![0u8; 5000];
    let smr = reg(&a, &mut src);
    let dmr = reg(&b, &mut dst);
    let rsge = [Sge { addr: dst.as_mut_ptr() as u64, length: 5000, lkey: dmr.lkey }];
    b.dev.control(|e, _| {
        e.post_recv(b.qpn, &RecvWr { wr_id: 1, sg_list: &rsge }).unwrap();
        e.req_notify_cq(b.cq, false).unwrap();
    });
    let ssge = [Sge { addr: src.as_ptr() as u64, length: 5000, lkey: smr.lkey }];
    let wr = SendWr { wr_id: 1, kind: WrKind::Send, flags: SendFlags::SIGNALED, sg_list: &ssge, ud: None };
    a.dev.post_send(a.qpn, |post| post(&wr)).unwrap();
    let ev = eb.recv_timeout(Duration::from_secs(10)).expect("completion event from b's progress thread");
    assert_eq!(ev, Event::Completion(b.cq));
    assert_eq!(wait_wc(&a).status, WcStatus::Success);
    assert_eq!(wait_wc(&b).byte_len, 5000);
    assert_eq!(dst, src);
    assert!(b.dev.transport_counters().progress_wakeups > 0);
}

#[test]
fn urxe_stat_reads_counters_of_a_running_device() {
    let (d, _e) = open(5);
    let s = side(d, QpType::Rc);
    let out =
        std::process::Command::new(urxe_bin::urxe()).args(["stat", &std::process::id().to_string()]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("pid {}", std::process::id())), "{text}");
    assert!(text.contains(&format!("address {}", s.dev.local_addr())), "{text}");
    assert!(text.contains("sent_pkts") && text.contains("rcvd_pkts") && text.contains("tx_datagrams"), "{text}");
    // Without a PID it finds every process with a device, this one included.
    let out = std::process::Command::new(urxe_bin::urxe()).arg("stat").output().unwrap();
    assert!(String::from_utf8(out.stdout).unwrap().contains(&format!("pid {}", std::process::id())));
}

/// Polls `s`'s empty CQ until packet wakeups of its progress thread are disarmed (the
/// busy-polling state in which posts and ACKs may wait for the application's next call).
fn busy_poll_idle(s: &Side) {
    let mut wc = [WorkCompletion::default(); 1];
    for _ in 0..4 {
        assert_eq!(s.dev.poll_cq(s.cq, &mut wc).unwrap(), 0);
    }
}

#[test]
fn burst_of_small_posts_is_batched_and_left_to_the_progress_thread_when_the_poster_goes_quiet() {
    // a busy-polls, then posts 20 small SENDs back to back (a burst: all but the first wait
    // for the next call) and never calls the library again until b has them all: a's progress
    // thread must send the rest by itself once a has been quiet for about a millisecond.
    let (da, _ea) = open(6);
    let (db, _eb) = open(7);
    let a = side(da, QpType::Rc);
    let b = side(db, QpType::Rc);
    connect(&a, &b, 1000, 2000);
    connect(&b, &a, 2000, 1000);
    const N: usize = 20;
    let mut src = pattern(64 * N, 5);
    let mut dst = vec![0u8; 64 * N];
    let smr = reg(&a, &mut src);
    let dmr = reg(&b, &mut dst);
    for i in 0..N {
        let rsge = [Sge { addr: dst.as_mut_ptr() as u64 + 64 * i as u64, length: 64, lkey: dmr.lkey }];
        b.dev.post_recv(b.qpn, &RecvWr { wr_id: i as u64, sg_list: &rsge }).unwrap();
    }
    busy_poll_idle(&a);
    let before = a.dev.transport_counters();
    for i in 0..N {
        let ssge = [Sge { addr: src.as_ptr() as u64 + 64 * i as u64, length: 64, lkey: smr.lkey }];
        let wr = SendWr { wr_id: i as u64, kind: WrKind::Send, flags: SendFlags::SIGNALED, sg_list: &ssge, ud: None };
        a.dev.post_send(a.qpn, |post| post(&wr)).unwrap();
    }
    let posted = Instant::now();
    for i in 0..N {
        let wc = wait_wc(&b);
        assert_eq!((wc.wr_id, wc.status, wc.byte_len), (i as u64, WcStatus::Success, 64));
    }
    let took = posted.elapsed();
    assert_eq!(dst, src);
    let after = a.dev.transport_counters();
    let deferred = after.tx_deferred_posts - before.tx_deferred_posts;
    // The first post leaves at once; the burst's others waited (unless the thread was slow
    // enough between two posts to break the burst, which would still be correct).
    assert!(deferred >= 1 && deferred < N as u64, "deferred {deferred} of {N}: {after:?}");
    assert!(took < Duration::from_secs(2), "the burst reached b only after {took:?}");
    for i in 0..N {
        let wc = wait_wc(&a);
        assert_eq!((wc.wr_id, wc.status), (i as u64, WcStatus::Success));
    }
    assert_eq!(a.dev.control(|e, _| e.counters().retransmitted_pkts), 0);
}

#[test]
fn ack_owed_by_a_poll_leaves_before_destroy_qp() {
    // b busy-polls and finds the receive completion: the ACK it owes waits for b's next call.
    // That call destroys the QP (ibv_rc_pingpong does this right after its last completion):
    // the ACK must leave first, so a's SEND completes without a single retransmission. (b's
    // progress thread, woken for another reason, may send the ACK first, through the poll's
    // exit path; such a message is simply followed by the next one, up to 20.)
    let (da, _ea) = open(8);
    let (db, _eb) = open(9);
    let a = side(da, QpType::Rc);
    let b = side(db, QpType::Rc);
    connect(&a, &b, 5, 6);
    connect(&b, &a, 6, 5);
    const TRIES: u64 = 20;
    let mut src = pattern(64, 1);
    let mut dst = vec![0u8; 64 * TRIES as usize];
    let smr = reg(&a, &mut src);
    let dmr = reg(&b, &mut dst);
    let mut owed = false;
    for i in 0..TRIES {
        let rsge = [Sge { addr: dst.as_mut_ptr() as u64 + 64 * i, length: 64, lkey: dmr.lkey }];
        b.dev.post_recv(b.qpn, &RecvWr { wr_id: 100 + i, sg_list: &rsge }).unwrap();
        busy_poll_idle(&b);
        let before = b.dev.transport_counters();
        let ssge = [Sge { addr: src.as_ptr() as u64, length: 64, lkey: smr.lkey }];
        let wr = SendWr { wr_id: i, kind: WrKind::Send, flags: SendFlags::SIGNALED, sg_list: &ssge, ud: None };
        a.dev.post_send(a.qpn, |post| post(&wr)).unwrap();
        let wc = wait_wc(&b);
        assert_eq!((wc.wr_id, wc.status), (100 + i, WcStatus::Success));
        let after = b.dev.transport_counters();
        if after.tx_deferred_polls == before.tx_deferred_polls + 1 && after.tx_datagrams == before.tx_datagrams {
            owed = true;
            b.dev.control(|e, _| e.destroy_qp(b.qpn).unwrap());
            let sent = b.dev.transport_counters().tx_datagrams;
            assert_eq!(sent, before.tx_datagrams + 1, "the owed ACK left before the QP died");
            let wc = wait_wc(&a);
            assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
            break;
        }
        let wc = wait_wc(&a);
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
    }
    assert!(owed, "no poll out of {TRIES} left an ACK owed");
    assert_eq!(a.dev.control(|e, _| e.counters().retransmitted_pkts), 0);
    assert!(dst.chunks(64).any(|c| c == &src[..]));
}

/// Spins (bounded) until `f` holds; the library is not called meanwhile.
fn spin_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::hint::spin_loop();
    }
}

#[test]
fn progress_thread_holds_an_ack_for_the_next_post_and_sends_it_alone_if_none_comes() {
    // ib_write_lat's pattern: b posts, then waits by spinning on memory (it never polls, so its
    // progress thread stays armed). a's WRITE is placed by b's thread, which holds the ACK for
    // b's next post: both packets then leave in one send call. Scheduling may delay b past the
    // hold time in a round (the ACK then leaves alone, which is also correct), so the
    // piggyback is required in at least one of several rounds. Finally a WRITE that no post
    // follows: its ACK leaves by itself within the hold time. No round retransmits anything.
    let (da, _ea) = open(10);
    let (db, _eb) = open(11);
    let a = side(da, QpType::Rc);
    let b = side(db, QpType::Rc);
    connect(&a, &b, 300, 400);
    connect(&b, &a, 400, 300);
    const ROUNDS: usize = 8;
    let mut src = pattern(64 * ROUNDS, 9);
    let mut dst = vec![0u8; 64 * ROUNDS];
    let smr = reg(&a, &mut src);
    let dmr = reg(&b, &mut dst);
    let mut bsrc = pattern(64 * (ROUNDS + 1), 11);
    let mut adst = vec![0u8; 64 * (ROUNDS + 1)];
    let bmr = reg(&b, &mut bsrc);
    let amr = reg(&a, &mut adst);
    let write = |s: &Side, wr_id: u64, from: &[u8], lkey: u32, to: &[u8], rkey: u32| {
        let sge = [Sge { addr: from.as_ptr() as u64, length: from.len() as u32, lkey }];
        let kind = WrKind::RdmaWrite { remote_addr: to.as_ptr() as u64, rkey };
        let wr = SendWr { wr_id, kind, flags: SendFlags::SIGNALED, sg_list: &sge, ud: None };
        s.dev.post_send(s.qpn, |post| post(&wr)).unwrap();
    };
    // SAFETY (both closures): volatile reads of our own buffers, written by a progress thread.
    let landed = |buf: &[u8], want: u8| {
        let p = buf.as_ptr() as usize + buf.len() - 1;
        spin_until("a WRITE placed in memory", || unsafe { std::ptr::read_volatile(p as *const u8) } == want);
    };
    let calls = |c: TransportCounters| c.tx_gso_sends + c.tx_mmsg_sends;
    // b's CQ is read through a control call, which, unlike a poll, leaves its thread's packet
    // wakeups armed (b "waits elsewhere" throughout).
    let b_completed = |wr_id: u64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut wc = [WorkCompletion::default(); 1];
        loop {
            if b.dev.control(|e, _| e.poll_cq(b.cq, &mut wc).unwrap()) == 1 {
                assert_eq!((wc[0].wr_id, wc[0].status), (wr_id, WcStatus::Success));
                return;
            }
            assert!(Instant::now() < deadline, "b's WRITE {wr_id} not complete within 10 s");
            std::hint::spin_loop();
        }
    };
    write(&b, 100, &bsrc[..64], bmr.lkey, &adst[..64], amr.rkey);
    landed(&adst[..64], bsrc[63]);
    b_completed(100);
    let (mut held, mut piggybacked) = (0, 0);
    for r in 0..ROUNDS {
        let (s, d) = (&src[64 * r..64 * (r + 1)], &dst[64 * r..64 * (r + 1)]);
        let before = b.dev.transport_counters();
        write(&a, r as u64, s, smr.lkey, d, dmr.rkey);
        landed(d, s[63]);
        let o = 64 * (r + 1);
        write(&b, 101 + r as u64, &bsrc[o..o + 64], bmr.lkey, &adst[o..o + 64], amr.rkey);
        let after = b.dev.transport_counters();
        // A round can miss the hold only if this thread was descheduled for a millisecond
        // (b no longer "active") or past the hold time (the ACK then leaves alone).
        held += after.tx_held_acks - before.tx_held_acks;
        if after.tx_datagrams == before.tx_datagrams + 2 && calls(after) == calls(before) + 1 {
            piggybacked += 1;
        }
        landed(&adst[o..o + 64], bsrc[o + 63]);
    }
    assert!(held >= 1, "b's thread never held an ACK in {ROUNDS} rounds");
    assert!(piggybacked >= 1, "no round's ACK left with b's next WRITE ({held} held)");
    for r in 0..ROUNDS {
        let wc = wait_wc(&a);
        assert_eq!((wc.wr_id, wc.status), (r as u64, WcStatus::Success));
        b_completed(101 + r as u64);
    }
    assert_eq!(dst, src);
    assert_eq!(adst, bsrc);

    // b stays quiet now: the ACK of the next WRITE leaves alone, well within a's 67 ms
    // retransmission timeout.
    write(&b, 200, &bsrc[..8], bmr.lkey, &adst[..8], amr.rkey); // b is active again
    b_completed(200);
    write(&a, 300, &src[..64], smr.lkey, &dst[..64], dmr.rkey);
    let wc = wait_wc(&a);
    assert_eq!((wc.wr_id, wc.status), (300, WcStatus::Success));
    assert_eq!(a.dev.control(|e, _| e.counters().retransmitted_pkts), 0);
    assert_eq!(b.dev.control(|e, _| e.counters().retransmitted_pkts), 0);
}

/// The progress thread's wakeup count, from the device's wakeup counters.
fn thread_wakeups(s: &Side) -> u64 {
    let text = s.dev.stats_text();
    let line = text.lines().find(|l| l.trim_start().starts_with("thread_wakeups:")).expect("thread_wakeups");
    line.split(':').nth(1).unwrap().trim().parse().unwrap()
}

#[test]
fn a_passive_read_responder_answers_each_read_in_the_wakeup_that_received_it() {
    // ib_read_lat's responder: b's application never calls the library once connected, so
    // every READ request wakes b's progress thread, which must send the response in that same
    // wakeup (issue 40: no second wakeup, no hand-off to another thread, no held response).
    let (da, _ea) = open(8);
    let (db, _eb) = open(9);
    let a = side(da, QpType::Rc);
    let b = side(db, QpType::Rc);
    connect(&a, &b, 300, 400);
    connect(&b, &a, 400, 300);
    let mut remote = pattern(64, 9);
    let mut local = vec![0u8; 64];
    let rmr = reg(&b, &mut remote);
    let lmr = reg(&a, &mut local);
    // b goes quiet: past the away timer its progress thread takes the packets (armed).
    std::thread::sleep(Duration::from_millis(50));
    const N: u64 = 200;
    let (w0, p0) = (thread_wakeups(&b), b.dev.transport_counters().progress_wakeups);
    for i in 0..N {
        local.fill(0);
        let sge = [Sge { addr: local.as_mut_ptr() as u64, length: 64, lkey: lmr.lkey }];
        let kind = WrKind::RdmaRead { remote_addr: remote.as_ptr() as u64, rkey: rmr.rkey };
        let wr = SendWr { wr_id: i, kind, flags: SendFlags::SIGNALED, sg_list: &sge, ud: None };
        a.dev.post_send(a.qpn, |post| post(&wr)).unwrap();
        let wc = wait_wc(&a);
        assert_eq!((wc.wr_id, wc.status, wc.opcode), (i, WcStatus::Success, WcOpcode::RdmaRead));
        assert_eq!(local, remote);
    }
    let (w, p) = (thread_wakeups(&b) - w0, b.dev.transport_counters().progress_wakeups - p0);
    eprintln!("{N} READs: b's progress thread woke {w} times, {p} steps");
    // One wakeup per READ; a few more for timers (the away timer, a look while active).
    assert!(w <= N + N / 10, "{w} wakeups of b's progress thread for {N} READs");
    assert!(p <= N + N / 10, "{p} progress steps on b for {N} READs");
    assert!(p >= N - N / 10, "b's responses were not sent by its progress thread ({p} steps for {N} READs)");
    assert_eq!(a.dev.control(|e, _| e.counters().retransmitted_pkts), 0);
}

#[test]
fn an_owner_asleep_on_its_channel_leaves_the_progress_thread_idle() {
    // An event-driven receiver, as ibv_get_cq_event runs it: b's thread owns the receive
    // socket while asleep on its completion channel (a socket pair here, written by the event
    // sink), runs the steps itself, and between two waits re-arms, polls, posts a receive.
    // a sends one SEND every 3 ms, so each of b's waits outlasts the away timer (about 1.5 ms
    // after b's last call). That timer only checks that the owner still lives: it must not
    // run a progress step on b (each such step takes the device lock, may take the owner's
    // packet and turns the owner's one wakeup into two).
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let (da, _ea) = open(10);
    let (db, chan_rx) = open_channel(11);
    let a = side(da, QpType::Rc);
    let b = side(db, QpType::Rc);
    connect(&a, &b, 500, 600);
    connect(&b, &a, 600, 500);
    let mut src = pattern(64, 11);
    let mut dst = vec![0u8; 64];
    let smr = reg(&a, &mut src);
    let dmr = reg(&b, &mut dst);
    const N: u64 = 60;
    let rsge = [Sge { addr: dst.as_mut_ptr() as u64, length: 64, lkey: dmr.lkey }];
    b.dev.post_recv(b.qpn, &RecvWr { wr_id: 0, sg_list: &rsge }).unwrap();
    b.dev.req_notify_cq(b.cq, false).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let stop = stop.clone();
        let (qpn, lkey, addr) = (a.qpn, smr.lkey, src.as_ptr() as u64);
        std::thread::spawn(move || {
            for i in 0..N {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(3));
                let ssge = [Sge { addr, length: 64, lkey }];
                let wr = SendWr { wr_id: i, kind: WrKind::Send, flags: SendFlags::SIGNALED, sg_list: &ssge, ud: None };
                a.dev.post_send(qpn, |post| post(&wr)).unwrap();
            }
            a
        })
    };
    let p0 = b.dev.transport_counters().progress_wakeups;
    let chan = chan_rx.as_raw_fd();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while got < N && Instant::now() < deadline {
        assert!(b.dev.channel_wait_begin(), "b's only waiter owns the socket");
        owner_wait(&b.dev, chan, deadline);
        b.dev.channel_wait_end();
        let mut byte = [0u8; 16];
        let _ = (&chan_rx).read(&mut byte);
        b.dev.req_notify_cq(b.cq, false).unwrap();
        let mut wc = [WorkCompletion::default(); 4];
        let n = b.dev.poll_cq(b.cq, &mut wc).unwrap();
        for w in &wc[..n] {
            assert_eq!((w.status, w.byte_len), (WcStatus::Success, 64));
            got += 1;
            b.dev.post_recv(b.qpn, &RecvWr { wr_id: got, sg_list: &rsge }).unwrap();
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _a = sender.join().unwrap();
    let steps = b.dev.transport_counters().progress_wakeups - p0;
    eprintln!("{got} SENDs received by b's owner; b's progress thread ran {steps} steps");
    assert_eq!(got, N, "b received {got} of {N}");
    assert!(steps <= N / 10, "b's progress thread ran {steps} steps for {N} arrivals its owner received");
}

#[test]
fn a_send_lost_while_the_owner_sleeps_is_resent_by_the_progress_thread() {
    // a's thread owns a's receive socket, asleep on its completion channel with no deadline
    // (nothing was outstanding when it went to sleep); another thread then posts a SEND that
    // b drops (its QP is still in RESET), and b gets ready. Only a's progress thread can
    // resend it: the timer was armed by the poster, after the owner planned its sleep. (rping
    // with 5 % loss hung at its first loss this way: the rung thread found the poster holding
    // the lock and dropped its deadline, and its liveness checks of the owner ran no step.)
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let (da, chan_rx) = open_channel(12);
    let (db, _eb) = open(13);
    let a = std::sync::Arc::new(side(da, QpType::Rc));
    let b = side(db, QpType::Rc);
    connect(&a, &b, 700, 800);
    let mut src = pattern(64, 13);
    let mut dst = vec![0u8; 64];
    let smr = reg(&a, &mut src);
    let dmr = reg(&b, &mut dst);
    a.dev.req_notify_cq(a.cq, false).unwrap();
    let (qpn, lkey, addr) = (a.qpn, smr.lkey, src.as_ptr() as u64);
    let (daddr, dlkey) = (dst.as_mut_ptr() as u64, dmr.lkey);
    let poster = {
        let a = a.clone();
        std::thread::spawn(move || {
            // Let the owner go to sleep first.
            std::thread::sleep(Duration::from_millis(50));
            let ssge = [Sge { addr, length: 64, lkey }];
            let wr = SendWr { wr_id: 7, kind: WrKind::Send, flags: SendFlags::SIGNALED, sg_list: &ssge, ud: None };
            a.dev.post_send(qpn, |post| post(&wr)).unwrap();
            // b is in RESET: the SEND is dropped there. Then b gets ready for the resend.
            std::thread::sleep(Duration::from_millis(20));
            connect(&b, &a, 800, 700);
            let rsge = [Sge { addr: daddr, length: 64, lkey: dlkey }];
            b.dev.post_recv(b.qpn, &RecvWr { wr_id: 1, sg_list: &rsge }).unwrap();
            b
        })
    };
    let chan = chan_rx.as_raw_fd();
    let deadline = Instant::now() + Duration::from_secs(5);
    assert!(a.dev.channel_wait_begin(), "a's only waiter owns the socket");
    let woke = owner_wait(&a.dev, chan, deadline);
    a.dev.channel_wait_end();
    let b = poster.join().unwrap();
    let mut byte = [0u8; 16];
    let _ = (&chan_rx).read(&mut byte);
    let mut wc = [WorkCompletion::default(); 1];
    let n = a.dev.poll_cq(a.cq, &mut wc).unwrap();
    let dropped = b.dev.control(|e, _| e.counters().bad_state_drops);
    let resent = a.dev.control(|e, _| e.counters().retransmitted_pkts);
    eprintln!("b dropped {dropped}, a resent {resent}, a's channel written: {woke}");
    assert!(dropped >= 1, "b must have dropped the first SEND (dropped {dropped})");
    assert!(woke, "the SEND's completion never reached a's channel within 5 s (resent {resent})");
    assert_eq!((n, wc[0].wr_id, wc[0].status), (1, 7, WcStatus::Success));
    assert_eq!(dst, src, "b received the resent SEND");
}
