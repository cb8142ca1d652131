//! Peer profiles: the deviations from the IBTA rules a known implementation is documented to
//! have. A scenario whose every failed check is documented for the chosen profile is graded
//! "deviation" with the explanation, not "fail"; anything undocumented still fails.

/// A documented deviation: the scenario, a text every failing check it covers starts with,
/// and why the peer behaves so.
#[derive(Clone, Copy, Debug)]
pub struct Deviation {
    pub scenario: &'static str,
    pub check_prefix: &'static str,
    pub why: &'static str,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Profile {
    /// No deviation is excused.
    #[default]
    Strict,
    /// Linux kernel soft-RoCE (`rdma_rxe`, as in Linux 6.1).
    Rxe,
}

const RXE: &[Deviation] = &[
    Deviation {
        scenario: "retry_cnt",
        check_prefix: "retry_cnt 7:",
        why: "rxe treats retry_cnt 7 like rnr_retry 7, as infinite (IBTA: 7 retries, then \
              IBV_WC_RETRY_EXC_ERR); only the RNR retry count has an infinite encoding",
    },
    Deviation {
        scenario: "ghost_ack",
        check_prefix: "ghost:",
        why: "rxe's completer takes an ACK whose PSN lies beyond a WQE's last PSN as a coalesced \
              ACK of that WQE without checking that the PSN was ever sent, so an ACK for a PSN \
              never sent completes the outstanding SEND (IBTA: such a ghost ACK is dropped)",
    },
    Deviation {
        scenario: "dup_read_partial",
        check_prefix: "partial duplicate READ opens a new response:",
        why: "rxe replays a duplicate READ that starts inside an earlier one by resuming that \
              READ's response stream (MIDDLE .. LAST) instead of answering it as a new request \
              (FIRST .. LAST); PSNs, length and data are right",
    },
];

impl Profile {
    pub fn parse(s: &str) -> Option<Profile> {
        match s {
            "strict" | "urxe" => Some(Profile::Strict),
            "rxe" => Some(Profile::Rxe),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Profile::Strict => "strict",
            Profile::Rxe => "rxe",
        }
    }

    pub fn deviations(self) -> &'static [Deviation] {
        match self {
            Profile::Strict => &[],
            Profile::Rxe => RXE,
        }
    }

    /// The documented deviation covering this failed check, if any.
    pub fn excuse(self, scenario: &str, check: &str) -> Option<&'static Deviation> {
        self.deviations().iter().find(|d| d.scenario == scenario && check.starts_with(d.check_prefix))
    }
}
