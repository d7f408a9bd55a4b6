//! The signed measurement envelope (`knowzcode.measurement-envelope/v2`): who measured a set of
//! pairs, on which corpus and runtime, when, and an Ed25519 signature over all of it.
//!
//! [`verify`] never throws: it returns every reason the envelope is not trusted, so the
//! provenance gate can say all of them at once. Stricter than the reference evaluator: the
//! algorithm is pinned to Ed25519 (keys are SPKI PEM blocks that must hold an Ed25519 key, and
//! signatures are checked with `verify_strict`), trusted keys are an explicit input (never the
//! environment), and replay protection consults the journal's record of consumed runs instead
//! of a list the caller passes in.
//!
//! What is signed: the UTF-8 canonical JSON ([`json`]) of the envelope without `signature`.
//! `corpus_digest` is `sha256:` over the canonical JSON of the pairs array exactly as written,
//! so reordering, adding or editing a pair breaks it.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde_json::{Map, Value, json};

use super::corpus::is_version;
use crate::ce::{json, time};

/// The envelope schema id.
pub const SCHEMA: &str = "knowzcode.measurement-envelope/v2";
/// Exactly these keys, no more, no fewer.
pub const KEYS: [&str; 12] = [
    "accounting_source",
    "candidate_version",
    "corpus_digest",
    "corpus_version",
    "measured_at",
    "measurement_run_id",
    "pair_count",
    "promotion_authorized",
    "runtime_digest",
    "schema",
    "signature",
    "signer_key_id",
];
/// Oldest trusted measurement: 30 days before now (inclusive).
pub const MAX_AGE_NS: i128 = 30 * 24 * 3600 * 1_000_000_000;
/// Furthest a measurement may lie in the future: 5 minutes of clock skew (inclusive).
pub const MAX_SKEW_NS: i128 = 5 * 60 * 1_000_000_000;
/// Most trusted keys.
pub const TRUSTED_KEYS_MAX: usize = 64;

const SPKI_PREFIX: [u8; 12] = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];
const PKCS8_PREFIX: [u8; 16] =
    [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];

/// A key or envelope that cannot be used, with the rule it breaks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EnvelopeError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, EnvelopeError> {
    Err(EnvelopeError(msg.into()))
}

/// Whether `s` is a measurement run id (the ledger's rule, which consumes them).
pub use crate::ce::ledger::is_run_id;

/// Whether `s` is a signer key id (`measurement-key-` and 1–64 of `a-z0-9._-`).
pub fn is_key_id(s: &str) -> bool {
    s.strip_prefix("measurement-key-").is_some_and(|r| {
        (1..=64).contains(&r.len()) && r.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
    })
}

/// Whether `s` is `sha256:` and 64 lowercase hex digits.
pub fn is_sha256(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

fn pem_body(text: &str, label: &str) -> Result<Vec<u8>, EnvelopeError> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let text = text.trim();
    let Some(inner) = text.strip_prefix(&begin).and_then(|r| r.strip_suffix(&end)) else {
        return err(format!("not a PEM `{label}` block (expected {begin} … {end})"));
    };
    let b64: String = inner.split_whitespace().collect();
    B64.decode(b64).map_err(|_| EnvelopeError(format!("the PEM `{label}` block is not base64")))
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = B64.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Parses an Ed25519 public key from an SPKI PEM block (`-----BEGIN PUBLIC KEY-----`).
pub fn public_key_from_pem(text: &str) -> Result<VerifyingKey, EnvelopeError> {
    let der = pem_body(text, "PUBLIC KEY")?;
    let Some(raw) = der.strip_prefix(&SPKI_PREFIX[..]).filter(|r| r.len() == 32) else {
        return err("the public key is not an Ed25519 SubjectPublicKeyInfo (only Ed25519 is trusted)");
    };
    let mut bytes = [0u8; 32];
    bytes.copy_from_slice(raw);
    VerifyingKey::from_bytes(&bytes).map_err(|_| EnvelopeError("the public key is not a valid Ed25519 point".into()))
}

/// Parses an Ed25519 private key from a PKCS #8 PEM block (`-----BEGIN PRIVATE KEY-----`, as
/// `openssl genpkey -algorithm ed25519` writes).
pub fn signing_key_from_pem(text: &str) -> Result<SigningKey, EnvelopeError> {
    let der = pem_body(text, "PRIVATE KEY")?;
    let Some(raw) = der.strip_prefix(&PKCS8_PREFIX[..]).filter(|r| r.len() == 32) else {
        return err("the private key is not an Ed25519 PKCS #8 key (only Ed25519 signs envelopes)");
    };
    let mut seed = [0u8; 32];
    seed.copy_from_slice(raw);
    Ok(SigningKey::from_bytes(&seed))
}

/// The signing key with this 32-byte seed.
pub fn signing_key_from_seed(seed: [u8; 32]) -> SigningKey {
    SigningKey::from_bytes(&seed)
}

/// `key` as a PKCS #8 PEM block.
pub fn signing_key_to_pem(key: &SigningKey) -> String {
    let mut der = PKCS8_PREFIX.to_vec();
    der.extend_from_slice(key.as_bytes());
    pem("PRIVATE KEY", &der)
}

/// `key` as an SPKI PEM block.
pub fn public_key_to_pem(key: &VerifyingKey) -> String {
    let mut der = SPKI_PREFIX.to_vec();
    der.extend_from_slice(key.as_bytes());
    pem("PUBLIC KEY", &der)
}

/// The keys whose envelopes are trusted, by key id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedKeys(BTreeMap<String, VerifyingKey>);

impl TrustedKeys {
    /// Reads `{"measurement-key-…": "-----BEGIN PUBLIC KEY-----…"}`.
    pub fn from_json(v: &Value) -> Result<TrustedKeys, EnvelopeError> {
        let Some(map) = v.as_object() else {
            return err("trusted keys: a JSON object mapping key id to a PEM public key");
        };
        if map.len() > TRUSTED_KEYS_MAX {
            return err(format!("trusted keys: {} given; at most {TRUSTED_KEYS_MAX}", map.len()));
        }
        let mut keys = BTreeMap::new();
        for (id, pem) in map {
            if !is_key_id(id) {
                return err(format!("trusted keys: {id:?} is not `measurement-key-` and 1–64 of a-z 0-9 . _ -"));
            }
            let Some(text) = pem.as_str() else {
                return err(format!("trusted keys: {id}: the value is a PEM string"));
            };
            let key = public_key_from_pem(text).map_err(|e| EnvelopeError(format!("trusted keys: {id}: {e}")))?;
            keys.insert(id.clone(), key);
        }
        Ok(TrustedKeys(keys))
    }

    /// One key.
    pub fn single(id: &str, key: VerifyingKey) -> TrustedKeys {
        TrustedKeys(BTreeMap::from([(id.to_owned(), key)]))
    }

    /// The key for `id`.
    pub fn get(&self, id: &str) -> Option<&VerifyingKey> {
        self.0.get(id)
    }
}

/// What a signer attests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    /// Candidate policy version measured.
    pub candidate_version: String,
    /// Corpus version measured.
    pub corpus_version: String,
    /// Runtime measured (`sha256:…`).
    pub runtime_digest: String,
    /// When, RFC 3339.
    pub measured_at: String,
    /// The run's id (`measurement-<hex>`).
    pub measurement_run_id: String,
    /// The signing key's id.
    pub signer_key_id: String,
    /// The signer authorises promotion on these pairs.
    pub promotion_authorized: bool,
}

/// `sha256:` over the canonical JSON of the pairs array.
pub fn pairs_digest(pairs: &Value) -> String {
    json::sha256_tagged(json::to_string(pairs).as_bytes())
}

/// Signs `claims` over `pairs` (the pairs array as it will be verified).
pub fn sign(claims: &Claims, pairs: &Value, key: &SigningKey) -> Result<Value, EnvelopeError> {
    let Some(list) = pairs.as_array() else { return err("pairs: an array") };
    for (field, value) in [("candidate_version", &claims.candidate_version), ("corpus_version", &claims.corpus_version)]
    {
        if !is_version(value) {
            return err(format!("{field} {value:?}: letters, digits and . _ + -, at most 128"));
        }
    }
    if !is_sha256(&claims.runtime_digest) {
        return err("runtime_digest: `sha256:` and 64 lowercase hex digits");
    }
    if !is_run_id(&claims.measurement_run_id) {
        return err("measurement_run_id: `measurement-` and 16 to 64 lowercase hex digits");
    }
    if !is_key_id(&claims.signer_key_id) {
        return err("signer_key_id: `measurement-key-` and 1–64 of a-z 0-9 . _ -");
    }
    if time::parse_rfc3339(&claims.measured_at, "measured_at").is_err() {
        return err("measured_at: strict RFC 3339 date-time");
    }
    let mut env = json!({
        "accounting_source": "authoritative",
        "candidate_version": claims.candidate_version,
        "corpus_digest": pairs_digest(pairs),
        "corpus_version": claims.corpus_version,
        "measured_at": claims.measured_at,
        "measurement_run_id": claims.measurement_run_id,
        "pair_count": list.len(),
        "promotion_authorized": claims.promotion_authorized,
        "runtime_digest": claims.runtime_digest,
        "schema": SCHEMA,
        "signer_key_id": claims.signer_key_id,
    });
    let signature: Signature = key.sign(json::to_string(&env).as_bytes());
    env["signature"] = json!(B64.encode(signature.to_bytes()));
    Ok(env)
}

/// What the verifier expects, from outside the envelope.
#[derive(Clone, Copy, Debug)]
pub struct Expected<'a> {
    /// Now, ns since the epoch.
    pub now_ns: i128,
    /// The candidate version being promoted.
    pub candidate_version: &'a str,
    /// The corpus version the pairs were measured on ([`super::promote::evaluate`] sets it to
    /// [`super::corpus::envelope_version`] of the corpus document).
    pub corpus_version: &'a str,
    /// The runtime the candidate runs on.
    pub runtime_digest: &'a str,
    /// Trusted keys.
    pub keys: &'a TrustedKeys,
}

/// A trusted envelope's identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trusted {
    /// The run, to record as consumed.
    pub measurement_run_id: String,
    /// Digest of the pairs.
    pub corpus_digest: String,
    /// Who signed.
    pub signer_key_id: String,
}

/// Checks `envelope` over `pairs`. `consumed` answers whether a run id was already used (and
/// where). Every failing rule is reported.
pub fn verify(
    envelope: &Value,
    pairs: &Value,
    expected: &Expected<'_>,
    consumed: &dyn Fn(&str) -> Option<u64>,
) -> Result<Trusted, Vec<String>> {
    let mut why: Vec<String> = Vec::new();
    let Some(env) = envelope.as_object() else {
        return Err(vec!["envelope: must be a JSON object".to_owned()]);
    };
    let mut keys: Vec<&str> = env.keys().map(String::as_str).collect();
    keys.sort_unstable();
    if keys != KEYS {
        let extra: Vec<&str> = keys.iter().filter(|k| !KEYS.contains(k)).copied().collect();
        let missing: Vec<&str> = KEYS.iter().filter(|k| !env.contains_key(**k)).copied().collect();
        why.push(format!("envelope: exactly the 12 v2 keys (missing {missing:?}, unexpected {extra:?})"));
    }
    let s = |k: &str| env.get(k).and_then(Value::as_str).unwrap_or_default();
    if s("schema") != SCHEMA {
        why.push(format!("schema: {SCHEMA}"));
    }
    let run_id = s("measurement_run_id");
    if !is_run_id(run_id) {
        why.push("measurement_run_id: `measurement-` and 16 to 64 lowercase hex digits".to_owned());
    } else if let Some(seq) = consumed(run_id) {
        why.push(format!("measurement_run_id: {run_id} was already consumed (journal seq {seq}); a run is used once"));
    }
    let key_id = s("signer_key_id");
    if !is_key_id(key_id) {
        why.push("signer_key_id: `measurement-key-` and 1–64 of a-z 0-9 . _ -".to_owned());
    }
    for (field, want) in
        [("candidate_version", expected.candidate_version), ("corpus_version", expected.corpus_version)]
    {
        if !is_version(s(field)) {
            why.push(format!("{field}: letters, digits and . _ + -, at most 128"));
        } else if s(field) != want {
            why.push(format!("{field}: {:?} but {want:?} is expected", s(field)));
        }
    }
    if !is_sha256(s("runtime_digest")) {
        why.push("runtime_digest: `sha256:` and 64 lowercase hex digits".to_owned());
    } else if s("runtime_digest") != expected.runtime_digest {
        why.push(format!("runtime_digest: {} but {} is expected", s("runtime_digest"), expected.runtime_digest));
    }
    if s("accounting_source") != "authoritative" {
        why.push("accounting_source: must be `authoritative`".to_owned());
    }
    if env.get("promotion_authorized") != Some(&Value::Bool(true)) {
        why.push("promotion_authorized: must be true".to_owned());
    }
    let n = pairs.as_array().map_or(0, Vec::len);
    if env.get("pair_count").and_then(Value::as_u64) != Some(n as u64) {
        why.push(format!("pair_count: must equal the {n} pairs given"));
    }
    match time::parse_rfc3339(s("measured_at"), "measured_at") {
        Err(_) => why.push("measured_at: strict RFC 3339 date-time".to_owned()),
        Ok(at) if at > expected.now_ns + MAX_SKEW_NS => {
            why.push("measured_at: more than 5 minutes in the future".to_owned());
        }
        Ok(at) if expected.now_ns - at > MAX_AGE_NS => {
            why.push("measured_at: older than 30 days; measure again".to_owned());
        }
        Ok(_) => {}
    }
    let digest = pairs_digest(pairs);
    if s("corpus_digest") != digest {
        why.push(format!(
            "corpus_digest: the pairs given digest to {digest}; the envelope says {:?}",
            s("corpus_digest")
        ));
    }
    let sig = s("signature");
    let sig_ok = !sig.is_empty()
        && sig.trim_end_matches('=').bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
        && sig.len() - sig.trim_end_matches('=').len() <= 2;
    match (sig_ok, expected.keys.get(key_id)) {
        (false, _) => why.push("signature: standard base64".to_owned()),
        (true, None) => why.push(format!("signer_key_id: {key_id:?} is not a trusted key")),
        (true, Some(key)) => {
            let mut unsigned: Map<String, Value> = env.clone();
            unsigned.remove("signature");
            let verified = B64
                .decode(sig)
                .ok()
                .and_then(|b| <[u8; 64]>::try_from(b.as_slice()).ok())
                .map(|b| Signature::from_bytes(&b))
                .is_some_and(|sig| {
                    key.verify_strict(json::to_string(&Value::Object(unsigned)).as_bytes(), &sig).is_ok()
                });
            if !verified {
                why.push(format!("signature: does not verify under {key_id}"));
            }
        }
    }
    if !why.is_empty() {
        return Err(why);
    }
    Ok(Trusted { measurement_run_id: run_id.to_owned(), corpus_digest: digest, signer_key_id: key_id.to_owned() })
}
