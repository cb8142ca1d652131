//! The C surface of this library called in-process, the way a careless or hostile program
//! would: bad arguments get an errno and never a crash; the event channel's fd behaves like a
//! real one (poll, O_NONBLOCK → EAGAIN); IDs move between channels with their events. The
//! test binary runs against the system's libibverbs, which has no `urxe_gsi_*`: calls that
//! need the device fail cleanly with ENODEV, which is tested too.

use crate::abi::*;
use crate::addrinfo::*;
use crate::api::*;
use crate::core::lock;
use crate::endpoints::*;
use crate::events::*;
use libc::{c_int, c_void};
use std::ptr;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `f()` returned -1 with `e` in errno.
fn fails_with(r: c_int, e: i32) {
    assert_eq!((r, errno()), (-1, e));
}

fn new_id(ch: *mut rdma_event_channel) -> *mut rdma_cm_id {
    let mut id = ptr::null_mut();
    // SAFETY: a valid out-pointer; `ch` is NULL or ours.
    assert_eq!(unsafe { rdma_create_id(ch, &mut id, ptr::null_mut(), ps::TCP) }, 0);
    id
}

/// IDs are named by handle inside the library; a pointer is only looked up, never trusted: a
/// destroyed ID's pointer and pointers into our own objects that are not an ID's struct are
/// refused with EINVAL before anything reads through them, and the live ID beside them is
/// untouched.
#[test]
fn a_destroyed_or_forged_id_pointer_is_einval() {
    // SAFETY: no arguments.
    let ch = unsafe { rdma_create_event_channel() };
    assert!(!ch.is_null());
    let keep = new_id(ch);
    let gone = new_id(ch);
    let (k_keep, k_gone) = {
        let l = lock();
        (l.key(keep).unwrap(), l.key(gone).unwrap())
    };
    assert_ne!(k_keep, k_gone);
    assert_ne!(k_gone, gone as usize, "the handle is not the pointer value");
    // SAFETY: every call below must refuse the stale or forged pointer before touching it.
    unsafe {
        assert_eq!(rdma_destroy_id(gone), 0);
        fails_with(rdma_destroy_id(gone), libc::EINVAL);
        fails_with(rdma_connect(gone, ptr::null_mut()), libc::EINVAL);
        fails_with(rdma_resolve_route(gone, 100), libc::EINVAL);
        fails_with(rdma_listen(gone, 1), libc::EINVAL);
        let mut tos: u8 = 1;
        fails_with(
            rdma_set_option(gone, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &mut tos as *mut u8 as *mut c_void, 1),
            libc::EINVAL,
        );
        assert_eq!(rdma_get_src_port(gone), 0);
        // Inside our own heap: the channel, and a pointer 8 bytes into a live ID's struct.
        for forged in [ch as *mut rdma_cm_id, (keep as *mut u8).add(8) as *mut rdma_cm_id] {
            fails_with(rdma_destroy_id(forged), libc::EINVAL);
            fails_with(rdma_disconnect(forged), libc::EINVAL);
        }
        assert!(lock().key(gone).is_err());
        assert_eq!(lock().key(keep), Ok(k_keep), "the live ID keeps its handle");
        assert_eq!(rdma_set_option(keep, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &mut tos as *mut u8 as *mut c_void, 1), 0);
        assert_eq!(rdma_destroy_id(keep), 0);
        assert_eq!(rdma_destroy_event_channel(ch), 0);
    }
}

fn readable(fd: c_int) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd of ours, no wait.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

#[test]
fn bad_arguments_get_errno_never_a_crash() {
    let junk = 0x1000 as *mut rdma_cm_id;
    // SAFETY: every call below must reject its arguments before touching them.
    unsafe {
        fails_with(rdma_create_id(ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), ps::TCP), libc::EINVAL);
        let mut id = ptr::null_mut();
        fails_with(rdma_create_id(ptr::null_mut(), &mut id, ptr::null_mut(), 0x7303), libc::EINVAL);
        fails_with(rdma_create_id(0x2000 as *mut _, &mut id, ptr::null_mut(), ps::TCP), libc::EINVAL);
        fails_with(rdma_destroy_id(ptr::null_mut()), libc::EINVAL);
        fails_with(rdma_destroy_id(junk), libc::EINVAL);
        fails_with(rdma_get_cm_event(ptr::null_mut(), ptr::null_mut()), libc::EINVAL);
        fails_with(rdma_ack_cm_event(0x3000 as *mut _), libc::EINVAL);
        fails_with(rdma_destroy_event_channel(0x4000 as *mut _), libc::EINVAL);
        fails_with(rdma_connect(junk, ptr::null_mut()), libc::EINVAL);
        fails_with(rdma_accept(junk, ptr::null_mut()), libc::EINVAL);
        fails_with(rdma_disconnect(junk), libc::EINVAL);
        fails_with(rdma_set_option(junk, 0, 0, ptr::null_mut(), 0), libc::EINVAL);
        assert_eq!(rdma_get_src_port(junk), 0);
        rdma_destroy_qp(junk);
        rdma_destroy_ep(ptr::null_mut());

        let id = new_id(ptr::null_mut());
        fails_with(rdma_bind_addr(id, ptr::null_mut()), libc::EINVAL);
        fails_with(rdma_resolve_addr(id, ptr::null_mut(), ptr::null_mut(), 100), libc::EINVAL);
        fails_with(rdma_resolve_route(id, 100), libc::EINVAL);
        fails_with(rdma_connect(id, ptr::null_mut()), libc::EINVAL);
        fails_with(rdma_accept(id, ptr::null_mut()), libc::EINVAL);
        fails_with(rdma_create_qp(id, ptr::null_mut(), ptr::null_mut()), libc::EINVAL);
        fails_with(rdma_establish(id), libc::EINVAL);
        let mut tos: u8 = 32;
        assert_eq!(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &mut tos as *mut u8 as *mut c_void, 1), 0);
        fails_with(rdma_set_option(id, 9, 9, &mut tos as *mut u8 as *mut c_void, 1), libc::ENOSYS);
        let mut sa: libc::sockaddr_in = std::mem::zeroed();
        sa.sin_family = libc::AF_INET as u16;
        // An ID with no address: EINVAL; nothing joined: EADDRNOTAVAIL.
        fails_with(rdma_join_multicast(id, &mut sa as *mut _ as *mut _, ptr::null_mut()), libc::EINVAL);
        fails_with(rdma_join_multicast(id, ptr::null_mut(), ptr::null_mut()), libc::EINVAL);
        fails_with(rdma_leave_multicast(id, &mut sa as *mut _ as *mut _), libc::EADDRNOTAVAIL);
        assert_eq!(rdma_destroy_id(id), 0);
        fails_with(rdma_destroy_id(id), libc::EINVAL);
    }
}

#[test]
fn without_urxes_libibverbs_device_calls_fail_with_enodev() {
    let id = new_id(ptr::null_mut());
    // SAFETY: a valid sockaddr and our ID.
    unsafe {
        let mut sa: libc::sockaddr_in = std::mem::zeroed();
        sa.sin_family = libc::AF_INET as u16;
        fails_with(rdma_bind_addr(id, &mut sa as *mut _ as *mut _), libc::ENODEV);
        assert!(rdma_get_devices(ptr::null_mut()).is_null());
        assert_eq!(errno(), libc::ENODEV);
        assert_eq!(rdma_destroy_id(id), 0);
    }
}

#[test]
fn channel_fd_is_readable_exactly_while_events_are_queued_and_honours_nonblock() {
    // SAFETY: our channel, IDs and events throughout.
    unsafe {
        let ch = rdma_create_event_channel();
        assert!(!ch.is_null());
        let fd = (*ch).fd;
        let fl = libc::fcntl(fd, libc::F_GETFL);
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
        let mut ev = ptr::null_mut();
        fails_with(rdma_get_cm_event(ch, &mut ev), libc::EAGAIN);
        assert!(!readable(fd));
        let id = new_id(ch);
        for e in [event::ADDR_RESOLVED, event::ROUTE_RESOLVED] {
            {
                let mut l = lock();
                let k = l.key(id).unwrap();
                l.post(k, 0, e, 0, |_| {})
            };
        }
        assert!(readable(fd));
        assert_eq!(rdma_get_cm_event(ch, &mut ev), 0);
        assert_eq!(((*ev).event, (*ev).id), (event::ADDR_RESOLVED, id));
        assert!(readable(fd), "one more is queued");
        assert_eq!(rdma_ack_cm_event(ev), 0);
        fails_with(rdma_ack_cm_event(ev), libc::EINVAL);
        assert_eq!(rdma_get_cm_event(ch, &mut ev), 0);
        assert_eq!((*ev).event, event::ROUTE_RESOLVED);
        assert!(!readable(fd));
        fails_with(rdma_get_cm_event(ch, &mut ev.clone()), libc::EAGAIN);
        assert_eq!(rdma_ack_cm_event(ev), 0);
        assert_eq!(rdma_destroy_id(id), 0);
        assert_eq!(rdma_destroy_event_channel(ch), 0);
    }
}

#[test]
fn a_waiter_on_a_channel_destroyed_under_it_keeps_waiting_as_the_kernels_does() {
    // rping's CM thread waits for the next event while main destroys the ID and the channel
    // and returns: the waiter must not come back with an error (rping would exit(-1) first).
    // SAFETY: our channel and ID; the channel pointer is only used as a key after the destroy.
    unsafe {
        let ch = rdma_create_event_channel();
        let id = new_id(ch);
        // An event dropped with its ID leaves a count without an event on the eventfd.
        {
            let mut l = lock();
            let k = l.key(id).unwrap();
            l.post(k, 0, event::ESTABLISHED, 0, |_| {})
        };
        assert_eq!(rdma_destroy_id(id), 0);
        let key = ch as usize;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut ev = ptr::null_mut();
            let _ = tx.send(rdma_get_cm_event(key as *mut rdma_event_channel, &mut ev));
        });
        let r = rx.recv_timeout(std::time::Duration::from_millis(200));
        assert!(r.is_err(), "the waiter returned {r:?} with no event queued");
        // Woken by a new event, it finds its channel destroyed before it could take the lock
        // (rping: the DREP's DISCONNECTED lands as main destroys the ID and the channel).
        let id2 = new_id(ch);
        {
            let mut lib = lock();
            let k2 = lib.key(id2).unwrap();
            lib.post(k2, 0, event::DISCONNECTED, 0, |_| {});
            std::thread::sleep(std::time::Duration::from_millis(50));
            lib.id(id2).unwrap().channel = 0;
            lib.free_channel(key);
        }
        let r = rx.recv_timeout(std::time::Duration::from_millis(300));
        assert!(r.is_err(), "the waiter returned {r:?} from a destroyed channel");
        assert_eq!(rdma_destroy_id(id2), 0);
        // Calls after the destroy are refused.
        let mut ev = ptr::null_mut();
        fails_with(rdma_get_cm_event(ch, &mut ev), libc::EINVAL);
    }
}

#[test]
fn destroy_id_waits_for_another_threads_ack_of_its_events() {
    // SAFETY: our channel, ID and event; the event is acked by the other thread only.
    unsafe {
        let ch = rdma_create_event_channel();
        let id = new_id(ch);
        {
            let mut l = lock();
            let k = l.key(id).unwrap();
            l.post(k, 0, event::DISCONNECTED, 0, |_| {})
        };
        let mut ev = ptr::null_mut();
        assert_eq!(rdma_get_cm_event(ch, &mut ev), 0);
        let evk = ev as usize;
        let acker = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            let acked_at = std::time::Instant::now();
            assert_eq!(rdma_ack_cm_event(evk as *mut rdma_cm_event), 0);
            acked_at
        });
        assert_eq!(rdma_destroy_id(id), 0);
        let done = std::time::Instant::now();
        let acked_at = acker.join().unwrap();
        assert!(done >= acked_at, "rdma_destroy_id returned before the event was acked");
        assert_eq!(rdma_destroy_event_channel(ch), 0);
    }
}

#[test]
fn migrate_id_moves_queued_events_to_the_new_channel() {
    // SAFETY: our channels, ID and events.
    unsafe {
        let (a, b) = (rdma_create_event_channel(), rdma_create_event_channel());
        let id = new_id(a);
        {
            let mut l = lock();
            let k = l.key(id).unwrap();
            l.post(k, 0, event::ESTABLISHED, 0, |_| {})
        };
        assert_eq!(rdma_migrate_id(id, b), 0);
        assert_eq!((*id).channel, b);
        assert!(readable((*b).fd));
        let mut ev = ptr::null_mut();
        assert_eq!(rdma_get_cm_event(b, &mut ev), 0);
        assert_eq!((*ev).event, event::ESTABLISHED);
        assert_eq!(rdma_ack_cm_event(ev), 0);
        // To a NULL channel: the ID becomes synchronous with a private channel.
        assert_eq!(rdma_migrate_id(id, ptr::null_mut()), 0);
        assert!(!(*id).channel.is_null() && (*id).channel != a && (*id).channel != b);
        assert_eq!(rdma_destroy_id(id), 0);
        assert_eq!(rdma_destroy_event_channel(a), 0);
        assert_eq!(rdma_destroy_event_channel(b), 0);
    }
}

#[test]
fn event_names_and_unknown_values() {
    let name = |e| {
        // SAFETY: rdma_event_str returns a static NUL-terminated string.
        unsafe { std::ffi::CStr::from_ptr(rdma_event_str(e)) }.to_str().unwrap().to_string()
    };
    assert_eq!(name(event::CONNECT_REQUEST), "RDMA_CM_EVENT_CONNECT_REQUEST");
    assert_eq!(name(event::TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT");
    assert_eq!(name(-1), "UNKNOWN EVENT");
    assert_eq!(name(99), "UNKNOWN EVENT");
}

#[test]
fn getaddrinfo_gives_rc_over_the_tcp_port_space_and_passive_sources() {
    // SAFETY: NUL-terminated literals, our hints and results (freed).
    unsafe {
        let mut res = ptr::null_mut();
        assert_eq!(rdma_getaddrinfo(c"127.0.0.1".as_ptr(), c"7471".as_ptr(), ptr::null(), &mut res), 0);
        let r = &*res;
        assert_eq!((r.ai_qp_type, r.ai_port_space, r.ai_family), (2, ps::TCP, libc::AF_INET));
        assert!(r.ai_src_addr.is_null() && !r.ai_dst_addr.is_null());
        let sin = &*(r.ai_dst_addr as *const libc::sockaddr_in);
        assert_eq!((u16::from_be(sin.sin_port), u32::from_be(sin.sin_addr.s_addr)), (7471, 0x7F00_0001));
        rdma_freeaddrinfo(res);
        let mut hints: rdma_addrinfo = std::mem::zeroed();
        hints.ai_flags = RAI_PASSIVE;
        hints.ai_port_space = ps::UDP;
        hints.ai_family = libc::AF_INET;
        assert_eq!(rdma_getaddrinfo(ptr::null(), c"7174".as_ptr(), &hints, &mut res), 0);
        assert!(!(*res).ai_src_addr.is_null() && (*res).ai_dst_addr.is_null());
        assert_eq!(((*res).ai_port_space, (*res).ai_flags & RAI_PASSIVE), (ps::UDP, RAI_PASSIVE));
        rdma_freeaddrinfo(res);
        fails_with(rdma_getaddrinfo(ptr::null(), ptr::null(), ptr::null(), &mut res), libc::EINVAL);
        hints.ai_flags = RAI_NUMERICHOST;
        assert_ne!(rdma_getaddrinfo(c"not-an-address".as_ptr(), ptr::null(), &hints, &mut res), 0);
    }
}

#[test]
fn rsockets_refuse_what_they_do_not_provide_with_errno() {
    use crate::rsockets::*;
    // SAFETY: plain integer arguments; NULL pointers where the calls must refuse them.
    unsafe {
        assert_eq!(rsocket(libc::AF_INET, libc::SOCK_DGRAM, 0), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP);
        assert_eq!(rsocket(libc::AF_UNIX, libc::SOCK_STREAM, 0), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP);
        assert_eq!(rsocket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_UDP), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP);
        // A number that is no rsocket.
        assert_eq!(rsend(-1, ptr::null(), 0, 0), -1);
        assert_eq!(errno(), libc::EBADF);
        assert_eq!(rclose(1_000_000), -1);
        assert_eq!(errno(), libc::EBADF);
        assert_eq!(riowrite(-5, ptr::null(), 0, 0, 0), usize::MAX);
        assert_eq!(errno(), libc::EBADF);
    }
}
