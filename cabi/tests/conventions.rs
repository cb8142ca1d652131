//! The export attributes: every convention maps errors and panics as the table in
//! `urxe_cabi::export` says, and the function keeps its C name.
use libc::c_int;
use urxe_cabi::export::{errno, PANIC_ERRNO};
use urxe_cabi::{c_fn, export};

#[export(errno)]
pub unsafe extern "C" fn urxe_test_fail_errno(x: c_int) -> c_int {
    if x > 0 {
        Err(libc::EAGAIN)
    } else {
        Ok(())
    }
}

#[export(ptr)]
pub unsafe extern "C" fn urxe_test_panic_ptr(x: c_int) -> *mut u8 {
    if x > 0 {
        panic!("boom")
    }
    Ok(std::ptr::null_mut())
}

#[export(neg1)]
pub unsafe extern "C" fn urxe_test_neg1(x: c_int) -> isize {
    if x > 0 {
        Err(libc::ENOENT)
    } else {
        Ok(7)
    }
}

#[c_fn(negerrno)]
pub unsafe extern "C" fn test_negerrno(x: c_int) -> c_int {
    if x > 0 {
        Err(libc::EBUSY)
    } else {
        Ok(x)
    }
}

#[c_fn(value(-5))]
pub unsafe extern "C" fn test_value(x: c_int) -> c_int {
    if x > 0 {
        panic!("boom")
    }
    x + 1
}

#[export(void, cancel = false)]
pub unsafe extern "C" fn urxe_test_void(x: c_int) {
    if x > 0 {
        panic!("boom")
    }
}

#[test]
fn conventions_map_errors_and_panics() {
    // SAFETY: the test functions take no pointers.
    unsafe {
        assert_eq!(urxe_test_fail_errno(1), libc::EAGAIN);
        assert_eq!(errno(), libc::EAGAIN);
        assert_eq!(urxe_test_fail_errno(0), 0);
        assert!(urxe_test_panic_ptr(1).is_null());
        assert_eq!(errno(), PANIC_ERRNO);
        assert_eq!(urxe_test_neg1(1), -1);
        assert_eq!(errno(), libc::ENOENT);
        assert_eq!(urxe_test_neg1(0), 7);
        assert_eq!(test_negerrno(1), -libc::EBUSY);
        assert_eq!(test_negerrno(-3), -3);
        assert_eq!(test_value(1), -5);
        assert_eq!(test_value(2 - 3), 0);
        urxe_test_void(1);
        assert_eq!(errno(), PANIC_ERRNO);
    }
}
