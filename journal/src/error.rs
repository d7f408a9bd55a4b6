//! Error types of the journal.
//!
//! Expected outcomes are not errors: an optimistic-concurrency conflict is [`Conflict`], returned
//! inside `Ok` (`Result<Result<Appended, Conflict>, JournalError>`, the shape of sled's
//! compare-and-swap), so `?` cannot carry it to a caller that does not handle it. Everything here
//! is either bad input (nothing was appended) or a fail-stop condition. Every message starts with
//! a stable code (`[STRATA-E0xxx]`, listed in `docs/errors.md`), names the input and says what to
//! do.

use std::path::PathBuf;

use uuid::Uuid;

use crate::ExpectedVersion;

/// Bad input to an append; nothing was appended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// A name is empty or too long.
    #[error("[STRATA-E0101] {what} {value:?} must be 1 to {max} bytes long")]
    NameLength {
        /// Which name.
        what: &'static str,
        /// The value (shortened).
        value: String,
        /// Limit in bytes.
        max: usize,
    },
    /// A name has a character outside its alphabet.
    #[error("[STRATA-E0102] {what} {value:?} contains {character:?}; use ASCII letters, digits and {allowed:?}")]
    NameCharacter {
        /// Which name.
        what: &'static str,
        /// The value (shortened).
        value: String,
        /// The first offending character.
        character: char,
        /// Allowed punctuation.
        allowed: &'static str,
    },
    /// Payload over the size limit.
    #[error(
        "[STRATA-E0103] payload of {bytes} bytes exceeds the {max}-byte limit; store large content outside the event and reference it by hash"
    )]
    PayloadTooLarge {
        /// Actual size.
        bytes: usize,
        /// Limit.
        max: usize,
    },
    /// Payload is not JSON.
    #[error("[STRATA-E0104] payload is not valid JSON ({detail}); payloads are compact JSON values")]
    PayloadNotJson {
        /// Parser message.
        detail: String,
    },
    /// Payload has whitespace around it or line breaks.
    #[error("[STRATA-E0105] payload is not compact JSON; serialise it without surrounding whitespace or line breaks")]
    PayloadNotCompact,
    /// Too many events in one append.
    #[error("[STRATA-E0106] append carries {count} events; at most {max} per append, split it into several appends")]
    TooManyEvents {
        /// Events in the request.
        count: usize,
        /// Limit.
        max: usize,
    },
    /// Too many streams in one atomic append.
    #[error("[STRATA-E0107] append touches {count} streams; at most {max} per atomic append")]
    TooManyStreams {
        /// Streams in the request.
        count: usize,
        /// Limit.
        max: usize,
    },
    /// An append with no events.
    #[error("[STRATA-E0108] append has no events; every stream in an append needs at least one event")]
    EmptyAppend,
    /// The same event id twice in one request.
    #[error("[STRATA-E0109] event id {0} appears twice in one append; every event needs its own id")]
    DuplicateEventId(Uuid),
    /// The same stream twice in one request.
    #[error("[STRATA-E0110] stream {0:?} appears twice in one append; put all its events in one entry")]
    DuplicateStream(String),
    /// A retried append whose ids only partly match what was stored, or match another stream.
    #[error(
        "[STRATA-E0111] event id {event_id} was already appended {detail}; a retry must resend exactly the original events, and new events need new ids"
    )]
    IdempotencyMismatch {
        /// The id that matched.
        event_id: Uuid,
        /// How the retry differs.
        detail: String,
    },
}

/// A stored record or frame that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// Ends early.
    #[error("record or frame is truncated")]
    Truncated,
    /// Unknown format byte.
    #[error("unknown record or frame format {0}")]
    UnknownFormat(u8),
    /// Violates the format.
    #[error("invalid record or frame: {0}")]
    Invalid(&'static str),
}

/// Bad key or note text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NoteError {
    /// Key name breaks the rule.
    #[error("[STRATA-E0401] key name {0:?} must be 1 to 100 characters with no spaces or '+'")]
    KeyName(String),
    /// Key text malformed.
    #[error("[STRATA-E0402] key is malformed: {0}; generate one with `strata keygen`")]
    KeyFormat(&'static str),
    /// Note text malformed.
    #[error("[STRATA-E0403] signed note is malformed: {0}")]
    Malformed(&'static str),
    /// Origin breaks the rule.
    #[error("[STRATA-E0404] origin {0:?} must be one line of 1 to 200 printable characters")]
    Origin(String),
}

/// An optimistic-concurrency conflict: the stream is not at the version the caller expected.
/// This is an expected outcome, so it is returned inside `Ok`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "[STRATA-E0100] stream {stream:?} is at version {actual}, the append expected {expected}; re-read the stream, decide again, and retry"
)]
pub struct Conflict {
    /// The stream.
    pub stream: String,
    /// What the caller expected.
    pub expected: ExpectedVersion,
    /// The stream's version when the writer checked.
    pub actual: u64,
}

/// Fail-stop and bad-input errors of journal operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// Bad append input.
    #[error(transparent)]
    Input(#[from] InputError),
    /// sled failed.
    #[error(
        "[STRATA-E0201] storage error in {path}: {source}; check disk space and permissions, then run `strata journal verify`"
    )]
    Storage {
        /// Journal directory.
        path: PathBuf,
        /// The sled error.
        source: sled::Error,
    },
    /// A file operation failed.
    #[error("[STRATA-E0201] I/O error on {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Stored data does not decode or does not chain.
    #[error("[STRATA-E0202] journal at {path} is damaged{}: {detail}; run `strata journal verify` for a full report and restore from an export if needed", seq.map(|s| format!(" at sequence {s}")).unwrap_or_default())]
    Corrupt {
        /// Journal directory.
        path: PathBuf,
        /// First bad sequence, when known.
        seq: Option<u64>,
        /// What is wrong.
        detail: String,
    },
    /// Another process holds the journal.
    #[error(
        "[STRATA-E0203] journal at {path} is in use by {holder}; stop that process, or talk to it (`strata serve` owns the journal while it runs)"
    )]
    Locked {
        /// Journal directory.
        path: PathBuf,
        /// Who holds it, as recorded in the lock file.
        holder: String,
    },
    /// The directory holds no journal.
    #[error("[STRATA-E0204] no journal at {path}; create one with `strata init`")]
    NotAJournal {
        /// Journal directory.
        path: PathBuf,
    },
    /// A journal already exists where one was to be created.
    #[error("[STRATA-E0205] a journal already exists at {path}; use it, or choose another directory")]
    AlreadyExists {
        /// Journal directory.
        path: PathBuf,
    },
    /// An earlier storage failure left the writer in an unknown state.
    #[error(
        "[STRATA-E0206] journal stopped accepting appends after a storage failure ({cause}); reopen it to recover from what is durable"
    )]
    Poisoned {
        /// The original failure.
        cause: String,
    },
    /// The journal was closed.
    #[error("[STRATA-E0207] journal is closed")]
    Closed,
    /// Bad note or key.
    #[error(transparent)]
    Note(#[from] NoteError),
    /// The PostgreSQL backend failed.
    #[error(transparent)]
    Postgres(#[from] crate::pg::PgError),
}

impl JournalError {
    pub(crate) fn storage(path: &std::path::Path, source: sled::Error) -> JournalError {
        JournalError::Storage { path: path.to_owned(), source }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> JournalError {
        JournalError::Io { path: path.to_owned(), source }
    }

    pub(crate) fn corrupt(path: &std::path::Path, seq: Option<u64>, detail: impl Into<String>) -> JournalError {
        JournalError::Corrupt { path: path.to_owned(), seq, detail: detail.into() }
    }
}
