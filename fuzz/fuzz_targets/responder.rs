#![no_main]
//! Arbitrary packet sequences (plus timers, posts and state changes) into RC/UC/UD QPs in RTS:
//! no panic, and no host-memory access outside registered regions.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    urxe::engine::fuzzing::responder(data);
});
