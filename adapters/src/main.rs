//! The `strata` binary: everything lives in `strata_adapters::cli`.

fn main() -> std::process::ExitCode {
    strata_adapters::cli::main()
}
