//! The notification point: one per QP that receives. A packet that arrived with ECN CE set
//! makes a CNP due to the QP that sent it, at most one per `min_time_between_cnps` (mlx5's
//! `ecn/roce_np/min_time_between_cnps`; DCQCN's N, 50 µs in the paper).

use super::super::types::Nanos;
use super::{CcCounters, DcqcnParams};

/// Per-QP NP state.
#[derive(Clone, Copy, Debug, Default)]
pub struct Np {
    /// When the last CNP was made due.
    last_cnp: Option<Nanos>,
}

impl Np {
    /// A packet with CE set arrived at `now`. True: send a CNP to its source QP now.
    /// Counts `np_ecn_marked_roce_packets` always and `np_cnp_sent` when a CNP is due; with
    /// DCQCN off, never a CNP.
    pub fn on_ce(&mut self, now: Nanos, p: &DcqcnParams, c: &mut CcCounters) -> bool {
        c.np_ecn_marked_roce_packets += 1;
        if !p.enabled {
            return false;
        }
        if let Some(last) = self.last_cnp {
            if now.saturating_sub(last) < p.cnp_interval() {
                return false;
            }
        }
        self.last_cnp = Some(now);
        c.np_cnp_sent += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn np_sends_at_most_one_cnp_per_min_time_between_cnps() {
        let p = DcqcnParams { min_time_between_cnps: 50, ..DcqcnParams::default() };
        let (mut np, mut c) = (Np::default(), CcCounters::default());
        // A CE-marked packet every 1 µs for 1 ms: one CNP per 50 µs, the first at once.
        let sent: Vec<Nanos> = (0..1000u64).map(|i| 7 + i * 1000).filter(|&t| np.on_ce(t, &p, &mut c)).collect();
        assert_eq!(sent.len(), 20, "{sent:?}");
        assert_eq!(sent[0], 7);
        assert!(sent.windows(2).all(|w| w[1] - w[0] == 50_000), "{sent:?}");
        assert_eq!(c.np_ecn_marked_roce_packets, 1000);
        assert_eq!(c.np_cnp_sent, 20);
    }

    #[test]
    fn np_with_dcqcn_off_counts_marks_and_sends_nothing() {
        let p = DcqcnParams { enabled: false, ..DcqcnParams::default() };
        let (mut np, mut c) = (Np::default(), CcCounters::default());
        assert!(!np.on_ce(0, &p, &mut c) && !np.on_ce(1_000_000, &p, &mut c));
        assert_eq!((c.np_ecn_marked_roce_packets, c.np_cnp_sent), (2, 0));
    }

    #[test]
    fn np_interval_zero_sends_a_cnp_per_mark() {
        let p = DcqcnParams { min_time_between_cnps: 0, ..DcqcnParams::default() };
        let (mut np, mut c) = (Np::default(), CcCounters::default());
        assert!((0..10).all(|_| np.on_ce(5, &p, &mut c)));
    }
}
