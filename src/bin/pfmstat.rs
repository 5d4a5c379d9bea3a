//! `pfmstat`: perfex(1) for the pfm device. The tool lives in `pfmd::pfmstat`.

fn main() -> std::process::ExitCode {
    pfmd::pfmstat::main()
}
