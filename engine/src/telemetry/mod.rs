//! Telemetry: efficiency events and strata's own provider usage, recorded in the journal, rolled
//! up per provider, model, profile, mode and stratum, and reconciled against the totals the
//! provider itself reports.
//!
//! * [`events`]: the three event payloads, the counters they carry and the name rules.
//! * [`decide`]: the request shapes and the pure decider: one event, or a typed rejection.
//! * [`state`]: the `telemetry` projection: per session the stream version, the last
//!   cumulative counters and the provider's totals; per group the per-invocation figures.
//! * [`report`]: rollups (counts, sums, type-7 p50/p75/p95) and integer-exact reconciliation.
//!
//! **Streams.** Every event of a session goes to `telemetry/<session>` ([`stream_of`]). A usage
//! delta depends only on that session's previous cumulative counters, so appending with the
//! session stream's version expected serialises exactly the decisions that could disagree, while
//! workers of different sessions record side by side without conflicting on one shared stream.
//!
//! **Unknown is not zero.** Every counter is an `Option<u64>` from the request to the report: an
//! unknown value is never summed, never enters a quantile, and is counted as `unknown`.

pub mod decide;
pub mod events;
pub mod report;
pub mod state;

use crate::ce::Code;

/// Stream prefix; a session's stream is the prefix followed by its pseudonym.
pub const STREAM_PREFIX: &str = "telemetry/";

/// The stream a session's events are appended to.
pub fn stream_of(session: &str) -> String {
    format!("{STREAM_PREFIX}{session}")
}

/// Why a telemetry request was refused; every message names the field, the rule and the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The request is not of the documented shape (unknown field, wrong type, missing field).
    #[error("[STRATA-E1501] request: {0}; see `strata telemetry record --help` for the shape")]
    Shape(String),
    /// A value outside its rule.
    #[error("[STRATA-E1502] {field}: {rule}")]
    BadValue {
        /// The field.
        field: &'static str,
        /// The rule it breaks, and the fix.
        rule: String,
    },
    /// The efficiency event (or the whole request) was refused by the context-efficiency checks:
    /// the privacy scan (`PRIVATE_TELEMETRY`), the schema or the accounting rule.
    #[error("[STRATA-E1503] {code}: {detail}; nothing was recorded")]
    Efficiency {
        /// The wire code.
        code: Code,
        /// Which field and rule (never private input: the privacy scan runs first).
        detail: String,
    },
    /// A cumulative counter smaller than one the session reported before.
    #[error(
        "[STRATA-E1504] cumulative.{counter}: {given} is below {previous}, reported earlier for session \
         {session:?}; cumulative counters never go back: report the provider's running total, or start a new \
         session pseudonym if the provider restarted its count; nothing was recorded"
    )]
    Regression {
        /// The counter.
        counter: &'static str,
        /// The session.
        session: String,
        /// The highest value reported before.
        previous: u64,
        /// The value given.
        given: u64,
    },
    /// Billing counters without a source that vouches for them.
    #[error(
        "[STRATA-E1505] accounting_source: billing counters (tokens, cost) need `authoritative`, \
         `provider-reported` or `estimated`; with `unknown` give them as null"
    )]
    AccountingSourceRequired,
    /// A session property that is fixed once recorded was given differently.
    #[error(
        "[STRATA-E1506] {field}: session {session:?} was recorded with {recorded}, not {given}; a session keeps \
         one {field}: use a new session pseudonym"
    )]
    SessionChanged {
        /// The field.
        field: &'static str,
        /// The session.
        session: String,
        /// What the session holds.
        recorded: String,
        /// What was given.
        given: String,
    },
    /// Internal error building an event.
    #[error("[STRATA-E1507] internal error building an event: {0}; report a bug")]
    Internal(String),
}

impl From<crate::ce::CeError> for TelemetryError {
    fn from(e: crate::ce::CeError) -> Self {
        TelemetryError::Efficiency { code: e.code, detail: e.detail }
    }
}
