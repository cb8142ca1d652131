//! Engine counters, in the spirit of rxe's hw counters (`rxe_hw_counters.c`). Plain `u64`s the
//! driver reads with `Engine::counters()`; the engine only ever increments them, except the
//! send-window gauges (`send_window`, `send_window_min`, `srtt_ns`), which hold a last value.

/// Device-wide packet and error counters.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Counters {
    /// Packets produced by `poll_transmit` (`sent_pkts`).
    pub sent_pkts: u64,
    /// Datagrams handed to `handle_datagram` (`rcvd_pkts`).
    pub rcvd_pkts: u64,
    /// Requester packets sent again after a NAK, RNR NAK or timeout.
    pub retransmitted_pkts: u64,
    /// Local ACK timeouts that led to a retry.
    pub ack_timeouts: u64,
    /// RNR NAKs sent by our responders (`rcvd_rnr_err` on the peer).
    pub rnr_naks_sent: u64,
    /// RNR NAKs received by our requesters (`send_rnr_err`).
    pub rnr_naks_rcvd: u64,
    /// Out-of-sequence requests seen by a responder (`rcvd_seq_err`).
    pub psn_seq_errs: u64,
    /// PSN sequence error NAKs received by a requester.
    pub seq_naks_rcvd: u64,
    /// Duplicate requests seen by a responder (`duplicate_request`).
    pub duplicate_requests: u64,
    /// Packets dropped because the ICRC did not match.
    pub icrc_errors: u64,
    /// Faults a fault plan injected (`URXE_FAULTS`; see engine::faults), all kinds; then per
    /// kind: packets dropped (`drop`, `silent`), duplicated, reordered, delayed, corrupted
    /// (ICRC or PSN), answered with an RNR NAK or a NAK, verbs failed with an errno,
    /// completions given an error status, device faults raised (`qp-fatal`, `port-down`, …),
    /// and packets lost while a `port-down` held the port down.
    pub faults_injected: u64,
    pub faults_drop: u64,
    pub faults_dup: u64,
    pub faults_reorder: u64,
    pub faults_delay: u64,
    pub faults_corrupt: u64,
    pub faults_rnr_nak: u64,
    pub faults_nak: u64,
    pub faults_errno: u64,
    pub faults_wc: u64,
    pub faults_device: u64,
    pub faults_port_down_drops: u64,
    /// IPv4 packets whose ICRC could not be verified (IP ID unknown) and were accepted.
    pub icrc_unverified: u64,
    /// Packets dropped because a length was wrong (truncated, bad pad, payload size).
    pub length_errors: u64,
    /// Packets dropped or NAKed for an unknown, unsupported or out-of-place opcode.
    pub opcode_errors: u64,
    /// Packets for a QPN that does not exist, or from an address the QP is not connected to.
    pub unknown_qp: u64,
    /// Packets dropped because the QP's state does not accept them.
    pub bad_state_drops: u64,
    /// UD packets dropped for a Q_Key mismatch.
    pub qkey_violations: u64,
    /// Packets dropped because their P_Key is not the default partition (0xFFFF / 0x7FFF).
    pub pkey_violations: u64,
    /// UD/UC packets dropped for want of a receive WQE.
    pub no_recv_wqe_drops: u64,
    /// NAKs other than PSN sequence error sent by a responder (invalid request, remote
    /// access, remote operational).
    pub naks_sent: u64,
    /// SENDs with Invalidate refused because their key names nothing a peer may invalidate
    /// (an MR, a type 1 window, another QP's window, no object).
    pub invalidate_errors: u64,
    /// FLUSH and ATOMIC WRITE requests NAKed (misaligned or wrong-length ATOMIC WRITE,
    /// undefined FETH values, a key without the access, a range outside the region); also
    /// in `naks_sent`.
    pub flush_atomic_write_naks: u64,
    /// Responses that did not match anything outstanding (ghost/duplicate ACKs, late reads).
    pub unexpected_responses: u64,
    /// Send WRs completed with IBV_WC_RETRY_EXC_ERR (`completer_retry_err`).
    pub retry_exceeded: u64,
    /// Send WRs completed with IBV_WC_RNR_RETRY_EXC_ERR (`rnr_nak_retry_err`).
    pub rnr_retry_exceeded: u64,
    /// Completions lost because a CQ was full (the CQ then reports IBV_EVENT_CQ_ERR).
    pub cq_overflows: u64,
    /// Outgoing packets that did not fit the caller's buffer or could not be addressed.
    pub tx_errors: u64,
    /// Send-window reductions (a NAK-sequence, lost READ response, RNR NAK or timer expiry
    /// halved the window or dropped it to the one-packet probe).
    pub window_reductions: u64,
    /// Retransmission-timer expiries before the configured local ACK timeout (measured
    /// round trip): a probe was resent, `retry_cnt` untouched.
    pub early_rtos: u64,
    /// Early expiries found premature: the first response after one acknowledged a PSN that
    /// was not resent (the ACK lagged). The window cut was undone and the QP's timer floor
    /// raised to cover that lag (at least doubled, up to 256 ms; it halves again after 2048
    /// round-trip samples).
    pub spurious_rtos: u64,
    /// Timer expiries that doubled the retransmission timeout (consecutive, no progress).
    pub rto_backoffs: u64,
    /// Packets resent as probes (one at a time) after a timer expiry.
    pub probe_resends: u64,
    /// PSN sequence error NAKs ignored because go-back-N had already restarted from that
    /// PSN with no progress since.
    pub dup_naks_ignored: u64,
    /// Round-trip samples taken (ACKs of packets sent once).
    pub rtt_samples: u64,
    /// Multicast datagrams (destination QPN 0xFFFFFF) received for a group a QP is attached to.
    pub mcast_rcvd: u64,
    /// Multicast datagrams dropped: no QP attached to the destination group, or a datagram to a
    /// multicast address whose destination QPN is not 0xFFFFFF.
    pub mcast_drops: u64,
    /// Gauge: the smoothed round trip of the QP that took the last sample (ns).
    pub srtt_ns: u64,
    /// Gauge: the send window (PSNs) of the QP whose window changed last.
    pub send_window: u64,
    /// Gauge: the smallest send window any QP reached (0: never reduced).
    pub send_window_min: u64,
    /// XRC requests NAKed because their XRCETH names no XRC SRQ of the target QP's XRC
    /// domain (no such SRQ, an ordinary SRQ, another domain's SRQ), or changes SRQ within
    /// a message.
    pub xrc_srq_errors: u64,
}
