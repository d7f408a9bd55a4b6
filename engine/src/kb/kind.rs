//! The fifteen artifact kinds, their id rules and their schemas.

use std::fmt;

/// What an artifact is. Identity is `(kind, id)`: slugs may repeat across kinds (an entity and a
/// functional domain can both be called `billing`) but never within one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ArtifactKind {
    /// A branch of the knowledge base: product, foundation, discipline or cross-cutting.
    Entity,
    /// ISS-n.
    Issue,
    /// CR-n.
    ChangeRequest,
    /// BI-n (backlog item or initiative).
    BacklogItem,
    /// BRD-n.m.
    BrdRequirement,
    /// Business logic of one area.
    FunctionalDomain,
    /// An API surface.
    BackendModule,
    /// A screen.
    UiScreen,
    /// RN-n.
    ResearchNote,
    /// DL-n.
    Devlog,
    /// How an entity presents itself: brand, colours, voice.
    DesignProfile,
    /// A rule a technology of the stack imposes on changes (migrations reversible, …).
    StackConcern,
    /// What an agent must know to work with one technology of the stack.
    TechSkill,
    /// Which source paths in the repository implement one specification.
    ImplementationRef,
    /// Where a kind of change is made: the paths and the steps.
    ModificationRoute,
}

impl ArtifactKind {
    /// Every kind, in a fixed order.
    pub const ALL: [ArtifactKind; 15] = [
        ArtifactKind::Entity,
        ArtifactKind::Issue,
        ArtifactKind::ChangeRequest,
        ArtifactKind::BacklogItem,
        ArtifactKind::BrdRequirement,
        ArtifactKind::FunctionalDomain,
        ArtifactKind::BackendModule,
        ArtifactKind::UiScreen,
        ArtifactKind::ResearchNote,
        ArtifactKind::Devlog,
        ArtifactKind::DesignProfile,
        ArtifactKind::StackConcern,
        ArtifactKind::TechSkill,
        ArtifactKind::ImplementationRef,
        ArtifactKind::ModificationRoute,
    ];

    /// The name used in front matter, streams and schemas (`change-request`).
    pub fn name(self) -> &'static str {
        match self {
            ArtifactKind::Entity => "entity",
            ArtifactKind::Issue => "issue",
            ArtifactKind::ChangeRequest => "change-request",
            ArtifactKind::BacklogItem => "backlog-item",
            ArtifactKind::BrdRequirement => "brd-requirement",
            ArtifactKind::FunctionalDomain => "functional-domain",
            ArtifactKind::BackendModule => "backend-module",
            ArtifactKind::UiScreen => "ui-screen",
            ArtifactKind::ResearchNote => "research-note",
            ArtifactKind::Devlog => "devlog",
            ArtifactKind::DesignProfile => "design-profile",
            ArtifactKind::StackConcern => "stack-concern",
            ArtifactKind::TechSkill => "tech-skill",
            ArtifactKind::ImplementationRef => "implementation-ref",
            ArtifactKind::ModificationRoute => "modification-route",
        }
    }

    /// Parses [`ArtifactKind::name`].
    pub fn from_name(name: &str) -> Option<ArtifactKind> {
        ArtifactKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The group an impact report lists this kind under.
    pub fn group(self) -> &'static str {
        match self {
            ArtifactKind::Entity => "entities",
            ArtifactKind::Issue => "issues",
            ArtifactKind::ChangeRequest => "change requests",
            ArtifactKind::BacklogItem => "backlog items",
            ArtifactKind::BrdRequirement => "requirements",
            ArtifactKind::FunctionalDomain => "domains",
            ArtifactKind::BackendModule => "modules",
            ArtifactKind::UiScreen => "screens",
            ArtifactKind::ResearchNote => "research notes",
            ArtifactKind::Devlog => "devlogs",
            ArtifactKind::DesignProfile => "design profiles",
            ArtifactKind::StackConcern => "stack concerns",
            ArtifactKind::TechSkill => "tech skills",
            ArtifactKind::ImplementationRef => "implementation references",
            ArtifactKind::ModificationRoute => "modification routes",
        }
    }

    /// True for the four specification layers (BRD requirement, domain, module, screen).
    pub fn is_spec(self) -> bool {
        matches!(
            self,
            ArtifactKind::BrdRequirement
                | ArtifactKind::FunctionalDomain
                | ArtifactKind::BackendModule
                | ArtifactKind::UiScreen
        )
    }

    /// True for the five kinds behind the seed's further prompt sections (design profile, stack
    /// concern, tech skill, implementation reference, modification route): slug ids, classified
    /// under an entity, the specifications' lifecycle.
    pub fn is_section(self) -> bool {
        matches!(
            self,
            ArtifactKind::DesignProfile
                | ArtifactKind::StackConcern
                | ArtifactKind::TechSkill
                | ArtifactKind::ImplementationRef
                | ArtifactKind::ModificationRoute
        )
    }

    /// The JSON Schema (2020-12) of this kind, compiled into the binary.
    pub fn schema(self) -> &'static str {
        match self {
            ArtifactKind::Entity => include_str!("../../../schemas/entity.schema.json"),
            ArtifactKind::Issue => include_str!("../../../schemas/issue.schema.json"),
            ArtifactKind::ChangeRequest => include_str!("../../../schemas/change-request.schema.json"),
            ArtifactKind::BacklogItem => include_str!("../../../schemas/backlog-item.schema.json"),
            ArtifactKind::BrdRequirement => include_str!("../../../schemas/brd-requirement.schema.json"),
            ArtifactKind::FunctionalDomain => include_str!("../../../schemas/functional-domain.schema.json"),
            ArtifactKind::BackendModule => include_str!("../../../schemas/backend-module.schema.json"),
            ArtifactKind::UiScreen => include_str!("../../../schemas/ui-screen.schema.json"),
            ArtifactKind::ResearchNote => include_str!("../../../schemas/research-note.schema.json"),
            ArtifactKind::Devlog => include_str!("../../../schemas/devlog.schema.json"),
            ArtifactKind::DesignProfile => include_str!("../../../schemas/design-profile.schema.json"),
            ArtifactKind::StackConcern => include_str!("../../../schemas/stack-concern.schema.json"),
            ArtifactKind::TechSkill => include_str!("../../../schemas/tech-skill.schema.json"),
            ArtifactKind::ImplementationRef => include_str!("../../../schemas/implementation-ref.schema.json"),
            ArtifactKind::ModificationRoute => include_str!("../../../schemas/modification-route.schema.json"),
        }
    }

    /// Whether `id` has this kind's shape (the same rule as the schema's `id` pattern).
    pub fn valid_id(self, id: &str) -> bool {
        if id.is_empty() || id.len() > 64 {
            return false;
        }
        let numbered = |prefix: &str| {
            id.strip_prefix(prefix).is_some_and(|n| (1..=6).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_digit()))
        };
        match self {
            ArtifactKind::Entity
            | ArtifactKind::FunctionalDomain
            | ArtifactKind::BackendModule
            | ArtifactKind::UiScreen
            | ArtifactKind::DesignProfile
            | ArtifactKind::StackConcern
            | ArtifactKind::TechSkill
            | ArtifactKind::ImplementationRef
            | ArtifactKind::ModificationRoute => is_slug(id),
            ArtifactKind::Issue => numbered("ISS-"),
            ArtifactKind::ChangeRequest => numbered("CR-"),
            ArtifactKind::BacklogItem => numbered("BI-"),
            ArtifactKind::ResearchNote => numbered("RN-"),
            ArtifactKind::Devlog => numbered("DL-"),
            ArtifactKind::BrdRequirement => {
                id.strip_prefix("BRD-").and_then(|r| r.split_once('.')).is_some_and(|(a, b)| {
                    (1..=4).contains(&a.len())
                        && (1..=4).contains(&b.len())
                        && a.bytes().all(|c| c.is_ascii_digit())
                        && b.bytes().all(|c| c.is_ascii_digit())
                })
            }
        }
    }

    /// The kinds whose ids `id` could be, judged by shape alone.
    pub fn guess(id: &str) -> Vec<ArtifactKind> {
        ArtifactKind::ALL.into_iter().filter(|k| k.valid_id(id)).collect()
    }
}

/// `^[a-z][a-z0-9]*(-[a-z0-9]+)*$`
pub fn is_slug(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || !b[0].is_ascii_lowercase() || b[b.len() - 1] == b'-' {
        return false;
    }
    let mut prev_dash = false;
    for &c in b {
        match c {
            b'a'..=b'z' | b'0'..=b'9' => prev_dash = false,
            b'-' if !prev_dash => prev_dash = true,
            _ => return false,
        }
    }
    true
}

impl fmt::Display for ArtifactKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `(kind, id)`: the identity of an artifact.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ArtifactKey {
    /// Kind.
    pub kind: ArtifactKind,
    /// Id.
    pub id: String,
}

impl ArtifactKey {
    /// A key.
    pub fn new(kind: ArtifactKind, id: &str) -> ArtifactKey {
        ArtifactKey { kind, id: id.to_owned() }
    }

    /// The journal stream of this artifact: `artifact/<kind>/<id>`.
    pub fn stream(&self) -> String {
        format!("artifact/{}/{}", self.kind.name(), self.id)
    }
}

impl fmt::Display for ArtifactKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.name(), self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_ids_follow_their_rules() {
        for k in ArtifactKind::ALL {
            assert_eq!(ArtifactKind::from_name(k.name()), Some(k));
            let schema: serde_json::Value = serde_json::from_str(k.schema()).expect("schema is JSON");
            assert_eq!(schema["properties"]["kind"]["const"], k.name());
        }
        assert!(ArtifactKind::BrdRequirement.valid_id("BRD-19.1"));
        assert!(!ArtifactKind::BrdRequirement.valid_id("BRD-19"));
        assert!(ArtifactKind::ChangeRequest.valid_id("CR-189"));
        assert!(!ArtifactKind::ChangeRequest.valid_id("CR-"));
        assert!(ArtifactKind::Entity.valid_id("ai-sales"));
        assert!(!ArtifactKind::Entity.valid_id("Ai-sales"));
        assert!(!ArtifactKind::Entity.valid_id("ai--sales"));
        assert!(!ArtifactKind::Entity.valid_id("ai-sales-"));
        assert_eq!(ArtifactKind::guess("CR-1"), vec![ArtifactKind::ChangeRequest]);
    }
}
