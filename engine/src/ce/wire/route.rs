//! Routing on the wire: the `input` of `route` (and `routing` of `dispatch`) read into the
//! router's [`RouteFacts`], and the router's, rollout's and result policy's answers written
//! back in the reference's shapes.

use serde_json::{Value, json};

use super::facts::Obj;
use crate::ce::budget::{Budget, BudgetLevel, VerificationPlan};
use crate::ce::error::{CeError, Code, fail};
use crate::ce::paths::Workspace;
use crate::ce::policy::{Policy, PolicyFacts, ResultMode};
use crate::ce::router::{
    ACTIVE_WRITERS_MAX, ActiveWriter, INHERITED_WRITERS_DEFAULT, Inheritance, LineageFacts, NESTING_DEFAULT, Route,
    RouteFacts, Sensitivity, Team, canonical_owned,
};

impl RouteFacts {
    /// Reads the wire facts (`input` of `route`). `active_writers` / `active_writer_scopes` are
    /// taken from the request; with a journal, the caller replaces them with the ownership map.
    pub fn from_json(input: &Value, ws: &Workspace) -> Result<RouteFacts, CeError> {
        let o = Obj::of(input, "input", Code::InvalidRequest)?;
        // As in the reference: a workspace root, when given, is a non-empty string. (Its links
        // arrive as workspace facts, discovered by the adapter; see [`workspace_paths`].)
        if o.string_or("workspace_root", Code::InvalidOwnershipPath)? == Some("") {
            return fail(Code::InvalidOwnershipPath, "input.workspace_root: empty; name the workspace directory");
        }
        let mut f = RouteFacts {
            role: o.string("role")?.map(str::to_owned),
            is_writer: o.flag("is_writer")?,
            ..RouteFacts::default()
        };
        let mut proposed = Vec::new();
        let add = |obj: &Obj<'_>, into: &mut Vec<String>| -> Result<(), CeError> {
            for key in ["owned_files", "resolved_owned_files"] {
                obj.each_string(key, Code::InvalidOwnershipPath, |p| {
                    // The field is named only when the path is refused.
                    into.push(canonical_owned(ws, p, &obj.path(key))?);
                    Ok(())
                })?;
            }
            Ok(())
        };
        add(&o, &mut proposed)?;
        if let Some(l) = o.object("lineage")? {
            add(&l, &mut proposed)?;
            f.lineage = Some(LineageFacts {
                compatible: l.is_true("compatible")?,
                resumable: l.is_true("resumable")?,
                role: l.string("role")?.map(str::to_owned),
                lineage_id: l.string("lineage_id")?.map(str::to_owned),
            });
        }
        let writers_key = if o.has("active_writers") { "active_writers" } else { "active_writer_scopes" };
        let writers = o.array(writers_key, Code::InvalidOwnershipPath)?;
        if writers.len() > ACTIVE_WRITERS_MAX {
            return fail(Code::InvalidRequest, format!("input.{writers_key}: more than {ACTIVE_WRITERS_MAX} writers"));
        }
        for w in writers {
            let w = Obj::of(w, writers_key, Code::InvalidOwnershipPath)?;
            let mut paths = Vec::new();
            add(&w, &mut paths)?;
            if paths.is_empty() {
                return fail(Code::WriterScopeRequired, format!("input.{writers_key}: an active writer owns no path"));
            }
            f.active_writers.push(ActiveWriter { lineage_id: w.string("lineage_id")?.map(str::to_owned), paths });
        }
        f.nesting_depth = o.count("nesting_depth", Code::InvalidNesting)?.unwrap_or(0);
        f.max_nesting_depth = o.count("max_nesting_depth", Code::InvalidNesting)?.unwrap_or(NESTING_DEFAULT);
        if f.max_nesting_depth == 0 {
            return fail(Code::InvalidNesting, "input.max_nesting_depth: must be at least 1");
        }
        f.trivial = o.is_true("trivial")?;
        f.blocking = o.is_true("blocking")?;
        f.tight = o.string("coupling")? == Some("tight");
        f.sensitivity = Sensitivity::parse(o.string("sensitivity")?);
        f.independent_reviewer = o.is_true("independent_reviewer")?;
        f.active_inherited_writers = o.count("active_inherited_writers", Code::InvalidWriterCount)?.unwrap_or(0);
        f.max_active_inherited =
            o.count("max_active_inherited", Code::InvalidWriterCount)?.unwrap_or(INHERITED_WRITERS_DEFAULT);
        if f.max_active_inherited == 0 {
            return fail(Code::InvalidWriterCount, "input.max_active_inherited: must be at least 1");
        }
        if let Some(i) = o.object("inheritance")? {
            f.inheritance = Inheritance {
                affinity_high: i.string("affinity")? == Some("high"),
                safe: i.flag("safe")?,
                within_budget: i.is_true("within_budget")?,
                full_supported: i.is_true("full_supported")?,
                recent_supported: i.is_true("recent_supported")?,
                recent_sufficient: i.is_true("recent_sufficient")?,
            };
        }
        if let Some(t) = o.object("team")? {
            let mut team = Team {
                coordination_required: t.is_true("coordination_required")?,
                peers: peers(&t)?,
                provider_supported: t.is_true("provider_supported")?,
                safe: t.is_true("safe")?,
                sensitivity_approved: t.is_true("sensitivity_approved")?,
                within_budget: t.is_true("within_budget")?,
                latency_ratio: t.number("latency_ratio", Code::InvalidFact)?,
                writer_scopes: Vec::new(),
            };
            for s in t.array("scopes", Code::InvalidOwnershipPath)? {
                let s = Obj::of(s, "input.team.scopes", Code::InvalidOwnershipPath)?;
                if s.flag("is_writer")? == Some(false) {
                    continue;
                }
                let mut paths = Vec::new();
                add(&s, &mut paths)?;
                if paths.is_empty() {
                    return fail(Code::WriterScopeRequired, "input.team.scopes: a writer scope owns no path");
                }
                proposed.extend(paths.iter().cloned());
                team.writer_scopes.push(paths);
            }
            f.team_writer_paths = !team.writer_scopes.is_empty();
            f.team = Some(team);
        }
        f.capsule_sufficient = o.flag("capsule_sufficient")?;
        f.set_proposed(proposed)?;
        Ok(f)
    }
}

/// `peers` as a whole number; a fractional number is no peer count (as in the reference), a
/// non-number is a typed error.
fn peers(t: &Obj<'_>) -> Result<Option<u64>, CeError> {
    match t.get("peers") {
        Some(Value::Number(n)) if n.as_f64().is_some_and(|f| f.fract() != 0.0 || f < 0.0) => Ok(None),
        _ => t.count("peers", Code::InvalidFact),
    }
}

impl Route {
    /// The wire result `{mode, reason_codes}`.
    pub fn to_json(&self) -> Value {
        json!({
            "mode": self.mode.as_str(),
            "reason_codes": self.reason_codes.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
        })
    }
}

/// Reads `input` of `result-policy`. Every fact is type-checked, even for a write-prohibited
/// unit.
pub fn policy_facts(input: &Value) -> Result<PolicyFacts, CeError> {
    let o = Obj::of(input, "input", Code::InvalidRequest)?;
    let requested = match o.string_or("requested_mode", Code::InvalidResultMode)? {
        None => None,
        Some("ephemeral") => Some(ResultMode::Ephemeral),
        Some("durable") => Some(ResultMode::Durable),
        Some("artifact") => Some(ResultMode::Artifact),
        Some(_) => {
            return fail(Code::InvalidResultMode, "input.requested_mode: must be ephemeral, durable or artifact");
        }
    };
    let write_prohibited = o.is_true("write_prohibited")?;
    let mut handoff_required = false;
    for k in ["material", "writer", "partial", "resumable", "crosses_phase"] {
        handoff_required |= o.is_true(k)?;
    }
    Ok(PolicyFacts {
        requested,
        write_prohibited,
        handoff_required,
        large_raw_output: o.is_true("large_raw_output")?,
        authorize_handoff: o.flag("authorize_handoff")?,
        authorize_artifact: o.flag("authorize_artifact")?,
        vault: o.is_true("authorize_vault_write")?,
        settings: o.is_true("authorize_settings_write")?,
        workgroup: o.is_true("authorize_workgroup_write")?,
    })
}

impl Policy {
    /// The wire result.
    pub fn to_json(&self) -> Value {
        let w = &self.writes;
        json!({
            "mode": self.mode.as_str(),
            "write_prohibited": self.write_prohibited,
            "writes": {"handoff": w.handoff, "artifact": w.artifact, "vault": w.vault, "settings": w.settings, "workgroup": w.workgroup},
        })
    }
}

impl Budget {
    /// `{level, ratio, actions, mandatory_gates_preserved}`; mandatory gates always hold.
    pub fn to_json(&self) -> Value {
        let level = match self.level {
            BudgetLevel::Unbounded => "UNBOUNDED",
            BudgetLevel::Normal => "NORMAL",
            BudgetLevel::Soft => "SOFT",
            BudgetLevel::Checkpoint => "CHECKPOINT",
            BudgetLevel::Hard => "HARD",
        };
        json!({"level": level, "ratio": self.ratio, "actions": self.actions, "mandatory_gates_preserved": true})
    }
}

impl VerificationPlan {
    /// `{checks, consolidated, artifact_logs}`.
    pub fn to_json(&self) -> Value {
        json!({"checks": self.checks, "consolidated": self.consolidated, "artifact_logs": self.artifact_logs})
    }
}

/// The `workspace_root` of a `route` or `dispatch` request with every owned path its routing
/// facts name (the unit's and its lineage's, active writers', writer team scopes'): what an
/// adapter looks up to discover the workspace's links ([`crate::ce::links`]). `None` for another
/// operation, when the facts are not an object, or without a non-empty string root. Malformed
/// parts are skipped here; the decision refuses them with their codes.
pub fn workspace_paths(op: &str, payload: &Value) -> Option<(String, Vec<String>)> {
    let facts = match op {
        "route" => payload.get("input")?,
        "dispatch" => super::inner(payload.get("routing")?),
        _ => return None,
    };
    let root = facts.get("workspace_root")?.as_str().filter(|r| !r.is_empty())?;
    let mut out = Vec::new();
    let mut add = |o: &Value| {
        for key in ["owned_files", "resolved_owned_files"] {
            let items = o.get(key).and_then(Value::as_array).into_iter().flatten();
            out.extend(items.filter_map(Value::as_str).map(str::to_owned));
        }
    };
    add(facts);
    facts.get("lineage").into_iter().for_each(&mut add);
    let writers_key = if facts.get("active_writers").is_some() { "active_writers" } else { "active_writer_scopes" };
    facts.get(writers_key).and_then(Value::as_array).into_iter().flatten().for_each(&mut add);
    let scopes = facts.get("team").and_then(|t| t.get("scopes")).and_then(Value::as_array);
    scopes.into_iter().flatten().filter(|s| s.get("is_writer") != Some(&Value::Bool(false))).for_each(&mut add);
    Some((root.to_owned(), out))
}
