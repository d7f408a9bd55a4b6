//! Vault deltas: whether a knowledge capture is skipped, batched, flushed, or amends or updates
//! an earlier record, with stable identities so duplicates are skipped and changed content under
//! the same identity is never lost.
//!
//! Empty deltas and exact semantic-content duplicates (the same category, title and content,
//! whatever the semantic key) are skipped, as in the reference. Beyond the reference:
//! normalisation keeps punctuation inside words ("C++ guidance" and "C guidance" are different
//! knowledge, as are "v1.2" and "v1 2"); a record carrying the same id under two spellings
//! (`KnowledgeId` and `knowledge_id`) is not ambiguous.

use serde_json::{Value, json};
use unicode_normalization::UnicodeNormalization as _;

use super::facts::Obj;
use super::json as cj;
use crate::ce::error::{CeError, Code, fail};

/// A vault delta as the ledger keeps it (`ce.vault-delta-applied`): the caller's JSON, verbatim.
/// The vault journal is state of the wire operation alone, so it stays JSON here.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Record(pub Value);

impl Record {
    /// The delta as a record under `knowledge_id` (its `KnowledgeId` set).
    pub fn with_id(mut self, knowledge_id: &str) -> Record {
        if let Some(o) = self.0.as_object_mut() {
            o.insert("KnowledgeId".to_owned(), Value::from(knowledge_id));
        }
        self
    }
}

impl std::ops::Deref for Record {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.0
    }
}

/// Most previous deltas and hashes one request may carry.
pub const PREVIOUS_MAX: usize = 10_000;

/// The decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// `skip`, `batch`, `flush`, `amend` or `update`.
    pub action: &'static str,
    /// Why.
    pub reason: &'static str,
    /// The record an amend or update targets.
    pub knowledge_id: Option<String>,
}

impl Decision {
    fn of(action: &'static str, reason: &'static str) -> Decision {
        Decision { action, reason, knowledge_id: None }
    }

    /// The wire result.
    pub fn to_json(&self) -> Value {
        match &self.knowledge_id {
            None => json!({"action": self.action, "reason": self.reason}),
            Some(id) => json!({"action": self.action, "reason": self.reason, "KnowledgeId": id}),
        }
    }
}

/// Text identity: NFKC, lower case, whitespace runs as one space, trimmed, trailing sentence
/// punctuation dropped. Punctuation inside the text is kept.
pub fn normalise(s: &str) -> String {
    let lower: String = s.nfkc().collect::<String>().to_lowercase();
    let joined = lower.split_whitespace().collect::<Vec<_>>().join(" ");
    joined.trim_end_matches(['.', '!', '?', ';', ':', ',']).trim_end().to_owned()
}

/// A normalised delta.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Delta {
    category: Option<String>,
    title: String,
    content: String,
    semantic_key: Option<String>,
    supersedes: Option<String>,
}

impl Delta {
    fn read(v: Option<&Value>, at: &str) -> Result<Delta, CeError> {
        let Some(v) = v else {
            return Ok(Delta {
                category: None,
                title: String::new(),
                content: String::new(),
                semantic_key: None,
                supersedes: None,
            });
        };
        let o = Obj::of(v, at, Code::InvalidRequest)?;
        let text = |k: &str| -> Result<String, CeError> { Ok(o.string(k)?.map(normalise).unwrap_or_default()) };
        let nonempty = |s: String| (!s.is_empty()).then_some(s);
        Ok(Delta {
            category: nonempty(text("category")?),
            title: text("title")?,
            content: text("content")?,
            semantic_key: nonempty(text("semantic_key")?),
            supersedes: o
                .string("supersedes")?
                .map(|s| s.nfkc().collect::<String>().trim().to_owned())
                .filter(|s| !s.is_empty()),
        })
    }

    fn semantic_hash(&self) -> String {
        cj::sha256_hex(
            cj::to_string(&json!({"category": self.category, "content": self.content, "semantic_key": self.semantic_key, "supersedes": self.supersedes, "title": self.title}))
                .as_bytes(),
        )
    }

    fn content_hash(&self) -> String {
        cj::sha256_hex(
            cj::to_string(&json!({"category": self.category, "content": self.content, "title": self.title})).as_bytes(),
        )
    }
}

/// A previous record's stable id: `KnowledgeId`, `knowledgeId` or `knowledge_id`; the same id
/// under several spellings is one id, different ids are ambiguous.
fn stable_id(v: &Value) -> Result<Option<String>, CeError> {
    let mut found: Option<String> = None;
    for k in ["KnowledgeId", "knowledgeId", "knowledge_id"] {
        if let Some(id) = v.get(k).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty()) {
            match &found {
                Some(f) if f != id => {
                    return fail(Code::VaultTargetAmbiguous, "previous_deltas: a record carries two different ids");
                }
                _ => found = Some(id.to_owned()),
            }
        }
    }
    Ok(found)
}

/// Decides on `input` of `vault-delta`.
pub fn decide(input: &Value) -> Result<Decision, CeError> {
    let o = Obj::of(input, "input", Code::InvalidRequest)?;
    let severity = severity_of(&o)?;
    let previous_raw = o.array("previous_deltas", Code::InvalidRequest)?;
    let hashes = o.strings("previous_hashes", Code::InvalidRequest)?;
    if previous_raw.len() > PREVIOUS_MAX || hashes.len() > PREVIOUS_MAX {
        return fail(Code::InvalidRequest, "input: more than 10,000 previous deltas or hashes");
    }
    decide_against(&o, severity, previous_raw.iter(), &hashes)
}

/// Decides on `input` of `vault-delta` against previous records given apart from the request
/// (a ledger's); the request's own `previous_deltas` and `previous_hashes` are not read.
pub fn decide_with<'a>(input: &Value, previous: impl Iterator<Item = &'a Value>) -> Result<Decision, CeError> {
    let o = Obj::of(input, "input", Code::InvalidRequest)?;
    let severity = severity_of(&o)?;
    decide_against(&o, severity, previous, &[])
}

fn severity_of(o: &Obj<'_>) -> Result<Option<String>, CeError> {
    match o.get("severity") {
        None => Ok(None),
        Some(Value::String(s)) => match s.trim().to_uppercase().as_str() {
            l @ ("LOW" | "MEDIUM" | "HIGH" | "CRITICAL") => Ok(Some(l.to_owned())),
            _ => fail(Code::InvalidSeverity, "input.severity: LOW, MEDIUM, HIGH or CRITICAL"),
        },
        Some(_) => fail(Code::InvalidSeverity, "input.severity: LOW, MEDIUM, HIGH or CRITICAL"),
    }
}

fn decide_against<'a>(
    o: &Obj<'_>,
    severity: Option<String>,
    previous: impl Iterator<Item = &'a Value>,
    hashes: &[&str],
) -> Result<Decision, CeError> {
    let delta = Delta::read(o.get("delta"), "input.delta")?;
    let previous: Vec<(Delta, &Value)> =
        previous.map(|p| Delta::read(Some(p), "input.previous_deltas").map(|d| (d, p))).collect::<Result<_, _>>()?;
    let explicit_save = o.is_true("explicit_save")?;
    let interruption_sensitive = o.is_true("interruption_sensitive")?;

    if delta.title.is_empty() && delta.content.is_empty() && delta.supersedes.is_none() {
        return Ok(Decision::of("skip", "EMPTY_DELTA"));
    }
    let sh = delta.semantic_hash();
    if hashes.contains(&sh.as_str()) || previous.iter().any(|(p, _)| p.semantic_hash() == sh) {
        return Ok(Decision::of("skip", "SEMANTIC_DUPLICATE"));
    }
    let ch = delta.content_hash();
    // An exact semantic-content duplicate (category, title and content) is skipped, even under
    // another semantic key, as the seed and the reference have it.
    if previous.iter().any(|(p, _)| p.content_hash() == ch) {
        return Ok(Decision::of("skip", "SEMANTIC_DUPLICATE"));
    }
    if let Some(key) = &delta.semantic_key {
        let matches: Vec<&Value> =
            previous.iter().filter(|(p, _)| p.semantic_key.as_ref() == Some(key)).map(|(_, v)| *v).collect();
        if !matches.is_empty() {
            return target("amend", "SEMANTIC_IDENTITY_CHANGED", &matches);
        }
    }
    if let Some(sup) = &delta.supersedes {
        let mut matches = Vec::new();
        for (p, v) in &previous {
            let by_id = stable_id(v)?.as_ref() == Some(sup);
            let by_chain = p.supersedes.as_ref() == Some(sup) && p.category == delta.category;
            if by_id || by_chain {
                matches.push(*v);
            }
        }
        if !matches.is_empty() {
            return target("update", "SUPERSESSION_CHANGED", &matches);
        }
    }
    let reason = if explicit_save {
        "EXPLICIT_SAVE"
    } else if interruption_sensitive {
        "INTERRUPTION_SENSITIVE"
    } else if matches!(severity.as_deref(), Some("HIGH" | "CRITICAL")) {
        "HIGH_RISK"
    } else if matches!(delta.category.as_deref(), Some("correction" | "deprecation")) {
        "DURABILITY_REQUIRED"
    } else {
        return Ok(Decision::of("batch", "NORMAL_DELTA"));
    };
    Ok(Decision::of("flush", reason))
}

/// Exactly one matching record with a stable id, or a typed refusal.
fn target(action: &'static str, reason: &'static str, matches: &[&Value]) -> Result<Decision, CeError> {
    let mut ids = Vec::new();
    for m in matches {
        if let Some(id) = stable_id(m)? {
            ids.push(id);
        }
    }
    ids.sort();
    ids.dedup();
    match (ids.as_slice(), matches.len()) {
        ([], _) => fail(Code::VaultTargetRequired, "previous_deltas: the matching record has no KnowledgeId"),
        ([id], 1) => Ok(Decision { action, reason, knowledge_id: Some(id.clone()) }),
        _ => fail(Code::VaultTargetAmbiguous, "previous_deltas: more than one record matches"),
    }
}
