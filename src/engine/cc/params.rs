//! DCQCN's parameters under mlx5's names, their defaults, and overrides from the environment
//! (a pure function of the variables given: the caller reads the environment).
//!
//! Sources. Names: the mlx5 per-port sysfs files `ecn/roce_rp/<name>` and `ecn/roce_np/<name>`
//! (MLNX_OFED) and the `mlxconfig` NVConfig keys of the same names (`RPG_TIME_RESET_P1`, …).
//! ConnectX's defaults ([`DcqcnParams::connectx`]): an `mlxconfig query` of a ConnectX adapter (RPG_TIME_RESET 300, RPG_BYTE_RESET
//! 32767, RPG_THRESHOLD 1, RPG_MAX_RATE 0, RPG_AI_RATE 5, RPG_HAI_RATE 50, RPG_GD 11,
//! RPG_MIN_DEC_FAC 50, RPG_MIN_RATE 1, RATE_TO_SET_ON_FIRST_CNP 0, DCE_TCP_G 1019,
//! DCE_TCP_RTT 1, RATE_REDUCE_MONITOR_PERIOD 4, INITIAL_ALPHA_VALUE 1023,
//! MIN_TIME_BETWEEN_CNPS 4, CNP_802P_PRIO 6, CNP_DSCP 48, CLAMP_TGT_RATE 0,
//! CLAMP_TGT_RATE_AFTER_TIME_INC 1). Units and meanings: NVIDIA's "DCQCN CC Parameters" page
//! (DOCA / MLNX_OFED docs: dce_tcp_g and initial_alpha_value are fixed point with 10
//! fractional bits; dce_tcp_rtt, rate_reduce_monitor_period, rpg_time_reset and
//! min_time_between_cnps in µs; rates in Mb/s; rpg_min_dec_fac in %; rpg_gd the base-2
//! logarithm of the divisor of the fixed-point alpha, so 11 cuts by alpha/2) and the
//! mlxconfig descriptions (rpg_byte_reset in bytes, 0 disables the byte counter;
//! rpg_threshold the stages a counter makes before the state machine advances). Older PRM
//! text gives rpg_threshold 5 (the paper's F = 5); the current firmware default is 1.
//! urxe's defaults ([`DcqcnParams::soft_roce`]) keep the names and the cut rule and change
//! eight time constants and steps for software rates; see there.

use std::fmt;

use super::super::types::Nanos;

/// The prefix of every variable [`DcqcnParams::from_env`] reads. `URXE_DCQCN` alone is the
/// on/off switch (`0` or `1`); `URXE_DCQCN_<NAME>` sets the parameter `<name>`.
pub const ENV_PREFIX: &str = "URXE_DCQCN";

/// The parameters of DCQCN for one device (mlx5 keeps them per port).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DcqcnParams {
    /// DCQCN on (the default) or off (`URXE_DCQCN=0`: no CNPs sent, CNPs ignored, no pacing).
    pub enabled: bool,
    // ---- ecn/roce_rp ----
    /// Time between rate increases while no CNP comes (µs).
    pub rpg_time_reset: u32,
    /// Bytes sent between rate increases while no CNP comes (0: byte counter off).
    pub rpg_byte_reset: u32,
    /// Stages each counter makes in fast recovery before the rate increase advances
    /// (DCQCN's F).
    pub rpg_threshold: u32,
    /// Highest rate (Mb/s); 0: the line rate the driver gives.
    pub rpg_max_rate: u32,
    /// Additive increase step of the target rate (Mb/s, R_AI).
    pub rpg_ai_rate: u32,
    /// Hyper increase step of the target rate (Mb/s, R_HAI).
    pub rpg_hai_rate: u32,
    /// A cut is Rc · alpha₁₀ / 2^rpg_gd (alpha₁₀: alpha with 10 fractional bits): 11 is alpha/2.
    pub rpg_gd: u32,
    /// A single cut leaves at least this share of the rate (%).
    pub rpg_min_dec_fac: u32,
    /// Lowest rate (Mb/s).
    pub rpg_min_rate: u32,
    /// Current and target rate set on a QP's first CNP (Mb/s); 0: the highest rate.
    pub rate_to_set_on_first_cnp: u32,
    /// At most one cut per this period (µs); further CNPs in it are coalesced.
    pub rate_reduce_monitor_period: u32,
    /// Alpha at a QP's first CNP (fixed point, /1024).
    pub initial_alpha_value: u32,
    /// 1 − g (fixed point, /1024): alpha = (1 − g)·alpha [+ g].
    pub dce_tcp_g: u32,
    /// The alpha timer (µs, DCQCN's K): each period without a CNP decays alpha.
    pub dce_tcp_rtt: u32,
    /// Every CNP sets the target rate to the current rate.
    pub clamp_tgt_rate: bool,
    /// A CNP sets the target rate to the current rate if the timer raised the rate since the
    /// last cut (not only the byte counter).
    pub clamp_tgt_rate_after_time_inc: bool,
    // ---- ecn/roce_np ----
    /// Least time between two CNPs to one QP (µs).
    pub min_time_between_cnps: u32,
    /// DSCP of the CNPs sent.
    pub cnp_dscp: u32,
    /// 802.1p priority of the CNPs sent (meaningful with a VLAN tag).
    pub cnp_802p_prio: u32,
    // ---- urxe ----
    /// Bytes a paced QP may send back to back (a token bucket's depth; at least one packet
    /// always goes). Not an mlx5 parameter: a NIC paces per packet in hardware.
    pub burst_bytes: u32,
    /// Data packets leave with ECN ECT(0) (`1`, the default while DCQCN is on) or Not-ECT
    /// (`0`). Not an mlx5 parameter (a ConnectX sets ECT on RoCEv2 packets by itself).
    pub ect: bool,
}

impl Default for DcqcnParams {
    /// urxe's profile ([`DcqcnParams::soft_roce`]): ConnectX's values do not hold a 1 Gbit/s
    /// bottleneck with 4 KiB packets (tests/sim_dcqcn.rs, docs/congestion.md).
    fn default() -> Self {
        DcqcnParams::soft_roce()
    }
}

impl DcqcnParams {
    /// ConnectX's firmware defaults (the `mlxconfig` values cited at the top of this file).
    /// Tuned for 25–100 Gbit/s links, where a congested QP receives a packet every few
    /// hundred nanoseconds: with dce_tcp_rtt 1 µs alpha decays to nothing between the CNPs a
    /// QP gets at 1 Gbit/s (one per delivered 4 KiB packet, tens of µs apart), and the 32767-byte
    /// byte counter restores half the rate gap every eight packets, so the rate never comes down
    /// (tests/sim_dcqcn.rs: drops as with DCQCN off).
    pub fn connectx() -> Self {
        DcqcnParams {
            enabled: true,
            rpg_time_reset: 300,
            rpg_byte_reset: 32767,
            rpg_threshold: 1,
            rpg_max_rate: 0,
            rpg_ai_rate: 5,
            rpg_hai_rate: 50,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate: 1,
            rate_to_set_on_first_cnp: 0,
            rate_reduce_monitor_period: 4,
            initial_alpha_value: 1023,
            dce_tcp_g: 1019,
            dce_tcp_rtt: 1,
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
            min_time_between_cnps: 4,
            cnp_dscp: 48,
            cnp_802p_prio: 6,
            burst_bytes: 16384,
            ect: true,
        }
    }

    /// urxe's defaults: ConnectX's names and cut rule, time constants and steps for a software
    /// RoCE device on 1–10 Gbit/s Ethernet with 4 KiB packets, where a round trip through a
    /// queue is hundreds of µs to ms. Closer to the DCQCN paper's settings (F = 5, g = 1/256,
    /// N = 50 µs, no byte counter) with its timers (T, K) stretched to 1 ms and the hyper
    /// increase step at 1 Mb/s (i·R_HAI grows each stage; with the byte counter off BC follows
    /// T, so recovery goes from fast recovery straight to hyper increase and rpg_ai_rate is not
    /// used). Each differs from [`DcqcnParams::connectx`] as follows (ConnectX in brackets):
    /// rpg_time_reset 1000 [300], rpg_byte_reset 0 [32767], rpg_threshold 5 [1], rpg_hai_rate
    /// 1 [50], rate_reduce_monitor_period 500 [4], dce_tcp_g 1020 [1019], dce_tcp_rtt 1000 [1],
    /// min_time_between_cnps 50 [4]. Chosen with tests/sim_dcqcn.rs (2, 4, 8 flows, 4 seeds,
    /// both markers): rpg_hai_rate 5 dropped 2.2 % in one run of eight flows; 1 dropped none.
    ///
    /// One more, chosen with bench/congestion.sh (1 Gbit/s bottleneck, 2 flows, a loaded
    /// two-core host): burst_bytes 32768 [16384, urxe only]. A paced QP's packets leave when
    /// the driver looks, which on a loaded host is late; 16 KiB then held two flows to 0.49–0.58
    /// Gb/s in all, 32 KiB 0.79, 128 KiB 0.70 with 2.6× the CE marks (single 5 s runs, load
    /// 9–11). (clamp_tgt_rate 1, the paper's Rt = Rc at every cut, kept Rc steadier in the lab
    /// but cost the simulation's queue-marker runs a third of their goodput: not taken.)
    pub fn soft_roce() -> Self {
        DcqcnParams {
            rpg_time_reset: 1000,
            rpg_byte_reset: 0,
            rpg_threshold: 5,
            rpg_hai_rate: 1,
            rate_reduce_monitor_period: 500,
            dce_tcp_g: 1020,
            dce_tcp_rtt: 1000,
            min_time_between_cnps: 50,
            burst_bytes: 32768,
            ..DcqcnParams::connectx()
        }
    }
}

/// A parameter override that cannot be used.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ParamError {
    /// `URXE_DCQCN_<NAME>` names no parameter.
    Unknown { var: String },
    /// The value is not a decimal integer (or 0/1 for a switch).
    NotANumber { var: String, value: String },
    /// The value is outside the parameter's range.
    OutOfRange { var: String, value: u64, min: u64, max: u64 },
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::Unknown { var } => write!(f, "{var}: no such DCQCN parameter"),
            ParamError::NotANumber { var, value } => write!(f, "{var}={value:?}: not a decimal integer"),
            ParamError::OutOfRange { var, value, min, max } => {
                write!(f, "{var}={value}: out of range {min}..={max}")
            }
        }
    }
}

impl std::error::Error for ParamError {}

/// Every parameter: (mlx5 name, least value, greatest value). Ranges from NVIDIA's parameter
/// table where it gives one; otherwise what keeps the arithmetic meaningful.
const TABLE: &[(&str, u64, u64)] = &[
    ("rpg_time_reset", 1, 131_071),
    ("rpg_byte_reset", 0, 32_767),
    ("rpg_threshold", 1, 31),
    ("rpg_max_rate", 0, 1_000_000),
    ("rpg_ai_rate", 1, 1_000_000),
    ("rpg_hai_rate", 1, 1_000_000),
    ("rpg_gd", 10, 20),
    ("rpg_min_dec_fac", 0, 100),
    ("rpg_min_rate", 1, 1_000_000),
    ("rate_to_set_on_first_cnp", 0, 1_000_000),
    ("rate_reduce_monitor_period", 1, u32::MAX as u64),
    ("initial_alpha_value", 1, 1023),
    ("dce_tcp_g", 0, 1023),
    ("dce_tcp_rtt", 1, 131_071),
    ("clamp_tgt_rate", 0, 1),
    ("clamp_tgt_rate_after_time_inc", 0, 1),
    ("min_time_between_cnps", 0, 4_000_000),
    ("cnp_dscp", 0, 63),
    ("cnp_802p_prio", 0, 7),
    ("burst_bytes", 1, 16 << 20),
    ("ect", 0, 1),
];

impl DcqcnParams {
    /// The parameters with overrides from `vars` (the process environment, or any list of
    /// name/value pairs). Variables not starting with [`ENV_PREFIX`] are ignored; an unknown
    /// `URXE_DCQCN_*` name or a bad value is an error naming the variable.
    pub fn from_env<I, K, V>(vars: I) -> Result<DcqcnParams, ParamError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        Self::default().with_env(vars)
    }

    /// `self` with the overrides of [`DcqcnParams::from_env`].
    pub fn with_env<I, K, V>(self, vars: I) -> Result<DcqcnParams, ParamError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut p = self;
        for (k, v) in vars {
            let (var, value) = (k.as_ref(), v.as_ref().trim());
            let Some(rest) = var.strip_prefix(ENV_PREFIX) else { continue };
            let name = if rest.is_empty() {
                "enabled"
            } else if let Some(n) = rest.strip_prefix('_') {
                n
            } else {
                continue; // URXE_DCQCNX…: another variable
            };
            let lower = name.to_ascii_lowercase();
            let (min, max) = match lower.as_str() {
                "enabled" => (0, 1),
                n => match TABLE.iter().find(|e| e.0 == n) {
                    Some(&(_, lo, hi)) => (lo, hi),
                    None => return Err(ParamError::Unknown { var: var.to_string() }),
                },
            };
            let n: u64 =
                value.parse().map_err(|_| ParamError::NotANumber { var: var.to_string(), value: value.to_string() })?;
            if n < min || n > max {
                return Err(ParamError::OutOfRange { var: var.to_string(), value: n, min, max });
            }
            p.set(&lower, n);
        }
        Ok(p)
    }

    /// Sets one parameter by its mlx5 name (the value already range-checked).
    fn set(&mut self, name: &str, v: u64) {
        let u = v as u32;
        match name {
            "enabled" => self.enabled = v != 0,
            "rpg_time_reset" => self.rpg_time_reset = u,
            "rpg_byte_reset" => self.rpg_byte_reset = u,
            "rpg_threshold" => self.rpg_threshold = u,
            "rpg_max_rate" => self.rpg_max_rate = u,
            "rpg_ai_rate" => self.rpg_ai_rate = u,
            "rpg_hai_rate" => self.rpg_hai_rate = u,
            "rpg_gd" => self.rpg_gd = u,
            "rpg_min_dec_fac" => self.rpg_min_dec_fac = u,
            "rpg_min_rate" => self.rpg_min_rate = u,
            "rate_to_set_on_first_cnp" => self.rate_to_set_on_first_cnp = u,
            "rate_reduce_monitor_period" => self.rate_reduce_monitor_period = u,
            "initial_alpha_value" => self.initial_alpha_value = u,
            "dce_tcp_g" => self.dce_tcp_g = u,
            "dce_tcp_rtt" => self.dce_tcp_rtt = u,
            "clamp_tgt_rate" => self.clamp_tgt_rate = v != 0,
            "clamp_tgt_rate_after_time_inc" => self.clamp_tgt_rate_after_time_inc = v != 0,
            "min_time_between_cnps" => self.min_time_between_cnps = u,
            "cnp_dscp" => self.cnp_dscp = u,
            "cnp_802p_prio" => self.cnp_802p_prio = u,
            "burst_bytes" => self.burst_bytes = u,
            "ect" => self.ect = v != 0,
            _ => {}
        }
    }

    /// Every parameter as (mlx5 name, value), in the order of mlx5's listing (for `urxe stat`).
    pub fn entries(&self) -> Vec<(&'static str, u64)> {
        let b = |x: bool| x as u64;
        let mut out = vec![("enabled", b(self.enabled))];
        for &(name, _, _) in TABLE {
            let v = match name {
                "rpg_time_reset" => self.rpg_time_reset as u64,
                "rpg_byte_reset" => self.rpg_byte_reset as u64,
                "rpg_threshold" => self.rpg_threshold as u64,
                "rpg_max_rate" => self.rpg_max_rate as u64,
                "rpg_ai_rate" => self.rpg_ai_rate as u64,
                "rpg_hai_rate" => self.rpg_hai_rate as u64,
                "rpg_gd" => self.rpg_gd as u64,
                "rpg_min_dec_fac" => self.rpg_min_dec_fac as u64,
                "rpg_min_rate" => self.rpg_min_rate as u64,
                "rate_to_set_on_first_cnp" => self.rate_to_set_on_first_cnp as u64,
                "rate_reduce_monitor_period" => self.rate_reduce_monitor_period as u64,
                "initial_alpha_value" => self.initial_alpha_value as u64,
                "dce_tcp_g" => self.dce_tcp_g as u64,
                "dce_tcp_rtt" => self.dce_tcp_rtt as u64,
                "clamp_tgt_rate" => b(self.clamp_tgt_rate),
                "clamp_tgt_rate_after_time_inc" => b(self.clamp_tgt_rate_after_time_inc),
                "min_time_between_cnps" => self.min_time_between_cnps as u64,
                "cnp_dscp" => self.cnp_dscp as u64,
                "cnp_802p_prio" => self.cnp_802p_prio as u64,
                "ect" => b(self.ect),
                _ => self.burst_bytes as u64,
            };
            out.push((name, v));
        }
        out
    }

    // ---- derived values in the engine's units ----

    /// g of the alpha update (`(1024 − dce_tcp_g) / 1024`).
    pub fn g(&self) -> f64 {
        (1024 - self.dce_tcp_g.min(1024)) as f64 / 1024.0
    }
    /// The alpha timer period K.
    pub fn alpha_period(&self) -> Nanos {
        us(self.dce_tcp_rtt).max(1)
    }
    /// The rate-increase timer period T.
    pub fn increase_period(&self) -> Nanos {
        us(self.rpg_time_reset).max(1)
    }
    /// The least time between CNPs to one QP.
    pub fn cnp_interval(&self) -> Nanos {
        us(self.min_time_between_cnps)
    }
    /// The least time between two cuts.
    pub fn reduce_period(&self) -> Nanos {
        us(self.rate_reduce_monitor_period)
    }
}

/// Microseconds to nanoseconds.
fn us(v: u32) -> Nanos {
    v as Nanos * 1000
}

/// Mb/s to bit/s.
pub(super) fn mbps(v: u32) -> f64 {
    v as f64 * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connectx_profile_is_the_firmware_defaults() {
        let p = DcqcnParams::connectx();
        let e = p.entries();
        let get = |n: &str| e.iter().find(|x| x.0 == n).unwrap().1;
        assert_eq!(get("rpg_time_reset"), 300);
        assert_eq!(get("rpg_byte_reset"), 32767);
        assert_eq!(get("rpg_ai_rate"), 5);
        assert_eq!(get("rpg_hai_rate"), 50);
        assert_eq!(get("rpg_gd"), 11);
        assert_eq!(get("dce_tcp_g"), 1019);
        assert_eq!(get("min_time_between_cnps"), 4);
        assert_eq!(get("cnp_dscp"), 48);
        assert_eq!(get("cnp_802p_prio"), 6);
        assert_eq!(e.len(), TABLE.len() + 1);
        assert!((p.g() - 5.0 / 1024.0).abs() < 1e-12);
        let u = DcqcnParams::default();
        assert_eq!(u, DcqcnParams::soft_roce());
        assert_eq!((u.rpg_gd, u.rpg_min_dec_fac, u.initial_alpha_value, u.cnp_dscp), (11, 50, 1023, 48));
        assert!((u.g() - 1.0 / 256.0).abs() < 1e-12);
    }

    #[test]
    fn env_overrides_by_mlx5_name_and_ignores_other_variables() {
        let vars = [
            ("URXE_DCQCN_RPG_AI_RATE", "40"),
            ("URXE_DCQCN_MIN_TIME_BETWEEN_CNPS", "50"),
            ("URXE_DCQCN_clamp_tgt_rate", "1"),
            ("URXE_DCQCNX", "junk"),
            ("PATH", "/bin"),
        ];
        let p = DcqcnParams::from_env(vars).unwrap();
        assert_eq!(p.rpg_ai_rate, 40);
        assert_eq!(p.min_time_between_cnps, 50);
        assert!(p.clamp_tgt_rate && p.enabled);
        assert_eq!(p.cnp_interval(), 50_000);
        let off = DcqcnParams::from_env([("URXE_DCQCN", "0")]).unwrap();
        assert!(!off.enabled);
    }

    #[test]
    fn env_errors_name_the_variable() {
        let e = DcqcnParams::from_env([("URXE_DCQCN_RPG_FOO", "1")]).unwrap_err();
        assert_eq!(e, ParamError::Unknown { var: "URXE_DCQCN_RPG_FOO".into() });
        assert!(e.to_string().contains("URXE_DCQCN_RPG_FOO"));
        let e = DcqcnParams::from_env([("URXE_DCQCN_CNP_DSCP", "64")]).unwrap_err();
        assert!(matches!(e, ParamError::OutOfRange { value: 64, max: 63, .. }), "{e}");
        assert!(e.to_string().starts_with("URXE_DCQCN_CNP_DSCP=64"));
        let e = DcqcnParams::from_env([("URXE_DCQCN_DCE_TCP_G", "x1")]).unwrap_err();
        assert!(matches!(e, ParamError::NotANumber { .. }), "{e}");
        assert!(DcqcnParams::from_env([("URXE_DCQCN", "2")]).is_err());
    }
}
