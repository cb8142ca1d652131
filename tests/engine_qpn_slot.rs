//! The engine's QPN space on a shared address: `Engine::set_qpn_slot` confines QPNs to one
//! slot (`slot << 16 | n`) and starts the counter where the slot's previous owner stopped.

#[path = "sim/mod.rs"]
mod sim;

use urxe::engine::{Engine, EngineConfig, Error, Limits, Mtu, QpCap, QpInitAttr, QpType};

fn engine() -> Engine<sim::SimHost> {
    let cfg = EngineConfig {
        local_addr: "10.0.0.1".parse().unwrap(),
        max_mtu: Mtu::Mtu1024,
        limits: Limits::default(),
        seed: 1,
    };
    Engine::new(cfg, sim::SimHost::new(0x1000, 4096))
}

fn init(e: &mut Engine<sim::SimHost>) -> QpInitAttr {
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(16).unwrap();
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    QpInitAttr { pd, qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, srq: None, cap, sq_sig_all: false }
}

#[test]
fn slot_qpns_carry_the_base_and_continue_the_counter() {
    let mut e = engine();
    e.set_qpn_slot(0x05_0000, 0x400).unwrap();
    let a = init(&mut e);
    let (q1, _) = e.create_qp(&a).unwrap();
    let (q2, _) = e.create_qp(&a).unwrap();
    assert_eq!((q1, q2), (0x05_0400, 0x05_0401));
    assert_eq!(e.next_qpn_counter(), 0x402);
    assert_eq!(e.qp_count(), 2);
    // The same low bits in another slot are not ours.
    assert!(e.query_qp(0x0400).is_err());
    assert!(e.query_qp(0x06_0400).is_err());
    assert!(e.query_qp(q2).is_ok());
    // Below the slot's first count (a previous owner's QPNs), and ours to the last bit.
    assert_eq!(e.query_qp(0x05_03FF).err(), Some(Error::NotFound));
    assert_eq!(e.query_qp(0x05_0011).err(), Some(Error::NotFound));
    e.destroy_qp(q1).unwrap();
    assert_eq!(e.query_qp(q1).err(), Some(Error::NotFound));
    // Only before the first QP, and only a 16-bit-aligned base with a valid counter.
    assert_eq!(e.set_qpn_slot(0x07_0000, 0x11), Err(Error::Busy));
    let mut f = engine();
    assert_eq!(f.set_qpn_slot(0x05_0001, 0x11), Err(Error::Invalid));
    assert_eq!(f.set_qpn_slot(0x05_0000, 0x1), Err(Error::Invalid));
    assert_eq!(f.set_qpn_slot(0x05_0000, 0xFFFF), Err(Error::Invalid));
}

#[test]
fn the_last_slot_never_hands_out_qpn_0xffffff() {
    let mut e = engine();
    e.set_qpn_slot(0xFF_0000, 0xFFFD).unwrap();
    let a = init(&mut e);
    assert_eq!(e.create_qp(&a).unwrap().0, 0xFF_FFFD);
    assert_eq!(e.create_qp(&a).unwrap().0, 0xFF_FFFE);
    assert_eq!(e.create_qp(&a).err(), Some(Error::NoMemory));
}
