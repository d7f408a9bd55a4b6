//! The catalogue of event types this engine understands: every domain's own list, put together.
//!
//! Import refuses a journal holding an event type that is not listed here (or a schema version
//! it does not know), so an old strata never silently misreads a newer journal. The catalogue is
//! not kept by hand: each domain declares the types it emits next to where its events are built
//! (`ALL` or `EVENT_TYPES` in its events module) and [`DOMAINS`] names those lists, so a type a
//! decider emits cannot be missing from it unless its own domain forgot it — which the tidy test
//! (`tests/it/tidy.rs`) catches by finding every event-type string the code can emit.
//!
//! Every type is at schema version [`SCHEMA_VERSION`]; a type's versions only ever grow, and an
//! old version stays readable through an upcaster.

use crate::{ce, context, guard, kb, knowledge, promotion, telemetry, workgroup};

/// `workspace.initialized`: written once by `strata init`.
pub const WORKSPACE_INITIALIZED: &str = "workspace.initialized";
/// `bench.sample`: synthetic load of benchmarks and stress tests, with an opaque payload.
pub const BENCH_SAMPLE: &str = "bench.sample";
/// The journal's own types and the workspace's.
pub const JOURNAL: [&str; 3] = [strata_journal::CHECKPOINT_EVENT_TYPE, WORKSPACE_INITIALIZED, BENCH_SAMPLE];

/// The schema version every catalogued type is at.
pub const SCHEMA_VERSION: u32 = 1;

/// Each domain's name and the event types it emits.
pub const DOMAINS: &[(&str, &[&str])] = &[
    ("journal", &JOURNAL),
    ("kb", &kb::artifact::event_types::ALL),
    ("context", &context::state::EVENT_TYPES),
    ("knowledge", &knowledge::events::ALL),
    ("ce", &ce::ledger::ALL),
    ("rollout", &promotion::rollout::ALL),
    ("telemetry", &telemetry::events::ALL),
    ("guard", &guard::ALL),
    ("workgroup", &workgroup::events::ALL),
    ("coordinator", &workgroup::lease::ALL),
];

/// Every catalogued event type, domain by domain.
pub fn event_types() -> impl Iterator<Item = &'static str> {
    DOMAINS.iter().flat_map(|(_, types)| types.iter().copied())
}

/// Whether `event_type` at `schema_version` is understood.
pub fn is_known_event(event_type: &str, schema_version: u32) -> bool {
    schema_version == SCHEMA_VERSION && event_types().any(|t| t == event_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_has_no_duplicates_and_valid_names() {
        let mut names: Vec<&str> = event_types().collect();
        assert!(names.len() > 50, "{names:?}");
        names.sort_unstable();
        assert!(names.windows(2).all(|w| w[0] != w[1]), "a type listed twice: {names:?}");
        for t in &names {
            assert!(strata_journal::record::validate_event_type(t).is_ok(), "{t}");
        }
        assert!(is_known_event("artifact.created", 1));
        assert!(is_known_event("ce.lineage-reconciled", 1));
        assert!(!is_known_event("artifact.created", 2));
        assert!(!is_known_event("nope", 1));
    }
}
