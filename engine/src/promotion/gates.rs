//! The promotion gates over a paired evaluation: each gate reports an estimate, one-sided 95%
//! bounds, its threshold, how many pairs it used, its method and a verdict. Promotion needs
//! every gate to pass; `Inconclusive` never promotes.
//!
//! Thresholds are basis points (or quality points) and verdicts compare ratios against limits
//! built from them, so a figure exactly at a threshold lands on the documented side rather than
//! on a rounding error: "reduction ≥ 25%" is "ratio ≤ 7500/10000", both correctly rounded from
//! exact integers.
//!
//! Beyond the reference evaluator: the p75 gate reads the tail it means (75% of tasks save at
//! least 15%: the 75th percentile of per-task cost ratios), quality and rework are paired, and
//! telemetry reconciliation covers both arms.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::stats;

/// The five strata every corpus must cover.
pub use crate::ce::wire::rollout::STRATA;
/// Fewest pairs in all.
pub const PAIRS_MIN: usize = 40;
/// Fewest pairs per stratum.
pub const STRATUM_MIN: usize = 8;
/// One-sided level of every bound.
pub const ALPHA: f64 = 0.05;
/// Most pairs one evaluation takes.
pub const PAIRS_MAX: usize = 100_000;

/// A security finding.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// Stable fingerprint.
    pub fingerprint: String,
    /// `low`, `medium`, `high` or `critical`.
    pub severity: String,
}

/// One arm's measurements of a task.
#[derive(Clone, Debug, PartialEq)]
pub struct Arm {
    /// Billed cost, micro-units of the currency (authoritative accounting).
    pub cost_micros: u64,
    /// Wall time, ms.
    pub wall_ms: u64,
    /// Quality score, points in [0, 100].
    pub quality: f64,
    /// Rework rounds.
    pub rework: u32,
    /// Security findings.
    pub findings: Vec<Finding>,
    /// Cost as the event telemetry accounted it, if reported.
    pub telemetry_cost_micros: Option<u64>,
}

/// A task measured under both arms.
#[derive(Clone, Debug, PartialEq)]
pub struct Pair {
    /// Anonymous task id (unique).
    pub task_id: String,
    /// One of [`STRATA`] (or an extra one).
    pub stratum: String,
    /// Baseline policy.
    pub baseline: Arm,
    /// Candidate policy.
    pub candidate: Arm,
}

/// Thresholds; [`Thresholds::stricter`] only ever tightens the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    /// Median cost reduction at least this (bp; default 2500).
    pub median_cost_bp: u32,
    /// 75% of tasks save at least this (bp; default 1500).
    pub p75_cost_bp: u32,
    /// p95 cost at most this much worse (bp; default 1000).
    pub p95_cost_worse_bp: u32,
    /// Median wall-time reduction at least this (bp; default 1500).
    pub median_wall_bp: u32,
    /// Mean paired quality drop at most this many points (default 2).
    pub quality_points: u32,
    /// Rework at most this much worse, relative (bp; default 500).
    pub rework_worse_bp: u32,
    /// Telemetry within this of billed, per arm (bp; default 200).
    pub reconciliation_bp: u32,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            median_cost_bp: 2500,
            p75_cost_bp: 1500,
            p95_cost_worse_bp: 1000,
            median_wall_bp: 1500,
            quality_points: 2,
            rework_worse_bp: 500,
            reconciliation_bp: 200,
        }
    }
}

impl Thresholds {
    /// The defaults, tightened by `asked` where it is stricter (floors up, ceilings down).
    pub fn stricter(asked: &Thresholds) -> Thresholds {
        let d = Thresholds::default();
        Thresholds {
            median_cost_bp: d.median_cost_bp.max(asked.median_cost_bp),
            p75_cost_bp: d.p75_cost_bp.max(asked.p75_cost_bp),
            p95_cost_worse_bp: d.p95_cost_worse_bp.min(asked.p95_cost_worse_bp),
            median_wall_bp: d.median_wall_bp.max(asked.median_wall_bp),
            quality_points: d.quality_points.min(asked.quality_points),
            rework_worse_bp: d.rework_worse_bp.min(asked.rework_worse_bp),
            reconciliation_bp: d.reconciliation_bp.min(asked.reconciliation_bp),
        }
    }
}

/// A gate's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Verdict {
    /// Confidently on the right side.
    Pass,
    /// The interval straddles the threshold: more evidence needed.
    Inconclusive,
    /// The gate could not be evaluated (insufficient corpus).
    Error,
    /// Confidently on the wrong side, or a veto broken.
    Fail,
}

/// One gate's report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gate {
    /// Gate id.
    pub gate: &'static str,
    /// Point estimate (absent when not computable).
    pub estimate: Option<f64>,
    /// One-sided 95% lower bound.
    pub lower_95: Option<f64>,
    /// One-sided 95% upper bound (absent when unbounded).
    pub upper_95: Option<f64>,
    /// The threshold, in the estimate's units.
    pub threshold: f64,
    /// Pairs used.
    pub n_used: usize,
    /// How the bounds were computed.
    pub method: &'static str,
    /// Verdict.
    pub verdict: Verdict,
    /// Why, in words.
    pub reason: String,
}

/// A refused input: it names the pair and the rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// No pairs, or more than [`PAIRS_MAX`].
    #[error("pairs: {0} given; an evaluation takes 1 to {PAIRS_MAX}")]
    Count(usize),
    /// A task id used twice or empty.
    #[error("pair {0}: task ids must be unique and non-empty")]
    TaskId(String),
    /// A value out of its range.
    #[error("pair {task}: {field} {why}")]
    Range {
        /// Task id.
        task: String,
        /// Field.
        field: &'static str,
        /// The rule.
        why: &'static str,
    },
}

/// The whole evaluation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Evaluation {
    /// Caller's evaluation id (seeds the bootstrap).
    pub evaluation_id: String,
    /// Thresholds applied.
    pub thresholds: Thresholds,
    /// Pairs.
    pub n_tasks: usize,
    /// Pairs per stratum.
    pub strata: BTreeMap<String, usize>,
    /// Bootstrap resamples.
    pub resamples: usize,
    /// Every gate, in a fixed order.
    pub gates: Vec<Gate>,
    /// True only if every gate passes.
    pub promote: bool,
}

fn check(pairs: &[Pair]) -> Result<(), InputError> {
    if pairs.is_empty() || pairs.len() > PAIRS_MAX {
        return Err(InputError::Count(pairs.len()));
    }
    let mut seen = BTreeSet::new();
    for p in pairs {
        if p.task_id.is_empty() || !seen.insert(p.task_id.as_str()) {
            return Err(InputError::TaskId(p.task_id.clone()));
        }
        let bad = |field, why| Err(InputError::Range { task: p.task_id.clone(), field, why });
        for (fields, a) in [
            (["baseline.cost_micros", "baseline.wall_ms", "baseline.quality"], &p.baseline),
            (["candidate.cost_micros", "candidate.wall_ms", "candidate.quality"], &p.candidate),
        ] {
            if a.cost_micros == 0 {
                return bad(fields[0], "must be > 0 (a ratio needs it)");
            }
            if a.wall_ms == 0 {
                return bad(fields[1], "must be > 0 (a ratio needs it)");
            }
            if !(0.0..=100.0).contains(&a.quality) {
                return bad(fields[2], "must be within 0..=100 points");
            }
        }
    }
    Ok(())
}

/// Evaluates `pairs` (sorted by task id first, so input order never matters).
pub fn evaluate(
    pairs: &[Pair],
    asked: &Thresholds,
    evaluation_id: &str,
    resamples: usize,
) -> Result<Evaluation, InputError> {
    check(pairs)?;
    let t = Thresholds::stricter(asked);
    let mut pairs: Vec<&Pair> = pairs.iter().collect();
    pairs.sort_by(|a, b| a.task_id.cmp(&b.task_id));
    let mut strata: BTreeMap<String, usize> = STRATA.iter().map(|s| ((*s).to_owned(), 0)).collect();
    for p in &pairs {
        *strata.entry(p.stratum.clone()).or_default() += 1;
    }
    let n = pairs.len();
    let sized = n >= PAIRS_MIN && STRATA.iter().all(|s| strata[*s] >= STRATUM_MIN);
    let seed = |gate: &str| -> [u8; 32] { Sha256::digest(format!("{evaluation_id}\u{0}{gate}")).into() };
    let by_stratum: Vec<Vec<&Pair>> = {
        let mut m: BTreeMap<&str, Vec<&Pair>> = BTreeMap::new();
        for p in &pairs {
            m.entry(p.stratum.as_str()).or_default().push(p);
        }
        m.into_values().collect()
    };
    let mut gates = vec![sample_gate(n, &strata, sized)];
    let statistical = [
        median_gate("median_cost", &pairs, |a| a.cost_micros, t.median_cost_bp),
        p75_gate(&by_stratum, t.p75_cost_bp, resamples, seed("p75_cost")),
        p95_gate(&by_stratum, t.p95_cost_worse_bp, resamples, seed("p95_cost")),
        median_gate("median_wall_time", &pairs, |a| a.wall_ms, t.median_wall_bp),
        quality_gate(&pairs, t.quality_points),
        rework_gate(&pairs, t.rework_worse_bp),
    ];
    for mut g in statistical {
        if !sized {
            g.verdict = Verdict::Error;
            g.reason = format!("insufficient corpus ({n} pairs; at least {PAIRS_MIN}, {STRATUM_MIN} per stratum)");
        }
        gates.push(g);
    }
    gates.push(security_gate(&pairs));
    gates.push(reconciliation_gate(&pairs, t.reconciliation_bp));
    let promote = gates.iter().all(|g| g.verdict == Verdict::Pass);
    Ok(Evaluation {
        evaluation_id: evaluation_id.to_owned(),
        thresholds: t,
        n_tasks: n,
        strata,
        resamples,
        gates,
        promote,
    })
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// A benefit gate "reduction ≥ θ" decided on ratio bounds: Pass if even the worst ratio bound
/// is within the limit, Fail if even the best is beyond it.
fn benefit(ratio_lo: f64, ratio_hi: f64, limit: f64) -> Verdict {
    if ratio_hi <= limit {
        Verdict::Pass
    } else if ratio_lo > limit {
        Verdict::Fail
    } else {
        Verdict::Inconclusive
    }
}

fn bp_limit(bp: u32, worse: bool) -> f64 {
    let bp = f64::from(bp);
    if worse { (10_000.0 + bp) / 10_000.0 } else { (10_000.0 - bp) / 10_000.0 }
}

fn sample_gate(n: usize, strata: &BTreeMap<String, usize>, sized: bool) -> Gate {
    let smallest = STRATA.iter().map(|s| strata[*s]).min().unwrap_or(0);
    Gate {
        gate: "sample_size",
        estimate: Some(n as f64),
        lower_95: None,
        upper_95: None,
        threshold: PAIRS_MIN as f64,
        n_used: n,
        method: "count",
        verdict: if sized { Verdict::Pass } else { Verdict::Fail },
        reason: format!("{n} pairs, smallest required stratum {smallest} (need {PAIRS_MIN} and {STRATUM_MIN} each)"),
    }
}

/// Median of per-task ratios c/b with sign-test order-statistic bounds.
fn median_gate(gate: &'static str, pairs: &[&Pair], of: impl Fn(&Arm) -> u64, bp: u32) -> Gate {
    let mut ratios: Vec<f64> = pairs.iter().map(|p| of(&p.candidate) as f64 / of(&p.baseline) as f64).collect();
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let limit = bp_limit(bp, false);
    let estimate = stats::quantile7(&ratios, 0.5).map(|m| 1.0 - m);
    let (verdict, lower, upper, reason) = match stats::sign_bounds(n as u64, ALPHA) {
        None => (Verdict::Inconclusive, None, None, "too few pairs to bound a median".to_owned()),
        Some((k, k_hi)) => {
            let (r_lo, r_hi) = (ratios[k - 1], ratios[k_hi - 1]);
            let v = benefit(r_lo, r_hi, limit);
            (v, Some(1.0 - r_hi), Some(1.0 - r_lo), format!("ratio order statistics {k} and {k_hi} of {n}"))
        }
    };
    Gate {
        gate,
        estimate,
        lower_95: lower,
        upper_95: upper,
        threshold: f64::from(bp) / 10_000.0,
        n_used: n,
        method: "median of per-task ratios; sign-test order-statistic bounds",
        verdict,
        reason,
    }
}

fn ratios_q(pairs: &[&Pair], q: f64) -> f64 {
    let mut r: Vec<f64> =
        pairs.iter().map(|p| p.candidate.cost_micros as f64 / p.baseline.cost_micros as f64).collect();
    r.sort_by(f64::total_cmp);
    stats::quantile7(&r, q).unwrap_or(f64::NAN)
}

/// 75% of tasks save at least θ: the 75th percentile of per-task cost ratios is at most 1 − θ.
fn p75_gate(by_stratum: &[Vec<&Pair>], bp: u32, resamples: usize, seed: [u8; 32]) -> Gate {
    let all: Vec<&Pair> = by_stratum.iter().flatten().copied().collect();
    let limit = bp_limit(bp, false);
    let q = ratios_q(&all, 0.75);
    let bounds = stats::bootstrap_bounds(by_stratum, resamples, seed, ALPHA, |s| ratios_q(s, 0.75));
    let (verdict, lower, upper) = match bounds {
        Some((lo, hi)) => (benefit(lo, hi, limit), Some(1.0 - hi), Some(1.0 - lo)),
        None => (Verdict::Inconclusive, None, None),
    };
    Gate {
        gate: "p75_cost",
        estimate: finite(1.0 - q),
        lower_95: lower,
        upper_95: upper,
        threshold: f64::from(bp) / 10_000.0,
        n_used: all.len(),
        method: "1 - p75 of per-task cost ratios (type 7); stratified paired bootstrap",
        verdict,
        reason: "75% of tasks must save at least the threshold".to_owned(),
    }
}

fn marginal_q95(pairs: &[&Pair]) -> f64 {
    let mut b: Vec<f64> = pairs.iter().map(|p| p.baseline.cost_micros as f64).collect();
    let mut c: Vec<f64> = pairs.iter().map(|p| p.candidate.cost_micros as f64).collect();
    b.sort_by(f64::total_cmp);
    c.sort_by(f64::total_cmp);
    match (stats::quantile7(&c, 0.95), stats::quantile7(&b, 0.95)) {
        (Some(c), Some(b)) if b > 0.0 => c / b,
        _ => f64::NAN,
    }
}

/// p95 cost no more than θ worse: Q95(candidate) / Q95(baseline) ≤ 1 + θ.
fn p95_gate(by_stratum: &[Vec<&Pair>], bp: u32, resamples: usize, seed: [u8; 32]) -> Gate {
    let all: Vec<&Pair> = by_stratum.iter().flatten().copied().collect();
    let limit = bp_limit(bp, true);
    let rho = marginal_q95(&all);
    let bounds = stats::bootstrap_bounds(by_stratum, resamples, seed, ALPHA, marginal_q95);
    let (verdict, lower, upper) = match bounds {
        Some((lo, hi)) => (benefit(lo, hi, limit), Some(lo - 1.0), Some(hi - 1.0)),
        None => (Verdict::Inconclusive, None, None),
    };
    let low_resolution = all.len() < 59;
    Gate {
        gate: "p95_cost",
        estimate: finite(rho - 1.0),
        lower_95: lower,
        upper_95: upper,
        threshold: f64::from(bp) / 10_000.0,
        n_used: all.len(),
        method: "Q95(candidate)/Q95(baseline) - 1 (type 7); stratified paired bootstrap",
        verdict,
        reason: if low_resolution {
            "fewer than 59 pairs: a p95 is poorly resolved".to_owned()
        } else {
            "the candidate's p95 cost may be at most the threshold worse".to_owned()
        },
    }
}

/// Mean paired quality change (candidate − baseline, points) with Student's t bounds.
fn quality_gate(pairs: &[&Pair], points: u32) -> Gate {
    let d: Vec<f64> = pairs.iter().map(|p| p.candidate.quality - p.baseline.quality).collect();
    let n = d.len() as f64;
    let mean = d.iter().sum::<f64>() / n;
    let threshold = -f64::from(points);
    let (lo, hi) = if d.len() < 2 {
        (f64::NEG_INFINITY, f64::INFINITY)
    } else {
        let var = d.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
        let half = stats::t_quantile(1.0 - ALPHA, n - 1.0) * (var / n).sqrt();
        (mean - half, mean + half)
    };
    let verdict = if lo >= threshold {
        Verdict::Pass
    } else if hi < threshold {
        Verdict::Fail
    } else {
        Verdict::Inconclusive
    };
    Gate {
        gate: "quality",
        estimate: Some(mean),
        lower_95: finite(lo),
        upper_95: finite(hi),
        threshold,
        n_used: d.len(),
        method: "mean paired difference in points; Student's t bounds",
        verdict,
        reason: "the candidate may lose at most the threshold in quality, paired per task".to_owned(),
    }
}

/// Rework ratio Σ candidate / Σ baseline with conditional binomial (Clopper–Pearson) bounds.
fn rework_gate(pairs: &[&Pair], bp: u32) -> Gate {
    let xc: u64 = pairs.iter().map(|p| u64::from(p.candidate.rework)).sum();
    let xb: u64 = pairs.iter().map(|p| u64::from(p.baseline.rework)).sum();
    let limit = bp_limit(bp, true);
    let (lo, hi) = stats::count_ratio_bounds(xc, xb, ALPHA);
    let (estimate, verdict, reason) = if xc + xb == 0 {
        (Some(1.0), Verdict::Pass, "no rework in either arm".to_owned())
    } else {
        let est = if xb == 0 { None } else { Some(xc as f64 / xb as f64) };
        let v = if hi <= limit {
            Verdict::Pass
        } else if lo > limit {
            Verdict::Fail
        } else {
            Verdict::Inconclusive
        };
        let note = if xb < 10 { "; low base rate" } else { "" };
        (est, v, format!("{xc} candidate and {xb} baseline rework rounds{note}"))
    };
    Gate {
        gate: "rework",
        estimate: estimate.map(|e| e - 1.0),
        lower_95: if xc + xb == 0 { None } else { finite(lo - 1.0) },
        upper_95: if xc + xb == 0 { None } else { finite(hi - 1.0) },
        threshold: f64::from(bp) / 10_000.0,
        n_used: pairs.len(),
        method: "ratio of total rework rounds - 1; conditional binomial (Clopper-Pearson) bounds",
        verdict,
        reason,
    }
}

/// No high or critical finding in the candidate that the baseline did not have (by
/// fingerprint): a veto.
fn security_gate(pairs: &[&Pair]) -> Gate {
    let severe = |a: &Arm| -> BTreeSet<String> {
        a.findings
            .iter()
            .filter(|f| matches!(f.severity.to_ascii_lowercase().as_str(), "high" | "critical"))
            .map(|f| f.fingerprint.clone())
            .collect()
    };
    let base: BTreeSet<String> = pairs.iter().flat_map(|p| severe(&p.baseline)).collect();
    let new: Vec<String> = pairs.iter().flat_map(|p| severe(&p.candidate)).filter(|f| !base.contains(f)).collect();
    Gate {
        gate: "security",
        estimate: Some(new.len() as f64),
        lower_95: None,
        upper_95: None,
        threshold: 0.0,
        n_used: pairs.len(),
        method: "set difference of high/critical finding fingerprints (veto)",
        verdict: if new.is_empty() { Verdict::Pass } else { Verdict::Fail },
        reason: if new.is_empty() {
            format!(
                "no new escape; a clean run bounds the escape rate below {:.1}% (95%)",
                100.0 * stats::zero_event_upper(pairs.len() as u64, ALPHA)
            )
        } else {
            format!("{} new high/critical finding(s)", new.len())
        },
    }
}

/// Telemetry-accounted cost within θ of billed cost, for each arm and each stratum, in integer
/// arithmetic (100·|Δ|·100 ≤ θ_bp·Σ billed); a pair without telemetry fails it (a veto).
fn reconciliation_gate(pairs: &[&Pair], bp: u32) -> Gate {
    let mut worst = 0.0f64;
    let mut failures = Vec::new();
    let mut groups: BTreeMap<(&str, &str), (i128, i128)> = BTreeMap::new();
    let mut missing = 0usize;
    // Offsetting errors cancel in a sum, so the largest single-task discrepancy is reported too
    // (compared exactly as |t − b| / b, cross-multiplied).
    let mut largest: Option<(u128, u128, &str, &str)> = None;
    for p in pairs {
        for (arm, a) in [("baseline", &p.baseline), ("candidate", &p.candidate)] {
            let Some(t) = a.telemetry_cost_micros else {
                missing += 1;
                continue;
            };
            let d = u128::from(t.abs_diff(a.cost_micros));
            let b = u128::from(a.cost_micros);
            if largest.is_none_or(|(ld, lb, _, _)| d * lb > ld * b) {
                largest = Some((d, b, arm, p.task_id.as_str()));
            }
            for key in [(arm, "all"), (arm, p.stratum.as_str())] {
                let g = groups.entry(key).or_default();
                g.0 += i128::from(t);
                g.1 += i128::from(a.cost_micros);
            }
        }
    }
    for ((arm, stratum), (tel, billed)) in &groups {
        let diff = (tel - billed).abs();
        worst = worst.max(diff as f64 / *billed as f64);
        if diff * 10_000 > i128::from(bp) * billed {
            failures.push(format!("{arm}/{stratum}"));
        }
    }
    let ok = missing == 0 && failures.is_empty();
    Gate {
        gate: "reconciliation",
        estimate: Some(worst),
        lower_95: None,
        upper_95: None,
        threshold: f64::from(bp) / 10_000.0,
        n_used: pairs.len(),
        method: "|telemetry - billed| / billed per arm and stratum, integer exact (veto)",
        verdict: if ok { Verdict::Pass } else { Verdict::Fail },
        reason: if missing > 0 {
            format!("{missing} arm measurement(s) without telemetry")
        } else if failures.is_empty() {
            let task = largest.map_or_else(String::new, |(d, b, arm, task)| {
                format!("; largest single task: {:.2}% ({arm} of {task})", d as f64 * 100.0 / b as f64)
            });
            format!("every arm and stratum reconciles{task}")
        } else {
            format!("beyond the threshold: {}", failures.join(", "))
        },
    }
}
