//! The capsule pipeline: one fail-closed path from a draft [`Capsule`] to a sealed one. Schema,
//! privacy scan (overlong strings, secret-like values, provider ids, transcripts), file
//! references (portable repository-relative paths; artifacts under the runtime-owned root), seal
//! (`sha256:` over the reference canonical JSON without `capsule_hash`), and overflow that moves
//! only the optional evidence out, recording its path, digest and item count, never truncating
//! mandatory content. The transformed capsule is checked again, whole, before it is sealed.
//!
//! The capsule is typed; its fields are declared in the canonical key order (all keys are ASCII,
//! so code-unit order is byte order), which makes its compact serde encoding the reference's
//! canonical JSON: strings escape as `JSON.stringify` escapes them and the only number is a
//! small count. The JSON Schema (`knowzcode.context-capsule/v1`) is a rule over the capsule's
//! JSON form, so the pipeline takes it as a [`Schema`]: the wire adapter's
//! ([`super::wire::capsule::SCHEMA`]) checks that form against the published schema file.
//!
//! Sealing replaces any `capsule_hash` the draft carries (a placeholder such as 64 zeros, or a
//! stale seal), as in the reference, once it has passed the schema's pattern; [`verify`] is the
//! separate question of whether a handed-back capsule is the one its hash names. Beyond the
//! reference: the artifact path is validated whenever it is given; externalised evidence is
//! recorded with its SHA-256 (`externalized`).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::digest::sha256_tagged;
use super::error::{CeError, Code, fail};
use super::privacy::{self, CAPSULE_CLASSES};

/// Default `max_bytes`.
pub const MAX_BYTES_DEFAULT: u64 = 12_288;
/// Longest string in a capsule, in UTF-8 bytes.
pub const STRING_BYTES_MAX: usize = 4096;
/// The runtime-owned artifact root.
pub const ARTIFACT_ROOT: &str = "knowzcode/artifacts";
/// The schema id.
pub const SCHEMA_ID: &str = "knowzcode.context-capsule/v1";

/// A `knowzcode.context-capsule/v1` capsule. Fields are in canonical key order; an optional
/// field that is absent stays absent when written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capsule {
    /// Decisions already approved.
    pub approved_decisions: Vec<String>,
    /// Artifact paths it refers to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_refs: Option<Vec<String>>,
    /// `sha256:` of the canonical capsule without this field (`None` on a draft).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capsule_hash: Option<String>,
    /// The checkpoint commit, when there is one.
    pub checkpoint_sha: Option<String>,
    /// Constraints.
    pub constraints: Vec<String>,
    /// Optional evidence (the only content overflow may move out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Vec<Evidence>>,
    /// Evidence moved out by overflow (strata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub externalized: Option<Vec<Externalized>>,
    /// Failures so far.
    pub failures: Vec<Failure>,
    /// What to do next.
    pub next_action: String,
    /// Knowledge node ids.
    pub node_ids: Vec<String>,
    /// The objective.
    pub objective: String,
    /// Paths the worker owns.
    pub owned_files: Vec<String>,
    /// Workflow phase (`1A`, `1B`, `2A`, `2B`, `3`).
    pub phase: String,
    /// Paths it reads.
    pub read_files: Vec<String>,
    /// Risks.
    pub risks: Vec<String>,
    /// [`SCHEMA_ID`].
    pub schema: String,
    /// Specifications with their verification ids.
    pub specs: Vec<Spec>,
    /// Task id.
    pub task_id: String,
    /// Workgroup id.
    pub workgroup_id: String,
}

/// A specification reference.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Its path.
    pub path: String,
    /// Verification ids.
    pub verify_ids: Vec<String>,
}

/// A failure so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    /// Where its raw output is kept.
    pub artifact: Option<String>,
    /// What ran.
    pub command: String,
    /// What happened.
    pub summary: String,
}

/// One piece of evidence.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// Where it is kept: absent, null (`Some(None)`) or a path.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "present_or_null")]
    pub artifact: Option<Option<String>>,
    /// `file`, `test`, `log`, `vault` or `user`.
    pub kind: String,
    /// What it shows.
    pub summary: String,
}

/// Evidence overflow moved out (the capsule's field order; the ledger event records the same
/// facts as [`super::ledger::Externalized`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Externalized {
    /// Items moved.
    #[serde(deserialize_with = "whole_count")]
    pub item_count: u64,
    /// Artifact path.
    pub path: String,
    /// `sha256:` of the moved evidence's canonical JSON.
    pub sha256: String,
}

/// A field that may be absent (outer `None`), null or a value.
mod present_or_null {
    use super::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Option<String>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(Some(x)) => s.serialize_str(x),
            _ => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
        Option::<String>::deserialize(d).map(Some)
    }
}

/// A count written as a whole number (`2.0` counts, as in JavaScript).
fn whole_count<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let f = f64::deserialize(d)?;
    if f >= 0.0 && f.fract() == 0.0 && f < 9.007_199_254_740_992e15 {
        Ok(f as u64)
    } else {
        Err(serde::de::Error::custom("item_count: a whole number"))
    }
}

/// The capsule schema, as a check over the capsule's JSON form (the wire adapter owns the JSON).
pub trait Schema {
    /// `Ok` when `c` satisfies the schema, else `CAPSULE_SCHEMA_INVALID` naming the first
    /// violation.
    fn check(&self, c: &Capsule) -> Result<(), CeError>;
}

/// What the caller asks of the pipeline.
#[derive(Clone, Debug)]
pub struct SealRequest<'a> {
    /// The draft capsule (a `capsule_hash` on it, if any, must be well-formed and is replaced).
    pub capsule: Capsule,
    /// Largest sealed capsule, in bytes of canonical JSON.
    pub max_bytes: u64,
    /// Where evidence goes on overflow.
    pub artifact_path: Option<&'a str>,
    /// Roots the caller authorises for it (only those under [`ARTIFACT_ROOT`] count).
    pub artifact_roots: Vec<&'a str>,
}

/// A sealed capsule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    /// The capsule with its `capsule_hash`.
    pub capsule: Capsule,
    /// Its hash.
    pub hash: String,
    /// Canonical size in bytes.
    pub bytes: usize,
    /// Whether evidence was moved out.
    pub externalized: bool,
}

impl Capsule {
    /// The reference canonical JSON of the capsule.
    pub fn canonical(&self) -> String {
        // Serialising plain strings, vectors and structs cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Every string value in document order (canonical key order, array order).
    pub fn strings(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        out.extend(self.approved_decisions.iter().map(String::as_str));
        out.extend(self.artifact_refs.iter().flatten().map(String::as_str));
        out.extend(self.capsule_hash.as_deref());
        out.extend(self.checkpoint_sha.as_deref());
        out.extend(self.constraints.iter().map(String::as_str));
        for e in self.evidence.iter().flatten() {
            out.extend(e.artifact.as_ref().and_then(Option::as_deref));
            out.push(&e.kind);
            out.push(&e.summary);
        }
        for x in self.externalized.iter().flatten() {
            out.push(&x.path);
            out.push(&x.sha256);
        }
        for f in &self.failures {
            out.extend(f.artifact.as_deref());
            out.push(&f.command);
            out.push(&f.summary);
        }
        out.push(&self.next_action);
        out.extend(self.node_ids.iter().map(String::as_str));
        out.push(&self.objective);
        out.extend(self.owned_files.iter().map(String::as_str));
        out.push(&self.phase);
        out.extend(self.read_files.iter().map(String::as_str));
        out.extend(self.risks.iter().map(String::as_str));
        out.push(&self.schema);
        for s in &self.specs {
            out.push(&s.path);
            out.extend(s.verify_ids.iter().map(String::as_str));
        }
        out.push(&self.task_id);
        out.push(&self.workgroup_id);
        out
    }
}

/// The capsule hash: `sha256:` over the canonical JSON without `capsule_hash`.
pub fn hash(capsule: &Capsule) -> String {
    hash_and_size(capsule).0
}

/// The hash, and the canonical size of the capsule once the hash is set: the canonical form
/// without the hash plus `"capsule_hash":"sha256:…"` and its comma (capsules have other keys).
fn hash_and_size(capsule: &Capsule) -> (String, usize) {
    let body = Capsule { capsule_hash: None, ..capsule.clone() }.canonical();
    let size = body.len() + r#","capsule_hash":"sha256:"#.len() + 64 + 1;
    (sha256_tagged(body.as_bytes()), size)
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

/// Runs the pipeline, checking the capsule against `schema` before and after any overflow.
pub fn seal(req: &SealRequest<'_>, schema: &dyn Schema) -> Result<Sealed, CeError> {
    if req.max_bytes == 0 {
        return fail(Code::InvalidRequest, "max_bytes: must be a positive integer");
    }
    let mut capsule = req.capsule.clone();
    // A given hash must have the schema's form (`md5:…` is a schema violation); it is then
    // replaced by the seal. Without one, a placeholder stands in for the schema check.
    capsule.capsule_hash.get_or_insert_with(|| format!("sha256:{}", "0".repeat(64)));
    schema.check(&capsule)?;
    seal_valid(req, capsule, schema).map_err(|e| privacy_first(&req.capsule, e))
}

/// Privacy before everything after the schema, as in the reference: a capsule refused for
/// another reason (a file reference, its size) that holds a value with a secret or identifier
/// shape of the reference's detectors is refused as private content. (The request's
/// `artifact_path` is not capsule content: an unsafe one stays `CAPSULE_ARTIFACT_REF_INVALID`,
/// as in the reference.)
fn privacy_first(c: &Capsule, e: CeError) -> CeError {
    if matches!(e.code, Code::CapsulePrivateContent | Code::CapsuleStringTooLong | Code::CapsuleSchemaInvalid) {
        return e;
    }
    match privacy::shaped(&c.strings(), false) {
        Some(id) => CeError::new(Code::CapsulePrivateContent, format!("capsule: a value has the shape {id}")),
        None => e,
    }
}

/// [`seal`] once the draft (`capsule`, a hash in place) satisfies the schema.
fn seal_valid(req: &SealRequest<'_>, mut capsule: Capsule, schema: &dyn Schema) -> Result<Sealed, CeError> {
    scan(&capsule)?;
    check_refs(&capsule)?;
    // The artifact path is checked whenever it is given, not only when it is used.
    let artifact = match req.artifact_path {
        None => None,
        Some(p) => Some(authorised_artifact(p, &req.artifact_roots)?),
    };
    let (h, bytes) = hash_and_size(&capsule);
    capsule.capsule_hash = Some(h.clone());
    if bytes as u64 <= req.max_bytes {
        return Ok(Sealed { capsule, hash: h, bytes, externalized: false });
    }
    // Overflow: only the optional evidence may move out, and only to an authorised artifact.
    let evidence = capsule.evidence.clone().filter(|e| !e.is_empty());
    let (Some(evidence), Some(path)) = (evidence, artifact) else {
        return fail(Code::CapsuleMandatoryOverflow, format!("capsule: {bytes} bytes > max_bytes {}", req.max_bytes));
    };
    let digest = sha256_tagged(serde_json::to_string(&evidence).unwrap_or_default().as_bytes());
    let mut moved = capsule;
    moved.evidence = Some(Vec::new());
    let refs = moved.artifact_refs.get_or_insert_with(Vec::new);
    if !refs.iter().any(|r| r == path) {
        refs.push(path.to_owned());
    }
    let item_count = u64::try_from(evidence.len()).unwrap_or(u64::MAX);
    moved.externalized.get_or_insert_with(Vec::new).push(Externalized {
        item_count,
        path: path.to_owned(),
        sha256: digest,
    });
    // The transformed capsule is checked again, whole, before it is sealed.
    check(&moved, schema)?;
    let (h, bytes) = hash_and_size(&moved);
    moved.capsule_hash = Some(h.clone());
    if bytes as u64 > req.max_bytes {
        return fail(
            Code::CapsuleMandatoryOverflow,
            format!("capsule: {bytes} bytes > max_bytes {} even without its evidence", req.max_bytes),
        );
    }
    Ok(Sealed { capsule: moved, hash: h, bytes, externalized: true })
}

/// Verifies a sealed capsule: schema, privacy, references and its hash.
pub fn verify(capsule: &Capsule, schema: &dyn Schema) -> Result<String, CeError> {
    check(capsule, schema)?;
    let h = hash(capsule);
    if capsule.capsule_hash.as_deref() != Some(h.as_str()) {
        return fail(Code::CapsuleHashMismatch, "capsule.capsule_hash: does not match the canonical content");
    }
    Ok(h)
}

/// Schema, privacy scan and references, in that order.
fn check(c: &Capsule, schema: &dyn Schema) -> Result<(), CeError> {
    schema.check(c)?;
    scan(c)?;
    check_refs(c)
}

/// String sizes, then every string value through the privacy scanner at once. (Key names need
/// no scan: the schema admits only the capsule's own keys, none of which names private content.)
fn scan(c: &Capsule) -> Result<(), CeError> {
    let strings = c.strings();
    if strings.iter().any(|s| s.len() > STRING_BYTES_MAX) {
        return fail(Code::CapsuleStringTooLong, "capsule: a string is longer than 4096 bytes");
    }
    match privacy::scan_all(&strings, CAPSULE_CLASSES) {
        None => Ok(()),
        Some(rule) => fail(Code::CapsulePrivateContent, format!("capsule: a value matches privacy rule {}", rule.id)),
    }
}

fn check_refs(c: &Capsule) -> Result<(), CeError> {
    let specs = c.specs.iter().map(|s| s.path.as_str());
    for p in c.owned_files.iter().chain(&c.read_files).map(String::as_str).chain(specs) {
        if !is_safe_relative(p) {
            return fail(Code::CapsuleArtifactRefInvalid, "capsule: a file or spec path is not a safe relative path");
        }
    }
    let refs = c.artifact_refs.iter().flatten().map(String::as_str);
    let failures = c.failures.iter().filter_map(|f| f.artifact.as_deref());
    let evidence = c.evidence.iter().flatten().filter_map(|e| e.artifact.as_ref().and_then(Option::as_deref));
    let ext = c.externalized.iter().flatten().map(|x| x.path.as_str());
    for p in refs.chain(failures).chain(evidence).chain(ext) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_capsule_key_names_private_content() {
        // The scan skips key names because the schema admits only these.
        let keys = [
            "approved_decisions",
            "artifact_refs",
            "capsule_hash",
            "checkpoint_sha",
            "constraints",
            "evidence",
            "externalized",
            "failures",
            "next_action",
            "node_ids",
            "objective",
            "owned_files",
            "phase",
            "read_files",
            "risks",
            "schema",
            "specs",
            "task_id",
            "workgroup_id",
            "path",
            "verify_ids",
            "artifact",
            "command",
            "summary",
            "kind",
            "item_count",
            "sha256",
        ];
        assert!(keys.iter().all(|k| !privacy::capsule_key_forbidden(k)));
    }
}
