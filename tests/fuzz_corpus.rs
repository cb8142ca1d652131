//! Replays the fuzz seed corpora (taken from the kernel-rxe captures) through the fuzz bodies, so
//! `cargo test` exercises exactly what the fuzzers run.

use std::path::Path;

#[test]
fn wire_parse_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/wire_parse");
    let mut n = 0;
    let mut parsed = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let data = std::fs::read(e.unwrap().path()).unwrap();
        urxe::wire::fuzzing::wire_parse(&data);
        parsed += urxe::wire::parse(&data).is_ok() as usize;
        n += 1;
    }
    assert!(n >= 20, "seed corpus has {n} inputs");
    assert_eq!(parsed, n, "every seed comes from a real packet and parses");
}
