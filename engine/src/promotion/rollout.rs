//! Rollouts of a candidate routing policy, event-sourced: every start, stage change and routed
//! unit is an event on the rollout's own stream (`rollout/<name>`), and the [`Rollouts`]
//! projection folds them. [`decide`] is pure: a command and the folded state in, events or a
//! typed rejection out (a rejection appends nothing).
//!
//! A routing policy here is a set of the router's limits (`max_nesting_depth`,
//! `max_active_inherited`) that replace a unit's own; baseline and candidate each have one.
//! Operators may advance through off → observe → shadow by hand, hold, and roll back at any
//! stage. From shadow on, a stage advances only on an evaluation made for that stage whose
//! measurement run was consumed in the same append (`strata eval promote --rollout`); the stage
//! policy ([`stages::decide`]) turns it into advance, hold or roll back. Holding on
//! Inconclusive spends an extension at the stage: one more beyond [`EXTENSIONS_MAX`] rolls back.
//! Holding on Error (an evaluation that could not decide) counts toward
//! [`CONSECUTIVE_ERRORS_MAX`] evaluations in error in a row, which also roll back.
//!
//! In shadow and later, [`route`] decides every unit under both policies and records both; which
//! one runs depends on the stage and the unit's bucket. A canary stage advances only once each
//! arm ran at least [`EXPOSED_MIN`] units there; short of that it holds like Inconclusive.
//!
//! A rollout is for one candidate: its version and runtime digest are recorded at the start, and
//! only evaluations of measurements signed for exactly those move it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use strata_journal::{EventData, Record};

use super::gates::Verdict;
use super::promote::Document;
use super::stages::{self, Action, Stage};
use crate::ce::ledger;
use crate::ce::paths::Workspace;
use crate::ce::router::{self, RouteFacts};
use crate::ports::{Clock, Ids};
use crate::projections::kept::EventLog;

/// Events a decision returns, as (type, payload), for [`stamp`].
pub type Decided = Vec<(&'static str, Value)>;

/// `rollout.started`.
pub const STARTED: &str = "rollout.started";
/// `rollout.stage-changed`: advanced, held or rolled back.
pub const STAGE_CHANGED: &str = "rollout.stage-changed";
/// `rollout.unit-routed`: one unit decided under the policies the stage consults.
pub const UNIT_ROUTED: &str = "rollout.unit-routed";
/// Every type folded here.
pub const ALL: [&str; 3] = [STARTED, STAGE_CHANGED, UNIT_ROUTED];
/// Holds on Inconclusive (or on too little exposure) allowed at one stage; one more rolls back.
pub const EXTENSIONS_MAX: u32 = 2;
/// Evaluations in error in a row before the rollout rolls back (Argo's default limit).
pub const CONSECUTIVE_ERRORS_MAX: u32 = 4;
/// The policy keys a rollout may set.
pub const POLICY_KEYS: [&str; 2] = ["max_nesting_depth", "max_active_inherited"];
/// Longest rollout name.
pub const NAME_BYTES_MAX: usize = 64;
/// Fewest units each arm must have run at a canary stage before it may advance (Spinnaker's
/// "at least 50 points").
pub const EXPOSED_MIN: u64 = 50;
/// Longest unit id or reason.
pub const TEXT_BYTES_MAX: usize = 512;

/// The stream of rollout `name`.
pub fn stream(name: &str) -> String {
    format!("rollout/{name}")
}

/// A refused command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RolloutError {
    /// A malformed name, unit id, reason or policy.
    #[error("{0}")]
    Invalid(String),
    /// No rollout by that name.
    #[error("rollout {0:?} does not exist; start it with `strata rollout start`")]
    Unknown(String),
    /// A rollout by that name exists.
    #[error("rollout {0:?} already exists; rollouts are never restarted, pick a new name")]
    Exists(String),
    /// The transition is not in the table, or needs evidence.
    #[error("{0}")]
    Transition(String),
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, RolloutError> {
    Err(RolloutError::Invalid(msg.into()))
}

/// `rollout.started` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Started {
    /// Name.
    pub rollout: String,
    /// Bucketing salt, fixed for the rollout's life (nested exposure).
    pub salt: String,
    /// Baseline policy.
    pub baseline: BTreeMap<String, u64>,
    /// Candidate policy.
    pub candidate: BTreeMap<String, u64>,
    /// The candidate version evaluations must be signed for.
    pub candidate_version: String,
    /// The runtime digest evaluations must be signed for.
    pub runtime_digest: String,
}

/// The evaluation behind a stage change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluationRef {
    /// Evaluation id.
    pub evaluation_id: String,
    /// `sha256:` of the evaluation document's JSON.
    pub digest: String,
    /// The measurement run it consumed.
    pub measurement_run_id: Option<String>,
    /// Worst gate verdict.
    pub worst: String,
}

/// `rollout.stage-changed` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageChanged {
    /// Name.
    pub rollout: String,
    /// Stage before.
    pub from: Stage,
    /// Stage after.
    pub to: Stage,
    /// What was done.
    pub action: Action,
    /// Why, in words.
    pub reason: String,
    /// `operator` or `evaluation`.
    pub by: String,
    /// The evaluation, when one decided.
    pub evaluation: Option<EvaluationRef>,
    /// Extensions used at `to` after this change.
    pub extensions: u32,
    /// Evaluations in error in a row after this change.
    pub consecutive_errors: u32,
}

/// One policy's routing decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// Mode.
    pub mode: String,
    /// Reason codes.
    pub reason_codes: Vec<String>,
}

/// `rollout.unit-routed` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitRouted {
    /// Name.
    pub rollout: String,
    /// The unit (task) id.
    pub unit: String,
    /// Stage at the time.
    pub stage: Stage,
    /// The unit's bucket, 0..10,000.
    pub bucket_bps: u16,
    /// Which policy's decision runs: `baseline` or `candidate`.
    pub executed: String,
    /// The baseline's decision.
    pub baseline: Decision,
    /// The candidate's decision (absent before shadow).
    pub candidate: Option<Decision>,
}

/// One rollout's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rollout {
    /// How it was started: name, salt, policies, and the candidate it is for.
    #[serde(flatten)]
    pub start: Started,
    /// Current stage.
    pub stage: Stage,
    /// Extensions used at the current stage.
    pub extensions: u32,
    /// Evaluations in error in a row.
    pub consecutive_errors: u32,
    /// Stage changes recorded (holds included).
    pub changes: u64,
    /// Units routed.
    pub units_routed: u64,
    /// Units routed at the current stage, by the arm whose decision ran.
    pub at_stage: BTreeMap<String, u64>,
    /// Units on which the two policies disagreed (shadow and later).
    pub disagreements: u64,
    /// The last change's reason.
    pub last_reason: Option<String>,
    /// Measurement runs its evaluations consumed.
    pub runs: Vec<String>,
    /// The stream version folded.
    pub version: u64,
}

/// The projection: every rollout by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rollouts {
    by_name: BTreeMap<String, Rollout>,
    kept: EventLog,
}

impl Rollouts {
    /// Every rollout, by name.
    pub fn all(&self) -> &BTreeMap<String, Rollout> {
        &self.by_name
    }

    /// One rollout.
    pub fn get(&self, name: &str) -> Option<&Rollout> {
        self.by_name.get(name)
    }

    /// The stream version of rollout `name` (0 when it does not exist).
    pub fn version(&self, name: &str) -> u64 {
        self.by_name.get(name).map_or(0, |r| r.version)
    }

    fn fold(&mut self, r: &Record<'_>) -> Result<(), String> {
        fn de<'a, T: Deserialize<'a>>(r: &Record<'a>) -> Result<T, String> {
            serde_json::from_slice(r.payload).map_err(|e| format!("{} at seq {}: {e}", r.event_type, r.seq))
        }
        let missing = |name: &str| format!("seq {}: rollout {name:?} was never started", r.seq);
        let on_stream = |name: &str| {
            if r.stream == stream(name) {
                Ok(())
            } else {
                Err(format!("seq {}: an event of rollout {name:?} on stream {}", r.seq, r.stream))
            }
        };
        match r.event_type {
            STARTED => {
                let s: Started = de(r)?;
                on_stream(&s.rollout)?;
                if self.by_name.contains_key(&s.rollout) {
                    return Err(format!("seq {}: rollout {:?} started twice", r.seq, s.rollout));
                }
                self.by_name.insert(
                    s.rollout.clone(),
                    Rollout {
                        start: s,
                        stage: Stage::Off,
                        extensions: 0,
                        consecutive_errors: 0,
                        changes: 0,
                        units_routed: 0,
                        at_stage: BTreeMap::new(),
                        disagreements: 0,
                        last_reason: None,
                        runs: Vec::new(),
                        version: r.version,
                    },
                );
            }
            STAGE_CHANGED => {
                let c: StageChanged = de(r)?;
                on_stream(&c.rollout)?;
                let ro = self.by_name.get_mut(&c.rollout).ok_or_else(|| missing(&c.rollout))?;
                if ro.stage != c.from || stages::next(c.from, c.action) != Some(c.to) {
                    return Err(format!(
                        "seq {}: {:?} from {:?} is not in the transition table",
                        r.seq, c.action, c.from
                    ));
                }
                let evidenced =
                    c.by == "evaluation" && c.evaluation.as_ref().is_some_and(|e| e.measurement_run_id.is_some());
                if c.action == Action::Advance && c.to > Stage::Shadow && !evidenced {
                    return Err(format!(
                        "seq {}: {} → {} without a consumed measurement run",
                        r.seq,
                        c.from.as_str(),
                        c.to.as_str()
                    ));
                }
                if c.to != ro.stage {
                    ro.at_stage.clear();
                }
                ro.stage = c.to;
                ro.extensions = c.extensions;
                ro.consecutive_errors = c.consecutive_errors;
                ro.changes += 1;
                ro.last_reason = Some(c.reason);
                if let Some(run) = c.evaluation.and_then(|e| e.measurement_run_id) {
                    ro.runs.push(run);
                }
                ro.version = r.version;
            }
            UNIT_ROUTED => {
                let u: UnitRouted = de(r)?;
                on_stream(&u.rollout)?;
                let ro = self.by_name.get_mut(&u.rollout).ok_or_else(|| missing(&u.rollout))?;
                ro.units_routed += 1;
                *ro.at_stage.entry(u.executed.clone()).or_default() += 1;
                if u.candidate.as_ref().is_some_and(|c| *c != u.baseline) {
                    ro.disagreements += 1;
                }
                ro.version = r.version;
            }
            _ => {}
        }
        Ok(())
    }
}

crate::projections::kept::kept_projection!(Rollouts, "rollouts", 1, ALL);

fn check_text(field: &str, s: &str, max: usize) -> Result<(), RolloutError> {
    if s.is_empty() || s.len() > max || s.chars().any(char::is_control) {
        return invalid(format!("{field}: 1 to {max} bytes, no control characters"));
    }
    Ok(())
}

/// Whether `name` is a rollout name: 1–64 of `a-z 0-9 . _ -`, starting with a letter or digit.
pub fn is_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= NAME_BYTES_MAX
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
}

/// Reads a policy object: only [`POLICY_KEYS`], each a count.
pub fn policy(v: &Value) -> Result<BTreeMap<String, u64>, RolloutError> {
    let Some(map) = v.as_object() else { return invalid("policy: a JSON object") };
    let mut out = BTreeMap::new();
    for (k, x) in map {
        if !POLICY_KEYS.contains(&k.as_str()) {
            return invalid(format!("policy.{k}: unknown; a policy sets {}", POLICY_KEYS.join(", ")));
        }
        let Some(n) = x.as_u64().filter(|n| *n <= 64) else {
            return invalid(format!("policy.{k}: an integer 0 to 64"));
        };
        out.insert(k.clone(), n);
    }
    Ok(out)
}

/// The events starting rollout `name`.
pub fn start(state: &Rollouts, s: Started) -> Result<Decided, RolloutError> {
    let name = s.rollout.as_str();
    if !is_name(name) {
        return invalid(format!(
            "rollout {name:?}: 1–{NAME_BYTES_MAX} of a-z 0-9 . _ -, starting with a letter or digit"
        ));
    }
    check_text("salt", &s.salt, 128)?;
    if !super::corpus::is_version(&s.candidate_version) {
        return invalid("candidate version: letters, digits and . _ + -, at most 128");
    }
    if !super::envelope::is_sha256(&s.runtime_digest) {
        return invalid("runtime digest: `sha256:` and 64 lowercase hex digits");
    }
    if state.get(name).is_some() {
        return Err(RolloutError::Exists(name.to_owned()));
    }
    Ok(vec![(STARTED, json!(s))])
}

fn changed(ro: &Rollout, action: Action, by: &str, reason: String) -> StageChanged {
    StageChanged {
        rollout: ro.start.rollout.clone(),
        from: ro.stage,
        to: stages::next(ro.stage, action).unwrap_or(ro.stage),
        action,
        reason,
        by: by.to_owned(),
        evaluation: None,
        extensions: ro.extensions,
        consecutive_errors: ro.consecutive_errors,
    }
}

/// An operator's command: hold or roll back at any stage, advance by hand up to shadow.
pub fn operate(state: &Rollouts, name: &str, action: Action, reason: &str) -> Result<Decided, RolloutError> {
    check_text("reason", reason, TEXT_BYTES_MAX)?;
    let ro = state.get(name).ok_or_else(|| RolloutError::Unknown(name.to_owned()))?;
    let Some(to) = stages::next(ro.stage, action) else {
        return Err(RolloutError::Transition(format!(
            "rollout {name}: {action:?} from {} is not in the transition table",
            ro.stage.as_str()
        )));
    };
    if action == Action::Advance && to > Stage::Shadow {
        return Err(RolloutError::Transition(format!(
            "rollout {name}: leaving {} needs an evaluation for that stage; run `strata eval promote --rollout {name} …`",
            ro.stage.as_str()
        )));
    }
    // An operator's hold buys no extension; leaving the stage starts the counts afresh.
    let mut c = changed(ro, action, "operator", reason.to_owned());
    if action != Action::Hold {
        c.extensions = 0;
        c.consecutive_errors = 0;
    }
    Ok(vec![(STAGE_CHANGED, json!(c))])
}

/// The stage change an evaluation made for the rollout's current stage leads to, by the stage
/// policy with the exposure minimum and the extension and error limits. The caller records the
/// evaluation document's digest in `evaluation.digest` and appends [`changed_event`].
pub fn evaluated(state: &Rollouts, name: &str, doc: &Document) -> Result<StageChanged, RolloutError> {
    let ro = state.get(name).ok_or_else(|| RolloutError::Unknown(name.to_owned()))?;
    if ro.stage < Stage::Shadow || ro.stage == Stage::On {
        return Err(RolloutError::Transition(format!(
            "rollout {name} is at {}; evaluations decide from shadow to canary-50",
            ro.stage.as_str()
        )));
    }
    if doc.stage != Some(ro.stage) {
        return Err(RolloutError::Transition(format!(
            "the evaluation was made for stage {}, the rollout is at {}",
            doc.stage.map_or("none", Stage::as_str),
            ro.stage.as_str()
        )));
    }
    let e = &doc.evaluation;
    let worst = e.gates.iter().map(|g| g.verdict).max().unwrap_or(Verdict::Error);
    let errors = if worst == Verdict::Error { ro.consecutive_errors + 1 } else { 0 };
    let mut action = stages::decide(ro.stage, e);
    let failing: Vec<&str> = e.gates.iter().filter(|g| g.verdict != Verdict::Pass).map(|g| g.gate).collect();
    let mut reason = match action {
        Action::Advance => format!("no gate failed or errored ({} not yet passing)", failing.len()),
        Action::Hold => format!("{worst:?}: {}", failing.join(", ")),
        Action::Rollback => format!("a gate failed: {}", failing.join(", ")),
    };
    let ran = |arm: &str| ro.at_stage.get(arm).copied().unwrap_or(0);
    let canary = matches!(ro.stage, Stage::Canary10 | Stage::Canary25 | Stage::Canary50);
    if action == Action::Advance && canary && (ran("candidate") < EXPOSED_MIN || ran("baseline") < EXPOSED_MIN) {
        action = Action::Hold;
        reason = format!(
            "too little exposure at {}: {} candidate and {} baseline units ran (at least {EXPOSED_MIN} each)",
            ro.stage.as_str(),
            ran("candidate"),
            ran("baseline")
        );
    }
    // An evaluation in error holds and counts toward the error limit; an Inconclusive one (or
    // too little exposure) holds and spends an extension.
    let in_error = worst == Verdict::Error;
    if action == Action::Hold && in_error && errors >= CONSECUTIVE_ERRORS_MAX {
        action = Action::Rollback;
        reason = format!("{errors} evaluations in error in a row");
    } else if action == Action::Hold && !in_error && ro.extensions >= EXTENSIONS_MAX {
        action = Action::Rollback;
        reason = format!("still holding after {EXTENSIONS_MAX} extensions: {reason}");
    }
    let evaluation = EvaluationRef {
        evaluation_id: e.evaluation_id.clone(),
        digest: String::new(),
        measurement_run_id: doc.measurement_run_id.clone(),
        worst: format!("{worst:?}"),
    };
    let mut c = changed(ro, action, "evaluation", reason);
    c.evaluation = Some(evaluation);
    (c.extensions, c.consecutive_errors) = match action {
        Action::Hold if in_error => (ro.extensions, errors),
        Action::Hold => (ro.extensions + 1, 0),
        Action::Advance | Action::Rollback => (0, 0),
    };
    Ok(c)
}

/// The event recording `change`.
pub fn changed_event(change: &StageChanged) -> Decided {
    vec![(STAGE_CHANGED, json!(change))]
}

fn decide_under(facts: &Value, policy: &BTreeMap<String, u64>) -> Result<Decision, crate::ce::CeError> {
    let mut f: Map<String, Value> = facts.as_object().cloned().unwrap_or_default();
    for (k, v) in policy {
        f.insert(k.clone(), json!(v));
    }
    let route = router::route(&RouteFacts::from_json(&Value::Object(f), &Workspace::default())?)?;
    Ok(Decision { mode: route.mode.as_str().to_owned(), reason_codes: route.reason_names() })
}

/// Decides `unit` with routing `facts` under rollout `name`: the baseline always; the candidate
/// too from shadow on (both recorded); the candidate's decision runs when the stage exposes the
/// unit's bucket. Off records nothing (an empty event list); observe records the baseline.
pub fn route(state: &Rollouts, name: &str, unit: &str, facts: &Value) -> Result<(UnitRouted, Decided), RolloutError> {
    check_text("unit", unit, TEXT_BYTES_MAX)?;
    if !facts.is_object() {
        return invalid("facts: a JSON object of routing facts");
    }
    let ro = state.get(name).ok_or_else(|| RolloutError::Unknown(name.to_owned()))?;
    let refused = |who: &str, e: crate::ce::CeError| {
        RolloutError::Invalid(format!("{who} policy: {} ({})", e.code.as_str(), e.detail))
    };
    let baseline = decide_under(facts, &ro.start.baseline).map_err(|e| refused("baseline", e))?;
    let candidate = if ro.stage >= Stage::Shadow {
        Some(decide_under(facts, &ro.start.candidate).map_err(|e| refused("candidate", e))?)
    } else {
        None
    };
    let bucket = stages::bucket_bps(&ro.start.salt, unit);
    let executed = if stages::exposed(&ro.start.salt, unit, ro.stage) { "candidate" } else { "baseline" };
    let routed = UnitRouted {
        rollout: name.to_owned(),
        unit: unit.to_owned(),
        stage: ro.stage,
        bucket_bps: bucket,
        executed: executed.to_owned(),
        baseline,
        candidate,
    };
    let events = if ro.stage == Stage::Off { vec![] } else { vec![(UNIT_ROUTED, json!(routed))] };
    Ok((routed, events))
}

/// Stamps `(type, payload)` pairs into events through the ports.
pub fn stamp(events: Decided, ids: &mut dyn Ids, clock: &dyn Clock) -> Result<Vec<EventData>, RolloutError> {
    events
        .into_iter()
        .map(|(t, payload)| ledger::event(ids, clock, t, &payload).map_err(|e| RolloutError::Invalid(e.detail)))
        .collect()
}
