//! `pfmstat`: perfex(1) for the pfm device. See `pfmstat -h` and the crate docs.

fn main() -> std::process::ExitCode {
    pfmstat::main()
}
