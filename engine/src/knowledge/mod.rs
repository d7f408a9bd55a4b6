//! The Knowledge API: concern-routed knowledge chunks served to any agent, with every serve, every
//! learning, decision and outcome in the journal, and the learned-routing analysis over them.
//!
//! * [`events`]: the event payloads and their streams.
//! * [`state`]: the `knowledge` projection: the vocabulary, the chunks with a bitset index per
//!   concern and per project scope, sessions, serves and outcomes; `get` and `list`.
//! * [`chunk`]: chunk files (Markdown with front matter, or JSON) parsed and checked.
//! * [`decide`]: the pure deciders (declare, put, retire, start a session, serve, log).
//! * [`insights`]: merge, removal, review and bundle candidates, and proposal replay.
//! * [`steering`]: existing steering files (AGENTS.md, CLAUDE.md, Cursor rules, Kiro steering)
//!   as chunks, for `strata knowledge import`.
//! * [`suggest`]: concerns suggested for a task text, from a full-text ranking of the chunks.
//! * [`fixture`]: the bundled example catalogue and a generator of large ones.
//!
//! Query semantics are the seed's, exactly: a chunk is served when its concerns overlap the
//! requested ones and its project scope contains the requested project or is empty (shared).

pub mod chunk;
pub mod decide;
pub mod events;
pub mod fixture;
pub mod insights;
pub mod state;
pub mod steering;
pub mod suggest;

/// Why a knowledge request was refused; every message names the input, the rule and the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KnowledgeError {
    /// No concerns were given.
    #[error("[STRATA-E1001] no concerns given; pass at least one (`list_knowledge` shows the concerns in use)")]
    EmptyConcerns,
    /// A concern outside the declared vocabulary.
    #[error("[STRATA-E1002] unknown concern {concern:?}{}; declared concerns: {known}", suggest(.suggestions))]
    UnknownConcern {
        /// The concern.
        concern: String,
        /// Closest declared concerns.
        suggestions: Vec<String>,
        /// Every declared concern, comma-separated (or a hint when none).
        known: String,
    },
    /// A project that was never declared.
    #[error("[STRATA-E1003] unknown project {project:?}{}; declared projects: {known}", suggest(.suggestions))]
    UnknownProject {
        /// The project.
        project: String,
        /// Closest declared projects.
        suggestions: Vec<String>,
        /// Every declared project, comma-separated (or a hint when none).
        known: String,
    },
    /// A list longer than its limit.
    #[error("[STRATA-E1004] {what}: {n} given, at most {max}")]
    TooMany {
        /// What.
        what: &'static str,
        /// How many were given.
        n: usize,
        /// The limit.
        max: usize,
    },
    /// A session that was never started.
    #[error("[STRATA-E1005] session {0:?} was never started; call start_session first (or omit the session)")]
    UnknownSession(String),
    /// A chunk that does not exist (or is retired).
    #[error("[STRATA-E1006] no chunk {slug:?}{}", suggest(.suggestions))]
    UnknownChunk {
        /// The slug.
        slug: String,
        /// Closest slugs.
        suggestions: Vec<String>,
    },
    /// A name outside its alphabet.
    #[error("[STRATA-E1007] {what} {value:?} is not valid: {rule}")]
    BadName {
        /// What kind of name.
        what: &'static str,
        /// The value.
        value: String,
        /// The rule.
        rule: &'static str,
    },
    /// A text over its limit.
    #[error("[STRATA-E1008] {what} is {len} bytes; the limit is {max}")]
    TooLong {
        /// What.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An outcome that is not one of the known ones.
    #[error("[STRATA-E1009] outcome {0:?} is not one of success, failure, partial, abandoned")]
    BadOutcome(String),
    /// An event could not be encoded.
    #[error("[STRATA-E1010] internal: {0}")]
    Internal(String),
    /// An idempotency key already recorded with a different request.
    #[error(
        "[STRATA-E1020] idempotency key {key:?} was used at sequence {seq} for a different get_knowledge request (other concerns, project or task context); a retry must repeat the request exactly, and a new request needs a new key"
    )]
    KeyReused {
        /// The key.
        key: String,
        /// Journal sequence of the serve recorded under it.
        seq: u64,
    },
}

fn suggest(s: &[String]) -> String {
    if s.is_empty() { String::new() } else { format!(" (did you mean {}?)", s.join(" or ")) }
}

/// The up to three names of `known` closest to `name` (edit distance ≤ 3 or a shared prefix).
pub(crate) fn closest<'a>(name: &str, known: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut scored: Vec<(usize, &String)> = known
        .map(|k| (crate::kb::intake::edit_distance(name, k), k))
        .filter(|(d, k)| *d <= 3 || k.starts_with(name) || name.starts_with(k.as_str()))
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, k)| k.clone()).collect()
}

/// `kebab` names: concerns, projects, slugs.
pub(crate) fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= NAME_BYTES_MAX
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Rule text for [`valid_name`].
pub const NAME_RULE: &str = "1 to 80 characters of a-z 0-9 and -, not starting or ending with -";
/// Longest concern, project or slug.
pub const NAME_BYTES_MAX: usize = 80;
/// Most concerns in one request or on one chunk.
pub const CONCERNS_MAX: usize = 32;
/// Most projects in a chunk's scope.
pub const SCOPE_MAX: usize = 32;
/// Largest chunk content.
pub const CONTENT_BYTES_MAX: usize = 64 * 1024;
/// Longest title.
pub const TITLE_BYTES_MAX: usize = 200;
/// Longest free text (task context, learning, decision, outcome detail).
pub const TEXT_BYTES_MAX: usize = 16 * 1024;
/// Most concerns and projects in the vocabulary.
pub const VOCABULARY_MAX: usize = 4096;
/// Default token cap of one `get_knowledge` answer (Claude Code warns above 10k and cuts at 25k).
pub const ANSWER_TOKENS_DEFAULT: usize = 20_000;
