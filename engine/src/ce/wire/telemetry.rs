//! Efficiency events (`knowzcode.efficiency-event/v1`): logical, billed and outcome measures kept
//! apart, private or identifying content refused by the shared privacy scanner, billed figures
//! only with an accounting source.
//!
//! Beyond the reference: unknown fields are refused, not silently dropped (a misspelled counter
//! would otherwise become `null`); a currency without an amount is refused.

use std::sync::LazyLock;

use serde_json::{Map, Value, json};

use crate::ce::error::{CeError, Code, fail};
use crate::ce::privacy::{self, TELEMETRY_CLASSES};
use crate::ce::router::Reason;
use crate::ce::time::parse_rfc3339;

/// The schema id.
pub const SCHEMA_ID: &str = "knowzcode.efficiency-event/v1";

const TOP: [&str; 13] = [
    "schema",
    "event",
    "observed_at",
    "task_corpus_id",
    "provider",
    "runtime",
    "model",
    "profile",
    "mode",
    "reason_codes",
    "logical",
    "billed",
    "outcome",
];
const LOGICAL: [&str; 6] = [
    "estimated_context_occupancy",
    "compaction_count",
    "repeated_file_reads",
    "prompt_bytes",
    "tool_output_bytes",
    "capsule_bytes",
];
const BILLED: [&str; 8] = [
    "uncached_input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
    "amount",
    "currency",
    "units",
    "accounting_source",
];
const OUTCOME: [&str; 7] = [
    "accepted_workgroup",
    "verify_passed",
    "verify_total",
    "rework_rounds",
    "escaped_high_critical",
    "elapsed_ms",
    "audit_score",
];

static SCHEMA: LazyLock<Result<jsonschema::Validator, String>> = LazyLock::new(|| {
    let v: Value = serde_json::from_str(include_str!("../../../../schemas/efficiency-event.schema.json"))
        .map_err(|e| format!("efficiency-event schema is not JSON: {e}"))?;
    jsonschema::validator_for(&v).map_err(|e| format!("efficiency-event schema does not compile: {e}"))
});

/// The schema compiles (checked by a test).
pub fn schema_compiles() -> Result<(), String> {
    SCHEMA.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// Keys while walking, then every string value through the privacy scanner at once (also
/// applied to whole `strata telemetry` requests by [`crate::telemetry`]).
pub(crate) fn private(v: &Value) -> Result<(), CeError> {
    let key = |k: &str| {
        if privacy::telemetry_key_forbidden(k) {
            return fail(Code::PrivateTelemetry, "event: a key names private or identifying content");
        }
        Ok(())
    };
    let mut strings = Vec::new();
    super::strings_of(v, &key, &|_: &str| Ok(()), &mut strings)?;
    match privacy::scan_all(&strings, TELEMETRY_CLASSES) {
        None => Ok(()),
        Some(r) => fail(Code::PrivateTelemetry, format!("event: a value matches privacy rule {}", r.id)),
    }
}

fn namespace(raw: &Value, name: &str, keys: &[&str]) -> Result<Value, CeError> {
    let mut out = Map::new();
    let given = match raw.get(name) {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => return fail(Code::EfficiencyEventInvalid, format!("event.{name}: must be an object")),
    };
    if let Some(m) = given
        && let Some(k) = m.keys().find(|k| !keys.contains(&k.as_str()))
    {
        return fail(Code::EfficiencyEventInvalid, format!("event.{name}.{k}: unknown field"));
    }
    for k in keys {
        out.insert((*k).to_owned(), given.and_then(|m| m.get(*k)).cloned().unwrap_or(Value::Null));
    }
    Ok(Value::Object(out))
}

/// Normalises a raw event into the full `v1` shape, or refuses it. Privacy first, as in the
/// reference: an event refused for any other reason (a field outside its enum, say) that holds a
/// value with a secret or identifier shape of the reference's detectors is `PRIVATE_TELEMETRY`.
pub fn normalise(raw: &Value) -> Result<Value, CeError> {
    let Some(top) = raw.as_object() else {
        return fail(Code::EfficiencyEventInvalid, "event: must be an object");
    };
    private(raw)?;
    shape(raw, top).map_err(|e| {
        let mut strings = Vec::new();
        let _ = super::strings_of(raw, &|_| Ok::<(), ()>(()), &|_| Ok(()), &mut strings);
        match privacy::shaped(&strings, true) {
            Some(id) => CeError::new(Code::PrivateTelemetry, format!("event: a value has the shape {id}")),
            None => e,
        }
    })
}

/// The checks after the privacy scan: known fields, accounting, the schema and its extra rules.
fn shape(raw: &Value, top: &Map<String, Value>) -> Result<Value, CeError> {
    if let Some(k) = top.keys().find(|k| !TOP.contains(&k.as_str())) {
        return fail(Code::EfficiencyEventInvalid, format!("event.{k}: unknown field"));
    }
    let logical = namespace(raw, "logical", &LOGICAL)?;
    let mut billed = namespace(raw, "billed", &BILLED)?;
    let outcome = namespace(raw, "outcome", &OUTCOME)?;
    let figures = [
        "uncached_input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "output_tokens",
        "amount",
        "units",
    ];
    let source = billed["accounting_source"].as_str().unwrap_or("unknown").to_owned();
    if figures.iter().any(|f| !billed[*f].is_null())
        && !matches!(source.as_str(), "authoritative" | "provider-reported")
    {
        return fail(
            Code::AccountingSourceRequired,
            "event.billed.accounting_source: authoritative or provider-reported",
        );
    }
    if !billed["currency"].is_null() && billed["amount"].is_null() {
        return fail(Code::EfficiencyEventInvalid, "event.billed.currency: given without an amount");
    }
    billed["accounting_source"] = json!(source);
    let mut reasons: Vec<Value> = Vec::new();
    match top.get("reason_codes") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            let mut known: Vec<Reason> = items.iter().filter_map(|r| r.as_str().and_then(Reason::parse)).collect();
            known.sort();
            known.dedup();
            reasons.extend(known.iter().map(|r| json!(r.as_str())));
            // Unknown codes go last and then fail the schema.
            reasons.extend(items.iter().filter(|r| r.as_str().and_then(Reason::parse).is_none()).cloned());
        }
        Some(_) => return fail(Code::EfficiencyEventInvalid, "event.reason_codes: must be an array"),
    }
    let get = |k: &str| top.get(k).cloned().unwrap_or(Value::Null);
    let event = json!({
        "schema": SCHEMA_ID,
        "event": get("event"),
        "observed_at": get("observed_at"),
        "task_corpus_id": get("task_corpus_id"),
        "provider": get("provider"),
        "runtime": get("runtime"),
        "model": get("model"),
        "profile": get("profile"),
        "mode": get("mode"),
        "reason_codes": reasons,
        "logical": logical,
        "billed": billed,
        "outcome": outcome,
    });
    // Every string in `event` came from `raw`, already scanned, under keys of its own.
    let validator = SCHEMA.as_ref().map_err(|e| CeError::new(Code::EfficiencyEventInvalid, e.clone()))?;
    if !validator.is_valid(&event) {
        let why = validator
            .iter_errors(&event)
            .next()
            .map(|e| format!("event{}: {e}", e.instance_path()))
            .unwrap_or_default();
        return fail(Code::EfficiencyEventInvalid, why);
    }
    if parse_rfc3339(event["observed_at"].as_str().unwrap_or(""), "event.observed_at").is_err() {
        return fail(Code::EfficiencyEventInvalid, "event.observed_at: strict RFC 3339");
    }
    let o = &event["outcome"];
    if let (Some(p), Some(t)) = (o["verify_passed"].as_u64(), o["verify_total"].as_u64())
        && p > t
    {
        return fail(Code::EfficiencyEventInvalid, "event.outcome.verify_passed: more than verify_total");
    }
    if o["audit_score"].as_f64().is_some_and(|s| s > 100.0) {
        return fail(Code::EfficiencyEventInvalid, "event.outcome.audit_score: at most 100");
    }
    if event["event"] == "dispatch_decision" && (event["mode"].is_null() || reasons.is_empty()) {
        return fail(Code::EfficiencyEventInvalid, "event: a dispatch_decision needs a mode and a reason code");
    }
    Ok(event)
}
