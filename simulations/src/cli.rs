//! The command line both front ends share (`strata simulate` and `strata-simulations`): which
//! scenario, seeds and steps, the report; one line per run (or the result document with
//! `--json`), a broken invariant printed with its reproduction command (exit 1).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::store::Defects;
use crate::{Config, html, result};

/// Most steps one run may take.
pub const STEPS_MAX: u64 = 1_000_000;
/// Most seeds one call may run.
pub const SEEDS_MAX: u64 = 100_000;

/// What to simulate.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The scenario: journal-crash, ownership-storm, coordinator-faults, canary,
    /// canary-regression, canary-marginal.
    #[arg(long)]
    pub scenario: String,
    /// The seed every random choice derives from.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run this many seeds, from --seed on.
    #[arg(long, default_value_t = 1)]
    pub seeds: u64,
    /// Steps per run (for the canary scenarios: pairs per evaluation window).
    #[arg(long, default_value_t = 2_000)]
    pub steps: u64,
    /// Write the HTML report of the last run to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// A line on stdout; a closed pipe (`… | head`) ends the output quietly.
fn out(line: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Runs what `args` asks with `defects` (none outside tests); the process's exit code: 0, 1 for
/// a broken invariant or an unwritable report, 2 for arguments out of range.
pub fn run(args: &RunArgs, json: bool, defects: Defects) -> ExitCode {
    if !result::SCENARIOS.contains(&args.scenario.as_str()) {
        eprintln!("[STRATA-E1802] no scenario {}; the scenarios are: {}", args.scenario, result::SCENARIOS.join(", "));
        return ExitCode::from(2);
    }
    if args.steps == 0 || args.steps > STEPS_MAX || args.seeds == 0 || args.seeds > SEEDS_MAX {
        eprintln!("[STRATA-E1803] --steps must be 1–{STEPS_MAX} and --seeds 1–{SEEDS_MAX}");
        return ExitCode::from(2);
    }
    let mut last = None;
    for seed in args.seed..args.seed.saturating_add(args.seeds) {
        match result::run(&args.scenario, Config { seed, steps: args.steps, defects }) {
            Ok(o) => {
                out(&if json { o.result.to_string() } else { o.line.clone() });
                last = Some(o.result);
            }
            Err(f) => {
                if json {
                    out(&serde_json::to_string(&f).unwrap_or_default());
                }
                eprintln!("{f}");
                eprintln!("reproduce: {}", f.reproduce());
                return ExitCode::from(1);
            }
        }
    }
    if let (Some(path), Some(doc)) = (&args.report, &last) {
        if let Err(e) = std::fs::write(path, html::render(doc)) {
            eprintln!(
                "[STRATA-E1804] cannot write the report {}: {e}; check the directory exists and is writable",
                path.display()
            );
            return ExitCode::from(1);
        }
        eprintln!("report: {}", path.display());
    }
    ExitCode::SUCCESS
}
