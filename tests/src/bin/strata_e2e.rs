//! The `strata` CLI built inside the tests package, so end-to-end tests can find it through
//! `CARGO_BIN_EXE_strata-e2e`. It is exactly `strata_adapters::cli::main`.

fn main() -> std::process::ExitCode {
    strata_adapters::cli::main()
}
