//! Debug: rc_pingpong-like loop between two in-process devices.
use std::net::IpAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use urxe::engine::*;
use urxe::transport::Device;
struct Side {
    dev: Device,
    pd: PdId,
    cq: CqId,
    qpn: Qpn,
}
fn side(dev: Device, ty: QpType) -> Side {
    let (pd, cq, qpn) = dev.with(|e, _| {
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
    me.dev.with(|e, _| {
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
    s.dev.with(|e, _| e.reg_mr(s.pd, addr, buf.len() as u64, addr, access).unwrap())
}

fn gid(ip: IpAddr) -> [u8; 16] { match ip { IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(), IpAddr::V6(v6) => v6.octets() } }
fn cfg() -> EngineConfig { EngineConfig { local_addr: "127.0.0.1".parse().unwrap(), max_mtu: Mtu::Mtu4096, limits: Limits::default(), seed: 1 } }
fn open(last: u8) -> (Device, mpsc::Receiver<Event>) {
    let (tx, rx) = mpsc::channel();
    for b in 0..200u8 {
        let ip: IpAddr = format!("127.{}.{}.{}", 91, b, last).parse().unwrap();
        let t = tx.clone();
        if let Ok(d) = Device::open(ip, cfg(), Box::new(move |e| drop(t.send(e)))) { return (d, rx); }
    }
    panic!()
}
fn run(s: &Side, peer: &Side, first: bool, iters: usize) {
    let mut buf = vec![0u8; 4096];
    let mr = reg(&s, &mut buf);
    let sge = [Sge { addr: buf.as_mut_ptr() as u64, length: 4096, lkey: mr.lkey }];
    for i in 0..60 { s.dev.with(|e, _| e.post_recv(s.qpn, &RecvWr { wr_id: 1000 + i, sg_list: &sge }).unwrap()); }
    let mut routs = 60;
    let (mut scnt, mut rcnt) = (0, 0);
    // rc_pingpong's logic: RECV=1, SEND=2; the next send goes once both of this round completed.
    let send = |s: &Side| {
        let wr = SendWr { wr_id: 2, kind: WrKind::Send, flags: SendFlags::SIGNALED, sg_list: &sge, ud: None };
        s.dev.post(|e, now| e.post_send(now, s.qpn, &wr).unwrap());
    };
    let mut pending = 1u64;
    if first {
        send(s);
        pending |= 2;
    }
    let mut wc = [WorkCompletion::default(); 2];
    let mut last = Instant::now();
    while rcnt < iters || scnt < iters {
        let n = s.dev.poll(|e| e.poll_cq(s.cq, &mut wc).unwrap());
        if n == 0 {
            if last.elapsed() > Duration::from_millis(50) {
                eprintln!("{} stalled 50ms at scnt {scnt} rcnt {rcnt} pending {pending}\n{}", if first {"A"} else {"B"}, s.dev.stats_text().lines().filter(|l| !l.ends_with(": 0")).collect::<Vec<_>>().join(" "));
                eprintln!("   peer: {}", peer.dev.stats_text().lines().filter(|l| !l.ends_with(": 0")).collect::<Vec<_>>().join(" "));
                last = Instant::now();
            }
            continue;
        }
        last = Instant::now();
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            let id = if w.wr_id == 2 { 2 } else { 1 };
            if id == 2 {
                scnt += 1;
            } else {
                rcnt += 1;
                routs -= 1;
                if routs <= 1 {
                    for i in 0..59 {
                        s.dev.with(|e, _| e.post_recv(s.qpn, &RecvWr { wr_id: 1000 + i, sg_list: &sge }).unwrap());
                    }
                    routs += 59;
                }
            }
            pending &= !id;
            if scnt < iters && pending == 0 {
                send(s);
                pending = 3;
            }
        }
    }
}
fn main() {
    let iters: usize = std::env::args().nth(1).map(|a| a.parse().unwrap()).unwrap_or(5000);
    let (da, _ea) = open(1); let (db, _eb) = open(2);
    let a = side(da, QpType::Rc); let b = side(db, QpType::Rc);
    connect(&a, &b, 0x100, 0x200); connect(&b, &a, 0x200, 0x100);
    let t0 = Instant::now();
    std::thread::scope(|sc| {
        sc.spawn(|| run(&b, &a, false, iters));
        run(&a, &b, true, iters);
    });
    let el = t0.elapsed();
    println!("{iters} iters in {:?} = {:.1} us/iter", el, el.as_secs_f64() * 1e6 / iters as f64);
}
