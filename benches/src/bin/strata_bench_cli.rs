//! The `strata` CLI built inside the benches package, so a benchmark can run it as a child
//! process (for peak-memory measurements) through `CARGO_BIN_EXE_strata-bench-cli`.

fn main() -> std::process::ExitCode {
    strata_adapters::cli::main()
}
