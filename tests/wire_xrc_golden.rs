//! Golden bytes of XRC requests, written out by hand from the IBTA layout (Vol 1 §9.2 BTH,
//! §9.3 / annex A14 XRCETH, §9.3.3 RETH): BTH (12 bytes), XRCETH (reserved byte + 24-bit XRC
//! SRQ number), then RETH for RDMA WRITE / READ, then payload, pad and ICRC. Each is parsed to
//! the fields it spells and re-emitted byte for byte; an XRC ACK carries no XRCETH.

use urxe::wire::aeth::{AethRepr, CreditCode, Syndrome};
use urxe::wire::bth::BthRepr;
use urxe::wire::icrc::{icrc, IpFields, ROCEV2_PORT};
use urxe::wire::opcode::{OpKind, Transport};
use urxe::wire::packet::finish;
use urxe::wire::reth::RethRepr;
use urxe::wire::xrceth::XrcEthRepr;
use urxe::wire::{parse, Headers, Msn, Psn};

fn ip() -> IpFields {
    IpFields::v4_df("127.45.0.1".parse().unwrap(), "127.45.0.2".parse().unwrap())
}

const SPORT: u16 = 0xC123;

/// Emits `h` + `payload` with pad and ICRC; returns the packet.
fn emit(h: &Headers, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 128];
    let hl = h.emit(&mut buf).unwrap();
    buf[hl..hl + payload.len()].copy_from_slice(payload);
    let n = finish(&mut buf, hl, payload.len(), &ip(), SPORT, ROCEV2_PORT).unwrap();
    buf.truncate(n);
    buf
}

/// The hand-written bytes before the ICRC must match what urxe emits, and the ICRC must be
/// the one computed over them.
fn check(golden: &[u8], h: &Headers, payload: &[u8]) {
    let pkt = emit(h, payload);
    assert_eq!(&pkt[..pkt.len() - 4], golden, "emitted bytes differ from the IBTA layout");
    let crc = icrc(&ip(), SPORT, ROCEV2_PORT, golden);
    assert_eq!(pkt[pkt.len() - 4..], crc.to_le_bytes(), "ICRC");
    let p = parse(&pkt).unwrap();
    assert_eq!(p.info.transport, Transport::Xrc);
    assert_eq!(p.headers, *h);
    assert_eq!(p.payload, payload);
    assert!(!p.reserved_nonzero);
}

fn bth(opcode: u8, pad: u8) -> BthRepr {
    BthRepr {
        opcode,
        pkey: 0xFFFF,
        dest_qp: 0x01_2345,
        ack_req: true,
        psn: Psn::new(0xAB_CDEF),
        pad_cnt: pad,
        ..BthRepr::default()
    }
}

#[test]
fn xrc_send_only_golden_bytes() {
    #[rustfmt::skip]
    let golden = [
        0xA4, 0x20, 0xFF, 0xFF, 0x00, 0x01, 0x23, 0x45, 0x80, 0xAB, 0xCD, 0xEF, // BTH: XRC SEND ONLY, pad 2
        0x00, 0x00, 0x00, 0x2A, //                                                XRCETH: SRQ 0x2A
        b'h', b'e', b'l', b'l', b'o', b'!', 0x00, 0x00, //                        payload + 2 pad bytes
    ];
    let h = Headers { bth: bth(0xA4, 2), xrceth: Some(XrcEthRepr { srqn: 0x2A }), ..Headers::default() };
    check(&golden, &h, b"hello!");
    assert_eq!(parse(&emit(&h, b"hello!")).unwrap().info.kind, OpKind::Send);
}

#[test]
fn xrc_rdma_write_only_golden_bytes() {
    #[rustfmt::skip]
    let golden = [
        0xAA, 0x00, 0xFF, 0xFF, 0x00, 0x01, 0x23, 0x45, 0x80, 0xAB, 0xCD, 0xEF, // BTH: XRC RDMA WRITE ONLY
        0x00, 0x12, 0x34, 0x56, //                                                XRCETH: SRQ 0x123456
        0x00, 0x00, 0x7F, 0x00, 0x12, 0x34, 0x50, 0x00, //                        RETH: VA
        0xDE, 0xAD, 0xBE, 0xEF, //                                                RETH: R_Key
        0x00, 0x00, 0x00, 0x04, //                                                RETH: DMA length 4
        0x01, 0x02, 0x03, 0x04, //                                                payload
    ];
    let h = Headers {
        bth: bth(0xAA, 0),
        xrceth: Some(XrcEthRepr { srqn: 0x12_3456 }),
        reth: Some(RethRepr { va: 0x7F00_1234_5000, rkey: 0xDEAD_BEEF, dma_len: 4 }),
        ..Headers::default()
    };
    check(&golden, &h, &[1, 2, 3, 4]);
}

#[test]
fn xrc_rdma_read_request_golden_bytes() {
    #[rustfmt::skip]
    let golden = [
        0xAC, 0x00, 0xFF, 0xFF, 0x00, 0x01, 0x23, 0x45, 0x80, 0xAB, 0xCD, 0xEF, // BTH: XRC RDMA READ REQUEST
        0x00, 0x00, 0x00, 0x01, //                                                XRCETH: SRQ 1
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, //                        RETH: VA 0x1000
        0x00, 0x00, 0x05, 0x01, //                                                RETH: R_Key 0x501
        0x00, 0x01, 0x00, 0x00, //                                                RETH: DMA length 65536
    ];
    let h = Headers {
        bth: bth(0xAC, 0),
        xrceth: Some(XrcEthRepr { srqn: 1 }),
        reth: Some(RethRepr { va: 0x1000, rkey: 0x501, dma_len: 0x1_0000 }),
        ..Headers::default()
    };
    check(&golden, &h, &[]);
}

#[test]
fn xrc_ack_carries_no_xrceth() {
    #[rustfmt::skip]
    let golden = [
        0xB1, 0x00, 0xFF, 0xFF, 0x00, 0x01, 0x23, 0x45, 0x00, 0xAB, 0xCD, 0xEF, // BTH: XRC ACKNOWLEDGE
        0x1F, 0x00, 0x00, 0x09, //                                                AETH: ACK, unlimited credits, MSN 9
    ];
    let h = Headers {
        bth: BthRepr { ack_req: false, ..bth(0xB1, 0) },
        aeth: Some(AethRepr { syndrome: Syndrome::Ack { credits: CreditCode::UNLIMITED }, msn: Msn::new(9) }),
        ..Headers::default()
    };
    check(&golden, &h, &[]);
}

#[test]
fn xrc_request_without_its_xrceth_is_refused_on_emit_and_truncated_on_parse() {
    let h = Headers { bth: bth(0xA4, 0), ..Headers::default() };
    assert!(h.emit(&mut [0u8; 64]).is_err());
    // A SEND ONLY cut right after the BTH: the XRCETH does not fit.
    let full = emit(&Headers { xrceth: Some(XrcEthRepr { srqn: 3 }), ..h }, &[]);
    let mut cut = full[..12].to_vec();
    cut.extend_from_slice(&full[full.len() - 4..]);
    assert!(parse(&cut).is_err());
}
