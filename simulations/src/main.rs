//! `strata-simulations`: the simulator's own front end (the same as `strata simulate`), plus a
//! hidden `--inject` for tests that shows the invariants catch a deliberate defect.

use std::process::ExitCode;

use clap::Parser;
use strata_simulations::cli::{self, RunArgs};
use strata_simulations::store::Defects;

#[derive(Parser)]
#[command(
    name = "strata-simulations",
    about = "Deterministic simulation of strata: a scenario, a seed, its invariants"
)]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Print each run's result document (`strata.simulation-result/v1`), one JSON line per run.
    #[arg(long)]
    json: bool,
    /// A deliberate defect, to show the invariants catch it (`sync-lies`: the disk acknowledges
    /// a sync without making anything durable; `ownership-check-off`: claims are routed without
    /// the ledger's active writers; `stale-resume`: a warm session whose capsule went stale is
    /// resumed unreconciled; `no-backoff`: a failed attempt is retried at once). For tests.
    #[arg(long, hide = true)]
    inject: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let defects = match args.inject.as_deref() {
        None => Defects::default(),
        Some("sync-lies") => Defects { sync_lies: true, ..Defects::default() },
        Some("ownership-check-off") => Defects { ownership_check_off: true, ..Defects::default() },
        Some("stale-resume") => Defects { stale_resume: true, ..Defects::default() },
        Some("no-backoff") => Defects { no_backoff: true, ..Defects::default() },
        Some(other) => {
            eprintln!(
                "[STRATA-E1803] no defect {other} to inject; there are: sync-lies, ownership-check-off, stale-resume, no-backoff"
            );
            return ExitCode::from(2);
        }
    };
    cli::run(&args.run, args.json, defects)
}
