//! Hard caps on what a worker and a workgroup may spend: cost, input tokens, output tokens, wall
//! time and turns. A plan sets them per task and for the whole workgroup (`[caps.task]`,
//! `[caps.workgroup]`, a task's own `caps`), the workspace's `[context_efficiency.caps.*]` tables
//! set defaults, and the effective caps of each attempt are recorded in its `task.dispatched`, so
//! the worker's adapter, a replay and the simulation all read the same figures.
//!
//! Two kinds of boundary, as the seed draws them:
//!
//! * A task's cap is an **efficiency** budget. The worker is interrupted when its live usage
//!   reaches it (`worker.capped` records the measure, the cap and the figure seen), its partial
//!   work is kept as an artifact and never integrated, and the task continues once in a smaller
//!   mode: a fresh capsule, nothing resumed or inherited (`task.dispatched` names the cap it
//!   falls back after). A second cap fails the task.
//! * A workgroup's cap, an authentication failure and a storm of denied writes are **safety**
//!   boundaries: the workgroup is paused (`workgroup.paused`), nothing new is dispatched, the run
//!   ends with exit code 4, and `strata run --resume` continues after a person acted (raised the
//!   cap in the configuration, fixed the credentials, looked at the denials). A workgroup still
//!   over its cap pauses again at once.
//!
//! Unknown is never zero: a cost the provider does not report cannot reach a cost cap, so a plan
//! that caps cost on a provider that reports none is refused before anything runs
//! ([`super::preflight`]).

use serde::{Deserialize, Serialize};

use super::state::Workgroup;
use crate::telemetry::events::Counters;

/// Most turns a cap may allow.
pub const TURNS_MAX: u32 = 10_000;
/// Longest wall-time cap, seconds (a day).
pub const WALL_SECONDS_MAX: u64 = 86_400;
/// Largest token cap (10¹²).
pub const TOKENS_MAX: u64 = 1_000_000_000_000;
/// Largest cost cap, micro-USD (a million USD).
pub const COST_MICROS_MAX: u64 = 1_000_000_000_000;
/// Write-guard denials in one attempt that make a storm (a safety boundary).
pub const GUARD_STORM_DENIALS: u64 = 8;

/// A cost in USD, kept as micro-USD so that plans compare and hash exactly. Written as a number
/// of USD (`cost_usd = 2.5`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Usd(pub u64);

impl Serialize for Usd {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0 as f64 / 1e6)
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Usd, D::Error> {
        let usd = f64::deserialize(d)?;
        if !(usd.is_finite() && usd > 0.0 && usd * 1e6 <= COST_MICROS_MAX as f64) {
            return Err(serde::de::Error::custom("cost_usd: a number of USD above 0, at most 1,000,000"));
        }
        Ok(Usd((usd * 1e6).round() as u64))
    }
}

/// Caps as written in a plan or the configuration: every field optional.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapsSpec {
    /// Cost, USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<Usd>,
    /// Input tokens (uncached, cache writes and cache reads together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Wall time, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_seconds: Option<u64>,
    /// Model turns (assistant messages, as the worker's stream shows them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u32>,
}

impl CapsSpec {
    /// Field by field: this one's value where it has one, else `under`'s.
    pub fn over(self, under: CapsSpec) -> CapsSpec {
        CapsSpec {
            cost_usd: self.cost_usd.or(under.cost_usd),
            input_tokens: self.input_tokens.or(under.input_tokens),
            output_tokens: self.output_tokens.or(under.output_tokens),
            wall_seconds: self.wall_seconds.or(under.wall_seconds),
            turns: self.turns.or(under.turns),
        }
    }

    /// Whether no cap is set.
    pub fn is_empty(&self) -> bool {
        *self == CapsSpec::default()
    }

    /// The rule each set field breaks, as `(field, rule)`.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let range = |v: u64, max: u64| (1..=max).contains(&v);
        if let Some(v) = self.input_tokens.filter(|v| !range(*v, TOKENS_MAX)) {
            out.push(("input_tokens", format!("{v}: between 1 and {TOKENS_MAX}")));
        }
        if let Some(v) = self.output_tokens.filter(|v| !range(*v, TOKENS_MAX)) {
            out.push(("output_tokens", format!("{v}: between 1 and {TOKENS_MAX}")));
        }
        if let Some(v) = self.wall_seconds.filter(|v| !range(*v, WALL_SECONDS_MAX)) {
            out.push(("wall_seconds", format!("{v}: between 1 and {WALL_SECONDS_MAX}")));
        }
        if let Some(v) = self.turns.filter(|v| !(1..=TURNS_MAX).contains(v)) {
            out.push(("turns", format!("{v}: between 1 and {TURNS_MAX}")));
        }
        out
    }

    /// As resolved caps.
    pub fn caps(&self) -> Caps {
        Caps {
            cost_micros: self.cost_usd.map(|u| u.0),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            wall_ms: self.wall_seconds.map(|s| s.saturating_mul(1000)),
            turns: self.turns,
        }
    }
}

/// Caps as a plan carries them: a default for every task and a total for the workgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanCaps {
    /// Every task's caps, unless the task sets its own.
    #[serde(default, skip_serializing_if = "CapsSpec::is_empty")]
    pub task: CapsSpec,
    /// The workgroup's totals over all its attempts.
    #[serde(default, skip_serializing_if = "CapsSpec::is_empty")]
    pub workgroup: CapsSpec,
}

impl PlanCaps {
    /// Whether neither sets a cap.
    pub fn is_empty(&self) -> bool {
        self.task.is_empty() && self.workgroup.is_empty()
    }
}

/// Resolved caps of one attempt or one workgroup, as recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Caps {
    /// Cost, micro-USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_micros: Option<u64>,
    /// Input tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Wall time, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<u64>,
    /// Turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u32>,
}

impl Caps {
    /// Whether no cap is set.
    pub fn is_empty(&self) -> bool {
        *self == Caps::default()
    }
}

/// What a worker (or a workgroup) has spent so far: `None` is unknown, never zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spend {
    /// Cost, micro-USD.
    pub cost_micros: Option<u64>,
    /// Input tokens (uncached, cache writes and reads).
    pub input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
    /// Wall time, milliseconds.
    pub wall_ms: u64,
    /// Turns.
    pub turns: u32,
}

impl Spend {
    /// The spend a usage report shows, with `turns`.
    pub fn of(u: &Counters, turns: u32) -> Spend {
        let input = match (u.input_tokens, u.cache_creation_tokens, u.cache_read_tokens) {
            (None, None, None) => None,
            (a, b, c) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0)).saturating_add(c.unwrap_or(0))),
        };
        Spend {
            cost_micros: u.cost_micros,
            input_tokens: input,
            output_tokens: u.output_tokens,
            wall_ms: u.wall_ms.unwrap_or(0),
            turns,
        }
    }
}

/// A measure a cap is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Measure {
    /// Cost, micro-USD.
    Cost,
    /// Input tokens.
    InputTokens,
    /// Output tokens.
    OutputTokens,
    /// Wall time, milliseconds.
    WallTime,
    /// Turns.
    Turns,
}

impl Measure {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Measure::Cost => "cost",
            Measure::InputTokens => "input-tokens",
            Measure::OutputTokens => "output-tokens",
            Measure::WallTime => "wall-time",
            Measure::Turns => "turns",
        }
    }

    /// `value` with its unit, for people.
    pub fn show(self, value: u64) -> String {
        match self {
            Measure::Cost => format!("{:.4} USD", value as f64 / 1e6),
            Measure::InputTokens => format!("{value} input tokens"),
            Measure::OutputTokens => format!("{value} output tokens"),
            Measure::WallTime => format!("{:.1} s", value as f64 / 1000.0),
            Measure::Turns => format!("{value} turns"),
        }
    }
}

/// A cap reached: the measure, the cap and the figure seen when it was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reached {
    /// The measure.
    pub measure: Measure,
    /// The cap.
    pub limit: u64,
    /// The figure seen.
    pub observed: u64,
}

impl Reached {
    /// In words: "turns: 3 turns of 2 turns".
    pub fn describe(&self) -> String {
        format!(
            "{}: {} reached the cap of {}",
            self.measure.as_str(),
            self.measure.show(self.observed),
            self.measure.show(self.limit)
        )
    }
}

/// The first cap `spend` is over (turns and wall time at their cap count too: a worker at its
/// last allowed turn has no turn left), in [`Measure`] order. Token and cost caps are reached at
/// the cap; turns when a turn past the cap starts.
pub fn reached(caps: &Caps, spend: &Spend) -> Option<Reached> {
    let over = |measure, limit: Option<u64>, seen: Option<u64>, strict: bool| {
        let (limit, seen) = (limit?, seen?);
        let hit = if strict { seen > limit } else { seen >= limit };
        hit.then_some(Reached { measure, limit, observed: seen })
    };
    over(Measure::Cost, caps.cost_micros, spend.cost_micros, false)
        .or_else(|| over(Measure::InputTokens, caps.input_tokens, spend.input_tokens, false))
        .or_else(|| over(Measure::OutputTokens, caps.output_tokens, spend.output_tokens, false))
        .or_else(|| over(Measure::WallTime, caps.wall_ms, Some(spend.wall_ms), false))
        .or_else(|| over(Measure::Turns, caps.turns.map(u64::from), Some(u64::from(spend.turns)), true))
}

/// The caps of `task`'s attempts in `g`: the task's own, else the plan's task caps, else the
/// workspace configuration's, field by field.
pub fn for_task(g: &Workgroup, task: &str) -> Caps {
    let own = g.plan.task(task).and_then(|t| t.spec.caps).unwrap_or_default();
    own.over(g.plan.caps.task).over(g.policy.caps.task).caps()
}

/// The workgroup's total caps: the configuration's where it sets one (a person raises a
/// workgroup's cap there and resumes), else the plan's.
pub fn for_workgroup(g: &Workgroup) -> Caps {
    g.policy.caps.workgroup.over(g.plan.caps.workgroup).caps()
}

/// What the workgroup's attempts spent, summed over every recorded end: a measure is unknown
/// when some attempt's is (so an unknown cost never passes for a small one). Wall time is the
/// attempts' own time summed.
pub fn workgroup_spend(g: &Workgroup) -> Spend {
    let mut total = Spend { cost_micros: Some(0), input_tokens: Some(0), output_tokens: Some(0), ..Spend::default() };
    let add = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_add(b?));
    for t in g.tasks.values() {
        if t.completed.is_none() && t.failed.is_none() {
            continue;
        }
        let s = Spend::of(&t.spent, t.turns);
        total.cost_micros = add(total.cost_micros, s.cost_micros);
        total.input_tokens = add(total.input_tokens, s.input_tokens);
        total.output_tokens = add(total.output_tokens, s.output_tokens);
        total.wall_ms = total.wall_ms.saturating_add(s.wall_ms);
        total.turns = total.turns.saturating_add(s.turns);
    }
    total
}

/// The workgroup cap its spend reached, if any.
pub fn workgroup_reached(g: &Workgroup) -> Option<Reached> {
    let caps = for_workgroup(g);
    if caps.is_empty() {
        return None;
    }
    reached(&caps, &workgroup_spend(g))
}

/// Each capped measure against what was spent, for the live status line: `cost 0.12/5.00 USD`,
/// `cost unknown/5.00 USD` when a figure is not known (never as zero).
pub fn against(caps: &Caps, spend: &Spend) -> String {
    let mut parts = Vec::new();
    let show = |m: Measure, v: Option<u64>, cap: u64| {
        let seen = v.map_or_else(|| "unknown".to_owned(), |v| m.show(v));
        format!("{} {seen} of {}", m.as_str(), m.show(cap))
    };
    if let Some(c) = caps.cost_micros {
        parts.push(show(Measure::Cost, spend.cost_micros, c));
    }
    if let Some(c) = caps.input_tokens {
        parts.push(show(Measure::InputTokens, spend.input_tokens, c));
    }
    if let Some(c) = caps.output_tokens {
        parts.push(show(Measure::OutputTokens, spend.output_tokens, c));
    }
    if let Some(c) = caps.wall_ms {
        parts.push(show(Measure::WallTime, Some(spend.wall_ms), c));
    }
    if let Some(c) = caps.turns {
        parts.push(show(Measure::Turns, Some(u64::from(spend.turns)), u64::from(c)));
    }
    parts.join(", ")
}

/// Why a workgroup was paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PauseReason {
    /// A workgroup total reached its cap.
    WorkgroupCap,
    /// A worker's provider refused its credentials.
    Authentication,
    /// The write guard denied one attempt's writes [`GUARD_STORM_DENIALS`] times or more.
    WriteGuardStorm,
}

impl PauseReason {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            PauseReason::WorkgroupCap => "workgroup-cap",
            PauseReason::Authentication => "authentication",
            PauseReason::WriteGuardStorm => "write-guard-storm",
        }
    }

    /// What the person must do before `--resume`.
    pub fn fix(self) -> &'static str {
        match self {
            PauseReason::WorkgroupCap => {
                "raise the cap under [context_efficiency.caps.workgroup] in .strata/config.toml, then strata run --resume"
            }
            PauseReason::Authentication => "fix the provider's credentials, then strata run --resume",
            PauseReason::WriteGuardStorm => {
                "look at the denials (strata audit run), fix the plan's ownership or the prompt, then strata run --resume"
            }
        }
    }
}

/// `workgroup.paused` v1: a safety boundary stopped the workgroup's dispatches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Paused {
    /// Why.
    pub reason: PauseReason,
    /// The cap reached, for a workgroup cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached: Option<Reached>,
    /// The task whose attempt showed it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// What happened, bounded.
    pub detail: String,
}

/// `workgroup.unpaused` v1: `strata run --resume` continues a paused workgroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unpaused {
    /// The pause it ends.
    pub reason: PauseReason,
}

/// `worker.capped` v1: the worker was interrupted at a cap (on the attempt's worker stream,
/// before its `worker.failed`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capped {
    /// The task.
    pub task: String,
    /// Its attempt.
    pub attempt: u32,
    /// The cap reached.
    pub reached: Reached,
    /// The attempt's caps.
    pub caps: Caps,
    /// What it had spent when it was stopped.
    pub spend: Spend,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_measure_over_its_cap_is_reported_and_unknown_never_reaches_a_cap() {
        let caps = Caps { cost_micros: Some(100), turns: Some(2), ..Caps::default() };
        let mut s = Spend { cost_micros: None, turns: 2, ..Spend::default() };
        assert_eq!(reached(&caps, &s), None, "two turns of two are allowed; an unknown cost is not over");
        s.turns = 3;
        assert_eq!(reached(&caps, &s).map(|r| r.measure), Some(Measure::Turns));
        s.cost_micros = Some(100);
        assert_eq!(reached(&caps, &s), Some(Reached { measure: Measure::Cost, limit: 100, observed: 100 }));
    }

    #[test]
    fn a_cost_reads_as_usd_and_keeps_exact_micros() {
        let c: CapsSpec = serde_json::from_str(r#"{"cost_usd": 2.5, "turns": 3}"#).expect("caps");
        assert_eq!(c.caps().cost_micros, Some(2_500_000));
        let back: CapsSpec = serde_json::from_str(&serde_json::to_string(&c).expect("json")).expect("caps");
        assert_eq!(back, c);
        assert!(serde_json::from_str::<CapsSpec>(r#"{"cost_usd": -1}"#).is_err());
        assert!(serde_json::from_str::<CapsSpec>(r#"{"cost_usd": 1, "tokens": 3}"#).is_err());
    }

    #[test]
    fn a_tasks_caps_override_the_plans_and_those_the_configurations() {
        let task = CapsSpec { turns: Some(2), ..CapsSpec::default() };
        let plan = CapsSpec { turns: Some(5), output_tokens: Some(9), ..CapsSpec::default() };
        let config = CapsSpec { output_tokens: Some(1), wall_seconds: Some(3), ..CapsSpec::default() };
        let c = task.over(plan).over(config).caps();
        assert_eq!((c.turns, c.output_tokens, c.wall_ms), (Some(2), Some(9), Some(3000)));
    }
}
