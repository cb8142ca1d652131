use super::*;

fn tx(qpn: u32, opcode: u8) -> Point {
    Point { site: Some(Site::Tx), qpn: Some(qpn), opcode: Some(opcode), ..Point::default() }
}

fn fires(plan: &mut FaultPlan, points: &[(Nanos, Point)]) -> Vec<Option<Action>> {
    points.iter().map(|(t, p)| plan.decide(*t, p).map(|d| d.action)).collect()
}

#[test]
fn every_after_and_count_count_the_faults_own_points() {
    let mut plan = parse("drop:qpn=0x11,after=2,every=3,count=2").unwrap();
    let pts: Vec<_> = (0..12).map(|i| (i, tx(0x11, 4))).collect();
    let got = fires(&mut plan, &pts);
    let idx: Vec<usize> = got.iter().enumerate().filter(|(_, a)| a.is_some()).map(|(i, _)| i).collect();
    // Points 0 and 1 are skipped (after=2); then the 1st, 4th, 7th … of the rest; at most 2.
    assert_eq!(idx, vec![2, 5]);
    assert_eq!(plan.faults[0].fired(), 2);
    // Other QPs never match and never count.
    let mut plan = parse("drop:qpn=0x11,every=2").unwrap();
    let mixed = [(0, tx(0x12, 4)), (1, tx(0x11, 4)), (2, tx(0x12, 4)), (3, tx(0x11, 4)), (4, tx(0x11, 4))];
    assert_eq!(fires(&mut plan, &mixed), vec![None, Some(Action::Drop), None, None, Some(Action::Drop)]);
}

#[test]
fn at_and_for_bound_a_fault_in_time() {
    let mut plan = parse("drop:at=1ms,for=2ms").unwrap();
    let ms = 1_000_000;
    let pts: Vec<_> = [0, ms / 2, ms, 2 * ms, 3 * ms - 1, 3 * ms, 10 * ms].iter().map(|&t| (t, tx(1, 4))).collect();
    let got: Vec<bool> = fires(&mut plan, &pts).iter().map(Option::is_some).collect();
    assert_eq!(got, vec![false, false, true, true, true, false, false]);
}

#[test]
fn the_same_seed_gives_the_same_decisions_and_another_seed_others() {
    let run = |seed: u64| {
        let mut plan = parse(&format!("seed={seed}; drop:prob=0.3")).unwrap();
        (0..2000).map(|i| plan.decide(i, &tx(7, 4)).is_some()).collect::<Vec<_>>()
    };
    let a = run(42);
    assert_eq!(a, run(42));
    assert_ne!(a, run(43));
    let n = a.iter().filter(|x| **x).count();
    assert!((450..750).contains(&n), "{n} of 2000 at p=0.3");
}

#[test]
fn the_first_matching_fault_decides_and_all_matching_faults_count() {
    let mut plan = parse("rnr-nak:count=2; nak=access:every=2").unwrap();
    let rx = Point {
        site: Some(Site::Rx),
        qpn: Some(5),
        opcode: Some(4),
        rnr_answerable: true,
        nak_answerable: true,
        ..Point::default()
    };
    // A request the responder could not answer itself is not counted by either fault.
    let mut other = plan.clone();
    assert!(other.decide(0, &Point { rnr_answerable: false, nak_answerable: false, ..rx }).is_none());
    assert_eq!((other.faults[0].fired(), other.faults[1].fired()), (0, 0));
    let got = fires(&mut plan, &[(0, rx), (1, rx), (2, rx), (3, rx)]);
    // The second fault saw points 1..4 too: it fires on its 1st and 3rd (points 0 and 2), but
    // the first fault decided point 0; point 2 is the second fault's, point 3 nobody's.
    assert_eq!(got, vec![Some(Action::RnrNak), Some(Action::RnrNak), Some(Action::Nak(2)), None]);
}

#[test]
fn scopes_select_sites_classes_peers_and_cm_steps() {
    let mut plan = parse("drop:site=rx,class=resp,peer=10.0.0.2").unwrap();
    let peer = std::net::Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped().octets();
    let resp = Point { site: Some(Site::Rx), response: true, peer: Some(peer), ..Point::default() };
    assert!(plan.decide(0, &resp).is_some());
    assert!(plan.decide(0, &Point { response: false, ..resp }).is_none());
    assert!(plan.decide(0, &Point { site: Some(Site::Tx), ..resp }).is_none());
    assert!(plan.decide(0, &Point { peer: Some([0; 16]), ..resp }).is_none());
    assert!(plan.watches(Site::Rx) && !plan.watches(Site::Tx));

    let mut plan = parse("reject=28:step=request").unwrap();
    let req = Point { site: Some(Site::Cm), cm_step: Some(CmStep::RequestReceived), ..Point::default() };
    assert_eq!(plan.decide(0, &req).map(|d| d.action), Some(Action::Reject(28)));
    let rtu = Point { cm_step: Some(CmStep::Rtu), ..req };
    assert!(plan.decide(0, &rtu).is_none());
}

#[test]
fn actions_parse_with_their_values_and_default_sites() {
    let plan = parse(
        "# a comment line\n delay=500us ; corrupt-psn=3 ; silent:peer=::1\n\
         errno=ENOMEM:site=post-send,count=1; wc=retry_exc_err; wc=IBV_WC_REM_ACCESS_ERR\n\
         port-down=2s:at=100ms; cm-error=ETIMEDOUT:step=resolve-route; opcode-test:x=1 # never reached",
    );
    let e = plan.unwrap_err();
    assert_eq!(e.item, 9, "{e}");
    let plan = parse(
        "delay=500us; corrupt-psn=3; silent:peer=::1; errno=ENOMEM:site=post-send,count=1;\
         wc=retry_exc_err; wc=IBV_WC_REM_ACCESS_ERR; port-down=2s:at=100ms;\
         cm-error=ETIMEDOUT:step=resolve-route; drop:opcode=RC_RDMA_WRITE_FIRST; drop:opcode=0x81",
    )
    .unwrap();
    let a: Vec<(Action, Option<Site>)> = plan.faults.iter().map(|f| (f.action, f.scope.site)).collect();
    assert_eq!(
        a,
        vec![
            (Action::Delay(500_000), Some(Site::Tx)),
            (Action::CorruptPsn(3), Some(Site::Tx)),
            (Action::Drop, Some(Site::Rx)),
            (Action::Errno(libc::ENOMEM), Some(Site::PostSend)),
            (Action::WcStatus(12), Some(Site::Completion)),
            (Action::WcStatus(10), Some(Site::Completion)),
            (Action::PortDown(2_000_000_000), Some(Site::Device)),
            (Action::CmError(libc::ETIMEDOUT), Some(Site::Cm)),
            (Action::Drop, Some(Site::Tx)),
            (Action::Drop, Some(Site::Tx)),
        ]
    );
    assert_eq!(plan.faults[8].scope.opcode, Some(0x06));
    assert_eq!(plan.faults[9].scope.opcode, Some(0x81));
    assert_eq!(plan.faults[6].schedule.at, Some(100_000_000));
    assert_eq!(parse("").unwrap().faults.len(), 0);
}

#[test]
fn a_plan_that_does_not_mean_what_it_says_is_refused_naming_the_item() {
    let bad = [
        ("drop; teleport", 2, "unknown fault 'teleport'"),
        ("drop:qpn=zz", 1, "qpn: 'zz' is not a whole number"),
        ("errno=ENOMEM", 1, "needs site=post-send"),
        ("errno=ENOMEM:site=tx", 1, "cannot act at site tx"),
        ("rnr-nak:site=tx", 1, "cannot act at site tx"),
        ("drop:prob=1.5", 1, "prob: 1.5 is not between 0 and 1"),
        ("delay=5", 1, "needs a unit"),
        ("delay", 1, "needs a value"),
        ("drop=3", 1, "takes no value"),
        ("drop:opcode=RC_TELEPORT", 1, "unknown opcode"),
        ("qp-fatal:opcode=4", 1, "opcode, class and peer scope packets"),
        ("drop:step=rtu", 1, "cm-id and step scope rdma_cm faults"),
        ("drop:colour=red", 1, "unknown option 'colour'"),
        ("drop:after", 1, "not key=value"),
        ("seed=x", 1, "not a whole number"),
        ("wc=NOT_A_STATUS", 1, "unknown completion status"),
        ("reject=70000", 1, "more than 16 bits"),
    ];
    for (text, item, why) in bad {
        let e = parse(text).unwrap_err();
        assert_eq!(e.item, item, "{text}: {e}");
        assert!(e.to_string().contains(why), "{text}: {e}");
    }
}

#[test]
fn cm_faults_take_their_default_steps_and_map_to_the_kernels_events() {
    let mut plan =
        parse("reject=28:count=1; cm-error=EHOSTUNREACH; cm-error=ETIMEDOUT:step=connect; lose-rtu").unwrap();
    let steps: Vec<_> = plan.faults.iter().map(|f| f.scope.cm_step).collect();
    use CmStep::*;
    assert_eq!(steps, vec![Some(RequestReceived), Some(ResolveAddr), Some(Connect), Some(Rtu)]);
    assert_eq!(plan.decide_cm(0, RequestReceived, 0), Some((0, CmEffect::Reject(28))));
    // count=1: the second REQ is let through.
    assert_eq!(plan.decide_cm(1, RequestReceived, 0), None);
    assert_eq!(plan.decide_cm(2, ResolveAddr, 0), Some((1, CmEffect::AddrError(-libc::EHOSTUNREACH))));
    assert_eq!(plan.decide_cm(3, ResolveRoute, 0), None);
    assert_eq!(plan.decide_cm(4, Connect, 0), Some((2, CmEffect::LoseReq)));
    assert_eq!(plan.decide_cm(5, Rtu, 0), Some((3, CmEffect::LoseRtu)));
    let mut plan = parse("cm-error=ENETUNREACH:step=resolve-route; cm-error=ENOMEM:step=connect").unwrap();
    assert_eq!(plan.decide_cm(0, ResolveRoute, 0), Some((0, CmEffect::RouteError(-libc::ENETUNREACH))));
    assert_eq!(plan.decide_cm(0, Connect, 0), Some((1, CmEffect::ConnectFails(libc::ENOMEM))));
    assert_eq!(parse("drop").unwrap().decide_cm(0, Connect, 0), None);
}

#[test]
fn disconnect_and_device_removal_happen_once_at_their_time() {
    let mut plan = parse("disconnect:at=1ms; device-removal:at=5ms").unwrap();
    assert_eq!(plan.next_cm_at(), Some(1_000_000));
    let connected = |c: bool| move |e: CmEffect, _: Option<u64>| c || e != CmEffect::Disconnect;
    assert!(plan.due_cm(500_000, connected(true)).is_empty());
    // Due, but nothing is connected: the disconnect waits for a connection.
    assert!(plan.due_cm(2_000_000, connected(false)).is_empty());
    assert_eq!(plan.due_cm(3_000_000, connected(true)), vec![(0, CmEffect::Disconnect, None)]);
    assert!(plan.due_cm(4_000_000, connected(true)).is_empty());
    assert_eq!(plan.due_cm(5_000_000, connected(false)), vec![(1, CmEffect::DeviceRemoval, None)]);
    assert_eq!(plan.next_cm_at(), None);
    for (text, why) in [
        ("reject=28:step=rtu", "cannot act at step Rtu"),
        ("cm-error=ETIMEDOUT:step=request", "cannot act at step RequestReceived"),
        ("disconnect:count=2", "happens once"),
        ("drop:cm-id=3", "cm-id and step scope rdma_cm faults"),
    ] {
        let e = parse(text).unwrap_err();
        assert!(e.to_string().contains(why), "{text}: {e}");
    }
}

#[test]
fn a_cm_id_scope_fires_at_that_id_only() {
    use CmStep::*;
    let mut plan = parse("cm-error=EHOSTUNREACH:cm-id=1; reject=28:cm-id=0").unwrap();
    assert_eq!(plan.faults[0].scope.cm_id, Some(1));
    assert_eq!(plan.decide_cm(0, ResolveAddr, 0), None);
    assert_eq!(plan.decide_cm(1, ResolveAddr, 2), None);
    assert_eq!(plan.decide_cm(2, ResolveAddr, 1), Some((0, CmEffect::AddrError(-libc::EHOSTUNREACH))));
    assert_eq!(plan.decide_cm(3, RequestReceived, 4), None);
    assert_eq!(plan.decide_cm(4, RequestReceived, 0), Some((1, CmEffect::Reject(28))));
    // A timed fault scoped to an ID waits until that ID has something to act on.
    let mut plan = parse("disconnect:cm-id=2,at=1ms").unwrap();
    assert!(plan.due_cm(2_000_000, |_, id| id != Some(2)).is_empty());
    assert_eq!(plan.due_cm(3_000_000, |_, id| id == Some(2)), vec![(0, CmEffect::Disconnect, Some(2))]);
}
