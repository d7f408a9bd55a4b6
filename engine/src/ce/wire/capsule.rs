//! Capsules on the wire: a request's capsule (any JSON) read into the core's [`Capsule`] after
//! it passes the published JSON Schema, and the sealed capsule written back. The schema is also
//! the [`Schema`] the core pipeline checks every capsule against, drafts built in code included.

use std::sync::LazyLock;

use serde_json::Value;

use crate::ce::capsule::{self, Capsule, Schema};
use crate::ce::error::{CeError, Code, fail};

pub use crate::ce::capsule::{ARTIFACT_ROOT, MAX_BYTES_DEFAULT, SCHEMA_ID, STRING_BYTES_MAX, is_safe_relative};

static VALIDATOR: LazyLock<Result<jsonschema::Validator, String>> = LazyLock::new(|| {
    let v: Value = serde_json::from_str(include_str!("../../../../schemas/context-capsule.schema.json"))
        .map_err(|e| format!("context-capsule schema is not JSON: {e}"))?;
    jsonschema::validator_for(&v).map_err(|e| format!("context-capsule schema does not compile: {e}"))
});

/// The schema compiles (checked by a test).
pub fn schema_compiles() -> Result<(), String> {
    VALIDATOR.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// `knowzcode.context-capsule/v1` as published (`schemas/context-capsule.schema.json`).
pub struct JsonSchema;

/// The capsule schema every seal checks against.
pub static SCHEMA: JsonSchema = JsonSchema;

impl Schema for JsonSchema {
    fn check(&self, c: &Capsule) -> Result<(), CeError> {
        check_json(&to_json(c))
    }
}

/// The first schema violation of the JSON capsule `v`, named by its location.
fn check_json(v: &Value) -> Result<(), CeError> {
    let validator = VALIDATOR.as_ref().map_err(|e| CeError::new(Code::CapsuleSchemaInvalid, e.clone()))?;
    if validator.is_valid(v) {
        return Ok(());
    }
    match validator.iter_errors(v).next() {
        None => Ok(()),
        Some(e) => fail(Code::CapsuleSchemaInvalid, format!("capsule{}: {e}", e.instance_path())),
    }
}

/// The capsule as JSON.
pub fn to_json(c: &Capsule) -> Value {
    // A capsule is strings, vectors and structs: it always serialises.
    serde_json::to_value(c).unwrap_or_default()
}

/// A request's draft capsule: an object satisfying the schema, its `capsule_hash` absent, null
/// (a placeholder stands in for the check, as in the reference) or of the schema's form.
pub fn draft_of(v: &Value) -> Result<Capsule, CeError> {
    let Value::Object(draft) = v else {
        return fail(Code::CapsuleSchemaInvalid, "capsule: must be an object");
    };
    let claimed = match draft.get("capsule_hash") {
        None | Some(Value::Null) => None,
        Some(Value::String(h)) => Some(h.clone()),
        Some(_) => return fail(Code::CapsuleSchemaInvalid, "capsule.capsule_hash: a sha256:… string or null"),
    };
    let mut with_hash = draft.clone();
    let placeholder = || Value::from(format!("sha256:{}", "0".repeat(64)));
    with_hash.insert("capsule_hash".to_owned(), claimed.clone().map_or_else(placeholder, Value::from));
    let with_hash = Value::Object(with_hash);
    check_json(&with_hash)?;
    let mut c = typed(with_hash)?;
    c.capsule_hash = claimed;
    Ok(c)
}

/// Whether the draft `v` is the capsule its `capsule_hash` names (the `verify` flag of a
/// `capsule` request): `CAPSULE_HASH_MISMATCH` when the hash is absent or names other content.
/// The hash is over the content as handed in, before any overflow moves evidence out.
pub fn check_claim(v: &Value) -> Result<(), CeError> {
    let draft = draft_of(v)?;
    match &draft.capsule_hash {
        None => fail(Code::CapsuleHashMismatch, "capsule.capsule_hash: verify asks for a sealed capsule; none given"),
        Some(h) if *h == capsule::hash(&draft) => Ok(()),
        Some(_) => fail(Code::CapsuleHashMismatch, "capsule.capsule_hash: does not match the canonical content"),
    }
}

/// A schema-valid JSON capsule as the core's.
fn typed(v: Value) -> Result<Capsule, CeError> {
    serde_json::from_value(v).map_err(|e| CeError::new(Code::CapsuleSchemaInvalid, format!("capsule: {e}")))
}

/// What a caller of the JSON pipeline asks.
#[derive(Clone, Debug)]
pub struct SealRequest<'a> {
    /// The draft capsule (a `capsule_hash` on it, if any, is replaced by the seal).
    pub capsule: &'a Value,
    /// Largest sealed capsule, in bytes of canonical JSON.
    pub max_bytes: u64,
    /// Where evidence goes on overflow.
    pub artifact_path: Option<&'a str>,
    /// Roots the caller authorises for it (only those under [`ARTIFACT_ROOT`] count).
    pub artifact_roots: Vec<&'a str>,
}

/// A sealed capsule, as JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct Sealed {
    /// The capsule with its `capsule_hash`.
    pub capsule: Value,
    /// Its hash.
    pub hash: String,
    /// Canonical size in bytes.
    pub bytes: usize,
    /// Whether evidence was moved out.
    pub externalized: bool,
}

/// Reads the draft and runs the core pipeline ([`capsule::seal`]) on it.
pub fn seal_typed(req: &SealRequest<'_>) -> Result<capsule::Sealed, CeError> {
    if req.max_bytes == 0 {
        return fail(Code::InvalidRequest, "max_bytes: must be a positive integer");
    }
    let draft = draft_of(req.capsule)?;
    let typed_req = capsule::SealRequest {
        capsule: draft,
        max_bytes: req.max_bytes,
        artifact_path: req.artifact_path,
        artifact_roots: req.artifact_roots.clone(),
    };
    capsule::seal(&typed_req, &SCHEMA)
}

/// [`seal_typed`], its capsule written back as JSON.
pub fn seal(req: &SealRequest<'_>) -> Result<Sealed, CeError> {
    let s = seal_typed(req)?;
    Ok(Sealed { capsule: to_json(&s.capsule), hash: s.hash, bytes: s.bytes, externalized: s.externalized })
}

/// Verifies a sealed JSON capsule: schema, privacy, references and its hash.
pub fn verify(v: &Value) -> Result<String, CeError> {
    check_json(v)?;
    capsule::verify(&typed(v.clone())?, &SCHEMA)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_encoding_is_the_reference_canonical_json() {
        // Control characters, quotes, DEL, U+2028 and non-ASCII; absent, null and present
        // optional fields; a count written as a float.
        let v: Value = serde_json::from_str(
            r#"{"schema":"knowzcode.context-capsule/v1","task_id":"t\u0001\"q\\","workgroup_id":"wg",
            "phase":"2A","objective":"é\u007f\u2028\n\t\u000b😀","node_ids":[],"owned_files":["src/a.rs"],
            "read_files":[],"specs":[{"path":"s.md","verify_ids":["V1"]}],"approved_decisions":[],
            "checkpoint_sha":null,"failures":[{"command":"c","summary":"s","artifact":null}],"risks":[],
            "constraints":[],"next_action":"n","evidence":[{"kind":"log","summary":"x"},
            {"kind":"test","summary":"y","artifact":null},{"kind":"file","summary":"z","artifact":"knowzcode/artifacts/a"}],
            "externalized":[{"path":"knowzcode/artifacts/b","sha256":"sha256:00","item_count":2.0}],
            "capsule_hash":"sha256:11"}"#,
        )
        .unwrap();
        let c: Capsule = typed(v.clone()).unwrap();
        assert_eq!(c.canonical(), crate::ce::wire::json::to_string(&v));
        assert_eq!(c.evidence.as_ref().unwrap()[0].artifact, None);
        assert_eq!(c.evidence.as_ref().unwrap()[1].artifact, Some(None));
        let mut strings = Vec::new();
        crate::ce::wire::strings_of(&v, &|_| Ok::<(), ()>(()), &|_| Ok(()), &mut strings).unwrap();
        assert_eq!(c.strings(), strings, "the typed walk is the JSON walk");
    }
}
