//! Data movement between messages and host memory: a message is the concatenation of its
//! SGEs; `walk` visits the pieces of a byte range of it, `gather` reads (requester payloads)
//! and `scatter` writes (received SENDs, READ responses, atomic results), each checking every
//! lkey (PD, bounds, access) before touching memory.

use super::shared::EngineShared;
use super::types::*;

/// Copies `out.len()` bytes of the message described by `sges`, starting at message offset
/// `off`, into `out` — checking each lkey (PD, bounds) before reading.
#[must_use]
pub(crate) fn gather<M: HostMemory>(sh: &EngineShared<M>, pd: PdId, sges: &[Sge], off: u64, out: &mut [u8]) -> bool {
    walk(sges, off, out.len(), |s, va, at, n| match sh.keys.check_lkey(s.lkey, pd, va, n as u64, AccessFlags::EMPTY) {
        Ok(r) => sh.mem.read(r.host, &mut out[at..at + n]).is_ok(),
        Err(_) => false,
    })
}

/// Scatters `data` into the message described by `sges` at message offset `off` (READ
/// responses, atomic results, received SENDs), checking LOCAL_WRITE on every lkey first.
#[must_use]
pub(crate) fn scatter<M: HostMemory>(sh: &EngineShared<M>, pd: PdId, sges: &[Sge], off: u64, data: &[u8]) -> bool {
    // Check everything before writing anything. The usual case, one piece, is resolved once.
    let mut pieces = 0usize;
    let mut first = 0u64;
    if !walk(sges, off, data.len(), |s, va, _, n| {
        match sh.keys.check_lkey(s.lkey, pd, va, n as u64, AccessFlags::LOCAL_WRITE) {
            Ok(r) => {
                if pieces == 0 {
                    first = r.host;
                }
                pieces += 1;
                true
            }
            Err(_) => false,
        }
    }) {
        return false;
    }
    if pieces == 1 {
        // One piece covered all of `data` (the walk ended with every byte placed).
        return sh.mem.write(first, data).is_ok();
    }
    walk(sges, off, data.len(), |s, va, at, n| {
        match sh.keys.check_lkey(s.lkey, pd, va, n as u64, AccessFlags::LOCAL_WRITE) {
            Ok(r) => sh.mem.write(r.host, &data[at..at + n]).is_ok(),
            Err(_) => false,
        }
    })
}

/// Visits the SGE pieces covering `len` bytes from message offset `off`:
/// `f(sge, va, offset_in_data, n)`; false if they do not cover it or `f` fails.
fn walk(sges: &[Sge], mut off: u64, len: usize, mut f: impl FnMut(&Sge, u64, usize, usize) -> bool) -> bool {
    let mut at = 0usize;
    for s in sges {
        if at == len {
            break;
        }
        let l = s.length as u64;
        if off >= l {
            off -= l;
            continue;
        }
        let n = ((l - off) as usize).min(len - at);
        if !f(s, s.addr.wrapping_add(off), at, n) {
            return false;
        }
        at += n;
        off = 0;
    }
    at == len
}
