//! Print the Rust-side ABI layout report (used by tests/abi_layout.rs).
fn main() {
    print!("{}", urxe_provider::layout_report());
}
