#![no_main]
//! Arbitrary UDP payloads into the RoCEv2 parser: no panic, and parse -> emit -> parse agrees.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    urxe::wire::fuzzing::wire_parse(data);
});
