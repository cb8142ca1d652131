//! Address handles: `ibv_create_ah`, `ibv_destroy_ah`, and the two "from a received
//! completion" verbs (`ibv_init_ah_from_wc`, `ibv_create_ah_from_wc`).

use super::{destroy_plain, dev_of};
use crate::abi::*;
use crate::context::{ctx_from, PORT_NUM};
use crate::convert;
use crate::export::{non_null, non_null_const};
use crate::glue;
use crate::objects::*;
use libc::{c_int, c_void};

/// `ibv_create_ah(3)`.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: caller passes a PD of ours.
    let p: &UrxePd = unsafe { shell(pd) }?;
    let a = non_null(attr)?;
    // SAFETY: readable caller struct.
    let ea = convert::ah_attr_from_c(unsafe { &*a })?;
    if ea.port_num != PORT_NUM {
        return Err(libc::EINVAL);
    }
    // SAFETY: its context is live.
    let id = glue::create_ah(unsafe { dev_of(p.ibv.context) }?, p.id, &ea)?;
    let ah = Box::new(UrxeAh { ibv: ibv_ah { context: p.ibv.context, pd, handle: id }, id });
    Ok(Box::into_raw(ah) as *mut ibv_ah)
}

/// `ibv_destroy_ah(3)`.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: caller passes an AH of ours (from ibv_create_ah).
    unsafe { destroy_plain(ah, |s: &UrxeAh| s.ibv.context, |dev, s| glue::destroy_ah(dev, s.id)) }
}

/// The 40-byte GRH area at the start of a UD receive buffer. For RoCEv2 over IPv4 the
/// IPv4 header sits in its last 20 bytes (the first 20 are zero), as rxe and NICs deliver.
pub fn ah_attr_from_grh(grh: &[u8; 40], wc: &ibv_wc, port_num: u8) -> Result<ibv_ah_attr, i32> {
    let v4 = &grh[20..40];
    let (sgid_src, flow_label, hop_limit, tclass) = if v4[0] == 0x45 && grh[..20].iter().all(|b| *b == 0) {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&v4[12..16]);
        (g, 0u32, v4[8], v4[1])
    } else if grh[0] >> 4 == 6 {
        let vtf = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
        let mut g = [0u8; 16];
        g.copy_from_slice(&grh[8..24]);
        (g, vtf & 0xf_ffff, grh[7], ((vtf >> 20) & 0xff) as u8)
    } else {
        return Err(libc::EINVAL);
    };
    Ok(ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: sgid_src },
            flow_label,
            sgid_index: 0,
            hop_limit,
            traffic_class: tclass,
        },
        dlid: wc.slid,
        sl: wc.sl,
        src_path_bits: wc.dlid_path_bits,
        static_rate: 0,
        is_global: 1,
        port_num,
    })
}

/// `ibv_init_ah_from_wc(3)`: 0 or -1 + errno. RoCE requires the GRH (IBV_WC_GRH).
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    // SAFETY: caller passes a context of ours.
    unsafe { ctx_from(context) }?;
    if port_num != PORT_NUM {
        return Err(libc::EINVAL);
    }
    let wc = non_null(wc)?;
    let out = non_null(ah_attr)?;
    // SAFETY: readable caller struct.
    let w = unsafe { *wc };
    if w.wc_flags & IBV_WC_GRH as u32 == 0 {
        return Err(libc::EINVAL);
    }
    let g = non_null_const(grh as *const [u8; 40])?;
    // SAFETY: with IBV_WC_GRH the caller passes the 40-byte GRH area of the receive buffer.
    let a = ah_attr_from_grh(unsafe { &*g }, &w, port_num)?;
    // SAFETY: writable caller struct.
    unsafe { out.write(a) };
    Ok(0)
}

/// `ibv_create_ah_from_wc(3)`.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    port_num: u8,
) -> *mut ibv_ah {
    let p = non_null(pd)?;
    let mut a = ibv_ah_attr::zeroed();
    // SAFETY: caller passes a PD of ours; forwarded pointers as documented.
    unsafe {
        if ibv_init_ah_from_wc((*p).context, port_num, wc, grh, &mut a) != 0 {
            return Err(crate::export::errno());
        }
        let ah = ibv_create_ah(pd, &mut a);
        if ah.is_null() {
            Err(crate::export::errno())
        } else {
            Ok(ah)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grh_of_ipv4_and_ipv6_packets() {
        let mut g = [0u8; 40];
        g[20] = 0x45;
        g[21] = 0x10; // TOS
        g[28] = 64; // TTL
        g[32..36].copy_from_slice(&[10, 0, 0, 2]);
        let mut wc = ibv_wc::zeroed();
        wc.sl = 2;
        let a = ah_attr_from_grh(&g, &wc, 1).unwrap();
        // SAFETY: byte view of a union.
        let dgid = unsafe { a.grh.dgid.raw };
        assert_eq!(dgid, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]);
        assert_eq!((a.grh.hop_limit, a.grh.traffic_class, a.is_global, a.sl, a.port_num), (64, 0x10, 1, 2, 1));
        let mut g6 = [0u8; 40];
        g6[0] = 0x60;
        g6[3] = 0x05; // flow label 5
        g6[7] = 9;
        g6[8..24].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        let a = ah_attr_from_grh(&g6, &wc, 1).unwrap();
        assert_eq!((a.grh.flow_label, a.grh.hop_limit), (5, 9));
        // SAFETY: byte view of a union.
        assert_eq!(unsafe { a.grh.dgid.raw }[0..4], [0x20, 0x01, 0x0d, 0xb8]);
        assert_eq!(ah_attr_from_grh(&[0u8; 40], &wc, 1).err(), Some(libc::EINVAL));
    }
}
