//! The catalogue of event types this engine understands, with their schema versions.
//!
//! Import refuses a journal holding an event type that is not listed here (or a newer schema
//! version than listed), so an old strata never silently misreads a newer journal. A type's
//! versions only ever grow; an old version stays readable through an upcaster.

/// Known event types and the schema versions each accepts.
pub const EVENT_TYPES: &[(&str, &[u32])] = &[
    // The journal's own signed checkpoints.
    (strata_journal::CHECKPOINT_EVENT_TYPE, &[1]),
    // Written once by `strata init`.
    ("workspace.initialized", &[1]),
    // Knowledge-base artifacts.
    ("artifact.created", &[1]),
    ("artifact.updated", &[1]),
    ("artifact.transitioned", &[1]),
    ("artifact.reviewed", &[1]),
    ("artifact.deleted", &[1]),
    ("entity.tier-promoted", &[1]),
    // Context: profiles, summaries, prompts.
    ("profile.registered", &[1]),
    ("summary.published", &[1]),
    ("summary.retracted", &[1]),
    ("prompt.assembled", &[1]),
    ("context.superseded", &[1]),
    // Knowledge API: vocabulary, chunks, sessions and what they were served and logged.
    ("knowledge.declared", &[1]),
    ("knowledge.chunk-put", &[1]),
    ("knowledge.chunk-retired", &[1]),
    ("session.started", &[1]),
    ("knowledge.served", &[1]),
    ("learning.logged", &[1]),
    ("decision.logged", &[1]),
    ("outcome.logged", &[1]),
    // Context-efficient dispatch: routing decisions and the writer-ownership map.
    ("ce.workspace-facts", &[1]),
    ("ce.measurement-run-consumed", &[1]),
    ("ce.route-decided", &[1]),
    ("ce.ownership-claimed", &[1]),
    ("ce.ownership-conflict", &[1]),
    ("ce.ownership-released", &[1]),
    ("ce.lineage-recorded", &[1]),
    ("ce.lineage-invalidated", &[1]),
    ("ce.lease-granted", &[1]),
    ("ce.lease-renewed", &[1]),
    ("ce.lease-expired", &[1]),
    ("ce.capsule-sealed", &[1]),
    ("ce.vault-delta-applied", &[1]),
    // Rollouts of a candidate routing policy.
    ("rollout.started", &[1]),
    ("rollout.stage-changed", &[1]),
    ("rollout.unit-routed", &[1]),
    // Telemetry: efficiency events, strata's own usage per invocation, provider session totals.
    ("telemetry.efficiency-recorded", &[1]),
    ("telemetry.usage-reported", &[1]),
    ("telemetry.session-reported", &[1]),
    // Write guards: every PreToolUse decision of a worker's hook.
    ("guard.write-allowed", &[1]),
    ("guard.write-denied", &[1]),
    // Workgroups: a coordinator's run of a plan, task by task.
    ("workgroup.planned", &[1]),
    ("workgroup.tasks-added", &[1]),
    ("task.dispatched", &[1]),
    ("worker.started", &[1]),
    ("worker.output", &[1]),
    ("worker.completed", &[1]),
    ("worker.failed", &[1]),
    ("task.completed", &[1]),
    ("task.failed", &[1]),
    ("task.held", &[1]),
    ("task.write-violation", &[1]),
    ("task.conflicted", &[1]),
    ("workgroup.finished", &[1]),
    // Synthetic load used by benchmarks and stress tests; carries an opaque payload.
    ("bench.sample", &[1]),
];

/// Whether `event_type` at `schema_version` is understood.
pub fn is_known_event(event_type: &str, schema_version: u32) -> bool {
    EVENT_TYPES.iter().any(|(t, versions)| *t == event_type && versions.contains(&schema_version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_has_no_duplicates_and_valid_names() {
        let mut names: Vec<&str> = EVENT_TYPES.iter().map(|(t, _)| *t).collect();
        names.sort_unstable();
        assert!(names.windows(2).all(|w| w[0] != w[1]));
        for (t, versions) in EVENT_TYPES {
            assert!(strata_journal::record::validate_event_type(t).is_ok(), "{t}");
            assert!(!versions.is_empty(), "{t}");
        }
        assert!(is_known_event("artifact.created", 1));
        assert!(!is_known_event("artifact.created", 2));
        assert!(!is_known_event("nope", 1));
    }
}
