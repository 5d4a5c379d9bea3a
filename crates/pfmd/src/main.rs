fn main() -> std::process::ExitCode {
    pfmd::cli::main()
}
