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
        ArtifactKind::FunctionalDomain
        | ArtifactKind::BackendModule
        | ArtifactKind::UiScreen
        | ArtifactKind::DesignProfile
        | ArtifactKind::StackConcern
        | ArtifactKind::TechSkill
        | ArtifactKind::ImplementationRef
        | ArtifactKind::ModificationRoute => &["draft", "active", "deprecated"],
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
        K::FunctionalDomain
        | K::BackendModule
        | K::UiScreen
        | K::DesignProfile
        | K::StackConcern
        | K::TechSkill
        | K::ImplementationRef
        | K::ModificationRoute => {
            matches!((from, to), ("draft", "active") | ("active", "deprecated") | ("deprecated", "active"))
        }
        K::ResearchNote => matches!((from, to), ("draft", "published") | ("published", "archived")),
        K::Devlog => matches!((from, to), ("recorded", "archived")),
    }
}

/// The state every artifact of `kind` starts in: the first of [`states`]. Commands create
/// artifacts only in it; intake may create one further along (see [`creation_path`]).
pub fn initial(kind: ArtifactKind) -> &'static str {
    states(kind)[0]
}

/// What entering a state takes beyond the transition table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Nothing more.
    Open,
    /// A promotion command, which also writes the back-links; never a plain transition.
    Promotion,
    /// Nothing upstream of the artifact (nor the artifact itself) may be suspect.
    Suspects,
}

/// The gate on entering `to`.
pub fn gate(kind: ArtifactKind, to: &str) -> Gate {
    match (kind, to) {
        (ArtifactKind::Issue, "promoted") => Gate::Promotion,
        (ArtifactKind::ChangeRequest, "approved") => Gate::Suspects,
        _ => Gate::Open,
    }
}

/// Target states reachable only through a promotion command (which also writes the back-links),
/// never through a plain transition.
pub fn promotion_only(kind: ArtifactKind, to: &str) -> bool {
    gate(kind, to) == Gate::Promotion
}

/// Approving a change request is gated: nothing upstream of it may be suspect.
pub fn gated_by_suspects(kind: ArtifactKind, to: &str) -> bool {
    gate(kind, to) == Gate::Suspects
}

/// The shortest history that reaches `to` from the initial state of `kind` along allowed
/// transitions, entering a gated state only where `open` says its gate holds: the states from
/// the initial one to `to`, both included; `None` when there is none. An artifact created in
/// `to` is taken to have come this way, so its creation is held to the gates on the way.
pub fn creation_path(kind: ArtifactKind, to: &str, open: impl Fn(Gate) -> bool) -> Option<Vec<&'static str>> {
    let st = states(kind);
    // Breadth first from the initial state (index 0) over at most seven states; parent[i] is the
    // state index i was reached from.
    let mut parent: Vec<Option<usize>> = vec![None; st.len()];
    let mut queue = std::collections::VecDeque::from([0usize]);
    parent[0] = Some(0);
    while let Some(i) = queue.pop_front() {
        if st[i] == to {
            let mut path = vec![st[i]];
            let mut cur = i;
            while cur != 0 {
                cur = parent[cur].unwrap_or(0);
                path.push(st[cur]);
            }
            path.reverse();
            return Some(path);
        }
        for (j, next) in st.iter().enumerate() {
            if parent[j].is_none() && can_transition(kind, st[i], next) && open(gate(kind, next)) {
                parent[j] = Some(i);
                queue.push_back(j);
            }
        }
    }
    None
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
        // Every state is reachable from the initial one when every gate holds, and no initial
        // state is gated (creating an artifact in its initial state passes no gate).
        for k in ArtifactKind::ALL {
            assert_eq!(gate(k, initial(k)), Gate::Open, "{k}");
            for to in states(k) {
                let path = creation_path(k, to, |_| true).unwrap_or_else(|| panic!("{k}: {to} unreachable"));
                assert_eq!((path[0], *path.last().unwrap()), (initial(k), *to));
                assert!(path.windows(2).all(|w| can_transition(k, w[0], w[1])), "{k}: {path:?}");
            }
        }
        let open_only = |g: Gate| g == Gate::Open;
        let cr = ArtifactKind::ChangeRequest;
        assert_eq!(creation_path(cr, "draft", open_only), Some(vec!["draft"]));
        assert_eq!(creation_path(cr, "proposed", open_only), Some(vec!["draft", "proposed"]));
        assert_eq!(creation_path(cr, "cancelled", open_only), Some(vec!["draft", "cancelled"]));
        assert_eq!(creation_path(cr, "done", open_only), None, "done is reached only through approved");
        assert_eq!(creation_path(cr, "approved", |_| true), Some(vec!["draft", "proposed", "approved"]));
        assert_eq!(creation_path(ArtifactKind::Issue, "promoted", open_only), None);
        assert_eq!(
            creation_path(ArtifactKind::Issue, "resolved", open_only),
            Some(vec!["open", "triaged", "resolved"])
        );
        assert_eq!(creation_path(cr, "shipped", |_| true), None);
        assert!(can_promote_tier("discipline", "product"));
        assert!(!can_promote_tier("product", "discipline"));
        assert!(!can_promote_tier("cross-cutting", "product"));
    }
}
