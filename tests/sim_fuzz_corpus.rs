//! Replays the `responder` fuzz corpus (fuzz/corpus/responder, minimised with `cargo fuzz
//! cmin`) through the fuzz body, so `cargo test` runs what the fuzzer found interesting:
//! no panic, no host-memory access outside registered regions.

use std::path::Path;

#[test]
fn responder_corpus_replays_without_panic_or_stray_access() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/responder");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let data = std::fs::read(e.unwrap().path()).unwrap();
        urxe::engine::fuzzing::responder(&data);
        n += 1;
    }
    assert!(n >= 100, "corpus has {n} inputs");
}
