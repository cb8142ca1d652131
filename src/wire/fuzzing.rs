//! Fuzz bodies for the wire layer, in the library so that `cargo test` replays the seed corpus
//! through exactly the code the fuzzer runs (fuzz/fuzz_targets/wire_parse.rs).

use super::icrc::IpFields;
use super::packet::{finish, parse};

/// Parses arbitrary bytes; whatever parses must re-emit to the same headers and payload.
/// Panics (the fuzzer's signal) only if that property fails.
pub fn wire_parse(data: &[u8]) {
    let Ok(p) = parse(data) else { return };
    assert!(p.header_len + p.payload.len() + 4 <= data.len());
    let mut buf = vec![0u8; data.len() + 8];
    let hl = p.headers.emit(&mut buf).expect("a parsed packet re-emits");
    assert_eq!(hl, p.header_len);
    buf[hl..hl + p.payload.len()].copy_from_slice(p.payload);
    let ip = IpFields::v4_df([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
    let n = finish(&mut buf, hl, p.payload.len(), &ip, 0xC000, 4791).expect("finish fits");
    let q = parse(&buf[..n]).expect("re-emitted packet parses");
    let mut want = p.headers;
    want.bth.pad_cnt = q.headers.bth.pad_cnt;
    assert_eq!(q.headers, want);
    assert_eq!(q.payload, p.payload);
}
