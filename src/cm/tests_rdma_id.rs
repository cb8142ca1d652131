//! The rdma_cm ID's decisions (src/cm/rdma_id.rs) without a process, a socket or a clock.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::rdma_id::*;
use crate::wire::cm::{CmaHeader, CmaHeaderError, CMA_HEADER_LEN};

const SRC: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 3)), 40001);
const DST: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2)), 7471);
/// RDMA_PS_TCP (0x0106) << 16 | port 7471.
const SERVICE: u64 = 0x0106_1d2f;

#[test]
fn each_call_is_valid_only_in_its_states() {
    use IdState::*;
    let all = [
        Idle,
        AddrBound,
        AddrResolved,
        RouteResolved,
        Listening,
        Connecting,
        RequestReceived,
        Accepted,
        ResponseReceived,
        Connected,
        Disconnected,
    ];
    for s in all {
        assert_eq!(s.bind(false).is_ok(), s == Idle, "bind in {s:?}");
        assert_eq!(s.bind(true), Err(libc::EINVAL), "bind of a bound ID in {s:?}");
        let want = match s {
            Idle => Ok(Before::BindAny),
            AddrBound => Ok(Before::Nothing),
            _ => Err(libc::EINVAL),
        };
        assert_eq!(s.resolve_addr(), want, "resolve_addr in {s:?}");
        assert_eq!(s.listen(), want, "listen in {s:?}");
        assert_eq!(s.connect().is_ok(), s == RouteResolved, "connect in {s:?}");
        assert_eq!(s.answer().is_ok(), s == RequestReceived, "accept/reject in {s:?}");
        let mut t = s;
        let r = t.resolve_route();
        if s == AddrResolved {
            assert_eq!((r, t), (Ok(()), RouteResolved));
        } else {
            assert_eq!((r, t), (Err(libc::EINVAL), s), "resolve_route in {s:?} changes nothing");
        }
    }
}

#[test]
fn backlog_is_taken_as_the_kernels_ucma_does() {
    assert_eq!(listen_backlog(0), MAX_BACKLOG);
    assert_eq!(listen_backlog(-5), MAX_BACKLOG);
    assert_eq!(listen_backlog(1), 1);
    assert_eq!(listen_backlog(1023), 1023);
    assert_eq!(listen_backlog(1024), MAX_BACKLOG);
    assert_eq!(listen_backlog(i32::MAX), MAX_BACKLOG);
}

#[test]
fn request_private_data_is_the_cma_header_then_the_users_bytes() {
    let pdata = request_private_data(SRC, DST, b"hello", false).unwrap();
    assert_eq!(pdata.len(), CMA_HEADER_LEN + 5);
    assert_eq!(&pdata[CMA_HEADER_LEN..], b"hello");
    let h = CmaHeader::parse(&pdata).unwrap();
    assert_eq!(h, CmaHeader { version: 0, src_port: 40001, src: SRC.ip(), dst: DST.ip() });
    // The byte layout the kernel's CMA reads: version 0, IP version 4 in the high nibble,
    // the source port big-endian, IPv4 addresses in the last 4 bytes of their 16.
    assert_eq!(&pdata[..4], &[0, 0x40, 0x9c, 0x41]);
    assert_eq!(&pdata[16..20], &[10, 77, 0, 3]);
    assert_eq!(&pdata[32..36], &[10, 77, 0, 2]);
}

#[test]
fn request_private_data_room_is_the_messages_less_the_header() {
    assert_eq!(request_user_room(false), 56);
    assert_eq!(request_user_room(true), 180);
    assert_eq!(request_private_data(SRC, DST, &[7; 56], false).map(|p| p.len()), Ok(room::REQ));
    assert_eq!(request_private_data(SRC, DST, &[7; 57], false), Err(libc::EINVAL));
    assert_eq!(request_private_data(SRC, DST, &[7; 180], true).map(|p| p.len()), Ok(room::SIDR_REQ));
    assert_eq!(request_private_data(SRC, DST, &[7; 181], true), Err(libc::EINVAL));
}

#[test]
fn a_received_request_names_both_ends_and_the_users_bytes() {
    let pdata = request_private_data(SRC, DST, b"xy", false).unwrap();
    let dev = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 9));
    let r = parse_request(&pdata, SRC.ip(), SERVICE, Some(dev)).unwrap();
    assert_eq!(r.local, SocketAddr::new(dev, 7471), "the device's address, the service's port");
    assert_eq!(r.remote, SRC);
    assert_eq!(r.user, b"xy");
    // Without a device, the header's destination.
    assert_eq!(parse_request(&pdata, SRC.ip(), SERVICE, None).unwrap().local, DST);
}

#[test]
fn an_unspecified_source_in_the_header_is_the_senders_address() {
    let any = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 5000);
    let pdata = request_private_data(any, DST, &[], false).unwrap();
    let peer = IpAddr::V6("fd00::7".parse().unwrap());
    let r = parse_request(&pdata, peer, SERVICE, None).unwrap();
    assert_eq!(r.remote, SocketAddr::new(peer, 5000));
}

#[test]
fn a_request_without_a_valid_header_is_refused() {
    assert_eq!(parse_request(&[0; 35], SRC.ip(), SERVICE, None), Err(CmaHeaderError::Truncated));
    let mut pdata = request_private_data(SRC, DST, &[], false).unwrap();
    pdata[0] = 1;
    assert_eq!(parse_request(&pdata, SRC.ip(), SERVICE, None), Err(CmaHeaderError::Version(1)));
    pdata[0] = 0;
    pdata[1] = 0x50;
    assert_eq!(parse_request(&pdata, SRC.ip(), SERVICE, None), Err(CmaHeaderError::IpVersion(5)));
}

#[test]
fn psns_are_24_bits_and_vary() {
    let mut r = Rng::new(0x1234_5678);
    let psns: Vec<u32> = (0..1000).map(|_| r.psn()).collect();
    assert!(psns.iter().all(|&p| p <= 0xFF_FFFF));
    let mut distinct = psns.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() > 990, "{} distinct PSNs of 1000", distinct.len());
    // The same seed gives the same PSNs (a test can replay a trace); a zero seed still runs.
    let mut again = Rng::new(0x1234_5678);
    assert_eq!((0..1000).map(|_| again.psn()).collect::<Vec<_>>(), psns);
    assert_ne!(Rng::new(0).next_u64(), 0);
}

#[test]
fn a_new_id_is_idle_and_listens_only_once_bound() {
    let mut id = RdmaId::new(0x0106, 2);
    assert_eq!((id.state, id.src, id.bound, id.backlog, id.pending), (IdState::Idle, None, false, MAX_BACKLOG, 0));
    assert_eq!(id.listen(8), Err(libc::EINVAL), "an unbound ID does not listen");
    id.src = Some(DST);
    id.bound = true;
    id.state = IdState::AddrBound;
    assert_eq!(id.listen(8), Ok(SERVICE), "port space TCP, port 7471");
    assert_eq!((id.backlog, id.state), (8, IdState::AddrBound), "listening only once registered");
    id.listening(SERVICE);
    assert_eq!((id.state, id.listen_service), (IdState::Listening, Some(SERVICE)));
    assert_eq!(id.listen(8), Err(libc::EINVAL), "a listener does not listen again");
    assert_eq!(id.listen(-1).err(), Some(libc::EINVAL));
    let mut fresh = RdmaId::new(0x0106, 2);
    fresh.state = IdState::AddrBound;
    assert_eq!((fresh.listen(0), fresh.backlog), (Ok(0x0106_0000), MAX_BACKLOG));
}
