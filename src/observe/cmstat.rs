//! The connection manager's counters for `urxe stat`. The CM runs in librdmacm (its own copy
//! of `crate::cm`), which hands its counters over after each change through the provider's
//! private `urxe_gsi_cm_counters`; they are kept here, one set per process (one CM per
//! process), and printed with the device's own counters, QP1's included. After the CM's own
//! counters come the CM faults librdmacm injected (`faults_cm_*`, issue #41), in the same block.

use std::sync::Mutex;

use crate::cm::CmCounters;
use crate::engine::faults::CM_FAULT_KINDS;
use crate::engine::gsi::GsiCounters;

/// How many counters the CM has (`CmCounters::named`).
pub const CM_COUNTERS: usize = CmCounters::COUNT;

/// How many values librdmacm hands over: the CM's counters, then its injected faults per kind
/// (`CM_FAULT_KINDS` order).
pub const CM_VALUES: usize = CM_COUNTERS + CM_FAULT_KINDS.len();

/// The CM's counters as last handed over; None before the CM ran.
static CM: Mutex<Option<[u64; CM_VALUES]>> = Mutex::new(None);

/// Keeps the CM's counters (the first `values.len()` of them, in `CmCounters::named` order,
/// then the faults in `CM_FAULT_KINDS` order; a library that hands fewer leaves the rest 0).
pub fn set_cm_counters(values: &[u64]) {
    let mut v = [0u64; CM_VALUES];
    for (d, s) in v.iter_mut().zip(values) {
        *d = *s;
    }
    *CM.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
}

/// QP1's counters and (once the CM ran) the CM's, as `urxe stat` prints counters.
pub(crate) fn text(gsi: &GsiCounters) -> String {
    use std::fmt::Write;
    let mut s = format!("{gsi:#?}\n");
    s.retain(|ch| ch != ',' && ch != '{' && ch != '}');
    if let Some(v) = *CM.lock().unwrap_or_else(|e| e.into_inner()) {
        s.push_str("CmCounters\n");
        let names = CmCounters::default().named().map(|(n, _)| n);
        for (name, value) in names.iter().chain(CM_FAULT_KINDS.iter()).zip(v) {
            let _ = writeln!(s, "    {name}: {value}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cm_counters_appear_by_name_once_handed_over() {
        let gsi = GsiCounters { overflow_dropped: 7, ..GsiCounters::default() };
        let before = text(&gsi);
        assert!(before.contains("GsiCounters") && before.contains("overflow_dropped: 7"), "{before}");
        let mut v = [0u64; CM_VALUES];
        v[CM_COUNTERS - 2] = 41;
        v[CM_COUNTERS + 4] = 3;
        set_cm_counters(&v);
        let after = text(&gsi);
        assert!(after.contains("CmCounters\n") && after.contains("    backlog_refused: 41\n"), "{after}");
        assert!(after.contains("    faults_cm_reject: 3\n    faults_cm_lose_rtu: 0\n"), "{after}");
    }
}
