//! Print the linker version script generated from the entry-point table (used by build.sh);
//! with `--renames`, the `objcopy --redefine-syms` lines for the archive instead.
fn main() {
    if std::env::args().nth(1).as_deref() == Some("--renames") {
        print!("{}", urxe_provider::entries::default_renames());
    } else {
        print!("{}", urxe_provider::entries::version_script());
    }
}
