//! Lineage on the wire: a request's lineage record (any JSON) and `current` read into the core's
//! [`LineageRecord`] and [`Current`], and the evaluation written back. A record that fails the
//! published schema (`schemas/agent-lineage.schema.json`) or has a time that is not strict is no
//! record: the evaluator answers `UNKNOWN_PROVENANCE` for it, as for none.

use std::sync::LazyLock;

use serde_json::{Value, json};

use super::facts::Obj;
use crate::ce::error::{CeError, Code, fail};
use crate::ce::lineage::{self, CURRENT_KEYS, Current, Evaluation, LineageRecord};

/// The lineage schema, compiled once.
static SCHEMA: LazyLock<Result<jsonschema::Validator, String>> = LazyLock::new(|| {
    let v: Value = serde_json::from_str(include_str!("../../../../schemas/agent-lineage.schema.json"))
        .map_err(|e| format!("agent-lineage schema is not JSON: {e}"))?;
    jsonschema::validator_for(&v).map_err(|e| format!("agent-lineage schema does not compile: {e}"))
});

/// The schema compiles (checked by a test, so a broken schema file cannot ship).
pub fn schema_compiles() -> Result<(), String> {
    SCHEMA.as_ref().map(|_| ()).map_err(Clone::clone)
}

fn schema_valid(v: &Value) -> bool {
    matches!(&*SCHEMA, Ok(s) if s.is_valid(v))
}

/// `v` as a lineage record when it satisfies the schema and its times are strict.
pub fn record_of(v: &Value) -> Option<LineageRecord> {
    if !schema_valid(v) {
        return None;
    }
    serde_json::from_value::<LineageRecord>(v.clone()).ok().filter(LineageRecord::usable)
}

/// `current` of a request: an object whose compared keys are strings or null, with its flags.
pub fn current_of(v: &Value) -> Result<Current, CeError> {
    let cur = Obj::of(v, "current", Code::InvalidRequest)?;
    let mut c = Current::default();
    for key in CURRENT_KEYS {
        match cur.map().get(key) {
            None => {}
            Some(Value::Null) => c.set(key, None),
            Some(Value::String(s)) => c.set(key, Some(s)),
            Some(_) => return fail(Code::InvalidFact, format!("current.{key}: must be a string or null")),
        }
    }
    c.independent_reviewer = cur.is_true("independent_reviewer")?;
    c.final_gate = cur.is_true("final_gate")?;
    c.reconcile_required = cur.is_true("reconcile_required")?;
    c.scope_complete = cur.is_true("scope_complete")?;
    c.likely_continuation = cur.is_true("likely_continuation")?;
    Ok(c)
}

/// Evaluates the JSON `lineage` (`None` when absent) against the JSON `current` at `now_ns`.
pub fn evaluate(
    record: Option<&Value>,
    current: &Value,
    now_ns: i128,
    warm_lease_minutes: u64,
) -> Result<Evaluation, CeError> {
    let current = current_of(current)?;
    let record = record.and_then(record_of);
    Ok(lineage::evaluate(record.as_ref(), &current, now_ns, warm_lease_minutes))
}

impl Evaluation {
    /// The wire result `{state, invalidations}`.
    pub fn to_json(&self) -> Value {
        json!({
            "state": self.state.as_str(),
            "invalidations": self.invalidations.iter().map(|i| i.as_str()).collect::<Vec<_>>(),
        })
    }
}

impl LineageRecord {
    /// The record as JSON.
    pub fn to_json(&self) -> Value {
        // Strings, booleans and a mode: it always serialises.
        serde_json::to_value(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Value {
        json!({
            "schema": "knowzcode.agent-lineage/v1", "lineage_id": "lin-1", "workgroup_id": "wg",
            "platform": "claude", "platform_handle": "s-1", "parent_lineage_id": null, "role": "builder",
            "scope": "src", "phase": "2A", "fix_loop_id": null, "mode": "resume", "model": null, "effort": null,
            "runtime_prefix_hash": format!("sha256:{}", "a".repeat(64)), "baseline_hash": null,
            "capsule_hash": null, "tools_hash": "t", "permissions_hash": "p", "spec_hash": "s", "scope_hash": "h",
            "checkpoint_sha": "abcdef1", "sensitivity": "normal", "created_at": "2026-01-01T00:00:00Z",
            "last_used_at": "2026-01-01T00:00:00Z", "resumable": true, "lease_expires_at": null,
        })
    }

    #[test]
    fn the_typed_check_is_the_schema() {
        let good = record();
        assert!(schema_valid(&good));
        let typed: LineageRecord = serde_json::from_value(good.clone()).unwrap();
        assert!(typed.valid());
        assert_eq!(typed.to_json(), good, "the record round-trips");
        let long = "w".repeat(129);
        let bad_digest = format!("sha256:{}", "A".repeat(64));
        let cases: Vec<(&str, Value)> = vec![
            ("schema", json!("knowzcode.agent-lineage/v2")),
            ("lineage_id", json!("")),
            ("workgroup_id", json!(long)),
            ("workgroup_id", json!("é".repeat(128))),
            ("platform", json!("gemini")),
            ("platform_handle", json!("")),
            ("parent_lineage_id", json!("")),
            ("role", json!("")),
            ("scope", json!("")),
            ("phase", json!("4")),
            ("fix_loop_id", json!(long)),
            ("fix_loop_id", json!("f")),
            ("model", json!("")),
            ("effort", json!("")),
            ("runtime_prefix_hash", json!(bad_digest)),
            ("baseline_hash", json!("sha256:12")),
            ("capsule_hash", json!(format!("sha256:{}", "b".repeat(64)))),
            ("tools_hash", json!("")),
            ("checkpoint_sha", json!("abc")),
            ("checkpoint_sha", json!("abcdefé")),
            ("sensitivity", json!("secret")),
        ];
        for (k, v) in cases {
            let mut r = record();
            r[k] = v.clone();
            let typed: LineageRecord = serde_json::from_value(r.clone()).unwrap();
            assert_eq!(typed.valid(), schema_valid(&r), "{k} = {v}");
        }
    }
}
