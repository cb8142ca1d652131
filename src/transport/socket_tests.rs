//! Tests of `socket`.

mod basics {
    use super::super::*;

    #[test]
    fn socket_addresses_convert_both_ways_and_equal_socket2s() {
        let addrs: [SocketAddr; 4] = [
            "127.77.0.1:4791".parse().unwrap(),
            "10.1.2.3:65535".parse().unwrap(),
            SocketAddr::V6(SocketAddrV6::new("fe80::1:2".parse().unwrap(), 4791, 0x12345, 7)),
            "[2001:db8::9]:1".parse().unwrap(),
        ];
        for a in addrs {
            // Over a storage full of junk: every byte the kernel reads is written.
            // SAFETY: any byte pattern is a valid sockaddr_storage.
            let mut out: libc::sockaddr_storage = unsafe { std::mem::transmute([0xA5u8; 128]) };
            let len = write_sockaddr(a, &mut out) as usize;
            let theirs = SockAddr::from(a);
            assert_eq!(len, theirs.len() as usize, "{a}");
            // SAFETY: both hold at least `len` initialised bytes.
            let (ours, theirs) = unsafe {
                (
                    std::slice::from_raw_parts(&out as *const _ as *const u8, len),
                    std::slice::from_raw_parts(theirs.as_ptr() as *const u8, len),
                )
            };
            assert_eq!(ours, theirs, "{a}");
            assert_eq!(sockaddr_to_std(&out), Some(a));
        }
    }

    fn pair() -> (RoceSocket, RoceSocket) {
        // Port 0: let the kernel pick, so parallel tests do not collide.
        let a = RoceSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = RoceSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        (a, b)
    }

    fn recv_all(s: &RoceSocket, want: usize) -> Vec<Vec<u8>> {
        let mut b = RecvBatch::new();
        let mut got = Vec::new();
        for _ in 0..1000 {
            s.recv_batch(&mut b).unwrap();
            got.extend(b.packets().map(|(_, p)| p.to_vec()));
            if got.len() >= want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        got
    }

    #[test]
    fn a_batch_reused_and_moved_between_calls_reports_each_datagram_right() {
        // The headers are set up once: what the kernel wrote back (lengths, address sizes)
        // must not leak from one call into the next, and moving the batch must not matter.
        let (a, b) = pair();
        let dst = b.local_addr();
        let s1 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let s2 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut batch = RecvBatch::new();
        let mut got: Vec<(Option<SocketAddr>, Vec<u8>)> = Vec::new();
        // Three rounds: a full batch and more, then a few, then one long datagram.
        for (round, sizes) in
            [(0u8, (0..40).map(|i| 10 + i).collect::<Vec<usize>>()), (1, vec![7, 3000, 1]), (2, vec![60_000])]
        {
            for (i, &n) in sizes.iter().enumerate() {
                let from = if i % 2 == 0 { &s1 } else { &s2 };
                from.send_to(&vec![round * 50 + i as u8; n], dst).unwrap();
            }
            let want = got.len() + sizes.len();
            for _ in 0..1000 {
                if got.len() >= want {
                    break;
                }
                batch = std::hint::black_box(batch); // moved between calls
                b.recv_batch(&mut batch).unwrap();
                got.extend(batch.packets().map(|(src, p)| (src, p.to_vec())));
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert_eq!(got.len(), want, "round {round}");
            for (i, &n) in sizes.iter().enumerate() {
                let (src, p) = &got[want - sizes.len() + i];
                let from = if i % 2 == 0 { &s1 } else { &s2 };
                assert_eq!(*src, Some(from.local_addr().unwrap()), "round {round} datagram {i}");
                assert_eq!(p.len(), n, "round {round} datagram {i}");
                assert!(p.iter().all(|&x| x == round * 50 + i as u8), "round {round} datagram {i}");
            }
        }
        // The earlier calls had the kernel write back control lengths of 0 (plain datagrams
        // carry no GRO control message); a GSO train now must still arrive as its packets.
        assert!(a.gso_to(dst.ip()));
        let train: Vec<u8> = (0..5u8).flat_map(|i| std::iter::repeat_n(200 + i, 1000)).collect();
        a.send_gso(&train, 1000, dst).unwrap();
        let mut packets = Vec::new();
        for _ in 0..1000 {
            if packets.len() >= 5 {
                break;
            }
            b.recv_batch(&mut batch).unwrap();
            packets.extend(batch.packets().map(|(src, p)| (src, p.to_vec())));
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(packets.len(), 5, "the train's packets");
        for (i, (src, p)) in packets.iter().enumerate() {
            assert_eq!(*src, Some(a.local_addr()));
            assert!(p.len() == 1000 && p.iter().all(|&x| x == 200 + i as u8), "train packet {i}");
        }
    }

    #[test]
    fn a_receive_after_an_empty_one_takes_one_datagram_and_says_so() {
        // A busy poller's loop: the receive after an empty one is a one-datagram recvmsg,
        // which must say so (whoever needs the socket empty, the progress thread with its
        // edge-triggered epoll, receives on); the one after it takes the rest in one batch.
        let (a, b) = pair();
        let dst = b.local_addr();
        let mut batch = RecvBatch::new();
        assert_eq!(b.recv_batch(&mut batch).unwrap(), 0);
        assert!(!batch.was_single());
        for i in 0..3u8 {
            a.send_to(&[i; 40], dst).unwrap();
        }
        // Loopback delivery is synchronous with the send call; wait a little all the same.
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(b.recv_batch(&mut batch).unwrap(), 1);
        assert!(batch.was_single());
        let first: Vec<Vec<u8>> = batch.packets().map(|(_, p)| p.to_vec()).collect();
        assert_eq!(first, vec![vec![0u8; 40]]);
        assert_eq!(b.recv_batch(&mut batch).unwrap(), 2, "the next call takes the rest");
        assert!(!batch.was_single());
        let rest: Vec<Vec<u8>> = batch.packets().map(|(_, p)| p.to_vec()).collect();
        assert_eq!(rest, vec![vec![1u8; 40], vec![2u8; 40]]);
        assert_eq!(b.recv_batch(&mut batch).unwrap(), 0);
        // After that empty call, a GRO train still arrives whole through the one-datagram call.
        let train: Vec<u8> = (0..4u8).flat_map(|i| std::iter::repeat_n(100 + i, 500)).collect();
        a.send_gso(&train, 500, dst).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(b.recv_batch(&mut batch).unwrap(), 1);
        assert!(batch.was_single());
        let pkts: Vec<Vec<u8>> = batch.packets().map(|(_, p)| p.to_vec()).collect();
        assert_eq!(pkts.len(), 4);
        for (i, p) in pkts.iter().enumerate() {
            assert!(p.len() == 500 && p.iter().all(|&x| x == 100 + i as u8), "train packet {i}");
        }
    }

    #[test]
    fn gso_train_arrives_as_its_packets_in_order() {
        let (a, b) = pair();
        assert!(a.gso_to(b.local_addr().ip()));
        let mut buf = Vec::new();
        for i in 0..10u8 {
            buf.extend(std::iter::repeat_n(i, if i == 9 { 100 } else { 1000 }));
        }
        a.send_gso(&buf, 1000, b.local_addr()).unwrap();
        let got = recv_all(&b, 10);
        assert_eq!(got.len(), 10);
        for (i, p) in got.iter().enumerate() {
            assert_eq!(p.len(), if i == 9 { 100 } else { 1000 });
            assert!(p.iter().all(|&x| x == i as u8));
        }
    }

    /// The kernel behaviour the multicast design rests on: every socket bound to a group and
    /// port 4791 gets its own copy of a datagram sent to the group (several processes of one
    /// host, of one reuseport group or not), a unicast-bound 4791 socket of a shared address
    /// gets none, and a socket of another group none either.
    #[test]
    fn every_socket_bound_to_a_group_gets_each_datagram_and_unicast_sockets_none() {
        let local: IpAddr = "127.44.0.30".parse().unwrap();
        let group: IpAddr = "239.44.9.1".parse().unwrap();
        let m1 = RoceSocket::bind_multicast(group, local).unwrap();
        let m2 = RoceSocket::bind_multicast(group, local).unwrap();
        let other = RoceSocket::bind_multicast("239.44.9.2".parse().unwrap(), local).unwrap();
        let unicast = RoceSocket::bind_shared(SocketAddr::new(local, ROCE_PORT)).unwrap();
        let tx = RoceSocket::bind(SocketAddr::new("127.44.0.31".parse().unwrap(), 0)).unwrap();
        assert!(!tx.gso_to(group), "no GSO to a group");
        for i in 0..3u8 {
            tx.send_to(&[i; 48], SocketAddr::new(group, ROCE_PORT)).unwrap();
        }
        for m in [&m1, &m2] {
            assert_eq!(recv_all(m, 3).iter().map(|p| p[0]).collect::<Vec<_>>(), vec![0, 1, 2]);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut b = RecvBatch::new();
        assert_eq!(unicast.recv_batch(&mut b).unwrap(), 0, "a unicast-bound socket gets none");
        assert_eq!(other.recv_batch(&mut b).unwrap(), 0, "another group's socket gets none");
    }

    #[test]
    fn sendmmsg_batch_sends_every_packet_and_consume_keeps_order() {
        let (a, b) = pair();
        let mut s = SendBatch::new(8, 2048);
        for i in 0..5u8 {
            let buf = s.next_buf();
            buf[..64].fill(i);
            s.push(64, b.local_addr());
        }
        s.consume(2);
        assert_eq!(s.len(), 3);
        let sent = a.send_mmsg(&mut s).unwrap();
        assert_eq!(sent, 3);
        let got = recv_all(&b, 3);
        assert_eq!(got.iter().map(|p| p[0]).collect::<Vec<_>>(), vec![2, 3, 4]);
        assert!(got.iter().all(|p| p.len() == 64));
    }

    #[test]
    fn packets_of_mixed_sizes_leave_as_trains_of_one_sendmmsg_in_order() {
        // Three 2-packet WRITEs (a first packet 16 bytes longer: the RETH), an ACK, then three
        // equal packets of which the last is shorter.
        let sizes = [1016, 1000, 1016, 1000, 1016, 1000, 64, 1000, 1000, 500];
        let (a, b) = pair();
        let mut s = SendBatch::new(16, 2048);
        for (i, &n) in sizes.iter().enumerate() {
            s.next_buf()[..n].fill(i as u8);
            s.push(n, b.local_addr());
        }
        let trains: Vec<usize> = {
            let (mut v, mut i) = (Vec::new(), 0);
            while i < s.len() {
                v.push(s.train_len(i));
                i += v[v.len() - 1];
            }
            v
        };
        assert_eq!(trains, vec![2, 2, 2, 1, 3]);
        assert_eq!(a.send_trains(&mut s).unwrap(), sizes.len());
        let got = recv_all(&b, sizes.len());
        assert_eq!(got.len(), sizes.len());
        for (i, p) in got.iter().enumerate() {
            assert_eq!(p.len(), sizes[i], "packet {i}");
            assert!(p.iter().all(|&x| x == i as u8), "packet {i} intact");
        }
    }

    #[test]
    fn a_train_stops_at_the_kernels_segment_and_byte_limits() {
        let dst: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut s = SendBatch::new(MAX_GSO_SEGMENTS + 8, 2048);
        for _ in 0..MAX_GSO_SEGMENTS + 8 {
            s.push(100, dst);
        }
        assert_eq!(s.train_len(0), MAX_GSO_SEGMENTS);
        let mut s = SendBatch::new(40, 4200);
        for _ in 0..40 {
            s.push(4136, dst);
        }
        assert_eq!(s.train_len(0), MAX_GSO_BYTES / 4136);
    }

    #[test]
    fn binding_a_taken_address_reports_addr_in_use() {
        let a = RoceSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let e = RoceSocket::bind(a.local_addr()).err().unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE));
    }

    #[test]
    fn ipv6_gso_trains_and_lone_datagrams_arrive_from_one_socket() {
        // The kernel refuses an IPv6 GSO send from a socket with UDP_NO_CHECK6_TX (EINVAL in
        // udp_v6_send_skb): a train must go with the checksum on, a lone datagram after it
        // still with checksum 0, and both arrive, in either order, more than once.
        let a = RoceSocket::bind("[::1]:0".parse().unwrap()).unwrap();
        let b = RoceSocket::bind("[::1]:0".parse().unwrap()).unwrap();
        let dst = b.local_addr();
        for round in 0..2u8 {
            let train: Vec<u8> = (0..4u8).flat_map(|i| std::iter::repeat_n(round * 10 + i, 1000)).collect();
            a.send_gso(&train, 1000, dst).unwrap();
            let mut batch = SendBatch::new(8, 2000);
            for i in 0..3u8 {
                batch.next_buf()[..1000].fill(round * 10 + 4 + i);
                batch.push(1000, dst);
            }
            assert_eq!(a.send_trains(&mut batch).unwrap(), 3);
            a.send_to(&[round * 10 + 7; 40], dst).unwrap();
            let got = recv_all(&b, 8);
            assert_eq!(got.len(), 8, "round {round}");
            for (i, p) in got.iter().enumerate() {
                assert!(p.iter().all(|&x| x == round * 10 + i as u8), "round {round} packet {i}");
            }
        }
    }

    #[test]
    fn ipv6_socket_binds_with_zero_checksum_options() {
        let s = RoceSocket::bind("[::1]:0".parse().unwrap()).unwrap();
        let r = RoceSocket::bind("[::1]:0".parse().unwrap()).unwrap();
        s.send_to(&[1, 2, 3, 4], r.local_addr()).unwrap();
        assert_eq!(recv_all(&r, 1), vec![vec![1, 2, 3, 4]]);
    }
}

mod wire_fields {
    //! What the kernel puts in the IPv4 header of our packets, seen through a raw socket
    //! (root, as the project's machines run).
    use super::super::*;

    /// Reads raw IPv4 copies of UDP packets to `port` on loopback; returns (id, flags) per packet.
    fn raw_headers(port: u16, want: usize, send: impl FnOnce()) -> Vec<(u16, u16)> {
        let raw = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::UDP)).expect("raw socket (tests run as root)");
        raw.set_read_timeout(Some(std::time::Duration::from_millis(200))).unwrap();
        send();
        let mut out = Vec::new();
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 70000];
        for _ in 0..200 {
            let Ok(n) = raw.recv(&mut buf) else { break };
            // SAFETY: recv initialised the first n bytes.
            let b: Vec<u8> = buf[..n].iter().map(|x| unsafe { x.assume_init() }).collect();
            let ihl = ((b[0] & 0xF) * 4) as usize;
            if b.len() >= ihl + 8 && u16::from_be_bytes([b[ihl + 2], b[ihl + 3]]) == port {
                out.push((u16::from_be_bytes([b[4], b[5]]), u16::from_be_bytes([b[6], b[7]])));
            }
            if out.len() >= want {
                break;
            }
        }
        out
    }

    #[test]
    fn ipv4_packets_leave_with_df_and_id_zero() {
        let a = RoceSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = RoceSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let dst = b.local_addr();
        let hdrs = raw_headers(dst.port(), 3, || {
            for _ in 0..3 {
                a.send_to(&[0u8; 64], dst).unwrap();
            }
        });
        assert_eq!(hdrs.len(), 3);
        for (id, flags) in hdrs {
            assert_eq!(id, 0);
            assert_eq!(flags, 0x4000, "DF set, no fragment offset");
        }
    }
}

mod wire_fields_v6 {
    //! The UDP checksum of our IPv6 packets, seen through a raw IPv6 socket (root).
    use super::super::*;

    #[test]
    fn ipv6_lone_datagrams_carry_checksum_0_and_gso_trains_a_checksum() {
        let a = RoceSocket::bind("[::1]:0".parse().unwrap()).unwrap();
        let b = RoceSocket::bind("[::1]:0".parse().unwrap()).unwrap();
        let dst = b.local_addr();
        let raw = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::UDP)).expect("raw socket (tests run as root)");
        raw.set_read_timeout(Some(std::time::Duration::from_millis(200))).unwrap();
        a.send_to(&[1u8; 64], dst).unwrap();
        a.send_gso(&[2u8; 3000], 1000, dst).unwrap();
        a.send_to(&[3u8; 64], dst).unwrap();
        // (first payload byte, UDP checksum) of each datagram to `dst` (a train may show whole).
        let mut seen = Vec::new();
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 70000];
        for _ in 0..200 {
            let Ok(n) = raw.recv(&mut buf) else { break };
            // SAFETY: recv initialised the first n bytes.
            let u: Vec<u8> = buf[..n.min(9)].iter().map(|x| unsafe { x.assume_init() }).collect();
            if u.len() == 9 && u16::from_be_bytes([u[2], u[3]]) == dst.port() {
                seen.push((u[8], u16::from_be_bytes([u[6], u[7]])));
            }
            if seen.iter().any(|&(p, _)| p == 3) {
                break;
            }
        }
        assert_eq!(seen.first(), Some(&(1, 0)), "{seen:?}");
        assert_eq!(seen.last(), Some(&(3, 0)), "{seen:?}");
        let train: Vec<_> = seen.iter().filter(|&&(p, _)| p == 2).collect();
        assert!(!train.is_empty() && train.iter().all(|&&(_, c)| c != 0), "{seen:?}");
    }
}
