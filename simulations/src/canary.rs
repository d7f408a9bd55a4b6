//! Scenarios `canary`, `canary-regression` and `canary-marginal`: a candidate routing policy
//! rolled out through observe → shadow → canary 10% → 25% → 50% → on over a generated workload
//! in the five strata, with the real rollout deciders recording every routed unit and stage
//! change in the journal (on the crash disk), the real promotion gates evaluating each stage's
//! window of pairs, holds that spend extensions on Inconclusive (another window), and automatic
//! rollback on Fail or after the extensions.
//!
//! The workload: each unit has a stratum, and the simulated provider draws its baseline cost,
//! wall time, quality and rework; the candidate's outcome is the baseline's scaled by the
//! variant's effect (`canary`: clearly cheaper and faster; `canary-regression`: the same, but
//! quality drops in one stratum; `canary-marginal`: a saving close to the cost gate's
//! threshold), with noise. Both arms of a pair are simulated, so every result is synthetic: the
//! report says so, and at the end the simulated pairs are put to the real promotion (the
//! bundled synthetic corpus's tasks, one simulated pair per task of the same stratum), which
//! must refuse them.
//!
//! Invariants after every window: `gapless` and `chain`; `projection-rebuild` (the rollouts
//! projection folded from scratch equals the incremental one); `nested-exposure` (a unit the
//! candidate ran at one canary stage is exposed at every later stage) and `exposure-share` (the
//! share the candidate ran is the stage's within five standard deviations); `synthetic-never-
//! promotes` at the end.

use std::collections::BTreeMap;

use rand::Rng as _;
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use strata_engine::ce::json::sha256_tagged;
use strata_engine::ce::wire::rollout::STRATA;
use strata_engine::ports::Clock as _;
use strata_engine::promotion::gates::{self, Arm, Evaluation, Pair, Thresholds};
use strata_engine::promotion::promote::{self, CorpusId, Document};
use strata_engine::promotion::rollout::{self, Rollouts, Started};
use strata_engine::promotion::stages::{self, Action, Stage};
use strata_journal::{ExpectedVersion, Journal, StreamAppend};

use crate::store::CrashStore;
use crate::{Config, Failure, SeededIds, SimClock, component_rng};

/// The scenarios.
pub const NAMES: [&str; 3] = ["canary", "canary-regression", "canary-marginal"];

/// The rollout's name.
const ROLLOUT: &str = "sim-canary";
/// Most units one window routes.
pub const UNITS_PER_WINDOW_MAX: u64 = 1_000_000;
/// Bootstrap resamples per evaluation.
const RESAMPLES: usize = 200;
/// The bundled synthetic corpus, for the promotion check.
const CORPUS: &str = include_str!("../../corpus/synthetic.json");

/// The candidate's simulated effect.
#[derive(Clone, Copy, Debug)]
struct Effect {
    cost: f64,
    wall: f64,
    quality: f64,
    /// A stratum whose quality drops by this many points.
    regression: Option<(&'static str, f64)>,
    /// Chance a unit needs one rework round less.
    rework_saved: f64,
}

fn effect(name: &str) -> Effect {
    match name {
        "canary-regression" => Effect {
            cost: 0.6,
            wall: 0.75,
            quality: 0.0,
            regression: Some(("ui-integration", 25.0)),
            rework_saved: 0.2,
        },
        "canary-marginal" => Effect { cost: 0.75, wall: 0.85, quality: 0.0, regression: None, rework_saved: 0.2 },
        _ => Effect { cost: 0.6, wall: 0.75, quality: 0.0, regression: None, rework_saved: 0.2 },
    }
}

/// One evaluation window at a stage.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Window {
    /// The stage evaluated.
    pub stage: &'static str,
    /// Units routed in the window.
    pub units: u64,
    /// Units the candidate's decision ran for.
    pub exposed: u64,
    /// Pairs evaluated (the stage's windows so far).
    pub pairs: u64,
    /// Each gate's verdict, estimate and bounds.
    pub gates: Vec<GateResult>,
    /// What the rollout did.
    pub action: String,
    /// The stage after.
    pub to: &'static str,
    /// Why.
    pub reason: String,
}

/// One gate's result in a window.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct GateResult {
    /// The gate.
    pub gate: String,
    /// `Pass`, `Inconclusive`, `Error` or `Fail`.
    pub verdict: String,
    /// Point estimate.
    pub estimate: Option<f64>,
    /// One-sided 95% lower bound.
    pub lower_95: Option<f64>,
    /// One-sided 95% upper bound.
    pub upper_95: Option<f64>,
    /// The threshold, in the estimate's units.
    pub threshold: f64,
}

/// One simulated pair, for the report's scatter and distributions.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PairSample {
    /// Stratum.
    pub stratum: String,
    /// Baseline cost, micro-units.
    pub baseline_cost: u64,
    /// Candidate cost, micro-units.
    pub candidate_cost: u64,
    /// Baseline wall time, ms.
    pub baseline_wall: u64,
    /// Candidate wall time, ms.
    pub candidate_wall: u64,
}

/// Most pairs the report samples.
pub const PAIRS_SAMPLED_MAX: usize = 400;

/// The promotion check of the simulated pairs.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Promotion {
    /// Whether the real promotion promoted them (never).
    pub promote: bool,
    /// Its provenance gate's verdict.
    pub provenance: String,
    /// Why.
    pub reason: String,
}

/// What a run did and checked.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Report {
    /// The scenario.
    pub scenario: &'static str,
    /// Its seed.
    pub seed: u64,
    /// Every result is simulated.
    pub synthetic: bool,
    /// Units simulated.
    pub tasks: u64,
    /// The windows, in order.
    pub windows: Vec<Window>,
    /// Where the rollout ended.
    pub final_stage: &'static str,
    /// It was rolled back.
    pub rolled_back: bool,
    /// The simulated pairs put to the real promotion.
    pub promotion: Promotion,
    /// Every n-th simulated pair, at most [`PAIRS_SAMPLED_MAX`].
    pub pairs_sample: Vec<PairSample>,
    /// Invariant checks made.
    pub checks: u64,
    /// The journal's head at the end.
    pub head_seq: u64,
    /// Its hash, hex.
    pub head_hash: String,
}

struct Run {
    name: &'static str,
    cfg: Config,
    journal: Journal,
    state: Rollouts,
    cursor: u64,
    checked_to: u64,
    rng: ChaCha8Rng,
    ids: SeededIds,
    clock: SimClock,
    effect: Effect,
    salt: String,
    next_unit: u64,
    /// Units the candidate ran for, by stage.
    exposed: BTreeMap<Stage, Vec<String>>,
    /// Every simulated pair, by stratum (for the promotion check).
    pool: BTreeMap<String, Vec<Pair>>,
    report: Report,
    step: u64,
}

/// Runs scenario `name` (one of [`NAMES`]): `cfg.steps` is the pairs each evaluation window
/// aims at (shadow pairs every unit; a canary stage routes `steps` ÷ its share units).
pub fn run(name: &str, cfg: Config) -> Result<Report, Failure> {
    run_keeping_journal(name, cfg).map(|(r, _)| r)
}

/// [`run`], also returning the run's journal (closed, still readable), for tests that export it.
pub fn run_keeping_journal(name: &str, cfg: Config) -> Result<(Report, Journal), Failure> {
    let name: &'static str = NAMES.into_iter().find(|n| *n == name).unwrap_or(NAMES[0]);
    let fail0 = |invariant: &str, detail: String| Failure::new(name, &cfg, 0, invariant, detail);
    let (_disk, journal): (CrashStore, Journal) =
        CrashStore::open(cfg.defects).map_err(|e| fail0("open", e.to_string()))?;
    let mut r = Run {
        name,
        cfg,
        journal,
        state: Rollouts::default(),
        cursor: 0,
        checked_to: 0,
        rng: component_rng(cfg.seed, "canary/workload"),
        ids: SeededIds::new(component_rng(cfg.seed, "canary/ids").random()),
        clock: SimClock::new(1_795_000_000_000_000_000),
        effect: effect(name),
        salt: format!("sim-{}", cfg.seed),
        next_unit: 0,
        exposed: BTreeMap::new(),
        pool: BTreeMap::new(),
        report: Report {
            scenario: name,
            seed: cfg.seed,
            synthetic: true,
            tasks: 0,
            windows: Vec::new(),
            final_stage: "off",
            rolled_back: false,
            promotion: Promotion { promote: false, provenance: String::new(), reason: String::new() },
            pairs_sample: Vec::new(),
            checks: 0,
            head_seq: 0,
            head_hash: String::new(),
        },
        step: 0,
    };
    r.start()?;
    // Windows at the current stage: its pairs accumulate until the stage changes.
    let mut pairs: Vec<Pair> = Vec::new();
    let mut stage = r.stage();
    while matches!(stage, Stage::Shadow | Stage::Canary10 | Stage::Canary25 | Stage::Canary50) {
        r.step += 1;
        // Enough units that the candidate runs for about `steps` of them.
        let share = u64::from(stage.exposure_bps()).max(1);
        let units = if stage == Stage::Shadow { cfg.steps } else { cfg.steps.saturating_mul(10_000).div_ceil(share) };
        let (units, exposed, mut window) = r.window(stage, units.clamp(1, UNITS_PER_WINDOW_MAX))?;
        pairs.append(&mut window);
        let evaluation =
            gates::evaluate(&pairs, &Thresholds::default(), &format!("sim-{}-{}", cfg.seed, r.step), RESAMPLES)
                .map_err(|e| r.fail("evaluation", e.to_string()))?;
        let (action, to, reason) = r.decide(stage, &evaluation)?;
        r.report.windows.push(Window {
            stage: stage.as_str(),
            units,
            exposed,
            pairs: pairs.len() as u64,
            gates: evaluation
                .gates
                .iter()
                .map(|g| GateResult {
                    gate: g.gate.to_owned(),
                    verdict: format!("{:?}", g.verdict),
                    estimate: g.estimate,
                    lower_95: g.lower_95,
                    upper_95: g.upper_95,
                    threshold: g.threshold,
                })
                .collect(),
            action: format!("{action:?}"),
            to: to.as_str(),
            reason,
        });
        r.check()?;
        if to != stage {
            pairs.clear();
        }
        stage = to;
    }
    r.report.final_stage = stage.as_str();
    r.report.rolled_back = stage == Stage::Off;
    r.report.promotion = r.promotion()?;
    let all: Vec<&Pair> = r.pool.values().flatten().collect();
    let every = all.len().div_ceil(PAIRS_SAMPLED_MAX).max(1);
    r.report.pairs_sample = all
        .iter()
        .step_by(every)
        .map(|p| PairSample {
            stratum: p.stratum.clone(),
            baseline_cost: p.baseline.cost_micros,
            candidate_cost: p.candidate.cost_micros,
            baseline_wall: p.baseline.wall_ms,
            candidate_wall: p.candidate.wall_ms,
        })
        .collect();
    if r.report.promotion.promote {
        return Err(r.fail("synthetic-never-promotes", "the real promotion promoted simulated pairs".to_owned()));
    }
    r.report.checks += 1;
    (r.report.head_seq, r.report.head_hash) = crate::invariants::finish(&r.journal);
    Ok((r.report, r.journal))
}

/// A uniform draw in (0, 1).
fn uniform(rng: &mut ChaCha8Rng) -> f64 {
    rng.random_range(f64::EPSILON..1.0)
}

/// `x` scaled by e^(spread·(u − ½)): multiplicative noise around 1.
fn jitter(rng: &mut ChaCha8Rng, x: f64, spread: f64) -> f64 {
    x * (spread * (uniform(rng) - 0.5)).exp()
}

impl Run {
    fn fail(&self, invariant: &str, detail: String) -> Failure {
        Failure::new(self.name, &self.cfg, self.step, invariant, detail)
    }

    fn stage(&self) -> Stage {
        self.state.get(ROLLOUT).map_or(Stage::Off, |r| r.stage)
    }

    /// Appends `decided` on the rollout's stream expecting its folded version, then folds.
    fn record(&mut self, decided: rollout::Decided) -> Result<(), Failure> {
        if decided.is_empty() {
            return Ok(());
        }
        let events =
            rollout::stamp(decided, &mut self.ids, &self.clock).map_err(|e| self.fail("record", e.to_string()))?;
        let append = StreamAppend {
            stream: rollout::stream(ROLLOUT),
            expected: ExpectedVersion::Exact(self.state.version(ROLLOUT)),
            events,
        };
        match self.journal.append_multi_blocking(vec![append]) {
            Ok(Ok(_)) => {}
            Ok(Err(c)) => return Err(self.fail("projection-rebuild", format!("the folded version is stale: {c}"))),
            Err(e) => return Err(self.fail("record", e.to_string())),
        }
        crate::invariants::follow(&self.journal, &mut self.state, &mut self.cursor)
            .map_err(|e| self.fail("projection-rebuild", e))
    }

    /// Starts the rollout and walks it by hand to shadow, where evaluations take over.
    fn start(&mut self) -> Result<(), Failure> {
        let s = Started {
            rollout: ROLLOUT.to_owned(),
            salt: self.salt.clone(),
            baseline: BTreeMap::from([("max_active_inherited".to_owned(), 2), ("max_nesting_depth".to_owned(), 1)]),
            candidate: BTreeMap::from([("max_active_inherited".to_owned(), 4), ("max_nesting_depth".to_owned(), 2)]),
            candidate_version: "sim-1".to_owned(),
            runtime_digest: format!("sha256:{}", "0".repeat(64)),
        };
        let started = rollout::start(&self.state, s).map_err(|e| self.fail("record", e.to_string()))?;
        self.record(started)?;
        for reason in ["observe the baseline", "shadow the candidate"] {
            let d = rollout::operate(&self.state, ROLLOUT, Action::Advance, reason)
                .map_err(|e| self.fail("record", e.to_string()))?;
            self.record(d)?;
        }
        Ok(())
    }

    /// Routes `n` new units at `stage` (recording each) and simulates their pairs: every unit
    /// at shadow (the candidate's arm is the shadow estimate), the exposed ones at a canary
    /// stage. Returns units, exposed units and the pairs.
    fn window(&mut self, stage: Stage, n: u64) -> Result<(u64, u64, Vec<Pair>), Failure> {
        let mut pairs = Vec::new();
        let mut exposed = 0u64;
        let mut batch: rollout::Decided = Vec::new();
        for _ in 0..n {
            self.next_unit += 1;
            self.clock.advance(1_000_000);
            let stratum = STRATA[self.rng.random_range(0..STRATA.len())];
            let unit = format!("anon-{:016x}", self.next_unit ^ (self.cfg.seed << 32));
            let facts = json!({
                "role": if stratum == "ui-integration" { "ui-builder" } else { "backend-builder" },
                "owned_files": [format!("src/{stratum}/{unit}.rs")],
                "capsule_sufficient": true,
                "trivial": stratum == "small-tier2" && self.rng.random_bool(0.3),
            });
            let (routed, events) =
                rollout::route(&self.state, ROLLOUT, &unit, &facts).map_err(|e| self.fail("record", e.to_string()))?;
            batch.extend(events);
            let candidate_ran = routed.executed == "candidate";
            if candidate_ran {
                exposed += 1;
                self.exposed.entry(stage).or_default().push(unit.clone());
            }
            let pair = self.pair(&unit, stratum);
            self.pool.entry(stratum.to_owned()).or_default().push(pair.clone());
            if stage == Stage::Shadow || candidate_ran {
                pairs.push(pair);
            }
            if batch.len() >= 256 {
                self.record(std::mem::take(&mut batch))?;
            }
        }
        self.record(batch)?;
        self.report.tasks += n;
        Ok((n, exposed, pairs))
    }

    /// Both arms of a unit, simulated.
    fn pair(&mut self, unit: &str, stratum: &str) -> Pair {
        let scale = match stratum {
            "small-tier2" => 0.4,
            "security-compliance" => 1.6,
            "recovery-invalidation" => 1.3,
            _ => 1.0,
        };
        let e = self.effect;
        let rng = &mut self.rng;
        let base_cost = jitter(rng, 400_000.0 * scale, 1.5).round().max(1.0);
        let base_wall = jitter(rng, 90_000.0 * scale, 1.0).round().max(1.0);
        let quality: f64 = 80.0 + 15.0 * uniform(rng);
        let drop = e.regression.filter(|(s, _)| *s == stratum).map_or(0.0, |(_, d)| d);
        let cand_quality = (quality + e.quality - drop + 3.0 * (uniform(rng) - 0.5)).clamp(0.0, 100.0);
        let arm = |rng: &mut ChaCha8Rng, cost: f64, wall: f64, quality: f64| Arm {
            cost_micros: cost.max(1.0) as u64,
            wall_ms: wall.max(1.0) as u64,
            quality: quality.round(),
            rework: rng.random_range(0..3),
            findings: Vec::new(),
            // The events' telemetry accounts within a percent of the bill.
            telemetry_cost_micros: Some(jitter(rng, cost.max(1.0), 0.02).round().max(1.0) as u64),
        };
        let baseline = arm(rng, base_cost, base_wall, quality);
        let cand_cost = jitter(rng, base_cost * e.cost, 0.3).round();
        let cand_wall = jitter(rng, base_wall * e.wall, 0.3).round();
        let mut candidate = arm(rng, cand_cost, cand_wall, cand_quality);
        // The candidate reworks as often as the baseline, now and then once less.
        candidate.rework = baseline.rework.saturating_sub(u32::from(rng.random_bool(e.rework_saved)));
        Pair { task_id: unit.to_owned(), stratum: stratum.to_owned(), baseline, candidate }
    }

    /// The rollout's decision on `evaluation` at `stage`, recorded.
    fn decide(&mut self, stage: Stage, evaluation: &Evaluation) -> Result<(Action, Stage, String), Failure> {
        let doc = Document {
            schema: promote::SCHEMA,
            engine_version: "simulation".to_owned(),
            corpus: CorpusId {
                name: "simulated-workload".to_owned(),
                version: format!("seed-{}", self.cfg.seed),
                digest: format!("sha256:{}", "0".repeat(64)),
                synthetic: true,
            },
            pairs_digest: format!("sha256:{}", "0".repeat(64)),
            cost_basis: None,
            // The rollout fold advances past shadow only on an evaluation that names its
            // measurement run: here a simulated one, named as such, in the simulation's own
            // journal. The real promotion refuses these pairs (see `promotion`).
            measurement_run_id: Some(format!("simulated-{}-{}", self.cfg.seed, self.step)),
            stage: Some(stage),
            action: Some(stages::decide(stage, evaluation)),
            evaluation: evaluation.clone(),
        };
        let mut change =
            rollout::evaluated(&self.state, ROLLOUT, &doc).map_err(|e| self.fail("record", e.to_string()))?;
        if let Some(ev) = change.evaluation.as_mut() {
            ev.digest = sha256_tagged(&serde_json::to_vec(&doc).unwrap_or_default());
        }
        let out = (change.action, change.to, change.reason.clone());
        self.record(rollout::changed_event(&change))?;
        Ok(out)
    }

    fn check(&mut self) -> Result<(), Failure> {
        self.report.checks += 4;
        self.checked_to =
            crate::invariants::gapless(&self.journal, self.checked_to + 1).map_err(|e| self.fail("gapless", e))?;
        crate::invariants::chain(&self.journal).map_err(|e| self.fail("chain", e))?;
        crate::invariants::rebuild_matches(&self.journal, &self.state, "the rollouts")
            .map_err(|e| self.fail("projection-rebuild", e))?;
        // Exposure: nested across stages, and the stage's share.
        for (stage, units) in &self.exposed {
            for later in [Stage::Canary25, Stage::Canary50, Stage::On].into_iter().filter(|s| s > stage) {
                if let Some(u) = units.iter().find(|u| !stages::exposed(&self.salt, u, later)) {
                    return Err(self.fail(
                        "nested-exposure",
                        format!("{u} ran the candidate at {} but is not exposed at {}", stage.as_str(), later.as_str()),
                    ));
                }
            }
        }
        if let Some(w) = self.report.windows.last().filter(|w| w.stage.starts_with("canary")) {
            let share = f64::from(Stage::parse(w.stage).map_or(0, Stage::exposure_bps)) / 10_000.0;
            let n = w.units as f64;
            let sd = (n * share * (1.0 - share)).sqrt();
            if (w.exposed as f64 - n * share).abs() > 5.0 * sd + 1.0 {
                return Err(
                    self.fail("exposure-share", format!("{} of {} units exposed at {}", w.exposed, w.units, w.stage))
                );
            }
        }
        Ok(())
    }

    /// The simulated pairs, one per task of the bundled synthetic corpus (same stratum), put
    /// to the real promotion: it must refuse them.
    fn promotion(&mut self) -> Result<Promotion, Failure> {
        let corpus: Value = serde_json::from_str(CORPUS).map_err(|e| self.fail("promotion", e.to_string()))?;
        let report =
            strata_engine::promotion::corpus::check(&corpus).map_err(|e| self.fail("promotion", e.to_string()))?;
        let tasks = corpus["tasks"].as_array().cloned().unwrap_or_default();
        let mut taken: BTreeMap<String, usize> = BTreeMap::new();
        let mut pairs = Vec::new();
        for t in &tasks {
            let stratum = t["stratum"].as_str().unwrap_or_default().to_owned();
            let i = taken.entry(stratum.clone()).or_default();
            let Some(p) = self.pool.get(&stratum).and_then(|v| v.get(*i)) else { continue };
            *i += 1;
            let arm = |a: &Arm| json!({"cost_micros": a.cost_micros, "wall_ms": a.wall_ms, "quality": a.quality, "rework": a.rework, "findings": [], "telemetry_cost_micros": null});
            pairs.push(json!({
                "task_id": t["id"], "stratum": stratum,
                "provenance": {"kind": "synthetic", "empirical": false, "promotion_authorized": false},
                "baseline": arm(&p.baseline), "candidate": arm(&p.candidate),
            }));
        }
        let doc = json!({
            "schema": strata_engine::promotion::pairs::SCHEMA,
            "corpus": {"name": corpus["name"], "version": corpus["version"], "digest": report.digest},
            "pairs": pairs,
        });
        let keys = strata_engine::promotion::envelope::TrustedKeys::default();
        let opts = promote::Options {
            thresholds: Thresholds::default(),
            resamples: RESAMPLES,
            evaluation_id: Some("sim-promotion"),
            stage: None,
            expected: strata_engine::promotion::envelope::Expected {
                now_ns: i128::from(self.clock.now_ns()),
                candidate_version: "sim-1",
                corpus_version: "",
                runtime_digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000",
                keys: &keys,
            },
            engine_version: "simulation",
            recordable: false,
        };
        let (document, _) = promote::evaluate(&corpus, &doc, None, &opts, &|_| None)
            .map_err(|e| self.fail("promotion", e.to_string()))?;
        let provenance = document.evaluation.gates.iter().find(|g| g.gate == "provenance");
        Ok(Promotion {
            promote: document.evaluation.promote,
            provenance: provenance.map(|g| format!("{:?}", g.verdict)).unwrap_or_default(),
            reason: provenance.map(|g| g.reason.clone()).unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Defects;

    fn cfg(seed: u64, units: u64) -> Config {
        Config { seed, steps: units, defects: Defects::default() }
    }

    #[test]
    fn a_clearly_better_candidate_reaches_on_and_its_simulated_pairs_still_never_promote() {
        let r = run("canary", cfg(1, 200)).unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(r.final_stage, "on", "{:#?}", r.windows);
        let stages: Vec<&str> = r.windows.iter().map(|w| w.stage).collect();
        for s in ["shadow", "canary-10", "canary-25", "canary-50"] {
            assert!(stages.contains(&s), "{stages:?}");
        }
        assert!(r.synthetic);
        assert!(!r.promotion.promote, "simulated pairs never promote");
        assert_eq!(r.promotion.provenance, "Fail", "{}", r.promotion.reason);
        assert!(r.promotion.reason.contains("synthetic"), "{}", r.promotion.reason);
        assert_eq!(r, run("canary", cfg(1, 200)).expect("again"), "the same seed, the same rollout");
    }

    #[test]
    fn a_quality_regression_in_one_stratum_is_rolled_back() {
        let r = run("canary-regression", cfg(2, 200)).unwrap_or_else(|f| panic!("{f}"));
        assert!(r.rolled_back && r.final_stage == "off", "{:#?}", r.windows);
        let last = r.windows.last().expect("a window");
        assert_eq!(last.action, "Rollback");
        assert!(last.gates.iter().any(|g| g.gate == "quality" && g.verdict == "Fail"), "{last:#?}");
    }

    #[test]
    fn a_marginal_candidate_holds_on_extensions_before_it_is_decided() {
        let r = run("canary-marginal", cfg(3, 200)).unwrap_or_else(|f| panic!("{f}"));
        assert!(r.windows.iter().any(|w| w.action == "Hold"), "{:#?}", r.windows);
        assert_ne!(r.final_stage, "on", "a marginal candidate does not reach on: {:#?}", r.windows);
    }
}
