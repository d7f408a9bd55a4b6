//! The capsule pipeline: one fail-closed path from a draft to a sealed capsule. Schema, privacy
//! scan (keys, overlong strings, secret-like values, provider ids, transcripts), file references
//! (portable repository-relative paths; artifacts under the runtime-owned root), seal (`sha256:`
//! over the reference canonical JSON without `capsule_hash`), and overflow that moves only the
//! optional evidence out, recording its path, digest and item count, never truncating mandatory
//! content. The transformed capsule is scanned again before it is sealed.
//!
//! Beyond the reference: an incoming `capsule_hash` is verified, not silently replaced; the
//! artifact path is validated whenever it is given; externalised evidence is recorded with its
//! SHA-256 (`externalized`).

use std::sync::LazyLock;

use serde_json::{Value, json};

use super::error::{CeError, Code, fail};
use super::json as cj;
use super::privacy::{self, CAPSULE_CLASSES};

/// Default `max_bytes`.
pub const MAX_BYTES_DEFAULT: u64 = 12_288;
/// Longest string in a capsule, in UTF-8 bytes.
pub const STRING_BYTES_MAX: usize = 4096;
/// The runtime-owned artifact root.
pub const ARTIFACT_ROOT: &str = "knowzcode/artifacts";
/// The schema id.
pub const SCHEMA_ID: &str = "knowzcode.context-capsule/v1";

static SCHEMA: LazyLock<Result<jsonschema::Validator, String>> = LazyLock::new(|| {
    let v: Value = serde_json::from_str(include_str!("../../../schemas/context-capsule.schema.json"))
        .map_err(|e| format!("context-capsule schema is not JSON: {e}"))?;
    jsonschema::validator_for(&v).map_err(|e| format!("context-capsule schema does not compile: {e}"))
});

/// The schema compiles (checked by a test).
pub fn schema_compiles() -> Result<(), String> {
    SCHEMA.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// What the caller asks of the pipeline.
#[derive(Clone, Debug)]
pub struct SealRequest<'a> {
    /// The draft capsule (a `capsule_hash` on it, if any, is verified).
    pub capsule: &'a Value,
    /// Largest sealed capsule, in bytes of canonical JSON.
    pub max_bytes: u64,
    /// Where evidence goes on overflow.
    pub artifact_path: Option<&'a str>,
    /// Roots the caller authorises for it (only those under [`ARTIFACT_ROOT`] count).
    pub artifact_roots: Vec<&'a str>,
}

/// A sealed capsule.
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

/// The capsule hash: `sha256:` over the canonical JSON without `capsule_hash` at any depth.
pub fn hash(capsule: &Value) -> String {
    hash_and_size(capsule).0
}

/// The hash, and the canonical size of the capsule once the hash is set: the canonical form
/// without the hash plus `"capsule_hash":"sha256:…"` and its comma (capsules have other keys).
fn hash_and_size(capsule: &Value) -> (String, usize) {
    let body = cj::to_string_without(capsule, "capsule_hash");
    let nested = capsule.as_object().is_some_and(|m| m.values().any(|v| has_key(v, "capsule_hash")));
    let size = if nested { None } else { Some(body.len() + r#","capsule_hash":"sha256:"#.len() + 64 + 1) };
    let h = cj::sha256_tagged(body.as_bytes());
    let size = size.unwrap_or_else(|| {
        let mut with = capsule.clone();
        if let Some(m) = with.as_object_mut() {
            m.insert("capsule_hash".to_owned(), json!(h));
        }
        cj::to_string(&with).len()
    });
    (h, size)
}

fn has_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(m) => m.contains_key(key) || m.values().any(|x| has_key(x, key)),
        Value::Array(a) => a.iter().any(|x| has_key(x, key)),
        _ => false,
    }
}

/// Whether `p` is a portable repository-relative path: non-empty, at most 512 bytes, no
/// surrounding whitespace, no `\`, `:`, control character, leading `/`, or empty, `.` or `..`
/// segment.
pub fn is_safe_relative(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 512
        && p.trim() == p
        && !p.contains(['\\', ':'])
        && !p.chars().any(char::is_control)
        && !p.starts_with('/')
        && p.split('/').all(|s| !matches!(s, "" | "." | ".."))
}

fn under(p: &str, root: &str) -> bool {
    p == root || (p.starts_with(root) && p.as_bytes().get(root.len()) == Some(&b'/'))
}

/// Runs the pipeline.
pub fn seal(req: &SealRequest<'_>) -> Result<Sealed, CeError> {
    if req.max_bytes == 0 {
        return fail(Code::InvalidRequest, "max_bytes: must be a positive integer");
    }
    let Value::Object(draft) = req.capsule else {
        return fail(Code::CapsuleSchemaInvalid, "capsule: must be an object");
    };
    let claimed = match draft.get("capsule_hash") {
        None | Some(Value::Null) => None,
        Some(Value::String(h)) => Some(h.clone()),
        Some(_) => return fail(Code::CapsuleSchemaInvalid, "capsule.capsule_hash: a sha256:… string or null"),
    };
    let mut capsule = draft.clone();
    capsule.insert("capsule_hash".to_owned(), json!(format!("sha256:{}", "0".repeat(64))));
    let capsule = Value::Object(capsule);
    check_schema(&capsule)?;
    scan(&capsule)?;
    check_refs(&capsule)?;
    // The artifact path is checked whenever it is given, not only when it is used.
    let artifact = match req.artifact_path {
        None => None,
        Some(p) => Some(authorised_artifact(p, &req.artifact_roots)?),
    };
    let (h, bytes) = hash_and_size(&capsule);
    if let Some(c) = claimed
        && c != h
    {
        return fail(Code::CapsuleHashMismatch, "capsule.capsule_hash: does not match the canonical content");
    }
    let sealed = with_hash(capsule, h);
    if bytes as u64 <= req.max_bytes {
        return Ok(Sealed { capsule: sealed.0, hash: sealed.1, bytes, externalized: false });
    }
    // Overflow: only the optional evidence may move out, and only to an authorised artifact.
    let evidence = sealed.0.get("evidence").and_then(Value::as_array).filter(|e| !e.is_empty()).cloned();
    let (Some(evidence), Some(path)) = (evidence, artifact) else {
        return fail(Code::CapsuleMandatoryOverflow, format!("capsule: {bytes} bytes > max_bytes {}", req.max_bytes));
    };
    let mut moved = sealed.0;
    let Some(m) = moved.as_object_mut() else {
        return fail(Code::CapsuleSchemaInvalid, "capsule: must be an object");
    };
    let digest = cj::sha256_tagged(cj::to_string(&Value::Array(evidence.clone())).as_bytes());
    m.insert("evidence".to_owned(), json!([]));
    let refs = m.entry("artifact_refs").or_insert_with(|| json!([]));
    if let Some(list) = refs.as_array_mut()
        && !list.iter().any(|r| r == path)
    {
        list.push(json!(path));
    }
    let ext = m.entry("externalized").or_insert_with(|| json!([]));
    if let Some(list) = ext.as_array_mut() {
        list.push(json!({"path": path, "sha256": digest, "item_count": evidence.len()}));
    }
    // The transformed capsule is checked again, whole, before it is sealed.
    check_schema(&moved)?;
    scan(&moved)?;
    check_refs(&moved)?;
    let (h, bytes) = hash_and_size(&moved);
    let (capsule, hash) = with_hash(moved, h);
    if bytes as u64 > req.max_bytes {
        return fail(
            Code::CapsuleMandatoryOverflow,
            format!("capsule: {bytes} bytes > max_bytes {} even without its evidence", req.max_bytes),
        );
    }
    Ok(Sealed { capsule, hash, bytes, externalized: true })
}

/// Verifies a sealed capsule: schema, privacy, references and its hash.
pub fn verify(capsule: &Value) -> Result<String, CeError> {
    check_schema(capsule)?;
    scan(capsule)?;
    check_refs(capsule)?;
    let h = hash(capsule);
    if capsule.get("capsule_hash").and_then(Value::as_str) != Some(h.as_str()) {
        return fail(Code::CapsuleHashMismatch, "capsule.capsule_hash: does not match the canonical content");
    }
    Ok(h)
}

fn with_hash(mut v: Value, h: String) -> (Value, String) {
    if let Some(m) = v.as_object_mut() {
        m.insert("capsule_hash".to_owned(), json!(h));
    }
    (v, h)
}

fn check_schema(v: &Value) -> Result<(), CeError> {
    let validator = SCHEMA.as_ref().map_err(|e| CeError::new(Code::CapsuleSchemaInvalid, e.clone()))?;
    if validator.is_valid(v) {
        return Ok(());
    }
    match validator.iter_errors(v).next() {
        None => Ok(()),
        Some(e) => fail(Code::CapsuleSchemaInvalid, format!("capsule{}: {e}", e.instance_path())),
    }
}

/// Keys, string sizes and values at any depth: keys and sizes while walking, then every string
/// value through the privacy scanner at once.
fn scan(v: &Value) -> Result<(), CeError> {
    let key = |k: &str| {
        if privacy::capsule_key_forbidden(k) {
            return fail(Code::CapsulePrivateContent, "capsule: a key names private or raw content");
        }
        Ok(())
    };
    let size = |s: &str| {
        if s.len() > STRING_BYTES_MAX {
            return fail(Code::CapsuleStringTooLong, "capsule: a string is longer than 4096 bytes");
        }
        Ok(())
    };
    let mut strings = Vec::new();
    privacy::strings_of(v, &key, &size, &mut strings)?;
    match privacy::scan_all(&strings, CAPSULE_CLASSES) {
        None => Ok(()),
        Some(rule) => fail(Code::CapsulePrivateContent, format!("capsule: a value matches privacy rule {}", rule.id)),
    }
}

fn check_refs(v: &Value) -> Result<(), CeError> {
    let strs = |key: &str| v.get(key).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str);
    let specs = v.get("specs").and_then(Value::as_array).into_iter().flatten().filter_map(|s| s["path"].as_str());
    for p in strs("owned_files").chain(strs("read_files")).chain(specs) {
        if !is_safe_relative(p) {
            return fail(Code::CapsuleArtifactRefInvalid, "capsule: a file or spec path is not a safe relative path");
        }
    }
    let artifacts = |key: &str| {
        v.get(key).and_then(Value::as_array).into_iter().flatten().filter_map(|x| x.get("artifact")?.as_str())
    };
    let ext = v.get("externalized").and_then(Value::as_array).into_iter().flatten().filter_map(|x| x["path"].as_str());
    for p in strs("artifact_refs").chain(artifacts("failures")).chain(artifacts("evidence")).chain(ext) {
        if !is_safe_relative(p) {
            return fail(Code::CapsuleArtifactRefInvalid, "capsule: an artifact path is not a safe relative path");
        }
        if !under(p, ARTIFACT_ROOT) {
            return fail(Code::CapsuleArtifactRefUnauthorized, "capsule: an artifact lies outside knowzcode/artifacts");
        }
    }
    Ok(())
}

fn authorised_artifact<'a>(path: &'a str, roots: &[&str]) -> Result<&'a str, CeError> {
    if !is_safe_relative(path) || roots.iter().any(|r| !is_safe_relative(r)) {
        return fail(Code::CapsuleArtifactRefInvalid, "artifact_path / artifact_roots: not safe relative paths");
    }
    let trusted: Vec<&&str> = roots.iter().filter(|r| under(r, ARTIFACT_ROOT)).collect();
    if trusted.is_empty() || !trusted.iter().any(|r| under(path, r)) {
        return fail(
            Code::CapsuleArtifactRefUnauthorized,
            "artifact_path: not under an authorised root in knowzcode/artifacts",
        );
    }
    Ok(path)
}
