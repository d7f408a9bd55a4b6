//! Typed cross-references: every link field of every kind, its target kind, its declared inverse
//! and its semantics for impact and for suspicion.
//!
//! * **impact** (`strata graph impact`): what a change to an artifact touches. A change request
//!   touches the requirements it references, a requirement touches the domains, modules and
//!   screens that implement it, and so on downstream.
//! * **suspect**: whose correctness derives from an artifact. When its content changes, those
//!   artifacts become suspect until reviewed: implementations derive from requirements, a change
//!   request's plan derives from the requirements it references, an initiative's (backlog item)
//!   from the change requests and requirements it links, a dependent derives from what it
//!   depends on (a module from the modules it calls), an implementation reference from the
//!   specification it implements. References that only mention (research notes, devlogs) carry
//!   no suspicion.

use super::kind::ArtifactKind;

/// Which way a semantic flows along a link `source.field → target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Not at all.
    None,
    /// From the source to the target.
    Forward,
    /// From the target to the source.
    Backward,
}

/// One declared link field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkSpec {
    /// Kind that holds the field.
    pub from: ArtifactKind,
    /// Field name in front matter.
    pub field: &'static str,
    /// Kind of the referenced artifacts.
    pub to: ArtifactKind,
    /// A list (true) or a single id (false).
    pub many: bool,
    /// The field on the target that must point back, if the link has an inverse.
    pub inverse: Option<&'static str>,
    /// Direction in which a change's impact spreads.
    pub impact: Flow,
    /// Direction in which suspicion spreads when content changes.
    pub suspect: Flow,
}

use ArtifactKind as K;
use Flow::{Backward, Forward, None as NoFlow};

const fn link(
    from: ArtifactKind,
    field: &'static str,
    to: ArtifactKind,
    many: bool,
    inverse: Option<&'static str>,
    impact: Flow,
    suspect: Flow,
) -> LinkSpec {
    LinkSpec { from, field, to, many, inverse, impact, suspect }
}

/// Every link field. The `entity` classification of every non-entity artifact is a link too;
/// its semantics are handled by the graph (membership, cross-entity rules), not by flows.
pub const LINKS: &[LinkSpec] = &[
    // Membership.
    link(K::Issue, "entity", K::Entity, false, None, NoFlow, NoFlow),
    link(K::ChangeRequest, "entity", K::Entity, false, None, NoFlow, NoFlow),
    link(K::BacklogItem, "entity", K::Entity, false, None, NoFlow, NoFlow),
    link(K::BrdRequirement, "entity", K::Entity, false, None, NoFlow, NoFlow),
    link(K::FunctionalDomain, "entity", K::Entity, false, None, NoFlow, NoFlow),
    link(K::BackendModule, "entity", K::Entity, false, None, NoFlow, NoFlow),
    link(K::UiScreen, "entity", K::Entity, false, None, NoFlow, NoFlow),
    link(K::ResearchNote, "entity", K::Entity, false, None, NoFlow, NoFlow),
    link(K::Devlog, "entity", K::Entity, false, None, NoFlow, NoFlow),
    link(K::DesignProfile, "entity", K::Entity, false, None, NoFlow, NoFlow),
    link(K::StackConcern, "entity", K::Entity, false, None, NoFlow, NoFlow),
    link(K::TechSkill, "entity", K::Entity, false, None, NoFlow, NoFlow),
    link(K::ImplementationRef, "entity", K::Entity, false, None, NoFlow, NoFlow),
    link(K::ModificationRoute, "entity", K::Entity, false, None, NoFlow, NoFlow),
    // Backlog items group change requests and requirements; an initiative's plan derives from
    // them, as a change request's does from its requirements.
    link(K::BacklogItem, "linkedCrIds", K::ChangeRequest, true, Some("linkedBacklogItem"), Forward, Backward),
    link(K::ChangeRequest, "linkedBacklogItem", K::BacklogItem, false, Some("linkedCrIds"), Backward, Forward),
    link(K::BacklogItem, "linkedBrdRefs", K::BrdRequirement, true, Some("linkedBacklogItems"), Forward, Backward),
    link(K::BrdRequirement, "linkedBacklogItems", K::BacklogItem, true, Some("linkedBrdRefs"), Backward, Forward),
    // Change requests and the requirements they change.
    link(K::ChangeRequest, "brdRefs", K::BrdRequirement, true, Some("linkedCrs"), Forward, Backward),
    link(K::BrdRequirement, "linkedCrs", K::ChangeRequest, true, Some("brdRefs"), Backward, Forward),
    // Requirements and their implementations.
    link(K::BrdRequirement, "functionalDomains", K::FunctionalDomain, true, Some("brdRequirements"), Forward, Forward),
    link(
        K::FunctionalDomain,
        "brdRequirements",
        K::BrdRequirement,
        true,
        Some("functionalDomains"),
        Backward,
        Backward,
    ),
    link(K::BrdRequirement, "backendModules", K::BackendModule, true, Some("brdRequirements"), Forward, Forward),
    link(K::BackendModule, "brdRequirements", K::BrdRequirement, true, Some("backendModules"), Backward, Backward),
    link(K::BrdRequirement, "uiScreens", K::UiScreen, true, Some("brdRequirements"), Forward, Forward),
    link(K::UiScreen, "brdRequirements", K::BrdRequirement, true, Some("uiScreens"), Backward, Backward),
    // Domains and their modules and screens.
    link(K::FunctionalDomain, "backendModules", K::BackendModule, true, Some("functionalDomains"), Forward, Forward),
    link(K::BackendModule, "functionalDomains", K::FunctionalDomain, true, Some("backendModules"), Backward, Backward),
    link(K::FunctionalDomain, "uiScreens", K::UiScreen, true, Some("functionalDomains"), Forward, Forward),
    link(K::UiScreen, "functionalDomains", K::FunctionalDomain, true, Some("uiScreens"), Backward, Backward),
    // Issue promotion and resolution.
    link(K::Issue, "promotedTo", K::ChangeRequest, false, Some("promotedFrom"), Forward, Forward),
    link(K::ChangeRequest, "promotedFrom", K::Issue, false, Some("promotedTo"), Backward, Backward),
    link(K::Issue, "resolvedCr", K::ChangeRequest, false, Some("resolvesIssues"), NoFlow, NoFlow),
    link(K::ChangeRequest, "resolvesIssues", K::Issue, true, Some("resolvedCr"), NoFlow, NoFlow),
    // Dependencies: a dependent derives from what it depends on (cycles are forbidden).
    link(K::ChangeRequest, "dependsOn", K::ChangeRequest, true, None, Backward, Backward),
    link(K::BrdRequirement, "dependsOn", K::BrdRequirement, true, None, Backward, Backward),
    // Module dependencies: a module calls the modules it depends on, so a change to it needs
    // them (impact forward) and a change to one of them may break it (suspicion backward).
    // Across entities only towards foundation or cross-cutting modules (`graph::validate`).
    link(K::BackendModule, "dependsOn", K::BackendModule, true, Some("dependedOnBy"), Forward, Backward),
    link(K::BackendModule, "dependedOnBy", K::BackendModule, true, Some("dependsOn"), Backward, Forward),
    // Implementation references: the source paths that implement one specification. A change
    // to the specification reaches them (impact) and makes them suspect until reviewed; no
    // inverse, so a specification's own file does not list its implementations.
    link(K::ImplementationRef, "functionalDomain", K::FunctionalDomain, false, None, Backward, Backward),
    link(K::ImplementationRef, "backendModule", K::BackendModule, false, None, Backward, Backward),
    link(K::ImplementationRef, "uiScreen", K::UiScreen, false, None, Backward, Backward),
    // Mentions: no inverse, no flow.
    link(K::Issue, "relatedIssues", K::Issue, true, None, NoFlow, NoFlow),
    link(K::ResearchNote, "relatedIssues", K::Issue, true, None, NoFlow, NoFlow),
    link(K::ResearchNote, "relatedDevlogs", K::Devlog, true, None, NoFlow, NoFlow),
    link(K::Devlog, "relatedIssues", K::Issue, true, None, NoFlow, NoFlow),
    link(K::Devlog, "relatedCrs", K::ChangeRequest, true, None, NoFlow, NoFlow),
];

/// Nested traces: `apiMethods[].brdRef` on modules and `actions[].brdRef` on screens. Each traced
/// requirement must exist and be listed in the artifact's own `brdRequirements`.
pub const TRACES: &[(ArtifactKind, &str, &str)] =
    &[(K::BackendModule, "apiMethods", "brdRef"), (K::UiScreen, "actions", "brdRef")];

/// Index of a link in [`LINKS`].
pub type LinkId = u16;

/// The link fields of `kind`, with their ids.
pub fn links_of(kind: ArtifactKind) -> impl Iterator<Item = (LinkId, &'static LinkSpec)> {
    LINKS.iter().enumerate().filter(move |(_, l)| l.from == kind).map(|(i, l)| (i as LinkId, l))
}

/// The spec of the inverse of link `id`, if it has one.
pub fn inverse_of(id: LinkId) -> Option<(LinkId, &'static LinkSpec)> {
    let l = &LINKS[usize::from(id)];
    let inv = l.inverse?;
    links_of(l.to).find(|(_, s)| s.field == inv && s.to == l.from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverses_are_declared_on_both_sides_with_mirrored_flows() {
        for (i, l) in LINKS.iter().enumerate() {
            let Some((_, inv)) = inverse_of(i as LinkId) else {
                assert!(
                    l.inverse.is_none(),
                    "{}.{}: inverse {:?} not declared on {}",
                    l.from,
                    l.field,
                    l.inverse,
                    l.to
                );
                continue;
            };
            assert_eq!(inv.inverse, Some(l.field), "{}.{} and {}.{}", l.from, l.field, inv.from, inv.field);
            let mirror = |f: Flow| match f {
                Flow::Forward => Flow::Backward,
                Flow::Backward => Flow::Forward,
                Flow::None => Flow::None,
            };
            assert_eq!(inv.impact, mirror(l.impact), "{}.{} impact", l.from, l.field);
            assert_eq!(inv.suspect, mirror(l.suspect), "{}.{} suspect", l.from, l.field);
        }
        // Every link field is declared in its kind's schema.
        for l in LINKS {
            let schema: serde_json::Value = serde_json::from_str(l.from.schema()).unwrap();
            assert!(schema["properties"].get(l.field).is_some(), "{}.{} missing from schema", l.from, l.field);
        }
    }
}
