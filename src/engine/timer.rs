//! Timer values (IBTA §9.7.6.1.3 local ACK timeout, §9.7.5.2.8 RNR NAK timer) and the
//! engine's deadline heap. The engine has no clock: deadlines are absolute `Nanos` computed
//! from the `now` the driver passes in.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::types::{Nanos, Qpn};

/// Local ACK timeout: 4.096 µs × 2^timeout; 0 means the timer is disabled (infinite).
pub fn ack_timeout_nanos(timeout: u8) -> Option<Nanos> {
    if timeout == 0 {
        return None;
    }
    // 4.096 µs = 4096 ns; timeout is 5 bits (max 31 -> ~2.4 hours).
    Some(4096u64 << (timeout.min(31) as u32))
}

/// RNR NAK timer code -> nanoseconds (spec table, via the wire layer).
pub fn rnr_nanos(code: u8) -> Nanos {
    crate::wire::aeth::RnrTimer::new(code).nanos()
}

/// A min-heap of (deadline, QPN) with lazy deletion: each QP remembers the one deadline it
/// has in the heap (`Qp::heap_at`); an entry that does not match is stale and skipped. At
/// most one live entry per QP, so the heap stays O(QPs) however often timers are re-armed.
#[derive(Default)]
pub(crate) struct TimerHeap {
    heap: BinaryHeap<Reverse<(Nanos, Qpn)>>,
}

impl TimerHeap {
    pub fn push(&mut self, at: Nanos, qpn: Qpn) {
        self.heap.push(Reverse((at, qpn)));
    }

    pub fn peek(&self) -> Option<(Nanos, Qpn)> {
        self.heap.peek().map(|r| r.0)
    }

    pub fn pop(&mut self) -> Option<(Nanos, Qpn)> {
        self.heap.pop().map(|r| r.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_timeout_is_4096ns_times_power_of_two() {
        assert_eq!(ack_timeout_nanos(0), None);
        assert_eq!(ack_timeout_nanos(1), Some(8192));
        assert_eq!(ack_timeout_nanos(14), Some(4096 << 14)); // ~67 ms, the common default
    }

    #[test]
    fn rnr_table_matches_spec_for_every_code() {
        // IBTA Table 44, in microseconds; code 0 = 655.36 ms.
        let us: [u64; 32] = [
            655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840, 5120, 7680,
            10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760, 327_680, 491_520,
        ];
        for (code, us) in us.iter().enumerate() {
            assert_eq!(rnr_nanos(code as u8), us * 1000, "code {code}");
        }
    }
}
