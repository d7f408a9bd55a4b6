//! Wire error codes of the context-efficiency protocol. The reference runtime's codes keep their
//! fixed messages; strata adds a specific code wherever the reference threw an untyped error
//! (which surfaced as `INVALID_REQUEST`). A message never contains input content.

use std::fmt;

macro_rules! codes {
    ($( $(#[$doc:meta])* $name:ident = $text:literal, $message:literal; )*) => {
        /// Every rejection the `ce` operations can give.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Code {
            $( $(#[$doc])* $name, )*
        }

        impl Code {
            /// Every code, in declaration order.
            pub const ALL: &[Code] = &[$(Code::$name),*];

            /// The wire form (`SCREAMING_SNAKE`).
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$name => $text,)* }
            }

            /// The fixed message; never includes input content.
            pub fn message(self) -> &'static str {
                match self { $(Code::$name => $message,)* }
            }
        }
    };
}

codes! {
    /// Billed figures without an authoritative or provider-reported accounting source.
    AccountingSourceRequired = "ACCOUNTING_SOURCE_REQUIRED", "Billed telemetry requires an accounting source.";
    /// A capsule file reference is not a safe repository-relative path.
    CapsuleArtifactRefInvalid = "CAPSULE_ARTIFACT_REF_INVALID", "Capsule rejected an unsafe file reference.";
    /// A capsule artifact path lies outside the authorised roots.
    CapsuleArtifactRefUnauthorized = "CAPSULE_ARTIFACT_REF_UNAUTHORIZED", "Capsule artifact path is not authorized.";
    /// An incoming capsule's `capsule_hash` does not match its content (strata).
    CapsuleHashMismatch = "CAPSULE_HASH_MISMATCH", "Capsule hash does not match its canonical content.";
    /// Mandatory content alone exceeds `max_bytes`.
    CapsuleMandatoryOverflow = "CAPSULE_MANDATORY_OVERFLOW", "Mandatory capsule content exceeds the configured limit.";
    /// Private or unbounded content (secrets, transcripts, provider ids).
    CapsulePrivateContent = "CAPSULE_PRIVATE_CONTENT", "Capsule rejected private or unbounded content.";
    /// The capsule does not satisfy `knowzcode.context-capsule/v1`.
    CapsuleSchemaInvalid = "CAPSULE_SCHEMA_INVALID", "Capsule does not satisfy its schema.";
    /// A capsule string longer than 4,096 UTF-8 bytes.
    CapsuleStringTooLong = "CAPSULE_STRING_TOO_LONG", "Capsule contains an overlong string.";
    /// Routing and lineage facts disagree on role or sensitivity.
    DispatchFactMismatch = "DISPATCH_FACT_MISMATCH", "Dispatch routing facts conflict with evaluated lineage facts.";
    /// `--journal`: the journal could not be opened, read or appended to (strata).
    JournalUnavailable = "JOURNAL_UNAVAILABLE", "The journal could not be opened, read or written.";
    /// The efficiency event fails its schema or allowlists.
    EfficiencyEventInvalid = "EFFICIENCY_EVENT_INVALID", "Efficiency event does not satisfy its schema or allowlists.";
    /// A time that is not strict RFC 3339.
    InvalidDateTime = "INVALID_DATE_TIME", "Date-time must use strict RFC 3339 syntax.";
    /// A fact of the wrong type, e.g. a string where a boolean belongs (strata).
    InvalidFact = "INVALID_FACT", "A routing or policy fact has the wrong type.";
    /// Nesting depth or limit is not a valid count (strata).
    InvalidNesting = "INVALID_NESTING", "Nesting depth must be a non-negative integer and the limit a positive integer.";
    /// Inherited-writer count or cap is not a valid count (strata).
    InvalidWriterCount = "INVALID_WRITER_COUNT", "Active inherited writers must be a non-negative integer and the cap a positive integer.";
    /// A measurement run used before (strata: the journal records every consumption).
    MeasurementRunReplayed = "MEASUREMENT_RUN_REPLAYED", "Measurement run was already consumed.";
    /// A writer path that is malformed, absolute or escapes the workspace.
    InvalidOwnershipPath = "INVALID_OWNERSHIP_PATH", "Writer ownership paths are malformed.";
    /// The request is not one JSON object of the operation's shape.
    InvalidRequest = "INVALID_REQUEST", "Request must be one valid JSON object for the selected operation.";
    /// An unknown result mode (strata).
    InvalidResultMode = "INVALID_RESULT_MODE", "Requested result mode must be ephemeral, durable or artifact.";
    /// An unknown rollout stage, a bad canary percentage or a missing anonymous corpus id (strata).
    InvalidRollout = "INVALID_ROLLOUT", "Rollout stage, modes, canary percentage or corpus id are invalid.";
    /// Severity outside LOW, MEDIUM, HIGH, CRITICAL.
    InvalidSeverity = "INVALID_SEVERITY", "Severity must use an allowed level.";
    /// Telemetry with private or repository-identifying content.
    PrivateTelemetry = "PRIVATE_TELEMETRY", "Efficiency event rejected private or repository-identifying content.";
    /// More than 1 MiB on stdin.
    RequestTooLarge = "REQUEST_TOO_LARGE", "Request exceeds the one-megabyte stdin limit.";
    /// A required durable handoff that the caller forbade.
    ResultHandoffNotAuthorized = "RESULT_HANDOFF_NOT_AUTHORIZED", "Durable result handoff is not authorized.";
    /// Artifact persistence that the caller forbade.
    ResultArtifactNotAuthorized = "RESULT_ARTIFACT_NOT_AUTHORIZED", "Artifact result persistence is not authorized.";
    /// `canary` or `on` without a recommended mode.
    RolloutRecommendationRequired = "ROLLOUT_RECOMMENDATION_REQUIRED", "Executable rollout requires a recommendation.";
    /// Stdin could not be read (strata: the OS error is not leaked as a code).
    StdinUnreadable = "STDIN_UNREADABLE", "Request could not be read from standard input.";
    /// An operation strata does not know.
    UnsupportedOperation = "UNSUPPORTED_OPERATION", "Unsupported context-efficiency operation.";
    /// More than one prior record could be the mutation target.
    VaultTargetAmbiguous = "VAULT_TARGET_AMBIGUOUS", "Vault mutation target is ambiguous.";
    /// No prior record carries a stable KnowledgeId.
    VaultTargetRequired = "VAULT_TARGET_REQUIRED", "Vault mutation requires a stable KnowledgeId.";
    /// A writer without an owned path.
    WriterScopeRequired = "WRITER_SCOPE_REQUIRED", "Writer routing requires an explicit owned path.";
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rejection: the wire code, plus a detail for the operator (which field, which rule). The
/// detail may quote input, so it never goes into the wire response.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {detail}")]
pub struct CeError {
    /// Wire code.
    pub code: Code,
    /// Field and rule, for `--explain` and logs.
    pub detail: String,
}

impl CeError {
    /// A rejection with `code` and `detail`.
    pub fn new(code: Code, detail: impl Into<String>) -> Self {
        CeError { code, detail: detail.into() }
    }
}

/// Shorthand for building a [`CeError`].
pub(crate) fn fail<T>(code: Code, detail: impl Into<String>) -> Result<T, CeError> {
    Err(CeError::new(code, detail))
}
