//! Tests of the completion channels and async events ([`crate::events`]) through the
//! exported verbs: they open the device ([`crate::device`]) and build CQ shells
//! ([`crate::verbs::cq`]), so they sit on the top floor, above every room they use.

use crate::abi::*;
use crate::device::{ibv_close_device, ibv_free_device_list, ibv_get_device_list, ibv_open_device};
use crate::events::*;
use crate::export::errno;
use crate::objects::*;
use crate::verbs::cq::{free_cq_shell, new_cq_shell};
use libc::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct Ctx(*mut ibv_context);
impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: opened by `open()` below, closed once.
        unsafe { ibv_close_device(self.0) };
    }
}

fn open() -> Ctx {
    // SAFETY: the exported verbs, used as an application would.
    unsafe {
        let l = ibv_get_device_list(ptr::null_mut());
        assert!(!l.is_null(), "device list: errno {}", errno());
        let c = ibv_open_device(*l);
        ibv_free_device_list(l);
        assert!(!c.is_null());
        Ctx(c)
    }
}

fn cq_on(ctx: &Ctx, ch: *mut ibv_comp_channel, id: u32, user: usize) -> *mut UrxeCq {
    let mut attr = ibv_cq_init_attr_ex::zeroed();
    attr.channel = ch;
    attr.cq_context = user as *mut c_void;
    attr.cqe = 16;
    // SAFETY: live context and channel.
    unsafe { new_cq_shell(ctx.0, &attr, id, 16) }.unwrap()
}

fn nonblock(fd: c_int) {
    // SAFETY: fcntl on a live fd of ours.
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK) };
}

/// `ibv_get_cq_event` as (cq, cq_context) or the errno.
fn get_event(ch: *mut ibv_comp_channel) -> Result<(*mut UrxeCq, usize), i32> {
    let mut cq: *mut ibv_cq = ptr::null_mut();
    let mut user: *mut c_void = ptr::null_mut();
    // SAFETY: live channel, writable out-pointers.
    match unsafe { ibv_get_cq_event(ch, &mut cq, &mut user) } {
        0 => Ok((cq as *mut UrxeCq, user as usize)),
        _ => Err(errno()),
    }
}

/// The engine reuses a destroyed CQ's id: its completions go to the CQ created last with that
/// id, also after the older shell is freed (its unregister leaves the newer entry alone).
#[test]
fn engine_id_reused_by_a_new_cq_reaches_the_new_cq() {
    let ctx = open();
    // SAFETY: the exported verbs with a live context; CQ shells from new_cq_shell.
    unsafe {
        let ch = ibv_create_comp_channel(ctx.0);
        assert!(!ch.is_null());
        nonblock((*ch).fd);
        let old = cq_on(&ctx, ch, 21, 0x01d);
        let new = cq_on(&ctx, ch, 21, 0x2e3);
        free_cq_shell(old).unwrap();
        assert_eq!(notify_cq_id(21), Ok(Some(Some((*ch).fd))));
        assert_eq!(get_event(ch), Ok((new, 0x2e3)));
        assert_eq!(get_event(ch), Err(libc::EAGAIN));
        ibv_ack_cq_events(new as *mut ibv_cq, 1);
        free_cq_shell(new).unwrap();
        assert_eq!(notify_cq_id(21), Ok(None), "no CQ with that id is left");
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
    }
}

#[test]
fn channel_delivers_each_fired_cq_once_in_order_and_skips_destroyed_ones() {
    let ctx = open();
    // SAFETY: the exported verbs with a live context; CQ shells from new_cq_shell.
    unsafe {
        let ch = ibv_create_comp_channel(ctx.0);
        assert!(!ch.is_null());
        nonblock((*ch).fd);
        let a = cq_on(&ctx, ch, 1, 0xa);
        let b = cq_on(&ctx, ch, 2, 0xb);
        assert_eq!((*ch).refcnt, 2);
        assert_eq!(ibv_destroy_comp_channel(ch), libc::EBUSY, "CQs attached");
        assert_eq!(get_event(ch), Err(libc::EAGAIN), "empty non-blocking channel");

        notify_cq(a).unwrap();
        assert_eq!(notify_cq_id(2), Ok(Some(Some((*ch).fd))), "by engine id, to its channel");
        notify_cq(a).unwrap();
        assert_eq!(notify_cq_id(77), Ok(None), "no such CQ");
        assert_eq!(get_event(ch), Ok((a, 0xa)));
        assert_eq!(get_event(ch), Ok((b, 0xb)));
        assert_eq!(get_event(ch), Ok((a, 0xa)));
        assert_eq!(get_event(ch), Err(libc::EAGAIN));
        ibv_ack_cq_events(a as *mut ibv_cq, 2);
        ibv_ack_cq_events(b as *mut ibv_cq, 1);
        assert_eq!((*a).ibv.comp_events_completed, 2);

        // An event still in the pipe when its CQ is destroyed is skipped, not dereferenced.
        notify_cq(b).unwrap();
        free_cq_shell(b).unwrap();
        notify_cq(a).unwrap();
        assert_eq!(get_event(ch), Ok((a, 0xa)), "stale record of the destroyed CQ skipped");
        ibv_ack_cq_events(a as *mut ibv_cq, 1);
        free_cq_shell(a).unwrap();
        assert_eq!((*ch).refcnt, 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
    }
}

#[test]
fn a_record_handed_to_the_socket_owner_keeps_the_channel_order() {
    let ctx = open();
    // SAFETY: the exported verbs with a live context; CQ shells from new_cq_shell.
    unsafe {
        let ch = ibv_create_comp_channel(ctx.0);
        let other = ibv_create_comp_channel(ctx.0);
        nonblock((*ch).fd);
        let a = cq_on(&ctx, ch, 11, 0xa);
        let b = cq_on(&ctx, ch, 12, 0xb);
        let fd = (*ch).fd;
        let queued = |c: *mut ibv_comp_channel| (*(c as *const UrxeChannel)).queued.load(Ordering::Acquire);
        // The owner's step on this channel, pipe empty: the first record is handed over, the
        // second goes to the pipe behind it.
        let r = as_owner_step(fd, || (notify_cq(a), notify_cq(b)));
        assert_eq!(r, (Ok(Some(fd)), Ok(Some(fd))));
        assert_eq!(queued(ch), 1, "one record in the pipe");
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        assert_eq!(libc::poll(&mut p, 1, 0), 1, "the second record is in the pipe");
        assert_eq!(get_event(ch), Ok((a, 0xa)), "the handed record first");
        assert_eq!(get_event(ch), Ok((b, 0xb)));
        assert_eq!(get_event(ch), Err(libc::EAGAIN));
        assert_eq!(queued(ch), 0);
        // An older record in the pipe: nothing is handed over (it would jump the queue).
        notify_cq(b).unwrap();
        assert_eq!(as_owner_step(fd, || notify_cq(a)), Ok(Some(fd)));
        assert_eq!(queued(ch), 2, "both in the pipe");
        assert_eq!(get_event(ch), Ok((b, 0xb)));
        assert_eq!(get_event(ch), Ok((a, 0xa)));
        // An owner of another channel is handed nothing of this one.
        assert_eq!(as_owner_step((*other).fd, || notify_cq(a)), Ok(Some(fd)));
        assert_eq!(queued(ch), 1);
        assert_eq!(get_event(ch), Ok((a, 0xa)));
        assert_eq!(get_event(ch), Err(libc::EAGAIN));
        ibv_ack_cq_events(a as *mut ibv_cq, 3);
        ibv_ack_cq_events(b as *mut ibv_cq, 2);
        free_cq_shell(a).unwrap();
        free_cq_shell(b).unwrap();
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_destroy_comp_channel(other), 0);
    }
}

#[test]
fn destroy_waits_until_every_handed_out_event_is_acked() {
    let ctx = open();
    // SAFETY: as above.
    unsafe {
        let ch = ibv_create_comp_channel(ctx.0);
        let cq = cq_on(&ctx, ch, 3, 0);
        notify_cq(cq).unwrap();
        assert_eq!(get_event(ch).unwrap().0, cq);
        let acked = Arc::new(AtomicBool::new(false));
        let (flag, addr) = (acked.clone(), cq as usize);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            flag.store(true, Ordering::SeqCst);
            // SAFETY: the CQ lives until destroy returns, which waits for this ack.
            ibv_ack_cq_events(addr as *mut ibv_cq, 1);
        });
        free_cq_shell(cq).unwrap();
        assert!(acked.load(Ordering::SeqCst), "destroy returned before the ack");
        t.join().unwrap();
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
    }
}

#[test]
fn blocking_get_cq_event_wakes_on_notify() {
    let ctx = open();
    // SAFETY: as above.
    unsafe {
        let ch = ibv_create_comp_channel(ctx.0);
        let cq = cq_on(&ctx, ch, 4, 0x44);
        let (cha, cqa) = (ch as usize, cq as usize);
        let t = std::thread::spawn(move || get_event(cha as *mut ibv_comp_channel).map(|(c, u)| (c as usize, u)));
        std::thread::sleep(Duration::from_millis(50));
        notify_cq(cqa as *mut UrxeCq).unwrap();
        assert_eq!(t.join().unwrap(), Ok((cqa, 0x44)));
        ibv_ack_cq_events(cq as *mut ibv_cq, 1);
        free_cq_shell(cq).unwrap();
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
    }
}

#[test]
fn async_events_carry_element_and_type_and_acks_count_on_the_object() {
    let ctx = open();
    // SAFETY: as above.
    unsafe {
        let fd = (*ctx.0).async_fd;
        nonblock(fd);
        let cq = cq_on(&ctx, ptr::null_mut(), 5, 0);
        let mut ev = ibv_async_event::zeroed();
        assert_eq!(ibv_get_async_event(ctx.0, &mut ev), -1);
        assert_eq!(errno(), libc::EAGAIN);

        post_async_event(ctx.0, cq as u64, IBV_EVENT_CQ_ERR as u32).unwrap();
        post_async_event(ctx.0, 1, IBV_EVENT_PORT_ACTIVE as u32).unwrap();
        assert_eq!(ibv_get_async_event(ctx.0, &mut ev), 0);
        assert_eq!(ev.event_type, IBV_EVENT_CQ_ERR as u32);
        assert_eq!(ev.element.cq, cq as *mut ibv_cq);
        ibv_ack_async_event(&mut ev);
        assert_eq!((*cq).ibv.async_events_completed, 1);
        assert_eq!(ibv_get_async_event(ctx.0, &mut ev), 0);
        assert_eq!(ev.event_type, IBV_EVENT_PORT_ACTIVE as u32);
        assert_eq!(ev.element.port_num, 1);
        ibv_ack_async_event(&mut ev);
        free_cq_shell(cq).unwrap();
    }
}
