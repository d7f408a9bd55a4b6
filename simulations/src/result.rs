//! One scenario run as a result document (`strata.simulation-result/v1`, schema in
//! `schemas/simulation-result.schema.json`): what was simulated, the faults injected, the
//! invariants checked, the rollout's windows when there is one, and the provenance (seed, head
//! hash, the reproduction command). Both front ends (`strata-simulations` and `strata simulate`)
//! print it and the HTML report is drawn from it.

use serde_json::{Value, json};

use crate::{Config, Failure, canary, coordinator_faults, journal_crash, ownership_storm};

/// The result document's schema id.
pub const SCHEMA: &str = "strata.simulation-result/v1";

/// Every scenario's name.
pub const SCENARIOS: [&str; 6] = [
    journal_crash::NAME,
    ownership_storm::NAME,
    coordinator_faults::NAME,
    canary::NAMES[0],
    canary::NAMES[1],
    canary::NAMES[2],
];

/// A finished run: its result document and a one-line summary.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The `strata.simulation-result/v1` document.
    pub result: Value,
    /// One line for a terminal.
    pub line: String,
}

fn reproduce(scenario: &str, cfg: &Config) -> String {
    Failure::new(scenario_name(scenario), cfg, 0, "", String::new()).reproduce()
}

fn scenario_name(name: &str) -> &'static str {
    SCENARIOS.into_iter().find(|s| *s == name).unwrap_or(journal_crash::NAME)
}

fn document(scenario: &str, cfg: &Config, head: (u64, &str), faults: Value, invariants: (u64, &[&str])) -> Value {
    json!({
        "schema": SCHEMA,
        "scenario": scenario,
        "seed": cfg.seed,
        "steps": cfg.steps,
        "synthetic": true,
        "reproduce": reproduce(scenario, cfg),
        "head": {"seq": head.0, "hash": head.1},
        "faults": faults,
        "invariants": {"checks": invariants.0, "checked": invariants.1},
        "measures": {},
        "rollout": null,
    })
}

/// Runs `scenario` (one of [`SCENARIOS`]) and returns its journal (closed, still readable), so a
/// test can export it and import it again.
pub fn journal(scenario: &str, cfg: Config) -> Result<strata_journal::Journal, Failure> {
    Ok(match scenario {
        journal_crash::NAME => journal_crash::run_keeping_journal(cfg)?.1,
        ownership_storm::NAME => ownership_storm::run_keeping_journal(cfg)?.1,
        coordinator_faults::NAME => coordinator_faults::run_keeping_journal(cfg)?.1,
        name => canary::run_keeping_journal(name, cfg)?.1,
    })
}

/// Runs `scenario` (one of [`SCENARIOS`]); a broken invariant is the [`Failure`].
pub fn run(scenario: &str, cfg: Config) -> Result<Outcome, Failure> {
    match scenario {
        journal_crash::NAME => {
            let r = journal_crash::run(cfg)?;
            let mut doc = document(
                scenario,
                &cfg,
                (r.head_seq, &r.head_hash),
                json!({"power losses": r.crashes, "unsynced writes kept": r.kept_unsynced, "torn writes discarded": r.torn, "flush failures": r.flush_failures, "stale appends": r.conflicts, "retried appends": r.retries}),
                (r.checks, &["gapless", "chain", "acknowledged-survive", "conflicts-detected", "retries-idempotent"]),
            );
            doc["measures"] = json!({"appends acknowledged": r.acknowledged, "steps": r.steps});
            let line = format!(
                "{} seed {}: {} steps, {} appends acknowledged, {} conflicts refused, {} retries deduplicated, {} crashes \
                 ({} unsynced writes kept, {} torn discarded), {} flush failures; {} invariant checks passed; head {} {}",
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
            Ok(Outcome { result: doc, line })
        }
        ownership_storm::NAME => {
            let r = ownership_storm::run(cfg)?;
            let mut doc = document(
                scenario,
                &cfg,
                (r.head_seq, &r.head_hash),
                json!({"power losses": r.crashes, "overlapping claims": r.conflicts}),
                (r.checks, &["exclusive-ownership", "conflict-routed", "projection-rebuild", "gapless", "chain"]),
            );
            doc["measures"] =
                json!({"claims granted": r.claims, "releases": r.releases, "most owners at once": r.peak_owners});
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
            Ok(Outcome { result: doc, line })
        }
        coordinator_faults::NAME => {
            let r = coordinator_faults::run(cfg)?;
            let mut doc = document(
                scenario,
                &cfg,
                (r.head_seq, &r.head_hash),
                json!({
                    "coordinator crashes": r.crashes,
                    "workers abandoned": r.abandoned,
                    "provider outages": r.outages,
                    "starts refused in an outage": r.refused_starts,
                    "latency spikes": r.spikes,
                    "deliveries duplicated": r.duplicate_deliveries,
                    "deliveries late": r.late_deliveries,
                    "continuations whose lease had ended": r.cold_continuations,
                    "knowledge changes (stale capsules)": r.knowledge_deltas,
                }),
                (
                    r.checks,
                    &[
                        "gapless",
                        "exclusive-ownership",
                        "one-lease-holder",
                        "no-stale-resume",
                        "retry-backoff",
                        "start-once",
                        "projection-rebuild",
                        "chain",
                    ],
                ),
            );
            doc["measures"] = json!({
                "simulated seconds": r.steps,
                "attempts dispatched": r.dispatches,
                "warm sessions resumed": r.resumes,
                "stale warm sessions reconciled": r.reconciliations,
                "retries after a backoff": r.backoffs,
                "tasks lost to an outage": r.lost_to_outages,
                "tasks completed": r.completed,
                "tasks failed": r.failed,
                "tasks held": r.held,
                "workgroup finished": u64::from(r.finished),
            });
            let line = format!(
                "{} seed {}: {} simulated s, {} dispatches, {} completed, {} failed, {} held{}; {} crashes ({} workers \
                 abandoned), {} outages ({} starts refused, {} tasks lost), {} retries after a backoff, {} latency spikes, {} duplicated and {} late deliveries, {} \
                 knowledge changes; {} warm sessions resumed ({} reconciled); {} invariant checks passed; head {} {}",
                r.scenario,
                r.seed,
                r.steps,
                r.dispatches,
                r.completed,
                r.failed,
                r.held,
                if r.finished { "" } else { " (not finished within the steps)" },
                r.crashes,
                r.abandoned,
                r.outages,
                r.refused_starts,
                r.lost_to_outages,
                r.backoffs,
                r.spikes,
                r.duplicate_deliveries,
                r.late_deliveries,
                r.knowledge_deltas,
                r.resumes,
                r.reconciliations,
                r.checks,
                r.head_seq,
                r.head_hash
            );
            Ok(Outcome { result: doc, line })
        }
        name if canary::NAMES.contains(&name) => {
            let r = canary::run(name, cfg)?;
            let mut doc = document(
                scenario,
                &cfg,
                (r.head_seq, &r.head_hash),
                json!({
                    "holds (extensions)": r.windows.iter().filter(|w| w.action == "Hold").count(),
                    "rollbacks": u64::from(r.rolled_back),
                }),
                (
                    r.checks,
                    &[
                        "gapless",
                        "chain",
                        "projection-rebuild",
                        "nested-exposure",
                        "exposure-share",
                        "synthetic-never-promotes",
                    ],
                ),
            );
            doc["measures"] = json!({"tasks simulated": r.tasks, "windows": r.windows.len()});
            doc["rollout"] = json!({
                "windows": r.windows,
                "final_stage": r.final_stage,
                "rolled_back": r.rolled_back,
                "promotion": r.promotion,
                "pairs_sample": r.pairs_sample,
            });
            let path: Vec<String> = r.windows.iter().map(|w| format!("{} {} → {}", w.stage, w.action, w.to)).collect();
            let line = format!(
                "{} seed {}: {} tasks simulated (synthetic); {}; ended at {}{}; the real promotion refused the simulated \
                 pairs (provenance {}); {} invariant checks passed; head {} {}",
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
            Ok(Outcome { result: doc, line })
        }
        other => Err(Failure {
            scenario: "none",
            seed: cfg.seed,
            step: 0,
            invariant: "scenario".to_owned(),
            detail: format!("no scenario {other}; the scenarios are: {}", SCENARIOS.join(", ")),
            args: String::new(),
        }),
    }
}
