//! Rollout stages: off → observe → shadow → canary 10% → 25% → 50% → on, with hold and
//! rollback, as one transition table; deterministic bucketing with one salt per rollout, so
//! exposure sets are nested (10% ⊆ 25% ⊆ 50%); and the policy that turns an evaluation into
//! advance, hold or roll back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::gates::{Evaluation, Verdict};

/// A stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// The candidate policy is not consulted.
    Off,
    /// Baseline runs and telemetry only.
    Observe,
    /// Both policies decide every unit; only the baseline's decision runs.
    Shadow,
    /// The candidate runs for 10% of units.
    #[serde(rename = "canary-10")]
    Canary10,
    /// 25%.
    #[serde(rename = "canary-25")]
    Canary25,
    /// 50%.
    #[serde(rename = "canary-50")]
    Canary50,
    /// The candidate runs for every unit.
    On,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 7] =
        [Stage::Off, Stage::Observe, Stage::Shadow, Stage::Canary10, Stage::Canary25, Stage::Canary50, Stage::On];

    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Off => "off",
            Stage::Observe => "observe",
            Stage::Shadow => "shadow",
            Stage::Canary10 => "canary-10",
            Stage::Canary25 => "canary-25",
            Stage::Canary50 => "canary-50",
            Stage::On => "on",
        }
    }

    /// The stage named `s`.
    pub fn parse(s: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// Share of units the candidate runs for, basis points.
    pub fn exposure_bps(self) -> u16 {
        match self {
            Stage::Off | Stage::Observe | Stage::Shadow => 0,
            Stage::Canary10 => 1_000,
            Stage::Canary25 => 2_500,
            Stage::Canary50 => 5_000,
            Stage::On => 10_000,
        }
    }
}

/// What an operator or the policy asks of a rollout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// To the next stage.
    Advance,
    /// Stay, gathering more evidence.
    Hold,
    /// Back to off: the candidate stops running.
    Rollback,
}

/// The transition table: (from, action) → to. Holding keeps the stage; rolling back from any
/// stage but off goes to off; `on` has no next stage.
pub const TRANSITIONS: [(Stage, Action, Stage); 19] = [
    (Stage::Off, Action::Advance, Stage::Observe),
    (Stage::Observe, Action::Advance, Stage::Shadow),
    (Stage::Shadow, Action::Advance, Stage::Canary10),
    (Stage::Canary10, Action::Advance, Stage::Canary25),
    (Stage::Canary25, Action::Advance, Stage::Canary50),
    (Stage::Canary50, Action::Advance, Stage::On),
    (Stage::Observe, Action::Hold, Stage::Observe),
    (Stage::Shadow, Action::Hold, Stage::Shadow),
    (Stage::Canary10, Action::Hold, Stage::Canary10),
    (Stage::Canary25, Action::Hold, Stage::Canary25),
    (Stage::Canary50, Action::Hold, Stage::Canary50),
    (Stage::On, Action::Hold, Stage::On),
    (Stage::Off, Action::Hold, Stage::Off),
    (Stage::Observe, Action::Rollback, Stage::Off),
    (Stage::Shadow, Action::Rollback, Stage::Off),
    (Stage::Canary10, Action::Rollback, Stage::Off),
    (Stage::Canary25, Action::Rollback, Stage::Off),
    (Stage::Canary50, Action::Rollback, Stage::Off),
    (Stage::On, Action::Rollback, Stage::Off),
];

/// The stage `action` leads to from `from`, if the table has the transition.
pub fn next(from: Stage, action: Action) -> Option<Stage> {
    TRANSITIONS.iter().find(|(f, a, _)| *f == from && *a == action).map(|(_, _, to)| *to)
}

/// The unit's bucket in 0..10,000: the first eight bytes of SHA-256("{salt}.{unit_id}"),
/// big-endian, modulo 10,000. Stable across platforms, versions and runs.
pub fn bucket_bps(salt: &str, unit_id: &str) -> u16 {
    let digest = Sha256::digest(format!("{salt}.{unit_id}").as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(head) % 10_000) as u16
}

/// Whether the candidate runs for `unit_id` at `stage` (a fixed salt makes the sets nested).
pub fn exposed(salt: &str, unit_id: &str, stage: Stage) -> bool {
    bucket_bps(salt, unit_id) < stage.exposure_bps()
}

/// Exactly ⌈share · n⌉ units of each stratum, those with the smallest buckets: for a small
/// corpus, where hash bucketing is lumpy (40 tasks at 10% expose none 1.5% of the time). Still
/// deterministic and nested across stages. Returns the exposed unit ids, sorted.
pub fn stratified_exposure(salt: &str, units: &[(String, String)], stage: Stage) -> Vec<String> {
    let mut by_stratum: BTreeMap<&str, Vec<(u16, &str)>> = BTreeMap::new();
    for (unit, stratum) in units {
        by_stratum.entry(stratum.as_str()).or_default().push((bucket_bps(salt, unit), unit.as_str()));
    }
    let bps = u64::from(stage.exposure_bps());
    let mut out: Vec<String> = Vec::new();
    for list in by_stratum.values_mut() {
        list.sort();
        let take = (list.len() as u64 * bps).div_ceil(10_000) as usize;
        out.extend(list.iter().take(take).map(|(_, u)| (*u).to_owned()));
    }
    out.sort();
    out
}

/// The policy for an evaluation at `stage`: any Fail rolls back; promotion to `on` needs every
/// gate to Pass (Inconclusive holds, never promotes); earlier stages advance when no gate
/// fails and none is in error, and hold otherwise.
pub fn decide(stage: Stage, evaluation: &Evaluation) -> Action {
    let worst = evaluation.gates.iter().map(|g| g.verdict).max().unwrap_or(Verdict::Error);
    match (worst, stage) {
        (Verdict::Fail, _) => Action::Rollback,
        (_, Stage::On) => Action::Hold,
        (Verdict::Pass, _) => Action::Advance,
        (Verdict::Inconclusive, Stage::Canary50) => Action::Hold,
        (Verdict::Inconclusive, _) => Action::Advance,
        (Verdict::Error, _) => Action::Hold,
    }
}
