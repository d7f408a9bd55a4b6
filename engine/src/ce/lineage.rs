//! Lineage compatibility: whether a prior worker may be resumed or inherited (`HOT`), is valid
//! cold provenance, needs reconciliation, or is invalid, with every invalidation reported.
//!
//! Beyond the reference: the lease is bounded by the configured warm-lease time (a record
//! promising a longer lease is held to `last_used_at + warm_lease`), timestamps in the future
//! or out of order are unknown provenance, `current` is typed, and reviewer contamination
//! covers every writer role rather than the literal `builder`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::router::{Mode, is_writer_role};
use super::time::parse_rfc3339;

/// Default warm-lease time (`warm_lease_minutes: 20`).
pub const WARM_LEASE_MINUTES_DEFAULT: u64 = 20;
/// Clock skew tolerated on a lineage record's timestamps.
pub const FUTURE_SKEW_NS: i128 = 5 * 60 * 1_000_000_000;

const NS_PER_MINUTE: i128 = 60 * 1_000_000_000;

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
}

/// The schema id of a lineage record.
pub const SCHEMA_ID: &str = "knowzcode.agent-lineage/v1";

/// A `knowzcode.agent-lineage/v1` record. Fields are in canonical key order, so the record
/// serialises as the ledger has always recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineageRecord {
    /// `sha256:` of the baseline, when known.
    pub baseline_hash: Option<String>,
    /// The capsule it was last briefed with.
    pub capsule_hash: Option<String>,
    /// The checkpoint it started from.
    pub checkpoint_sha: Option<String>,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// Reasoning effort.
    pub effort: Option<String>,
    /// Fix loop.
    pub fix_loop_id: Option<String>,
    /// When it was last used (RFC 3339).
    pub last_used_at: String,
    /// When its lease ends (RFC 3339), if it has one.
    pub lease_expires_at: Option<String>,
    /// Its id.
    pub lineage_id: String,
    /// The mode it ran in.
    pub mode: Mode,
    /// Model.
    pub model: Option<String>,
    /// The lineage it continued.
    pub parent_lineage_id: Option<String>,
    /// `sha256:`-style digest of its permissions.
    pub permissions_hash: String,
    /// Workflow phase.
    pub phase: String,
    /// `claude`, `codex` or `other`.
    pub platform: String,
    /// The provider's session handle.
    pub platform_handle: Option<String>,
    /// It may be resumed.
    pub resumable: bool,
    /// Its role.
    pub role: String,
    /// `sha256:` of the runtime prefix.
    pub runtime_prefix_hash: String,
    /// [`SCHEMA_ID`].
    pub schema: String,
    /// What it works on.
    pub scope: String,
    /// Digest of its scope.
    pub scope_hash: String,
    /// `normal`, `restricted` or `isolated`.
    pub sensitivity: String,
    /// Digest of its specifications.
    pub spec_hash: String,
    /// Digest of its tools.
    pub tools_hash: String,
    /// Its workgroup.
    pub workgroup_id: String,
}

impl LineageRecord {
    /// The value of a compared key ([`CURRENT_KEYS`]); `None` for null or another key.
    pub fn compared(&self, key: &str) -> Option<&str> {
        match key {
            "platform" => Some(&self.platform),
            "workgroup_id" => Some(&self.workgroup_id),
            "role" => Some(&self.role),
            "phase" => Some(&self.phase),
            "fix_loop_id" => self.fix_loop_id.as_deref(),
            "spec_hash" => Some(&self.spec_hash),
            "scope_hash" => Some(&self.scope_hash),
            "checkpoint_sha" => self.checkpoint_sha.as_deref(),
            "model" => self.model.as_deref(),
            "effort" => self.effort.as_deref(),
            "runtime_prefix_hash" => Some(&self.runtime_prefix_hash),
            "baseline_hash" => self.baseline_hash.as_deref(),
            "capsule_hash" => self.capsule_hash.as_deref(),
            "tools_hash" => Some(&self.tools_hash),
            "permissions_hash" => Some(&self.permissions_hash),
            "sensitivity" => Some(&self.sensitivity),
            _ => None,
        }
    }

    /// Whether the record satisfies `knowzcode.agent-lineage/v1` (the constraints its types do
    /// not already carry: lengths, closed sets, digests).
    pub fn valid(&self) -> bool {
        let chars = |s: &str| s.chars().count();
        let nonempty = |s: &str| !s.is_empty();
        let opt = |s: &Option<String>, ok: &dyn Fn(&str) -> bool| s.as_deref().is_none_or(ok);
        let digest = |s: &str| {
            s.strip_prefix("sha256:")
                .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        };
        self.schema == SCHEMA_ID
            && nonempty(&self.lineage_id)
            && (1..=128).contains(&chars(&self.workgroup_id))
            && matches!(self.platform.as_str(), "claude" | "codex" | "other")
            && opt(&self.platform_handle, &nonempty)
            && opt(&self.parent_lineage_id, &nonempty)
            && nonempty(&self.role)
            && nonempty(&self.scope)
            && matches!(self.phase.as_str(), "1A" | "1B" | "2A" | "2B" | "3")
            && opt(&self.fix_loop_id, &|s| (1..=128).contains(&chars(s)))
            && opt(&self.model, &nonempty)
            && opt(&self.effort, &nonempty)
            && digest(&self.runtime_prefix_hash)
            && opt(&self.baseline_hash, &digest)
            && opt(&self.capsule_hash, &digest)
            && [&self.tools_hash, &self.permissions_hash, &self.spec_hash, &self.scope_hash].iter().all(|s| nonempty(s))
            && opt(&self.checkpoint_sha, &|s| chars(s) >= 7)
            && matches!(self.sensitivity.as_str(), "normal" | "restricted" | "isolated")
    }

    /// A record a ledger can keep: valid, with strict times.
    pub fn usable(&self) -> bool {
        self.valid() && self.times().is_some()
    }

    /// (created, last used, lease end); `None` if a time is not strict RFC 3339.
    fn times(&self) -> Option<(i128, i128, Option<i128>)> {
        let created = parse_rfc3339(&self.created_at, "created_at").ok()?;
        let last_used = parse_rfc3339(&self.last_used_at, "last_used_at").ok()?;
        let lease = match &self.lease_expires_at {
            None => None,
            Some(s) => Some(parse_rfc3339(s, "lease_expires_at").ok()?),
        };
        Some((created, last_used, lease))
    }
}

/// What the unit about to run is bound to (`current`): the compared keys it states (null is
/// `None`; a key it leaves out is absent, which makes any record unknown provenance) and its
/// flags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Current {
    /// [`CURRENT_KEYS`] as given.
    pub fields: BTreeMap<&'static str, Option<String>>,
    /// An independent reviewer is about to run.
    pub independent_reviewer: bool,
    /// This is the final gate.
    pub final_gate: bool,
    /// The caller asks for reconciliation.
    pub reconcile_required: bool,
    /// The scope is complete.
    pub scope_complete: bool,
    /// More work on the scope is likely.
    pub likely_continuation: bool,
}

impl Current {
    /// States `key` (one of [`CURRENT_KEYS`]; any other key is ignored) as `value`.
    pub fn set(&mut self, key: &str, value: Option<&str>) {
        if let Some(k) = CURRENT_KEYS.iter().find(|k| **k == key) {
            self.fields.insert(k, value.map(str::to_owned));
        }
    }

    /// The value stated for `key`: `None` when absent, `Some(None)` for null.
    pub fn get(&self, key: &str) -> Option<Option<&str>> {
        self.fields.get(key).map(Option::as_deref)
    }
}

/// Evaluates `lineage` (`None` when absent or not a valid record) against `current` at
/// `now_ns`.
pub fn evaluate(
    lineage: Option<&LineageRecord>,
    current: &Current,
    now_ns: i128,
    warm_lease_minutes: u64,
) -> Evaluation {
    let Some(lin) = lineage.filter(|l| l.valid()) else {
        return Evaluation::invalid([Invalidation::UnknownProvenance]);
    };
    let Some((created, last_used, lease)) = lin.times() else {
        return Evaluation::invalid([Invalidation::UnknownProvenance]);
    };
    // Future-dated or out-of-order records are not provenance anyone can vouch for.
    if created > now_ns + FUTURE_SKEW_NS || last_used > now_ns + FUTURE_SKEW_NS || created > last_used {
        return Evaluation::invalid([Invalidation::UnknownProvenance]);
    }
    if CURRENT_KEYS.iter().any(|k| current.get(k).is_none()) {
        return Evaluation::invalid([Invalidation::UnknownProvenance]);
    }
    let mut found = BTreeSet::new();
    if current.independent_reviewer && is_writer_role(Some(&lin.role)) {
        found.insert(Invalidation::ReviewLineageContamination);
    }
    for (field, code) in COMPARED {
        if Some(lin.compared(field)) != current.get(field) {
            found.insert(*code);
        }
    }
    if !lin.resumable {
        found.insert(Invalidation::NonResumable);
    }
    if !found.is_empty() {
        return Evaluation::invalid(found);
    }
    if current.final_gate {
        return Evaluation::invalid([Invalidation::FinalGate]);
    }
    let lease_ends_ns = lease.map(|l| l.min(last_used + i128::from(warm_lease_minutes) * NS_PER_MINUTE));
    if current.reconcile_required || Some(lin.capsule_hash.as_deref()) != current.get("capsule_hash") {
        return Evaluation {
            state: State::ReconcileRequired,
            invalidations: BTreeSet::from([Invalidation::ReconciliationRequired]),
            lease_ends_ns,
        };
    }
    let state =
        if lease_ends_ns.is_none_or(|end| now_ns >= end) || (current.scope_complete && !current.likely_continuation) {
            State::ColdValid
        } else {
            State::Hot
        };
    Evaluation { state, invalidations: BTreeSet::new(), lease_ends_ns }
}
