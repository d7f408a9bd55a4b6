//! Schema validation of artifacts against the JSON Schemas in `schemas/` (compiled into the
//! binary, validated with the `jsonschema` crate, draft 2020-12).

use std::sync::LazyLock;

use serde_json::Value;

use super::kind::ArtifactKind;

/// One schema violation: where (JSON pointer into the document), which keyword, and the
/// validator's message.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// JSON pointer into the artifact document (`/brdRefs/0`).
    pub pointer: String,
    /// The schema keyword that failed (`pattern`, `enum`, `required`, …).
    pub keyword: String,
    /// What the validator said.
    pub message: String,
}

static VALIDATORS: LazyLock<Vec<Result<jsonschema::Validator, String>>> = LazyLock::new(|| {
    ArtifactKind::ALL
        .iter()
        .map(|k| {
            let schema: Value = serde_json::from_str(k.schema()).map_err(|e| format!("{k} schema is not JSON: {e}"))?;
            jsonschema::validator_for(&schema).map_err(|e| format!("{k} schema does not compile: {e}"))
        })
        .collect()
});

/// Every violation of `doc` against the schema of `kind`, sorted by pointer.
pub fn validate(kind: ArtifactKind, doc: &Value) -> Result<Vec<Violation>, String> {
    let i = ArtifactKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
    let validator = VALIDATORS[i].as_ref().map_err(Clone::clone)?;
    let mut out: Vec<Violation> = validator
        .iter_errors(doc)
        .map(|e| Violation {
            pointer: e.instance_path().to_string(),
            keyword: e.kind().keyword().to_owned(),
            message: e.to_string(),
        })
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}
