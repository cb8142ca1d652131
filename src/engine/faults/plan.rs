//! A fault plan: its faults (action, scope, schedule) and the decision at each point.

use crate::engine::types::SplitMix64;

/// Nanoseconds on the caller's monotonic clock, from the plan's start.
pub type Nanos = u64;

/// Where a fault can be injected.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Site {
    /// A RoCEv2 packet leaving this process.
    Tx,
    /// A RoCEv2 packet arriving at this process.
    Rx,
    /// `ibv_post_send`.
    PostSend,
    /// `ibv_post_recv` / `ibv_post_srq_recv`.
    PostRecv,
    /// A work completion about to be delivered.
    Completion,
    /// `ibv_reg_mr` and its variants.
    RegMr,
    /// The device and port (events that no call asks for: checked on the timer).
    Device,
    /// An rdma_cm step (request received, reply, disconnect, resolution).
    Cm,
}

/// One moment at which a layer asks the plan.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Point {
    pub site: Option<Site>,
    /// The QP the packet or WR belongs to (destination QP for a received packet).
    pub qpn: Option<u32>,
    /// BTH opcode of a packet; `ibv_wr_opcode` of a WR.
    pub opcode: Option<u8>,
    /// Whether a packet is a response (ACK, NAK, READ response, atomic ACK).
    pub response: bool,
    /// The peer's address, as text-free bytes (IPv4-mapped for IPv4).
    pub peer: Option<[u8; 16]>,
    /// The rdma_cm ID's handle, for CM points.
    pub cm_id: Option<u64>,
    /// The rdma_cm step, for CM points.
    pub cm_step: Option<CmStep>,
    /// A received request the responder could answer with an RNR NAK itself: in sequence on
    /// a connected RC QP, starting a message that consumes a receive WQE. `rnr-nak` acts on
    /// (and counts) only these.
    pub rnr_answerable: bool,
    /// A received request the responder could NAK itself (in sequence on a connected RC
    /// QP). `nak=` acts on (and counts) only these.
    pub nak_answerable: bool,
}

/// The rdma_cm steps a plan can act on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum CmStep {
    ResolveAddr,
    ResolveRoute,
    Connect,
    RequestReceived,
    Established,
    Rtu,
}

/// What to do at a point.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Action {
    Drop,
    Duplicate,
    /// Hold the packet back and send it after the next one.
    Reorder,
    Delay(Nanos),
    /// Flip ICRC bits: the receiver's ICRC check drops it.
    CorruptIcrc,
    /// Move the PSN off by this much.
    CorruptPsn(u32),
    /// Answer the request with an RNR NAK instead of serving it.
    RnrNak,
    /// Answer the request with a NAK of this AETH code (0 PSN sequence error, 1 invalid
    /// request, 2 remote access error, 3 remote operational error).
    Nak(u8),
    /// The call fails with this errno.
    Errno(i32),
    /// The completion carries this `ibv_wc_status`.
    WcStatus(u32),
    CqOverrun,
    QpFatal,
    /// The port goes down for this long, then comes back.
    PortDown(Nanos),
    DeviceFatal,
    SrqLimit,
    /// The CM answers a request with REJ and this reason.
    Reject(u16),
    /// The resolution or connect fails with this errno / never answers (ETIMEDOUT).
    CmError(i32),
    /// A DREQ is sent on an established connection.
    Disconnect,
    /// The RTU is lost (the passive side sees a timeout or an MRA exchange).
    LoseRtu,
    DeviceRemoval,
}

/// When a fault fires, among the points that match its scope.
#[derive(Clone, Copy, PartialEq, Debug, Default)]
pub struct Schedule {
    /// Skip the first `after` matching points.
    pub after: u64,
    /// Not before this time.
    pub at: Option<Nanos>,
    /// Every n-th matching point (after `after`); 1 = each.
    pub every: Option<u64>,
    /// With this probability (0..=1), drawn from the plan's generator.
    pub prob: Option<f64>,
    /// For this long after its first firing (then never again).
    pub duration: Option<Nanos>,
    /// At most this many firings.
    pub count: Option<u64>,
}

/// Which points a fault applies to; a field that is `None` matches every point.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Scope {
    pub site: Option<Site>,
    pub qpn: Option<u32>,
    pub opcode: Option<u8>,
    /// Requests only (`Some(false)`) or responses only (`Some(true)`).
    pub response: Option<bool>,
    pub peer: Option<[u8; 16]>,
    pub cm_id: Option<u64>,
    pub cm_step: Option<CmStep>,
}

impl Scope {
    fn matches(&self, p: &Point) -> bool {
        fn m<T: PartialEq>(want: Option<T>, have: Option<T>) -> bool {
            want.is_none() || want == have
        }
        m(self.site, p.site)
            && m(self.qpn, p.qpn)
            && m(self.opcode, p.opcode)
            && self.response.is_none_or(|r| r == p.response)
            && m(self.peer, p.peer)
            && m(self.cm_id, p.cm_id)
            && m(self.cm_step, p.cm_step)
    }
}

/// One fault of a plan: what, where, when; and its own progress.
#[derive(Clone, PartialEq, Debug)]
pub struct Fault {
    /// The text it was written as, for the log.
    pub name: String,
    pub action: Action,
    pub scope: Scope,
    pub schedule: Schedule,
    seen: u64,
    fired: u64,
    first: Option<Nanos>,
}

impl Fault {
    pub fn new(name: impl Into<String>, action: Action, scope: Scope, schedule: Schedule) -> Fault {
        Fault { name: name.into(), action, scope, schedule, seen: 0, fired: 0, first: None }
    }

    /// How often this fault fired so far.
    pub fn fired(&self) -> u64 {
        self.fired
    }

    /// Counts a firing of a fault that fires once at its time (device and timed CM faults).
    pub(super) fn mark_fired(&mut self, now: Nanos) {
        self.fired += 1;
        self.first.get_or_insert(now);
    }
}

/// A parsed plan: its faults in the order written, and the generator for `prob=`.
#[derive(Clone, Debug)]
pub struct FaultPlan {
    pub seed: u64,
    pub faults: Vec<Fault>,
    rng: SplitMix64,
}

/// One decision: the fault's index in the plan and what to do.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Decision {
    pub fault: usize,
    pub action: Action,
}

impl FaultPlan {
    /// A plan with these faults and this seed.
    pub fn new(seed: u64, faults: Vec<Fault>) -> FaultPlan {
        FaultPlan { seed, faults, rng: SplitMix64::new(seed) }
    }

    /// Whether any fault can act at this site (callers skip building a [`Point`] otherwise).
    pub fn watches(&self, site: Site) -> bool {
        self.faults.iter().any(|f| f.scope.site.is_none_or(|s| s == site))
    }

    /// Asks the plan at one point. The first fault (in plan order) that matches the point and
    /// whose schedule fires decides; every matching fault counts the point, so each fault's
    /// `after` and `every` count the points of its own scope.
    pub fn decide(&mut self, now: Nanos, p: &Point) -> Option<Decision> {
        let mut out = None;
        for (i, f) in self.faults.iter_mut().enumerate() {
            if !f.scope.matches(p) {
                continue;
            }
            let answers = match f.action {
                Action::RnrNak => Some(p.rnr_answerable),
                Action::Nak(_) => Some(p.nak_answerable),
                _ => None,
            };
            if answers == Some(false) {
                continue;
            }
            f.seen += 1;
            if out.is_some() {
                continue;
            }
            let s = &f.schedule;
            if f.seen <= s.after || s.at.is_some_and(|t| now < t) {
                continue;
            }
            if s.count.is_some_and(|c| f.fired >= c) {
                continue;
            }
            if let (Some(d), Some(first)) = (s.duration, f.first) {
                if now.saturating_sub(first) >= d {
                    continue;
                }
            }
            if s.every.is_some_and(|n| n > 1 && (f.seen - s.after - 1) % n != 0) {
                continue;
            }
            if let Some(prob) = s.prob {
                // Drawn only here, for a point that passed every other test: the sequence of
                // draws is a function of the points alone.
                // Uniform in [0, 1) from 53 bits.
                let draw = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                if draw >= prob {
                    continue;
                }
            }
            f.fired += 1;
            f.first.get_or_insert(now);
            out = Some(Decision { fault: i, action: f.action });
        }
        out
    }

    /// The device faults (site `device`) due at `now`, each once: its index, action and QP
    /// scope. Their only schedule is `at` (at once without one).
    pub fn due_device(&mut self, now: Nanos) -> Vec<(usize, Action, Option<u32>)> {
        let mut out = Vec::new();
        for (i, f) in self.faults.iter_mut().enumerate() {
            if f.scope.site == Some(Site::Device) && f.fired == 0 && now >= f.schedule.at.unwrap_or(0) {
                f.fired = 1;
                f.first = Some(now);
                out.push((i, f.action, f.scope.qpn));
            }
        }
        out
    }

    /// When the next device fault falls due.
    pub fn next_device_at(&self) -> Option<Nanos> {
        self.faults
            .iter()
            .filter(|f| f.scope.site == Some(Site::Device) && f.fired == 0)
            .map(|f| f.schedule.at.unwrap_or(0))
            .min()
    }
}
