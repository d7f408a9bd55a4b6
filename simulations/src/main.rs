//! `strata-simulations`: runs one scenario with one seed, or a range of seeds, and prints what it
//! did and checked; a broken invariant prints the seed and the command that reproduces it, and
//! exits 1.

use std::process::ExitCode;

use clap::Parser;
use strata_simulations::store::Defects;
use strata_simulations::{Config, Failure, canary, journal_crash, ownership_storm};

/// Most steps one run may take.
const STEPS_MAX: u64 = 1_000_000;
/// Most seeds one call may run.
const SEEDS_MAX: u64 = 100_000;

#[derive(Parser)]
#[command(
    name = "strata-simulations",
    about = "Deterministic simulation of strata: a scenario, a seed, its invariants"
)]
struct Args {
    /// The scenario (`journal-crash`, `ownership-storm`, `canary`, `canary-regression`,
    /// `canary-marginal`).
    #[arg(long)]
    scenario: String,
    /// The seed (every random choice derives from it).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run this many seeds, from `--seed` on.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Steps per run (for the canary scenarios: pairs per evaluation window).
    #[arg(long, default_value_t = 2_000)]
    steps: u64,
    /// Machine-readable JSON output, one line per run.
    #[arg(long)]
    json: bool,
    /// A deliberate defect, to show the invariants catch it (`sync-lies`: the disk acknowledges
    /// a sync without making anything durable; `ownership-check-off`: claims are routed without
    /// the ledger's active writers). For tests.
    #[arg(long, hide = true)]
    inject: Option<String>,
}

/// One run's outcome: its report as JSON and as a line, or the broken invariant.
fn run_one(scenario: &str, seed: u64, steps: u64, defects: Defects) -> Result<(String, String), Failure> {
    match scenario {
        journal_crash::NAME => journal_crash::run(Config { seed, steps, defects }).map(|r| {
            let line = format!(
                "{} seed {}: {} steps, {} appends acknowledged, {} conflicts refused, {} retries deduplicated, \
                 {} crashes ({} unsynced writes kept, {} torn discarded), {} flush failures; {} invariant checks \
                 passed; head {} {}",
                r.scenario,
                r.seed,
                r.steps,
                r.acknowledged,
                r.conflicts,
                r.retries,
                r.crashes,
                r.kept_unsynced,
                r.torn,
                r.flush_failures,
                r.checks,
                r.head_seq,
                r.head_hash
            );
            (serde_json::to_string(&r).unwrap_or_default(), line)
        }),
        name if canary::NAMES.contains(&name) => canary::run(name, Config { seed, steps, defects }).map(|r| {
            let path: Vec<String> = r.windows.iter().map(|w| format!("{} {} → {}", w.stage, w.action, w.to)).collect();
            let line = format!(
                "{} seed {}: {} tasks simulated (synthetic); {}; ended at {}{}; the real promotion refused the \
                 simulated pairs (provenance {}); {} invariant checks passed; head {} {}",
                r.scenario,
                r.seed,
                r.tasks,
                path.join(", "),
                r.final_stage,
                if r.rolled_back { " (rolled back)" } else { "" },
                r.promotion.provenance,
                r.checks,
                r.head_seq,
                r.head_hash
            );
            (serde_json::to_string(&r).unwrap_or_default(), line)
        }),
        _ => ownership_storm::run(Config { seed, steps, defects }).map(|r| {
            let line = format!(
                "{} seed {}: {} steps, {} claims granted, {} refused as conflicts, {} releases, {} crashes, at most {} \
                 owners at once; {} invariant checks passed; head {} {}",
                r.scenario,
                r.seed,
                r.steps,
                r.claims,
                r.conflicts,
                r.releases,
                r.crashes,
                r.peak_owners,
                r.checks,
                r.head_seq,
                r.head_hash
            );
            (serde_json::to_string(&r).unwrap_or_default(), line)
        }),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let scenarios = [journal_crash::NAME, ownership_storm::NAME, canary::NAMES[0], canary::NAMES[1], canary::NAMES[2]];
    if !scenarios.contains(&args.scenario.as_str()) {
        eprintln!("[STRATA-E1802] no scenario {}; the scenarios are: {}", args.scenario, scenarios.join(", "));
        return ExitCode::from(2);
    }
    if args.steps == 0 || args.steps > STEPS_MAX || args.seeds == 0 || args.seeds > SEEDS_MAX {
        eprintln!("[STRATA-E1803] --steps must be 1–{STEPS_MAX} and --seeds 1–{SEEDS_MAX}");
        return ExitCode::from(2);
    }
    let defects = match args.inject.as_deref() {
        None => Defects::default(),
        Some("sync-lies") => Defects { sync_lies: true, ..Defects::default() },
        Some("ownership-check-off") => Defects { ownership_check_off: true, ..Defects::default() },
        Some(other) => {
            eprintln!("[STRATA-E1803] no defect {other} to inject; there are: sync-lies, ownership-check-off");
            return ExitCode::from(2);
        }
    };
    for seed in args.seed..args.seed.saturating_add(args.seeds) {
        match run_one(&args.scenario, seed, args.steps, defects) {
            Ok((json, _)) if args.json => println!("{json}"),
            Ok((_, line)) => println!("{line}"),
            Err(f) => {
                if args.json {
                    println!("{}", serde_json::to_string(&f).unwrap_or_default());
                }
                eprintln!("{f}");
                eprintln!("reproduce: {}", f.reproduce());
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}
