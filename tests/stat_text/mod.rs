//! Reading `urxe stat`'s text in tests: its blocks (a name at the line start) of indented
//! `name: value` counters.

/// The value of counter `name` in block `block` of a `urxe stat` text (None if absent).
pub fn stat_counter(text: &str, block: &str, name: &str) -> Option<u64> {
    let mut in_block = false;
    for l in text.lines() {
        if !l.starts_with(' ') {
            in_block = l.trim() == block;
        } else if in_block {
            if let Some(v) = l.trim().strip_prefix(&format!("{name}: ")) {
                return v.trim().parse().ok();
            }
        }
    }
    None
}
