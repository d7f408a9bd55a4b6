//! Lineage compatibility: whether a prior worker may be resumed or inherited (`HOT`), is valid
//! cold provenance, needs reconciliation, or is invalid, with every invalidation reported.
//!
//! Beyond the reference: the lease is bounded by the configured warm-lease time (a record
//! promising a longer lease is held to `last_used_at + warm_lease`), timestamps in the future
//! or out of order are unknown provenance, `current` is typed, and reviewer contamination
//! covers every writer role rather than the literal `builder`.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use serde::Serialize;
use serde_json::Value;

use super::error::{CeError, Code, fail};
use super::facts::Obj;
use super::router::is_writer_role;
use super::time::parse_rfc3339;

/// Default warm-lease time (`warm_lease_minutes: 20`).
pub const WARM_LEASE_MINUTES_DEFAULT: u64 = 20;
/// Clock skew tolerated on a lineage record's timestamps.
pub const FUTURE_SKEW_NS: i128 = 5 * 60 * 1_000_000_000;

const NS_PER_MINUTE: i128 = 60 * 1_000_000_000;

/// The lineage schema, compiled once.
static SCHEMA: LazyLock<Result<jsonschema::Validator, String>> = LazyLock::new(|| {
    let v: Value = serde_json::from_str(include_str!("../../../schemas/agent-lineage.schema.json"))
        .map_err(|e| format!("agent-lineage schema is not JSON: {e}"))?;
    jsonschema::validator_for(&v).map_err(|e| format!("agent-lineage schema does not compile: {e}"))
});

/// Lineage states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    /// Resumable now.
    Hot,
    /// Valid provenance, but not warm.
    ColdValid,
    /// Compatible, but its capsule changed: reconcile before reuse.
    ReconcileRequired,
    /// Not reusable.
    Invalid,
}

impl State {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Hot => "HOT",
            State::ColdValid => "COLD_VALID",
            State::ReconcileRequired => "RECONCILE_REQUIRED",
            State::Invalid => "INVALID",
        }
    }
}

macro_rules! invalidations {
    ($( $name:ident = $text:literal $(, $field:literal)? ; )*) => {
        /// Why a lineage is invalid; the derived order is the output order.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Invalidation { $( #[doc = $text] $name, )* }

        impl Invalidation {
            /// Wire name.
            pub fn as_str(self) -> &'static str {
                match self { $(Invalidation::$name => $text,)* }
            }
        }

        /// The compared fields and their codes, in output order.
        const COMPARED: &[(&str, Invalidation)] = &[ $( $( ($field, Invalidation::$name), )? )* ];
    };
}

invalidations! {
    UnknownProvenance = "UNKNOWN_PROVENANCE";
    ReviewLineageContamination = "REVIEW_LINEAGE_CONTAMINATION";
    PlatformMismatch = "PLATFORM_MISMATCH", "platform";
    WorkgroupMismatch = "WORKGROUP_MISMATCH", "workgroup_id";
    RoleMismatch = "ROLE_MISMATCH", "role";
    PhaseMismatch = "PHASE_MISMATCH", "phase";
    FixLoopMismatch = "FIX_LOOP_MISMATCH", "fix_loop_id";
    SpecMismatch = "SPEC_MISMATCH", "spec_hash";
    ScopeMismatch = "SCOPE_MISMATCH", "scope_hash";
    CheckpointMismatch = "CHECKPOINT_MISMATCH", "checkpoint_sha";
    ModelMismatch = "MODEL_MISMATCH", "model";
    EffortMismatch = "EFFORT_MISMATCH", "effort";
    RuntimePrefixMismatch = "RUNTIME_PREFIX_MISMATCH", "runtime_prefix_hash";
    BaselineMismatch = "BASELINE_MISMATCH", "baseline_hash";
    ToolsMismatch = "TOOLS_MISMATCH", "tools_hash";
    PermissionsMismatch = "PERMISSIONS_MISMATCH", "permissions_hash";
    SensitivityMismatch = "SENSITIVITY_MISMATCH", "sensitivity";
    FinalGate = "FINAL_GATE";
    NonResumable = "NON_RESUMABLE";
    ReconciliationRequired = "RECONCILIATION_REQUIRED";
}

/// The sixteen keys `current` must carry (presence, not value).
pub const CURRENT_KEYS: [&str; 16] = [
    "platform",
    "workgroup_id",
    "role",
    "phase",
    "fix_loop_id",
    "spec_hash",
    "scope_hash",
    "checkpoint_sha",
    "model",
    "effort",
    "runtime_prefix_hash",
    "baseline_hash",
    "capsule_hash",
    "tools_hash",
    "permissions_hash",
    "sensitivity",
];

/// The evaluation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// State.
    pub state: State,
    /// Invalidations, output order.
    pub invalidations: BTreeSet<Invalidation>,
    /// When the lease effectively ends (ns since the epoch), bounded by the warm-lease time.
    pub lease_ends_ns: Option<i128>,
}

impl Evaluation {
    fn invalid(codes: impl IntoIterator<Item = Invalidation>) -> Evaluation {
        Evaluation { state: State::Invalid, invalidations: codes.into_iter().collect(), lease_ends_ns: None }
    }

    /// The wire result `{state, invalidations}`.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "state": self.state.as_str(),
            "invalidations": self.invalidations.iter().map(|i| i.as_str()).collect::<Vec<_>>(),
        })
    }
}

/// Evaluates `lineage` (any JSON; `None` when absent) against `current` at `now_ns`.
pub fn evaluate(
    lineage: Option<&Value>,
    current: &Value,
    now_ns: i128,
    warm_lease_minutes: u64,
) -> Result<Evaluation, CeError> {
    let cur = Obj::of(current, "current", Code::InvalidRequest)?;
    for key in CURRENT_KEYS {
        match cur.map().get(key) {
            None | Some(Value::String(_) | Value::Null) => {}
            Some(_) => return fail(Code::InvalidFact, format!("current.{key}: must be a string or null")),
        }
    }
    let independent_reviewer = cur.is_true("independent_reviewer")?;
    let final_gate = cur.is_true("final_gate")?;
    let reconcile_required = cur.is_true("reconcile_required")?;
    let scope_complete = cur.is_true("scope_complete")?;
    let likely_continuation = cur.is_true("likely_continuation")?;

    let Some(lin) = lineage.filter(|l| schema_valid(l)) else {
        return Ok(Evaluation::invalid([Invalidation::UnknownProvenance]));
    };
    let times = lineage_times(lin);
    let Some((created, last_used, lease)) = times else {
        return Ok(Evaluation::invalid([Invalidation::UnknownProvenance]));
    };
    // Future-dated or out-of-order records are not provenance anyone can vouch for.
    if created > now_ns + FUTURE_SKEW_NS || last_used > now_ns + FUTURE_SKEW_NS || created > last_used {
        return Ok(Evaluation::invalid([Invalidation::UnknownProvenance]));
    }
    if CURRENT_KEYS.iter().any(|k| !cur.has(k)) {
        return Ok(Evaluation::invalid([Invalidation::UnknownProvenance]));
    }
    let mut found = BTreeSet::new();
    if independent_reviewer && is_writer_role(lin.get("role").and_then(Value::as_str)) {
        found.insert(Invalidation::ReviewLineageContamination);
    }
    for (field, code) in COMPARED {
        if lin.get(field) != cur.map().get(*field) {
            found.insert(*code);
        }
    }
    if lin.get("resumable") != Some(&Value::Bool(true)) {
        found.insert(Invalidation::NonResumable);
    }
    if !found.is_empty() {
        return Ok(Evaluation::invalid(found));
    }
    if final_gate {
        return Ok(Evaluation::invalid([Invalidation::FinalGate]));
    }
    let lease_ends_ns = lease.map(|l| l.min(last_used + i128::from(warm_lease_minutes) * NS_PER_MINUTE));
    if reconcile_required || lin.get("capsule_hash") != cur.map().get("capsule_hash") {
        return Ok(Evaluation {
            state: State::ReconcileRequired,
            invalidations: BTreeSet::from([Invalidation::ReconciliationRequired]),
            lease_ends_ns,
        });
    }
    let state = if lease_ends_ns.is_none_or(|end| now_ns >= end) || (scope_complete && !likely_continuation) {
        State::ColdValid
    } else {
        State::Hot
    };
    Ok(Evaluation { state, invalidations: BTreeSet::new(), lease_ends_ns })
}

/// Whether `v` is a lineage record a ledger can keep: schema-valid, with strict times.
pub fn record_usable(v: &Value) -> bool {
    schema_valid(v) && lineage_times(v).is_some()
}

fn schema_valid(v: &Value) -> bool {
    matches!(&*SCHEMA, Ok(s) if s.is_valid(v))
}

/// (created, last used, lease end) of a schema-valid record; `None` if a time is not strict.
fn lineage_times(lin: &Value) -> Option<(i128, i128, Option<i128>)> {
    let t = |k: &str| lin.get(k).and_then(Value::as_str).map(|s| parse_rfc3339(s, k));
    let created = t("created_at")?.ok()?;
    let last_used = t("last_used_at")?.ok()?;
    let lease = match t("lease_expires_at") {
        None => None,
        Some(r) => Some(r.ok()?),
    };
    Some((created, last_used, lease))
}

/// The schema compiles (checked by a test, so a broken schema file cannot ship).
pub fn schema_compiles() -> Result<(), String> {
    SCHEMA.as_ref().map(|_| ()).map_err(Clone::clone)
}
