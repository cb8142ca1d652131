//! The CM MAD codec against the kernel's own messages: the five CM MADs of
//! tests/captures/rdma_cm.pcap (rping between two kernel-rxe VMs, client 10.77.0.3, server
//! 10.77.0.2). Each parses to the fields the kernel meant and re-emits byte for byte.

use std::fs::File;
use std::net::IpAddr;
use std::path::Path;

use pcap_file::pcap::PcapReader;
use urxe::wire::cm::{attr, port_space, rdma_cm_service_id, CmMessage, CmaHeader, CMA_HEADER_LEN};
use urxe::wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};
use urxe::wire::opcode::op::UD_SEND_ONLY;
use urxe::wire::parse;

/// UDP payloads (BTH..ICRC) of frames 1, 2, 3, 40 and 41 (1-based), the CM MADs.
fn cm_payloads() -> Vec<(usize, Vec<u8>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/captures/rdma_cm.pcap");
    let mut r = PcapReader::new(File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    let mut n = 0;
    while let Some(p) = r.next_packet() {
        n += 1;
        let p = p.unwrap();
        if [1, 2, 3, 40, 41].contains(&n) {
            // Ethernet 14 + IPv4 20 (IHL 5 in these captures) + UDP 8.
            out.push((n, p.data[42..].to_vec()));
        }
    }
    assert_eq!(out.len(), 5);
    out
}

const CLIENT_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 3];
const SERVER_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 2];
const CLIENT_COMM_ID: u32 = 0x3530_3a54;
const SERVER_COMM_ID: u32 = 0xe5bb_ed21;
const TID: u64 = 0x0000_0002_543a_3035;

#[test]
fn kernel_cm_mads_parse_to_what_the_kernel_meant_and_emit_identically() {
    for (frame, udp) in cm_payloads() {
        let pkt = parse(&udp).unwrap();
        assert_eq!(pkt.headers.bth.opcode, UD_SEND_ONLY, "frame {frame}");
        assert_eq!(pkt.headers.bth.dest_qp, GSI_QPN);
        let deth = pkt.headers.deth.unwrap();
        assert_eq!((deth.qkey, deth.src_qp), (GSI_QKEY, GSI_QPN));
        assert_eq!(pkt.payload.len(), MAD_LEN);

        let (hdr, msg) = CmMessage::parse(pkt.payload).unwrap();
        assert_eq!(hdr.transaction_id, TID, "frame {frame}: one TID for the whole connection");
        match (frame, msg) {
            (1, CmMessage::Req(m)) => {
                assert_eq!(m.local_comm_id, CLIENT_COMM_ID);
                assert_eq!(m.service_id, rdma_cm_service_id(port_space::TCP, 7174));
                assert_eq!(m.local_ca_guid, 0x5054_00ff_fe77_0003);
                assert_eq!((m.local_qpn, m.responder_resources, m.initiator_depth), (0x11, 1, 1));
                assert_eq!((m.remote_cm_response_timeout, m.local_cm_response_timeout), (20, 20));
                assert_eq!((m.transport_service_type, m.end_to_end_flow_control), (0, false));
                assert_eq!(m.starting_psn, 0x155a56);
                assert_eq!((m.retry_count, m.rnr_retry_count, m.max_cm_retries), (7, 7, 15));
                assert_eq!((m.pkey, m.path_mtu, m.srq), (0xFFFF, 3, false));
                let p = m.primary;
                assert_eq!((p.local_lid, p.remote_lid), (0xFFFF, 0xFFFF));
                assert_eq!((p.local_gid, p.remote_gid), (CLIENT_GID, SERVER_GID));
                assert_eq!((p.flow_label, p.packet_rate), (0x077b0, 0), "flow label 0x077B0, rate 0");
                assert_eq!((p.traffic_class, p.hop_limit, p.sl, p.subnet_local), (0, 64, 0, false));
                assert_eq!(p.local_ack_timeout, 19);
                assert!(m.alternate.is_empty());
                let h = CmaHeader::parse(m.private_data).unwrap();
                assert_eq!(h.src_port, 0x8716);
                assert_eq!(h.src, "10.77.0.3".parse::<IpAddr>().unwrap());
                assert_eq!(h.dst, "10.77.0.2".parse::<IpAddr>().unwrap());
                assert!(m.private_data[CMA_HEADER_LEN..].iter().all(|&b| b == 0));
            }
            (2, CmMessage::Rep(m)) => {
                assert_eq!((m.local_comm_id, m.remote_comm_id), (SERVER_COMM_ID, CLIENT_COMM_ID));
                assert_eq!((m.local_qpn, m.starting_psn), (0x11, 0xd6a275));
                assert_eq!((m.responder_resources, m.initiator_depth), (1, 1));
                assert_eq!((m.target_ack_delay, m.failover_accepted, m.rnr_retry_count, m.srq), (15, 0, 7, false));
                assert_eq!(m.local_ca_guid, 0x5054_00ff_fe77_0002);
            }
            (3, CmMessage::Rtu(m)) => {
                assert_eq!((m.local_comm_id, m.remote_comm_id), (CLIENT_COMM_ID, SERVER_COMM_ID));
            }
            (40, CmMessage::Dreq(m)) => {
                assert_eq!((m.local_comm_id, m.remote_comm_id), (CLIENT_COMM_ID, SERVER_COMM_ID));
                assert_eq!(m.remote_qpn, 0x11);
            }
            (41, CmMessage::Drep(m)) => {
                assert_eq!((m.local_comm_id, m.remote_comm_id), (SERVER_COMM_ID, CLIENT_COMM_ID));
            }
            (f, m) => panic!("frame {f}: unexpected {}", m.name()),
        }

        let mut out = [0u8; MAD_LEN];
        msg.emit(hdr.transaction_id, &mut out).unwrap();
        assert_eq!(&out[..], pkt.payload, "frame {frame} ({}) re-emits byte for byte", msg.name());
    }
}

#[test]
fn every_cm_attribute_round_trips_and_corrupt_mads_are_refused() {
    let (_, udp) = cm_payloads().remove(0);
    let mad = &parse(&udp).unwrap().payload.to_vec();
    // Every handled attribute ID parses from the same bytes and emits them back (fields are
    // laid over the same data; reserved bits are zero in this MAD except where they are not:
    // compare only what round-trips through parse).
    for a in
        [attr::REQ, attr::MRA, attr::REJ, attr::REP, attr::RTU, attr::DREQ, attr::DREP, attr::SIDR_REQ, attr::SIDR_REP]
    {
        let mut m = mad.clone();
        m[16..18].copy_from_slice(&a.to_be_bytes());
        let (hdr, msg) = CmMessage::parse(&m).unwrap();
        assert_eq!(msg.attribute_id(), a);
        let mut out = [0u8; MAD_LEN];
        msg.emit(hdr.transaction_id, &mut out).unwrap();
        let (_, again) = CmMessage::parse(&out).unwrap();
        assert_eq!(again, msg, "attribute {a:#x}: parse(emit(parse(x))) == parse(x)");
    }
    // Truncations of every length are refused, never a panic.
    for len in 0..MAD_LEN {
        assert!(CmMessage::parse(&mad[..len]).is_err());
    }
}
