//! The text form of a fault plan, as `URXE_FAULTS` and `urxe run --faults` take it.
//!
//! ```text
//! plan     := item ( (';' | newline) item )*        '#' starts a comment to the line's end
//! item     := 'seed=' INT | fault
//! fault    := action [ ':' option ( ',' option )* ]
//! action   := drop | dup | reorder | delay=DUR | corrupt-icrc | corrupt-psn[=INT]
//!           | silent | rnr-nak | nak=seq|invalid|access|operational
//!           | errno=NAME|INT | wc=STATUS|INT
//!           | cq-overrun | qp-fatal | port-down=DUR | device-fatal | srq-limit
//!           | reject=INT | cm-error=NAME|INT | disconnect | lose-rtu | device-removal
//! option   := scope | schedule
//! scope    := site=tx|rx|post-send|post-recv|completion|reg-mr|device|cm
//!           | qpn=INT | opcode=NAME|INT | class=req|resp | peer=IP | cm-id=INT
//!           | step=resolve-addr|resolve-route|connect|request|established|rtu
//! schedule := after=INT | at=DUR | every=INT | prob=FLOAT | for=DUR | count=INT
//! DUR      := INT ( ns | us | ms | s )                INT: decimal or 0x hex
//! ```
//!
//! Each action has a site it applies to by default (packet faults: `tx`; `silent`, `rnr-nak`,
//! `nak`: `rx`, the packets a silent or refusing peer would not answer; `wc`: `completion`;
//! port and device faults: `device`; CM faults: `cm`); `errno` needs `site=post-send`,
//! `post-recv` or `reg-mr`. An option that does not fit the action's site is refused, as is
//! anything unknown: a plan that does not mean what it says never runs.
//!
//! Examples: `seed=7; drop:site=rx,qpn=0x11,every=10`, `rnr-nak:count=3`,
//! `errno=ENOMEM:site=post-send,after=100,count=1`, `port-down=2s:at=500ms`,
//! `reject=28:step=request`.

use super::cm::{cm_steps, cm_timed};
use super::plan::{Action, CmStep, Fault, FaultPlan, Nanos, Schedule, Scope, Site};
use crate::wire::opcode::Opcode;
use std::fmt;
use std::net::IpAddr;

/// A plan that cannot be run: which item (from 1), its text, and what is wrong with it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SpecError {
    pub item: usize,
    pub text: String,
    pub why: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "item {} \"{}\": {}", self.item, self.text, self.why)
    }
}

impl std::error::Error for SpecError {}

/// Parses a plan. An empty plan (or only comments) is valid and injects nothing.
pub fn parse(text: &str) -> Result<FaultPlan, SpecError> {
    let mut seed = 0u64;
    let mut faults = Vec::new();
    let items = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.split(';'))
        .map(str::trim)
        .filter(|i| !i.is_empty());
    for (n, item) in items.enumerate() {
        let err = |why: String| SpecError { item: n + 1, text: item.to_string(), why };
        if let Some(v) = item.strip_prefix("seed=") {
            seed = int(v).map_err(err)?;
            continue;
        }
        faults.push(fault(item).map_err(err)?);
    }
    Ok(FaultPlan::new(seed, faults))
}

fn fault(item: &str) -> Result<Fault, String> {
    let (head, opts) = match item.split_once(':') {
        Some((h, o)) => (h.trim(), o),
        None => (item, ""),
    };
    let (name, arg) = match head.split_once('=') {
        Some((n, a)) => (n.trim(), Some(a.trim())),
        None => (head, None),
    };
    let (action, default_site) = action(name, arg)?;
    let mut scope = Scope { site: default_site, ..Scope::default() };
    let mut sched = Schedule::default();
    for opt in opts.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        let (k, v) = opt.split_once('=').ok_or_else(|| format!("option '{opt}' is not key=value"))?;
        let (k, v) = (k.trim(), v.trim());
        let bad = |why: String| format!("{k}: {why}");
        match k {
            "site" => scope.site = Some(site(v).map_err(bad)?),
            "qpn" => {
                scope.qpn = Some(u32::try_from(int(v).map_err(bad)?).map_err(|_| bad("more than 32 bits".into()))?)
            }
            "opcode" => scope.opcode = Some(opcode(v).map_err(bad)?),
            "class" => {
                scope.response = Some(match v {
                    "req" | "request" => false,
                    "resp" | "response" => true,
                    _ => return Err(bad(format!("'{v}' is neither req nor resp"))),
                })
            }
            "peer" => {
                let ip: IpAddr = v.parse().map_err(|_| bad(format!("'{v}' is not an IP address")))?;
                scope.peer = Some(match ip {
                    IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                    IpAddr::V6(a) => a.octets(),
                });
            }
            "cm-id" => scope.cm_id = Some(int(v).map_err(bad)?),
            "step" => scope.cm_step = Some(cm_step(v).map_err(bad)?),
            "after" => sched.after = int(v).map_err(bad)?,
            "at" => sched.at = Some(duration(v).map_err(bad)?),
            "every" => sched.every = Some(int(v).map_err(bad)?.max(1)),
            "prob" => {
                let p: f64 = v.parse().map_err(|_| bad(format!("'{v}' is not a number")))?;
                if !(0.0..=1.0).contains(&p) {
                    return Err(bad(format!("{p} is not between 0 and 1")));
                }
                sched.prob = Some(p);
            }
            "for" => sched.duration = Some(duration(v).map_err(bad)?),
            "count" => sched.count = Some(int(v).map_err(bad)?),
            _ => return Err(format!("unknown option '{k}'")),
        }
    }
    let site = scope.site.ok_or_else(|| format!("'{name}' needs site=post-send, post-recv or reg-mr"))?;
    if !fits(&action, site) {
        return Err(format!("'{name}' cannot act at site {}", site_name(site)));
    }
    let packet = matches!(site, Site::Tx | Site::Rx);
    if (scope.opcode.is_some() || scope.response.is_some() || scope.peer.is_some()) && !packet {
        return Err("opcode, class and peer scope packets (site tx or rx)".into());
    }
    if site == Site::Device
        && (sched.after != 0
            || sched.every.is_some()
            || sched.prob.is_some()
            || sched.duration.is_some()
            || sched.count.is_some())
    {
        return Err(
            "a device fault happens once, at at= (at once without it): no after, every, prob, for or count".into()
        );
    }
    if (scope.cm_id.is_some() || scope.cm_step.is_some()) && site != Site::Cm {
        return Err("cm-id and step scope rdma_cm faults (site cm)".into());
    }
    if site == Site::Cm {
        cm_scope(name, &action, &mut scope, &sched)?;
    }
    Ok(Fault::new(item, action, scope, sched))
}

/// The action and the site it acts at unless the fault says otherwise.
fn action(name: &str, arg: Option<&str>) -> Result<(Action, Option<Site>), String> {
    let need = || arg.ok_or_else(|| format!("'{name}' needs a value ({name}=…)"));
    let none = |a: Action, s: Option<Site>| match arg {
        Some(v) => Err(format!("'{name}' takes no value (got '{v}')")),
        None => Ok((a, s)),
    };
    let (tx, rx, dev, cm) = (Some(Site::Tx), Some(Site::Rx), Some(Site::Device), Some(Site::Cm));
    match name {
        "drop" => none(Action::Drop, tx),
        "dup" | "duplicate" => none(Action::Duplicate, tx),
        "reorder" => none(Action::Reorder, tx),
        "delay" => Ok((Action::Delay(duration(need()?)?), tx)),
        "corrupt-icrc" => none(Action::CorruptIcrc, tx),
        "corrupt-psn" => Ok((Action::CorruptPsn(arg.map(int).transpose()?.unwrap_or(1) as u32 & 0xFF_FFFF), tx)),
        "silent" => none(Action::Drop, rx),
        "rnr-nak" => none(Action::RnrNak, rx),
        "nak" => {
            let code = match need()? {
                "seq" | "psn-seq" => 0,
                "invalid" | "inv-req" => 1,
                "access" | "rem-access" => 2,
                "operational" | "rem-op" => 3,
                v => return Err(format!("nak '{v}' is not seq, invalid, access or operational")),
            };
            Ok((Action::Nak(code), rx))
        }
        "errno" => Ok((Action::Errno(errno(need()?)?), None)),
        "wc" => Ok((Action::WcStatus(wc_status(need()?)?), Some(Site::Completion))),
        "cq-overrun" => none(Action::CqOverrun, dev),
        "qp-fatal" => none(Action::QpFatal, dev),
        "port-down" => Ok((Action::PortDown(duration(need()?)?), dev)),
        "device-fatal" => none(Action::DeviceFatal, dev),
        "srq-limit" => none(Action::SrqLimit, dev),
        "reject" => {
            let r = int(need()?)?;
            u16::try_from(r)
                .map(|r| (Action::Reject(r), cm))
                .map_err(|_| format!("REJ reason {r} is more than 16 bits"))
        }
        "cm-error" => Ok((Action::CmError(errno(need()?)?), cm)),
        "disconnect" => none(Action::Disconnect, cm),
        "lose-rtu" => none(Action::LoseRtu, cm),
        "device-removal" => none(Action::DeviceRemoval, cm),
        _ => Err(format!("unknown fault '{name}'")),
    }
}

/// An rdma_cm fault's step (its default when none is given) and schedule: a step it acts at;
/// `disconnect` and `device-removal` happen once at `at=`, as device faults.
fn cm_scope(name: &str, action: &Action, scope: &mut Scope, sched: &Schedule) -> Result<(), String> {
    let (default, steps) = cm_steps(action);
    let step = *scope.cm_step.get_or_insert(default);
    if !steps.contains(&step) {
        return Err(format!("'{name}' cannot act at step {step:?}"));
    }
    let once = sched.after != 0
        || sched.every.is_some()
        || sched.prob.is_some()
        || sched.duration.is_some()
        || sched.count.is_some();
    if cm_timed(action) && once {
        return Err(format!("'{name}' happens once, at at= (at once without it): no after, every, prob, for or count"));
    }
    Ok(())
}

fn fits(a: &Action, s: Site) -> bool {
    use Action::*;
    match a {
        Drop | Duplicate | Reorder | Delay(_) | CorruptIcrc | CorruptPsn(_) => matches!(s, Site::Tx | Site::Rx),
        RnrNak | Nak(_) => s == Site::Rx,
        Errno(_) => matches!(s, Site::PostSend | Site::PostRecv | Site::RegMr),
        WcStatus(_) => s == Site::Completion,
        CqOverrun | QpFatal | PortDown(_) | DeviceFatal | SrqLimit => s == Site::Device,
        Reject(_) | CmError(_) | Disconnect | LoseRtu | DeviceRemoval => s == Site::Cm,
    }
}

fn site(v: &str) -> Result<Site, String> {
    Ok(match v {
        "tx" => Site::Tx,
        "rx" => Site::Rx,
        "post-send" => Site::PostSend,
        "post-recv" => Site::PostRecv,
        "completion" => Site::Completion,
        "reg-mr" => Site::RegMr,
        "device" => Site::Device,
        "cm" => Site::Cm,
        _ => return Err(format!("unknown site '{v}'")),
    })
}

fn site_name(s: Site) -> &'static str {
    match s {
        Site::Tx => "tx",
        Site::Rx => "rx",
        Site::PostSend => "post-send",
        Site::PostRecv => "post-recv",
        Site::Completion => "completion",
        Site::RegMr => "reg-mr",
        Site::Device => "device",
        Site::Cm => "cm",
    }
}

fn cm_step(v: &str) -> Result<CmStep, String> {
    Ok(match v {
        "resolve-addr" => CmStep::ResolveAddr,
        "resolve-route" => CmStep::ResolveRoute,
        "connect" => CmStep::Connect,
        "request" => CmStep::RequestReceived,
        "established" => CmStep::Established,
        "rtu" => CmStep::Rtu,
        _ => return Err(format!("unknown step '{v}'")),
    })
}

fn int(v: &str) -> Result<u64, String> {
    let r = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    };
    r.map_err(|_| format!("'{v}' is not a whole number"))
}

fn duration(v: &str) -> Result<Nanos, String> {
    let split = v.find(|c: char| !c.is_ascii_digit()).ok_or_else(|| format!("'{v}' needs a unit (ns, us, ms, s)"))?;
    let (n, unit) = v.split_at(split);
    let n: u64 = n.parse().map_err(|_| format!("'{v}' is not a duration"))?;
    let mul = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return Err(format!("'{unit}' is not a unit (ns, us, ms, s)")),
    };
    n.checked_mul(mul).ok_or_else(|| format!("'{v}' is too long"))
}

/// BTH opcode by value or by name: `RC_SEND_ONLY`, `UD_SEND_ONLY`, `RC_ACKNOWLEDGE`, … (the
/// transport, an underscore and the opcode table's name; any case).
fn opcode(v: &str) -> Result<u8, String> {
    if let Ok(n) = int(v) {
        return u8::try_from(n).map_err(|_| format!("{n} is more than 8 bits"));
    }
    let want = v.to_ascii_uppercase();
    (0..=255u8)
        .find(|&o| {
            let i = Opcode(o).info();
            format!("{}_{}", i.transport.name(), i.name) == want
        })
        .ok_or_else(|| format!("unknown opcode '{v}' (e.g. RC_SEND_ONLY, RC_RDMA_WRITE_FIRST, or a number)"))
}

fn errno(v: &str) -> Result<i32, String> {
    if let Ok(n) = int(v) {
        return i32::try_from(n).map_err(|_| format!("errno {n} is out of range"));
    }
    Ok(match v {
        "EPERM" => libc::EPERM,
        "EINTR" => libc::EINTR,
        "EIO" => libc::EIO,
        "EAGAIN" => libc::EAGAIN,
        "ENOMEM" => libc::ENOMEM,
        "EACCES" => libc::EACCES,
        "EFAULT" => libc::EFAULT,
        "EBUSY" => libc::EBUSY,
        "EINVAL" => libc::EINVAL,
        "ENOSPC" => libc::ENOSPC,
        "ENODEV" => libc::ENODEV,
        "EOPNOTSUPP" => libc::EOPNOTSUPP,
        "EADDRNOTAVAIL" => libc::EADDRNOTAVAIL,
        "ENETUNREACH" => libc::ENETUNREACH,
        "EHOSTUNREACH" => libc::EHOSTUNREACH,
        "ECONNREFUSED" => libc::ECONNREFUSED,
        "ECONNRESET" => libc::ECONNRESET,
        "ETIMEDOUT" => libc::ETIMEDOUT,
        _ => return Err(format!("unknown errno '{v}' (a name such as ENOMEM, or a number)")),
    })
}

/// `enum ibv_wc_status` by its name without the prefix (`RETRY_EXC_ERR`, `rem-access-err`, …).
fn wc_status(v: &str) -> Result<u32, String> {
    if let Ok(n) = int(v) {
        return u32::try_from(n).map_err(|_| format!("status {n} is out of range"));
    }
    const NAMES: [&str; 24] = [
        "SUCCESS",
        "LOC_LEN_ERR",
        "LOC_QP_OP_ERR",
        "LOC_EEC_OP_ERR",
        "LOC_PROT_ERR",
        "WR_FLUSH_ERR",
        "MW_BIND_ERR",
        "BAD_RESP_ERR",
        "LOC_ACCESS_ERR",
        "REM_INV_REQ_ERR",
        "REM_ACCESS_ERR",
        "REM_OP_ERR",
        "RETRY_EXC_ERR",
        "RNR_RETRY_EXC_ERR",
        "LOC_RDD_VIOL_ERR",
        "REM_INV_RD_REQ_ERR",
        "REM_ABORT_ERR",
        "INV_EECN_ERR",
        "INV_EEC_STATE_ERR",
        "FATAL_ERR",
        "RESP_TIMEOUT_ERR",
        "GENERAL_ERR",
        "TM_ERR",
        "TM_RNDV_INCOMPLETE",
    ];
    let want = v.to_ascii_uppercase().replace('-', "_");
    let want = want.strip_prefix("IBV_WC_").unwrap_or(&want);
    NAMES
        .iter()
        .position(|n| *n == want)
        .map(|p| p as u32)
        .ok_or_else(|| format!("unknown completion status '{v}' (e.g. RETRY_EXC_ERR, REM_ACCESS_ERR)"))
}
