//! An artifact's content and the events that record it.
//!
//! The content of an artifact is its kind, id, fields and body; its lifecycle state is not
//! content (changing state is a transition, not an edit). The content hash is blake3 over the
//! canonical JSON of `{kind, id, fields, body}`, so re-intake of an unchanged file is recognised
//! whatever its key order or whitespace.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use strata_journal::Hash;

use super::kind::{ArtifactKey, ArtifactKind};

/// What an intake file or a command says an artifact should be.
#[derive(Clone, Debug, PartialEq)]
pub struct ArtifactDraft {
    /// Identity.
    pub key: ArtifactKey,
    /// Lifecycle state.
    pub state: String,
    /// Every field except `kind`, `id`, `state` and `body` (including `entity`).
    pub fields: Map<String, Value>,
    /// Markdown content.
    pub body: String,
    /// Where it came from (a file path), for messages and audit.
    pub source: Option<String>,
}

impl ArtifactDraft {
    /// The content hash of this draft.
    pub fn content_hash(&self) -> Hash {
        content_hash(&self.key, &self.fields, &self.body)
    }

    /// The entity this artifact is classified under (`None` for entities themselves).
    pub fn entity(&self) -> Option<&str> {
        self.fields.get("entity").and_then(Value::as_str)
    }

    /// The whole document as the schema sees it.
    pub fn document(&self) -> Value {
        let mut doc = self.fields.clone();
        doc.insert("kind".into(), Value::String(self.key.kind.name().into()));
        doc.insert("id".into(), Value::String(self.key.id.clone()));
        doc.insert("state".into(), Value::String(self.state.clone()));
        if !self.body.is_empty() {
            doc.insert("body".into(), Value::String(self.body.clone()));
        }
        Value::Object(doc)
    }
}

/// blake3 over the canonical JSON of `{kind, id, fields, body}`.
pub fn content_hash(key: &ArtifactKey, fields: &Map<String, Value>, body: &str) -> Hash {
    let doc = serde_json::json!({
        "kind": key.kind.name(),
        "id": key.id,
        "fields": Value::Object(fields.clone()),
        "body": body,
    });
    crate::canonical::hash(&doc)
}

/// `artifact.created` v1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Created {
    /// Kind name.
    pub kind: String,
    /// Id.
    pub id: String,
    /// Initial state.
    pub state: String,
    /// Fields.
    pub fields: Map<String, Value>,
    /// Body.
    pub body: String,
    /// Content hash (hex).
    pub hash: String,
    /// Source file, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// `artifact.updated` v1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Updated {
    /// Kind name.
    pub kind: String,
    /// Id.
    pub id: String,
    /// New fields.
    pub fields: Map<String, Value>,
    /// New body.
    pub body: String,
    /// New content hash (hex).
    pub hash: String,
    /// Content hash it replaces (hex).
    pub previous_hash: String,
    /// Source file, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// `artifact.transitioned` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transitioned {
    /// Kind name.
    pub kind: String,
    /// Id.
    pub id: String,
    /// State before.
    pub from: String,
    /// State after.
    pub to: String,
    /// Why, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `artifact.reviewed` v1: clears the artifact's suspicion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reviewed {
    /// Kind name.
    pub kind: String,
    /// Id.
    pub id: String,
    /// The content hash that was reviewed (hex).
    pub hash: String,
    /// The causes cleared (`kind:id` of each changed upstream artifact).
    pub cleared: Vec<String>,
}

/// `artifact.deleted` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deleted {
    /// Kind name.
    pub kind: String,
    /// Id.
    pub id: String,
    /// Content hash at deletion (hex).
    pub previous_hash: String,
}

/// `entity.tier-promoted` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierPromoted {
    /// Entity id.
    pub id: String,
    /// Tier before.
    pub from: String,
    /// Tier after.
    pub to: String,
}

/// Event type names of the knowledge base.
pub mod event_types {
    /// See [`super::Created`].
    pub const CREATED: &str = "artifact.created";
    /// See [`super::Updated`].
    pub const UPDATED: &str = "artifact.updated";
    /// See [`super::Transitioned`].
    pub const TRANSITIONED: &str = "artifact.transitioned";
    /// See [`super::Reviewed`].
    pub const REVIEWED: &str = "artifact.reviewed";
    /// See [`super::Deleted`].
    pub const DELETED: &str = "artifact.deleted";
    /// See [`super::TierPromoted`].
    pub const TIER_PROMOTED: &str = "entity.tier-promoted";
    /// Every knowledge-base event type.
    pub const ALL: [&str; 6] = [CREATED, UPDATED, TRANSITIONED, REVIEWED, DELETED, TIER_PROMOTED];
}

/// Parses a kind name from an event, with a message naming the event.
pub fn parse_kind(name: &str) -> Result<ArtifactKind, String> {
    ArtifactKind::from_name(name).ok_or_else(|| format!("unknown artifact kind {name:?}"))
}
