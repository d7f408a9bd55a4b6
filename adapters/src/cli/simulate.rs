//! `strata simulate`: a deterministic simulation scenario with a seed (or a range of seeds), its
//! invariants checked after every step; a line per run, the result document with `--json`, the
//! HTML report with `--report`. The same command line as `cargo run -p strata-simulations`
//! (shared in `strata_simulations::cli`); not forwarded to a daemon (it opens no workspace).

use std::process::ExitCode;

use strata_simulations::cli::{self, RunArgs};
use strata_simulations::store::Defects;

pub(crate) fn run(args: RunArgs, json: bool) -> anyhow::Result<ExitCode> {
    let code = cli::run(&args, json, Defects::default());
    Ok(code)
}
