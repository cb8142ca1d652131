//! Prints librdmacm.so.1's linker version script (used by rdmacm/build.sh).
fn main() {
    print!("{}", urxe_rdmacm::entries::version_script());
}
