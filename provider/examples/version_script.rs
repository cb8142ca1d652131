//! Print the linker version script generated from the entry-point table (used by build.sh).
fn main() {
    print!("{}", urxe_provider::entries::version_script());
}
