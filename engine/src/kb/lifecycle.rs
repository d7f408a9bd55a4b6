//! Lifecycles as transition tables: one exhaustive table per artifact kind, used by the graph
//! projection (to refuse an illegal history), by the deciders (to refuse an illegal command)
//! and by the property tests.

use super::kind::ArtifactKind;

/// The states of `kind`, in lifecycle order.
pub fn states(kind: ArtifactKind) -> &'static [&'static str] {
    match kind {
        ArtifactKind::Entity => &["proposed", "active", "deprecated", "retired"],
        ArtifactKind::Issue => &["open", "triaged", "promoted", "resolved", "wontfix", "duplicate"],
        ArtifactKind::ChangeRequest => &["draft", "proposed", "approved", "in-progress", "review", "done", "cancelled"],
        ArtifactKind::BacklogItem => &["planned", "in-progress", "done", "cancelled"],
        ArtifactKind::BrdRequirement => &["draft", "approved", "implemented", "deprecated"],
        ArtifactKind::FunctionalDomain | ArtifactKind::BackendModule | ArtifactKind::UiScreen => {
            &["draft", "active", "deprecated"]
        }
        ArtifactKind::ResearchNote => &["draft", "published", "archived"],
        ArtifactKind::Devlog => &["recorded", "archived"],
    }
}

/// Whether `kind` may move from `from` to `to`. Exhaustive per kind: anything not listed is
/// refused. Staying in the same state is not a transition.
pub fn can_transition(kind: ArtifactKind, from: &str, to: &str) -> bool {
    use ArtifactKind as K;
    match kind {
        K::Entity => matches!(
            (from, to),
            ("proposed", "active")
                | ("proposed", "retired")
                | ("active", "deprecated")
                | ("deprecated", "active")
                | ("deprecated", "retired")
        ),
        K::Issue => matches!(
            (from, to),
            ("open", "triaged")
                | ("open", "wontfix")
                | ("open", "duplicate")
                | ("triaged", "promoted")
                | ("triaged", "resolved")
                | ("triaged", "wontfix")
                | ("triaged", "duplicate")
                | ("promoted", "resolved")
                | ("wontfix", "open")
                | ("duplicate", "open")
                | ("resolved", "open")
        ),
        K::ChangeRequest => matches!(
            (from, to),
            ("draft", "proposed")
                | ("proposed", "draft")
                | ("proposed", "approved")
                | ("approved", "in-progress")
                | ("in-progress", "review")
                | ("review", "in-progress")
                | ("review", "done")
                | ("draft" | "proposed" | "approved" | "in-progress" | "review", "cancelled")
        ),
        K::BacklogItem => matches!(
            (from, to),
            ("planned", "in-progress") | ("in-progress", "done") | ("planned" | "in-progress", "cancelled")
        ),
        K::BrdRequirement => matches!(
            (from, to),
            ("draft", "approved")
                | ("approved", "draft")
                | ("approved", "implemented")
                | ("approved" | "implemented", "deprecated")
        ),
        K::FunctionalDomain | K::BackendModule | K::UiScreen => {
            matches!((from, to), ("draft", "active") | ("active", "deprecated") | ("deprecated", "active"))
        }
        K::ResearchNote => matches!((from, to), ("draft", "published") | ("published", "archived")),
        K::Devlog => matches!((from, to), ("recorded", "archived")),
    }
}

/// Target states reachable only through a promotion command (which also writes the back-links),
/// never through a plain transition.
pub fn promotion_only(kind: ArtifactKind, to: &str) -> bool {
    matches!((kind, to), (ArtifactKind::Issue, "promoted"))
}

/// Approving a change request is gated: nothing upstream of it may be suspect.
pub fn gated_by_suspects(kind: ArtifactKind, to: &str) -> bool {
    matches!((kind, to), (ArtifactKind::ChangeRequest, "approved"))
}

/// Entity tiers, lowest first along the promotion path. `cross-cutting` is outside it.
pub const TIERS: [&str; 4] = ["foundation", "product", "discipline", "cross-cutting"];

/// Entity tier promotion: a discipline (a collection of practices and scripts) becomes a product
/// with its own specifications; a product that others build on becomes a foundation. The
/// cross-cutting pseudo-entity never changes tier.
pub fn can_promote_tier(from: &str, to: &str) -> bool {
    matches!((from, to), ("discipline", "product") | ("product", "foundation"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_only_name_states_of_their_kind_and_every_state_is_reachable_or_initial() {
        for k in ArtifactKind::ALL {
            let st = states(k);
            for from in st {
                assert!(!can_transition(k, from, from), "{k}: self transition {from}");
                for to in ["nonexistent", "DONE", ""] {
                    assert!(!can_transition(k, from, to));
                }
            }
            // Every listed transition is between states of the kind.
            for from in ArtifactKind::ALL.iter().flat_map(|k2| states(*k2)) {
                for to in ArtifactKind::ALL.iter().flat_map(|k2| states(*k2)) {
                    if can_transition(k, from, to) {
                        assert!(st.contains(from) && st.contains(to), "{k}: {from} -> {to}");
                    }
                }
            }
            // Every state but the first is the target of some transition.
            for to in &st[1..] {
                assert!(st.iter().any(|from| can_transition(k, from, to)), "{k}: {to} unreachable");
            }
        }
        assert!(can_promote_tier("discipline", "product"));
        assert!(!can_promote_tier("product", "discipline"));
        assert!(!can_promote_tier("cross-cutting", "product"));
    }
}
