//! The `ibv_cq_ex` polling cursor: `start_poll` / `next_poll` / `end_poll` move it, the
//! `read_*` functions read the completion under it. One thread polls a CQ between
//! `start_poll` and `end_poll` (the verbs rule), so the cursor needs no lock.

use super::dev_of;
use crate::abi::*;
use crate::glue;
use crate::objects::*;
use libc::{c_int, c_uint};
use std::ptr;
use urxe::engine::{WcFlags, WorkCompletion};

/// Point the `ibv_cq_ex` function table of a new CQ at the cursor functions below.
pub(super) fn fill_cq_ex_table(c: &mut ibv_cq_ex) {
    c.start_poll = Some(cq_start_poll);
    c.next_poll = Some(cq_next_poll);
    c.end_poll = Some(cq_end_poll);
    c.read_opcode = Some(cq_read_opcode);
    c.read_vendor_err = Some(cq_read_vendor_err);
    c.read_byte_len = Some(cq_read_byte_len);
    c.read_imm_data = Some(cq_read_imm_data);
    c.read_qp_num = Some(cq_read_qp_num);
    c.read_src_qp = Some(cq_read_src_qp);
    c.read_wc_flags = Some(cq_read_wc_flags);
    c.read_slid = Some(cq_read_slid);
    c.read_sl = Some(cq_read_sl);
    c.read_dlid_path_bits = Some(cq_read_dlid_path_bits);
    c.read_completion_ts = Some(cq_read_completion_ts);
    c.read_cvlan = Some(cq_read_cvlan);
    c.read_flow_tag = Some(cq_read_flow_tag);
    c.read_tm_info = Some(cq_read_tm_info);
    c.read_completion_wallclock_ns = Some(cq_read_completion_wallclock_ns);
}

/// Move the `ibv_cq_ex` cursor to the next completion: 0, ENOENT when empty, or an errno.
///
/// # Safety
/// `cq` is a live CQ of ours.
unsafe fn cq_advance(cq: *mut ibv_cq_ex) -> Result<(), i32> {
    // SAFETY: caller contract.
    let s: &UrxeCq = unsafe { shell(cq) }?;
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(s.ibv.context) }?;
    let mut one = [WorkCompletion::default()];
    if glue::poll_cq(dev, s.id, &mut one)? == 0 {
        return Err(libc::ENOENT);
    }
    let p = cq as *mut UrxeCq;
    // SAFETY: the cursor belongs to the one thread polling this CQ between start_poll and
    // end_poll (the verbs rule); written through the handle, no shell reference used after.
    unsafe {
        ptr::addr_of_mut!((*p).cur).write(one[0]);
        ptr::addr_of_mut!((*p).ibv.status).write(one[0].status as u32);
        ptr::addr_of_mut!((*p).ibv.wr_id).write(one[0].wr_id);
    }
    Ok(())
}

#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn cq_start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: `attr` is NULL or readable.
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: caller passes a CQ of ours.
    unsafe { cq_advance(cq) }
}
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn cq_next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: caller passes a CQ of ours.
    unsafe { cq_advance(cq) }
}
#[urxe_cabi::c_fn(void)]
pub unsafe extern "C" fn cq_end_poll(cq: *mut ibv_cq_ex) {}

/// The completion under the cursor.
///
/// # Safety
/// `cq` is a live CQ of ours.
unsafe fn cur<'a>(cq: *mut ibv_cq_ex) -> &'a WorkCompletion {
    // SAFETY: caller contract; the cursor is plain data.
    unsafe { &(*(cq as *mut UrxeCq)).cur }
}

macro_rules! cq_reader {
    ($name:ident -> $t:ty, |$w:ident| $e:expr) => {
        #[urxe_cabi::c_fn(value(0))]
        pub unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $t {
            if cq.is_null() {
                return 0;
            }
            // SAFETY: caller passes a CQ of ours, between start_poll and end_poll.
            let $w = unsafe { cur(cq) };
            $e
        }
    };
}
cq_reader!(cq_read_opcode -> c_uint, |w| w.opcode as c_uint);
cq_reader!(cq_read_vendor_err -> u32, |w| w.vendor_err);
cq_reader!(cq_read_byte_len -> u32, |w| w.byte_len);
cq_reader!(cq_read_imm_data -> u32, |w| if w.wc_flags.contains(WcFlags::WITH_INV) { w.invalidated_rkey } else { w.imm_data });
cq_reader!(cq_read_qp_num -> u32, |w| w.qp_num);
cq_reader!(cq_read_src_qp -> u32, |w| w.src_qp);
cq_reader!(cq_read_wc_flags -> c_uint, |w| w.wc_flags.bits());
cq_reader!(cq_read_slid -> u32, |w| w.slid as u32);
cq_reader!(cq_read_sl -> u8, |w| w.sl);
cq_reader!(cq_read_dlid_path_bits -> u8, |w| w.dlid_path_bits);
cq_reader!(cq_read_completion_ts -> u64, |w| w.timestamp);
/// The completion's timestamp as wall-clock ns since the Unix epoch.
#[urxe_cabi::c_fn(value(0))]
pub unsafe extern "C" fn cq_read_completion_wallclock_ns(cq: *mut ibv_cq_ex) -> u64 {
    if cq.is_null() {
        return 0;
    }
    // SAFETY: caller passes a CQ of ours, between start_poll and end_poll.
    let (ts, ctx) = unsafe { (cur(cq).timestamp, (*cq).context) };
    // SAFETY: a live CQ's context is live.
    match unsafe { dev_of(ctx) } {
        Ok(dev) => glue::wallclock_ns(dev, ts).unwrap_or(0),
        Err(_) => 0,
    }
}
cq_reader!(cq_read_cvlan -> u16, |_w| 0);
cq_reader!(cq_read_flow_tag -> u32, |_w| 0);

#[urxe_cabi::c_fn(void)]
pub unsafe extern "C" fn cq_read_tm_info(cq: *mut ibv_cq_ex, tm_info: *mut ibv_wc_tm_info) {
    if !tm_info.is_null() {
        // SAFETY: caller passes a writable struct.
        unsafe { tm_info.write(ibv_wc_tm_info { tag: 0, priv_: 0 }) };
    }
}
