//! Pure deciders for knowledge-base commands: transition, review, promotions, deletion.
//!
//! Each takes the graph it decides against and returns either the appends to make (one atomic
//! multi-stream append, every stream with the version the decision read) or a typed rejection.
//! A rejection appends nothing.

use std::collections::BTreeSet;

use serde_json::{Map, Value};
use strata_journal::{ExpectedVersion, StreamAppend};

use super::artifact::{Created, Deleted, Reviewed, TierPromoted, Transitioned, Updated, content_hash, event_types};
use super::graph::{Graph, NodeId};
use super::intake::{event, with};
use super::kind::{ArtifactKey, ArtifactKind};
use super::lifecycle::{Gate, can_promote_tier, can_transition, gate, states};
use crate::ports::{Clock, Ids};

/// Why a command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The artifact does not exist.
    #[error("[STRATA-E0701] {key} does not exist; check the id with `strata graph entities` or `strata artifact show`")]
    Unknown {
        /// The artifact.
        key: ArtifactKey,
    },
    /// The lifecycle table has no such transition.
    #[error("[STRATA-E0702] {key} cannot go from {from} to {to}; from {from} it can go to: {allowed}")]
    IllegalTransition {
        /// The artifact.
        key: ArtifactKey,
        /// Current state.
        from: String,
        /// Requested state.
        to: String,
        /// Legal targets, comma separated.
        allowed: String,
    },
    /// The state is reached only by a promotion command.
    #[error("[STRATA-E0703] {key} reaches {to} only by promotion; use `strata artifact promote`")]
    PromotionOnly {
        /// The artifact.
        key: ArtifactKey,
        /// Requested state.
        to: String,
    },
    /// Something upstream of a change request is suspect.
    #[error(
        "[STRATA-E0704] {key} cannot be {to} while these are suspect: {suspects}; review them with `strata artifact review`"
    )]
    SuspectUpstream {
        /// The change request.
        key: ArtifactKey,
        /// Requested state.
        to: String,
        /// Suspect artifacts, comma separated.
        suspects: String,
    },
    /// Review of an artifact that is not suspect.
    #[error("[STRATA-E0705] {key} is not suspect; nothing to review")]
    NotSuspect {
        /// The artifact.
        key: ArtifactKey,
    },
    /// A promotion precondition failed.
    #[error("[STRATA-E0706] {0}")]
    Precondition(String),
    /// An artifact to be created exists already.
    #[error("[STRATA-E0707] {key} already exists; choose a new id")]
    Exists {
        /// The artifact.
        key: ArtifactKey,
    },
    /// An entity tier change outside the promotion path.
    #[error(
        "[STRATA-E0708] entity {id} cannot move from tier {from} to {to}; the promotion path is discipline -> product -> foundation"
    )]
    IllegalTier {
        /// Entity id.
        id: String,
        /// Current tier.
        from: String,
        /// Requested tier.
        to: String,
    },
    /// An id of the wrong shape.
    #[error("[STRATA-E0709] {id:?} is not a valid {kind} id")]
    BadId {
        /// Kind.
        kind: ArtifactKind,
        /// Id.
        id: String,
    },
    /// Building an event failed (a bug).
    #[error("[STRATA-E0710] internal error: {0}")]
    Internal(String),
}

/// The ports a decider needs.
pub struct Ctx<'a> {
    /// Fresh event ids.
    pub ids: &'a mut dyn Ids,
    /// The time recorded in events.
    pub clock: &'a dyn Clock,
}

impl Ctx<'_> {
    fn event(&mut self, t: &str, payload: &impl serde::Serialize) -> Result<strata_journal::EventData, Rejection> {
        event(self.ids, self.clock, t, payload, None).map_err(Rejection::Internal)
    }
}

fn existing<'g>(g: &'g Graph, key: &ArtifactKey) -> Result<&'g super::graph::Node, Rejection> {
    g.get(key).ok_or_else(|| Rejection::Unknown { key: key.clone() })
}

fn append(g: &Graph, key: &ArtifactKey, events: Vec<strata_journal::EventData>) -> StreamAppend {
    StreamAppend { stream: key.stream(), expected: ExpectedVersion::Exact(g.version(key)), events }
}

/// Checks a plain move of `key` from `from` to `to` against its kind's transition table and the
/// promotion gate: the checks that need nothing but the states. Returns the gate of `to`; the
/// caller must still apply [`suspect_gate`] when it is [`Gate::Suspects`].
pub fn check_move(key: &ArtifactKey, from: &str, to: &str) -> Result<Gate, Rejection> {
    if !can_transition(key.kind, from, to) {
        let allowed: Vec<&str> =
            states(key.kind).iter().copied().filter(|s| can_transition(key.kind, from, s)).collect();
        return Err(Rejection::IllegalTransition {
            key: key.clone(),
            from: from.to_owned(),
            to: to.to_owned(),
            allowed: if allowed.is_empty() { "nothing".into() } else { allowed.join(", ") },
        });
    }
    match gate(key.kind, to) {
        Gate::Promotion => Err(Rejection::PromotionOnly { key: key.clone(), to: to.to_owned() }),
        open_or_suspects => Ok(open_or_suspects),
    }
}

/// The suspect gate on moving `key` (node `n` of `g`) into `to`: refused while `n` or anything
/// upstream of it is suspect, or while anything upstream of it is in `changing` (artifacts whose
/// content the same decision changes, which would make `n` suspect).
pub fn suspect_gate(
    g: &Graph,
    key: &ArtifactKey,
    n: NodeId,
    to: &str,
    changing: &BTreeSet<NodeId>,
) -> Result<(), Rejection> {
    let mut names: BTreeSet<String> = g.suspect_upstream(n).iter().map(|&s| g.node(s).key.to_string()).collect();
    if !changing.is_empty() && g.upstream(n).iter().any(|u| changing.contains(u)) {
        names.insert(key.to_string());
    }
    if names.is_empty() {
        return Ok(());
    }
    Err(Rejection::SuspectUpstream {
        key: key.clone(),
        to: to.to_owned(),
        suspects: names.into_iter().collect::<Vec<_>>().join(", "),
    })
}

/// Moves `key` to state `to`.
pub fn transition(
    g: &Graph,
    key: &ArtifactKey,
    to: &str,
    reason: Option<&str>,
    ctx: &mut Ctx<'_>,
) -> Result<Vec<StreamAppend>, Rejection> {
    let node = existing(g, key)?;
    if check_move(key, &node.state, to)? == Gate::Suspects {
        let n = g.node_id(key).ok_or_else(|| Rejection::Unknown { key: key.clone() })?;
        suspect_gate(g, key, n, to, &BTreeSet::new())?;
    }
    let e = ctx.event(
        event_types::TRANSITIONED,
        &Transitioned {
            kind: key.kind.name().into(),
            id: key.id.clone(),
            from: node.state.clone(),
            to: to.to_owned(),
            reason: reason.map(str::to_owned),
        },
    )?;
    Ok(vec![append(g, key, vec![e])])
}

/// Clears `key`'s suspicion.
pub fn review(g: &Graph, key: &ArtifactKey, ctx: &mut Ctx<'_>) -> Result<Vec<StreamAppend>, Rejection> {
    let node = existing(g, key)?;
    let n = g.node_id(key).ok_or_else(|| Rejection::Unknown { key: key.clone() })?;
    let Some(marks) = g.suspects().get(&n).filter(|m| !m.is_empty()) else {
        return Err(Rejection::NotSuspect { key: key.clone() });
    };
    let mut cleared: Vec<String> = marks.iter().map(|m| g.node(m.cause).key.to_string()).collect();
    cleared.sort();
    cleared.dedup();
    let e = ctx.event(
        event_types::REVIEWED,
        &Reviewed { kind: key.kind.name().into(), id: key.id.clone(), hash: node.hash.to_hex(), cleared },
    )?;
    Ok(vec![append(g, key, vec![e])])
}

/// Deletes `key` (its dependents become suspect; references to it become dangling).
pub fn delete(g: &Graph, key: &ArtifactKey, ctx: &mut Ctx<'_>) -> Result<Vec<StreamAppend>, Rejection> {
    let node = existing(g, key)?;
    let e = ctx.event(
        event_types::DELETED,
        &Deleted { kind: key.kind.name().into(), id: key.id.clone(), previous_hash: node.hash.to_hex() },
    )?;
    Ok(vec![append(g, key, vec![e])])
}

fn updated_event(
    ctx: &mut Ctx<'_>,
    key: &ArtifactKey,
    node: &super::graph::Node,
    fields: Map<String, Value>,
) -> Result<strata_journal::EventData, Rejection> {
    let hash = content_hash(key, &fields, &node.body);
    ctx.event(
        event_types::UPDATED,
        &Updated {
            kind: key.kind.name().into(),
            id: key.id.clone(),
            fields,
            body: node.body.clone(),
            hash: hash.to_hex(),
            previous_hash: node.hash.to_hex(),
            source: None,
        },
    )
}

/// Promotes a triaged issue to a new change request, writing the back-links on both sides.
pub fn promote_issue(
    g: &Graph,
    issue_id: &str,
    cr_id: &str,
    title: Option<&str>,
    ctx: &mut Ctx<'_>,
) -> Result<Vec<StreamAppend>, Rejection> {
    if !ArtifactKind::ChangeRequest.valid_id(cr_id) {
        return Err(Rejection::BadId { kind: ArtifactKind::ChangeRequest, id: cr_id.to_owned() });
    }
    let issue_key = ArtifactKey::new(ArtifactKind::Issue, issue_id);
    let cr_key = ArtifactKey::new(ArtifactKind::ChangeRequest, cr_id);
    let issue = existing(g, &issue_key)?;
    if g.get(&cr_key).is_some() {
        return Err(Rejection::Exists { key: cr_key });
    }
    if issue.state != "triaged" {
        return Err(Rejection::Precondition(format!(
            "{issue_key} is {}; an issue is promoted once triaged (`strata artifact transition {issue_id} --to triaged`)",
            issue.state
        )));
    }
    let entity = issue.fields.get("entity").cloned().unwrap_or(Value::Null);
    let issue_title = issue.fields.get("title").and_then(Value::as_str).unwrap_or(issue_id);
    let mut cr_fields = Map::new();
    cr_fields.insert("entity".into(), entity);
    cr_fields.insert("title".into(), Value::String(title.unwrap_or(issue_title).to_owned()));
    cr_fields.insert("brdRefs".into(), Value::Array(Vec::new()));
    cr_fields.insert("promotedFrom".into(), Value::String(issue_id.to_owned()));
    let body = format!("Promoted from {issue_id}.\n\n{}", issue.body);
    let created = ctx.event(
        event_types::CREATED,
        &Created {
            kind: ArtifactKind::ChangeRequest.name().into(),
            id: cr_id.to_owned(),
            state: "draft".into(),
            hash: content_hash(&cr_key, &cr_fields, &body).to_hex(),
            fields: cr_fields,
            body,
            source: None,
        },
    )?;
    let mut issue_fields = issue.fields.clone();
    issue_fields.insert("promotedTo".into(), Value::String(cr_id.to_owned()));
    let updated = updated_event(ctx, &issue_key, issue, issue_fields)?;
    let moved = ctx.event(
        event_types::TRANSITIONED,
        &Transitioned {
            kind: ArtifactKind::Issue.name().into(),
            id: issue_id.to_owned(),
            from: "triaged".into(),
            to: "promoted".into(),
            reason: Some(format!("promoted to {cr_id}")),
        },
    )?;
    Ok(vec![append(g, &issue_key, vec![updated, moved]), append(g, &cr_key, vec![created])])
}

/// Groups change requests into a new initiative (backlog item), writing every back-link: each
/// change request's `linkedBacklogItem` and each referenced requirement's `linkedBacklogItems`.
pub fn group_initiative(
    g: &Graph,
    bi_id: &str,
    title: &str,
    entity: Option<&str>,
    crs: &[String],
    ctx: &mut Ctx<'_>,
) -> Result<Vec<StreamAppend>, Rejection> {
    if !ArtifactKind::BacklogItem.valid_id(bi_id) {
        return Err(Rejection::BadId { kind: ArtifactKind::BacklogItem, id: bi_id.to_owned() });
    }
    let bi_key = ArtifactKey::new(ArtifactKind::BacklogItem, bi_id);
    if g.get(&bi_key).is_some() {
        return Err(Rejection::Exists { key: bi_key });
    }
    if crs.is_empty() {
        return Err(Rejection::Precondition("an initiative groups at least one change request".into()));
    }
    let mut entities = std::collections::BTreeSet::new();
    let mut brds = std::collections::BTreeSet::new();
    let mut appends = Vec::new();
    for cr in crs {
        let key = ArtifactKey::new(ArtifactKind::ChangeRequest, cr);
        let node = existing(g, &key)?;
        if let Some(other) = node.fields.get("linkedBacklogItem").and_then(Value::as_str) {
            return Err(Rejection::Precondition(format!("{key} already belongs to {other}; remove it there first")));
        }
        entities.insert(node.fields.get("entity").and_then(Value::as_str).unwrap_or("").to_owned());
        for b in node.fields.get("brdRefs").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            brds.insert(b.to_owned());
        }
        let mut fields = node.fields.clone();
        fields.insert("linkedBacklogItem".into(), Value::String(bi_id.to_owned()));
        let e = updated_event(ctx, &key, node, fields)?;
        appends.push(append(g, &key, vec![e]));
    }
    let entity = match (entity, entities.len()) {
        (Some(e), _) => e.to_owned(),
        (None, 1) => entities.into_iter().next().unwrap_or_default(),
        (None, _) => {
            return Err(Rejection::Precondition(format!(
                "the change requests span entities {}; pass the (cross-cutting) entity the initiative belongs to",
                entities.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }
    };
    if g.get(&ArtifactKey::new(ArtifactKind::Entity, &entity)).is_none() {
        return Err(Rejection::Unknown { key: ArtifactKey::new(ArtifactKind::Entity, &entity) });
    }
    for b in &brds {
        let key = ArtifactKey::new(ArtifactKind::BrdRequirement, b);
        if let Some(node) = g.get(&key) {
            let mut fields = node.fields.clone();
            with(&mut fields, "linkedBacklogItems", bi_id);
            let e = updated_event(ctx, &key, node, fields)?;
            appends.push(append(g, &key, vec![e]));
        }
    }
    let mut fields = Map::new();
    fields.insert("entity".into(), Value::String(entity));
    fields.insert("title".into(), Value::String(title.to_owned()));
    fields.insert("linkedCrIds".into(), Value::Array(crs.iter().map(|c| Value::String(c.clone())).collect()));
    fields.insert("linkedBrdRefs".into(), Value::Array(brds.into_iter().map(Value::String).collect()));
    let body = String::new();
    let created = ctx.event(
        event_types::CREATED,
        &Created {
            kind: ArtifactKind::BacklogItem.name().into(),
            id: bi_id.to_owned(),
            state: "planned".into(),
            hash: content_hash(&bi_key, &fields, &body).to_hex(),
            fields,
            body,
            source: None,
        },
    )?;
    appends.push(append(g, &bi_key, vec![created]));
    Ok(appends)
}

/// Moves an entity up the tier promotion path.
pub fn promote_tier(g: &Graph, entity_id: &str, to: &str, ctx: &mut Ctx<'_>) -> Result<Vec<StreamAppend>, Rejection> {
    let key = ArtifactKey::new(ArtifactKind::Entity, entity_id);
    let node = existing(g, &key)?;
    let from = node.fields.get("tier").and_then(Value::as_str).unwrap_or("").to_owned();
    if !can_promote_tier(&from, to) {
        return Err(Rejection::IllegalTier { id: entity_id.to_owned(), from, to: to.to_owned() });
    }
    let e =
        ctx.event(event_types::TIER_PROMOTED, &TierPromoted { id: entity_id.to_owned(), from, to: to.to_owned() })?;
    Ok(vec![append(g, &key, vec![e])])
}
