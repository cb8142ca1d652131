//! Print the Rust-side ABI layout report of librdmacm's mirrors (used by tests/rdmacm_layout.rs).
fn main() {
    print!("{}", urxe_rdmacm::layout_report());
}
