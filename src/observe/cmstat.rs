//! The connection manager's counters for `urxe stat`. The CM runs in librdmacm (its own copy
//! of `crate::cm`), which hands its counters over after each change through the provider's
//! private `urxe_gsi_cm_counters`; they are kept here, one set per process (one CM per
//! process), and printed with the device's own counters, QP1's included.

use std::sync::Mutex;

use crate::cm::CmCounters;
use crate::engine::gsi::GsiCounters;

/// How many counters the CM has (`CmCounters::named`).
pub const CM_COUNTERS: usize = CmCounters::COUNT;

/// The CM's counters as last handed over; None before the CM ran.
static CM: Mutex<Option<[u64; CM_COUNTERS]>> = Mutex::new(None);

/// Keeps the CM's counters (the first `values.len()` of them, in `CmCounters::named` order).
pub fn set_cm_counters(values: &[u64]) {
    let mut v = [0u64; CM_COUNTERS];
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
        for ((name, _), value) in CmCounters::default().named().iter().zip(v) {
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
        let mut v = [0u64; CM_COUNTERS];
        v[CM_COUNTERS - 2] = 41;
        set_cm_counters(&v);
        let after = text(&gsi);
        assert!(after.contains("CmCounters\n") && after.contains("    backlog_refused: 41\n"), "{after}");
    }
}
