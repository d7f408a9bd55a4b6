//! The rollout selector of the wire protocol: which mode runs and what is recorded at each
//! stage (off, observe, shadow, canary, on), with the reference's deterministic canary bucket
//! (SHA-256 of the anonymous corpus id). strata's own rollouts use a salted, nested selector
//! (telemetry issue); this one stays wire-compatible.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::facts::Obj;
use crate::ce::error::{CeError, Code, fail};
use crate::ce::router::Mode;

/// Rollout stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// No routing changes, nothing recorded.
    Off,
    /// Record what ran.
    Observe,
    /// Also record the recommendation.
    Shadow,
    /// Execute the recommendation for a bucket of tasks.
    Canary,
    /// Execute the recommendation.
    On,
}

impl Stage {
    /// The stage named `s`.
    pub fn parse(s: &str) -> Option<Stage> {
        Some(match s {
            "off" => Stage::Off,
            "observe" => Stage::Observe,
            "shadow" => Stage::Shadow,
            "canary" => Stage::Canary,
            "on" => Stage::On,
            _ => return None,
        })
    }

    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Off => "off",
            Stage::Observe => "observe",
            Stage::Shadow => "shadow",
            Stage::Canary => "canary",
            Stage::On => "on",
        }
    }
}

/// The five strata of the evaluation corpus (task ids may be `<stratum>-NN`).
pub const STRATA: [&str; 5] =
    ["small-tier2", "backend-refactor", "ui-integration", "security-compliance", "recovery-invalidation"];

/// Whether `id` is an anonymous corpus id (`anon-<16–64 hex>` or `<stratum>-NN`).
pub fn is_corpus_id(id: &str) -> bool {
    if id.len() > 69 {
        return false;
    }
    if let Some(hex) = id.strip_prefix("anon-") {
        return (16..=64).contains(&hex.len()) && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    }
    STRATA.iter().any(|s| {
        id.strip_prefix(s)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// The canary bucket of `id`: the first 32 bits of its SHA-256 as a fraction of 2³², times 100.
pub fn bucket(id: &str) -> f64 {
    let d = Sha256::digest(id.as_bytes());
    let v = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
    f64::from(v) / 4_294_967_296.0 * 100.0
}

/// A selection.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// Stage.
    pub rollout: Stage,
    /// Whether the recommendation runs.
    pub execute_recommendation: bool,
    /// Record what ran.
    pub record_actual: bool,
    /// Record the recommendation.
    pub record_recommendation: bool,
    /// The mode that runs (`None` when the actual mode is unknown and not executing).
    pub selected_mode: Option<Mode>,
    /// The canary bucket, for canary.
    pub canary_bucket: Option<f64>,
}

impl Selection {
    /// The wire result.
    pub fn to_json(&self) -> Value {
        json!({
            "rollout": self.rollout.as_str(),
            "execute_recommendation": self.execute_recommendation,
            "record_actual": self.record_actual,
            "record_recommendation": self.record_recommendation,
            "selected_mode": self.selected_mode.map(Mode::as_str),
            "canary_bucket": self.canary_bucket,
        })
    }
}

/// The rollout facts, read from the wire.
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutFacts {
    /// Stage (default off).
    pub rollout: Stage,
    /// What would run without the optimiser.
    pub actual_mode: Option<Mode>,
    /// The optimiser's recommendation.
    pub recommended_mode: Option<Mode>,
    /// Canary percentage (default 10).
    pub canary_percent: f64,
    /// Anonymous corpus id.
    pub task_corpus_id: Option<String>,
}

fn mode(o: &Obj<'_>, key: &str) -> Result<Option<Mode>, CeError> {
    match o.string_or(key, Code::InvalidRollout)? {
        None => Ok(None),
        Some(s) => Mode::parse(s)
            .map(Some)
            .ok_or_else(|| CeError::new(Code::InvalidRollout, format!("{}: not a mode", o.path(key)))),
    }
}

impl RolloutFacts {
    /// Reads `input` of `rollout`.
    pub fn from_json(input: &Value) -> Result<RolloutFacts, CeError> {
        let o = Obj::of(input, "input", Code::InvalidRequest)?;
        let rollout = match o.string_or("rollout", Code::InvalidRollout)? {
            None => Stage::Off,
            Some(s) => Stage::parse(s).ok_or_else(|| {
                CeError::new(Code::InvalidRollout, "input.rollout: off, observe, shadow, canary or on")
            })?,
        };
        let recommended_mode = match mode(&o, "recommended_mode")? {
            Some(m) => Some(m),
            None => match o.object_or("recommendation", Code::InvalidRollout)? {
                Some(r) => mode(&r, "mode")?,
                None => None,
            },
        };
        Ok(RolloutFacts {
            rollout,
            actual_mode: mode(&o, "actual_mode")?,
            recommended_mode,
            canary_percent: o.number("canary_percent", Code::InvalidRollout)?.unwrap_or(10.0),
            task_corpus_id: o.string_or("task_corpus_id", Code::InvalidRollout)?.map(str::to_owned),
        })
    }
}

/// Selects what runs and what is recorded.
pub fn select(f: &RolloutFacts) -> Result<Selection, CeError> {
    let executable = matches!(f.rollout, Stage::Canary | Stage::On);
    if executable && f.recommended_mode.is_none() {
        return fail(Code::RolloutRecommendationRequired, "input.recommended_mode: canary and on execute it");
    }
    let mut s = Selection {
        rollout: f.rollout,
        execute_recommendation: false,
        record_actual: f.rollout >= Stage::Observe,
        record_recommendation: f.rollout >= Stage::Shadow,
        selected_mode: f.actual_mode,
        canary_bucket: None,
    };
    match f.rollout {
        Stage::Off | Stage::Observe | Stage::Shadow => {}
        Stage::Canary => {
            if !(f.canary_percent.is_finite() && (0.0..=100.0).contains(&f.canary_percent)) {
                return fail(Code::InvalidRollout, "input.canary_percent: a number from 0 to 100");
            }
            let Some(id) = f.task_corpus_id.as_deref().filter(|id| is_corpus_id(id)) else {
                return fail(Code::InvalidRollout, "input.task_corpus_id: canary needs an anonymous corpus id");
            };
            let b = bucket(id);
            s.canary_bucket = Some(b);
            s.execute_recommendation = b < f.canary_percent;
        }
        Stage::On => s.execute_recommendation = true,
    }
    if s.execute_recommendation {
        s.selected_mode = f.recommended_mode;
    }
    Ok(s)
}
