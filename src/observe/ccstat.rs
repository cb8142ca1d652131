//! DCQCN for the device (issue #42, docs/congestion.md): its parameters from the environment
//! (`URXE_DCQCN`, `URXE_DCQCN_<NAME>`, mlx5's names) and its counters and parameters for
//! `urxe stat`.

use std::io;

use crate::engine::cc::{DcqcnParams, ENV_PREFIX};
use crate::engine::{Engine, HostMemory};

/// The parameters the process environment sets (an unusable `URXE_DCQCN*` is `InvalidInput`
/// naming the variable). Variables whose name or value is not UTF-8 are not ours.
pub(crate) fn dcqcn_setting() -> io::Result<DcqcnParams> {
    let vars = std::env::vars_os().filter_map(|(k, v)| {
        let k = k.into_string().ok()?;
        k.starts_with(ENV_PREFIX).then(|| (k, v.to_string_lossy().into_owned()))
    });
    DcqcnParams::from_env(vars).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
}

/// The congestion counters (mlx5's names), CNPs dropped at a full queue, and every parameter,
/// as `urxe stat` prints counters.
pub(crate) fn text<M: HostMemory>(e: &Engine<M>) -> String {
    use std::fmt::Write;
    let c = e.cc_counters();
    let mut s = format!("{c:#?}\n");
    s.retain(|ch| ch != ',' && ch != '{' && ch != '}');
    let _ = writeln!(s, "    cnps_dropped: {}", e.cnps_dropped());
    s.push_str("DcqcnParams\n");
    for (name, v) in e.dcqcn().entries() {
        let _ = writeln!(s, "    {name}: {v}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::MemError;

    /// No memory at all: the engine is only asked for its counters.
    struct NoMemory;
    impl HostMemory for NoMemory {
        fn read(&self, _: u64, _: &mut [u8]) -> Result<(), MemError> {
            Err(MemError::Fault { addr: 0 })
        }
        fn write(&self, _: u64, _: &[u8]) -> Result<(), MemError> {
            Err(MemError::Fault { addr: 0 })
        }
        fn atomic_cmp_swap(&self, _: u64, _: u64, _: u64) -> Result<u64, MemError> {
            Err(MemError::Fault { addr: 0 })
        }
        fn atomic_fetch_add(&self, _: u64, _: u64) -> Result<u64, MemError> {
            Err(MemError::Fault { addr: 0 })
        }
    }

    #[test]
    fn urxe_stat_shows_the_counters_and_parameters_by_mlx5_name() {
        let cfg = crate::engine::EngineConfig {
            local_addr: std::net::Ipv4Addr::LOCALHOST.into(),
            max_mtu: crate::engine::Mtu::Mtu4096,
            limits: Default::default(),
            seed: 0,
        };
        let mut e = Engine::new(cfg, NoMemory);
        e.set_dcqcn(DcqcnParams { rpg_time_reset: 300, ..DcqcnParams::default() });
        let t = text(&e);
        for line in [
            "    np_ecn_marked_roce_packets: 0\n",
            "    rp_cnp_ignored: 0\n",
            "    rpg_time_reset: 300\n",
            "    enabled: 1\n",
            "    ect: 1\n",
        ] {
            assert!(t.contains(line), "{line:?} not in {t}");
        }
    }
}
