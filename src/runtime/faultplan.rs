//! `URXE_FAULTS`: the fault plan a process runs under (see `engine::faults` for the grammar),
//! read once when the device starts, and the log of what it injected.
//!
//! `URXE_FAULTS=<plan>` gives the plan itself; `URXE_FAULTS=@<file>` reads it from a file (one
//! fault a line, `#` comments). A plan that does not parse stops the device with a message
//! naming `URXE_FAULTS` and the item at fault; unset or empty, no plan, and the engine's doors
//! cost one test each.

use std::io;
use std::sync::OnceLock;

use crate::engine::faults::{parse, FaultPlan, Injected};

/// The plan `URXE_FAULTS` names, if any.
pub fn fault_setting() -> io::Result<Option<FaultPlan>> {
    let Some(v) = std::env::var_os("URXE_FAULTS") else { return Ok(None) };
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidInput, format!("URXE_FAULTS: {why}"));
    let v = v.into_string().map_err(|_| bad("not UTF-8".into()))?;
    let text = match v.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read {path}: {e}")))?,
        None => v,
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    parse(&text).map(Some).map_err(|e| bad(e.to_string()))
}

/// Whether injected faults are printed (`URXE_TRACE` set and not `0`, as for failing calls).
fn trace() -> bool {
    static T: OnceLock<bool> = OnceLock::new();
    *T.get_or_init(|| std::env::var_os("URXE_TRACE").is_some_and(|v| v != "0"))
}

/// The line `URXE_TRACE` prints for an injected fault.
pub(super) fn trace_line(i: &Injected, name: &str) -> String {
    let mut s = format!("urxe: fault injected: {name} -> {:?} at {:?}", i.action, i.site);
    if let Some(q) = i.qpn {
        s += &format!(" qp {q:#x}");
    }
    if let Some(p) = i.psn {
        s += &format!(" psn {p}");
    }
    s + &format!(" (t={} ns)", i.at)
}

/// Prints an injected fault if tracing is on.
pub(super) fn log(i: &Injected, name: &str) {
    if trace() {
        eprintln!("{}", trace_line(i, name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::faults::{Action, Site};

    #[test]
    fn the_trace_line_names_the_fault_the_qp_and_the_psn() {
        let i = Injected { at: 5, fault: 0, action: Action::Drop, site: Site::Tx, qpn: Some(0x11), psn: Some(7) };
        assert_eq!(
            trace_line(&i, "drop:every=3"),
            "urxe: fault injected: drop:every=3 -> Drop at Tx qp 0x11 psn 7 (t=5 ns)"
        );
    }
}
