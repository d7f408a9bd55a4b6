//! Knowledge events, their payloads and their streams.
//!
//! * `knowledge.declared` on `knowledge/vocabulary`: concerns and projects added to the vocabulary.
//! * `knowledge.chunk-put` on `knowledge/chunk/<slug>`: a chunk's new version (content changed).
//! * `knowledge.chunk-retired` on `knowledge/chunk/<slug>`.
//! * `session.started`, `knowledge.served`, `learning.logged`, `decision.logged`,
//!   `outcome.logged` on `session/<id>`; serves without a session go to `knowledge/serves`.

use serde::{Deserialize, Serialize};

/// Event type.
pub const DECLARED: &str = "knowledge.declared";
/// Event type.
pub const PUT: &str = "knowledge.chunk-put";
/// Event type.
pub const RETIRED: &str = "knowledge.chunk-retired";
/// Event type.
pub const SESSION_STARTED: &str = "session.started";
/// Event type.
pub const SERVED: &str = "knowledge.served";
/// Event type.
pub const LEARNING: &str = "learning.logged";
/// Event type.
pub const DECISION: &str = "decision.logged";
/// Event type.
pub const OUTCOME: &str = "outcome.logged";

/// Every knowledge event type.
pub const ALL: [&str; 8] = [DECLARED, PUT, RETIRED, SESSION_STARTED, SERVED, LEARNING, DECISION, OUTCOME];

/// The vocabulary stream.
pub const VOCABULARY_STREAM: &str = "knowledge/vocabulary";
/// The stream of serves outside any session.
pub const UNSESSIONED_STREAM: &str = "knowledge/serves";

/// A chunk's stream.
pub fn chunk_stream(slug: &str) -> String {
    format!("knowledge/chunk/{slug}")
}

/// A session's stream.
pub fn session_stream(session: &str) -> String {
    format!("session/{session}")
}

/// `knowledge.declared` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    /// Concerns added.
    #[serde(default)]
    pub concerns: Vec<String>,
    /// Projects added.
    #[serde(default)]
    pub projects: Vec<String>,
}

/// `knowledge.chunk-put` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Put {
    /// Slug.
    pub slug: String,
    /// Title.
    pub title: String,
    /// Concerns, sorted.
    pub concerns: Vec<String>,
    /// Projects it applies to, sorted; empty: shared.
    pub project_scope: Vec<String>,
    /// Content.
    pub content: String,
    /// blake3 of title, concerns, scope and content (hex).
    pub hash: String,
    /// o200k tokens of the content, computed by strata.
    pub tokens: u32,
    /// Version (1 for a new chunk, +1 for each content change).
    pub version: u64,
    /// Where it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// `knowledge.chunk-retired` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retired {
    /// Slug.
    pub slug: String,
    /// The version retired.
    pub version: u64,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `session.started` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionStarted {
    /// Session id.
    pub session: String,
    /// Agent or interface (e.g. `claude-code`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// What the session is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_context: Option<String>,
}

/// One chunk as served.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServedChunk {
    /// Slug.
    pub slug: String,
    /// Version served.
    pub version: u64,
    /// Content hash served (hex).
    pub hash: String,
    /// Tokens.
    pub tokens: u32,
}

/// `knowledge.served` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Served {
    /// Session, when the caller gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// What the agent was doing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_context: Option<String>,
    /// Concerns requested, sorted.
    pub concerns: Vec<String>,
    /// Project requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Chunks served, in answer order.
    pub chunks: Vec<ServedChunk>,
    /// Chunks that matched but did not fit the answer's token cap.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    /// Sum of the served chunks' tokens.
    pub total_tokens: u64,
    /// The caller's idempotency key, when it gave one: a retry with the same key is answered
    /// from this record, whatever changed since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// `learning.logged` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Learning {
    /// Session.
    pub session: String,
    /// What was learned.
    pub text: String,
    /// Concerns it relates to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub concerns: Vec<String>,
}

/// `decision.logged` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// Session.
    pub session: String,
    /// What was decided.
    pub decision: String,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
}

/// Session outcomes.
pub const OUTCOMES: [&str; 4] = ["success", "failure", "partial", "abandoned"];

/// `outcome.logged` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    /// Session.
    pub session: String,
    /// One of [`OUTCOMES`].
    pub outcome: String,
    /// Details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}
