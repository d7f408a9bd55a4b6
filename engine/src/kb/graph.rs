//! The spec graph: a projection of every artifact event into typed nodes and edges, with
//! suspicion, and the queries over it (impact closure, validation, suspects, the entity
//! registry).
//!
//! Nodes are addressed by a dense `NodeId`; a reference to an artifact that does not exist (yet)
//! creates a placeholder node, so every edge has a target and a dangling reference is simply an
//! edge to a node that does not exist. Each node keeps its outgoing edges (from its own link
//! fields) and its incoming ones, so both directions of every flow are a slice walk.
//!
//! Suspicion is derived state: an `artifact.updated` that changes an artifact's content hash (or
//! an `artifact.deleted`) marks every artifact reachable along suspect flows, up to
//! [`SUSPECT_DEPTH_MAX`] links away, with the cause and the path; `artifact.reviewed` clears an
//! artifact's marks. Replaying the same events gives the same marks.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, OnceLock};

use rkyv::rancor;
use rkyv::util::AlignedVec;
use serde_json::{Map, Value};
use strata_journal::body::Body;
use strata_journal::projection::Projection;
use strata_journal::{Hash, Record};

use super::artifact::{
    Created, Deleted, Reviewed, TierPromoted, Transitioned, Updated, content_hash, event_types, parse_kind,
};
use super::kind::{ArtifactKey, ArtifactKind};
use super::lifecycle::{can_promote_tier, can_transition, states};
use super::links::{Flow, LINKS, LinkId, TRACES, links_of};
use crate::projections::StateHasher;

/// Dense node index.
pub type NodeId = u32;

/// How far suspicion spreads from a changed artifact, in links.
pub const SUSPECT_DEPTH_MAX: usize = 16;

/// One artifact (or a placeholder for a referenced one that does not exist).
#[derive(Clone, Debug)]
pub struct Node {
    /// Identity.
    pub key: ArtifactKey,
    /// False for placeholders and deleted artifacts.
    pub exists: bool,
    /// Lifecycle state.
    pub state: String,
    /// Fields (all but kind, id, state, body).
    pub fields: Map<String, Value>,
    /// Body.
    pub body: String,
    /// Content hash.
    pub hash: Hash,
    /// Events applied to its stream.
    pub version: u64,
    /// Journal sequence of its last event.
    pub last_seq: u64,
    /// Its entity node.
    pub entity: Option<NodeId>,
    /// `(link, target)` for every reference in its own fields.
    pub out: Vec<(LinkId, NodeId)>,
    /// `(link, source)` for every reference to it.
    pub inn: Vec<(LinkId, NodeId)>,
}

/// Why an artifact is suspect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suspicion {
    /// The artifact whose change caused it.
    pub cause: NodeId,
    /// That artifact's content hash after the change (zero for a deletion).
    pub cause_hash: Hash,
    /// Journal sequence of the change.
    pub seq: u64,
    /// Links from the cause to the suspect artifact.
    pub path: Vec<(LinkId, NodeId)>,
}

/// The projection.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    nodes: Vec<Node>,
    index: KeyIndex,
    suspects: BTreeMap<NodeId, Vec<Suspicion>>,
    seq: u64,
    /// Entities whose members (or themselves) changed since the last `take_dirty_entities`.
    dirty: BTreeSet<NodeId>,
    /// Existing artifacts by [`Group`]: the directory of their virtual path, so path globs are
    /// decided per directory rather than per artifact.
    groups: BTreeMap<Group, BTreeSet<NodeId>>,
    /// Existing artifacts whose id contains `/` (none that intake accepts), whose paths have
    /// more segments than their group's directory and one id.
    slashed: BTreeSet<NodeId>,
    /// Per node, where its fields and body lie in `source` while they have not been decoded into
    /// `nodes`: a node restored from a snapshot and not changed since is *cold* (its entry in
    /// `nodes` has everything but empty fields and body); `None` once it is warm.
    cold: Vec<Option<Cold>>,
    /// Per cold node, the whole node with its fields and body decoded, made on first access.
    views: Vec<OnceLock<Box<Node>>>,
    /// The snapshot body cold nodes are read from (validated when it was restored).
    source: Option<Arc<Body>>,
}

/// Where a cold node's archived [`NodeSnapshot`] lies in the snapshot body.
#[derive(Clone, Copy, Debug)]
struct Cold {
    /// Offset of the archive (16-aligned).
    at: usize,
    /// Its length.
    len: usize,
    /// Whether the node's `entity` field is a string (then it names the node's entity link).
    entity_str: bool,
}

/// Node ids by key. Each id is hashed by its node's key and compared with it, so a key is held
/// once (in its node), not copied into the map as well: a restore of 116k nodes made 116k fewer
/// allocations.
#[derive(Clone, Debug, Default)]
struct KeyIndex(hashbrown::HashTable<NodeId>);

fn key_hash(key: &ArtifactKey) -> u64 {
    use std::hash::BuildHasher as _;
    std::hash::BuildHasherDefault::<crate::projections::FxHasher>::default().hash_one(key)
}

impl KeyIndex {
    fn get(&self, nodes: &[Node], key: &ArtifactKey) -> Option<NodeId> {
        self.0.find(key_hash(key), |&n| nodes[n as usize].key == *key).copied()
    }

    /// Adds node `n` (already in `nodes`) under its key; false when the key is held already.
    fn insert(&mut self, nodes: &[Node], n: NodeId) -> bool {
        let key = &nodes[n as usize].key;
        let entry =
            self.0.entry(key_hash(key), |&m| nodes[m as usize].key == *key, |&m| key_hash(&nodes[m as usize].key));
        match entry {
            hashbrown::hash_table::Entry::Occupied(_) => false,
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert(n);
                true
            }
        }
    }

    fn reserve(&mut self, nodes: &[Node], additional: usize) {
        self.0.reserve(additional, |&m| key_hash(&nodes[m as usize].key));
    }
}

/// Artifacts whose virtual paths share a directory: the kind, and for kinds filed under an
/// entity (specifications, research notes, devlogs) the `entity` field (`_` when absent; empty
/// for the other kinds).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Group {
    /// Kind.
    pub kind: ArtifactKind,
    /// Entity the path is filed under, `_` when none, empty for kinds not filed by entity.
    pub entity: String,
}

/// A finding of `strata graph validate`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// Stable rule name: `dangling`, `missing-inverse`, `cycle`, `cross-entity`, `untraced`,
    /// `unresolved` (a screen's `module#method` that names no such method).
    pub rule: &'static str,
    /// The artifact the finding is about.
    pub artifact: ArtifactKey,
    /// The field involved, if any.
    pub field: String,
    /// The other artifact involved, if any.
    pub target: Option<ArtifactKey>,
    /// A sentence saying what is wrong and what to do.
    pub detail: String,
}

/// One artifact reached by an impact closure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reached {
    /// The artifact.
    pub key: ArtifactKey,
    /// Its entity, if it has one.
    pub entity: Option<String>,
    /// The path from the start, rendered (`CR-189 -brdRefs-> BRD-19.1 -backendModules-> api`).
    pub path: String,
    /// Links from the start.
    pub depth: usize,
}

/// An impact closure: what a change to `start` touches, with a parent pointer per artifact.
#[derive(Clone, Debug)]
pub struct Closure {
    /// Where it starts.
    pub start: NodeId,
    parent: HashMap<NodeId, (NodeId, LinkId, u32)>,
    /// Reached artifacts in breadth-first order (the start excluded).
    pub steps: Vec<NodeId>,
    /// `(entity, first reached artifact belonging to it)` for entities not reached as artifacts.
    pub entities: Vec<(NodeId, NodeId)>,
    /// `(artifact, link, missing target)` for each reference met on the way to an artifact that
    /// does not exist, in the order met; the missing targets are not in `steps`.
    pub dangling: Vec<(NodeId, LinkId, NodeId)>,
}

impl Closure {
    /// Links from the start to `v` (0 for the start).
    pub fn depth(&self, v: NodeId) -> usize {
        self.parent.get(&v).map_or(0, |p| p.2 as usize)
    }

    /// The link steps from the start to `v`.
    pub fn steps_to(&self, v: NodeId) -> Vec<(LinkId, NodeId)> {
        let mut out = Vec::new();
        let mut cur = v;
        while cur != self.start {
            let Some(&(p, l, _)) = self.parent.get(&cur) else { break };
            out.push((l, cur));
            cur = p;
        }
        out.reverse();
        out
    }

    /// The rendered path from the start to `v`.
    pub fn path(&self, g: &Graph, v: NodeId) -> String {
        g.render_path(self.start, &self.steps_to(v))
    }

    /// Number of artifacts reached, entities included.
    pub fn len(&self) -> usize {
        self.steps.len() + self.entities.len()
    }

    /// True when nothing is reached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An entity in the registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntitySummary {
    /// Id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Tier.
    pub tier: String,
    /// State.
    pub state: String,
    /// Existing artifacts classified under it, by kind.
    pub counts: BTreeMap<ArtifactKind, usize>,
}

/// The artifact a knowledge-base event is about: its kind and id, borrowed from the payload.
#[derive(serde::Deserialize)]
struct About<'a> {
    #[serde(default, borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
}

impl<'a> About<'a> {
    /// `None` when the payload does not name one (the event's own parse reports why).
    fn of(r: &'a Record<'_>) -> Option<About<'a>> {
        serde_json::from_slice(r.payload).ok()
    }
}

/// Whether `spec` is one side of a module dependency (`dependsOn` / `dependedOnBy` between
/// backend modules).
pub fn is_module_dependency(spec: &super::links::LinkSpec) -> bool {
    spec.from == ArtifactKind::BackendModule
        && spec.to == ArtifactKind::BackendModule
        && matches!(spec.field, "dependsOn" | "dependedOnBy")
}

fn link_targets(value: &Value) -> Vec<&str> {
    match value {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Journal sequence of the last applied event.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The node for `key`, if it exists (not a placeholder or deleted).
    pub fn get(&self, key: &ArtifactKey) -> Option<&Node> {
        self.node_id(key).filter(|&i| self.nodes[i as usize].exists).map(|i| self.node(i))
    }

    /// The stream version of `key` (0 when never written), including deleted artifacts.
    pub fn version(&self, key: &ArtifactKey) -> u64 {
        self.node_id(key).map_or(0, |i| self.nodes[i as usize].version)
    }

    /// Node by id, with its fields and body (decoded on first access for a node restored from
    /// a snapshot; what needs only identity, state or links should use [`Graph::key`],
    /// [`Graph::exists`], [`Graph::state_of`] or [`Graph::entity_field`], which decode nothing).
    pub fn node(&self, id: NodeId) -> &Node {
        let i = id as usize;
        match self.cold[i] {
            None => &self.nodes[i],
            Some(c) => self.views[i].get_or_init(|| {
                let mut n = self.nodes[i].clone();
                (n.fields, n.body) = self.decode_content(c);
                Box::new(n)
            }),
        }
    }

    /// The key of node `id` (decodes nothing).
    pub fn key(&self, id: NodeId) -> &ArtifactKey {
        &self.nodes[id as usize].key
    }

    /// Whether node `id` is an existing artifact (decodes nothing).
    pub fn exists(&self, id: NodeId) -> bool {
        self.nodes[id as usize].exists
    }

    /// The lifecycle state of node `id` (decodes nothing).
    pub fn state_of(&self, id: NodeId) -> &str {
        &self.nodes[id as usize].state
    }

    /// The content hash of node `id` (decodes nothing).
    pub fn hash_of(&self, id: NodeId) -> Hash {
        self.nodes[id as usize].hash
    }

    /// The `entity` field of node `id` when it is a string (what its virtual path is filed
    /// under), decoding nothing for an existing artifact.
    pub fn entity_field(&self, id: NodeId) -> Option<&str> {
        let i = id as usize;
        match self.cold[i] {
            None => self.nodes[i].fields.get("entity").and_then(Value::as_str),
            Some(c) if !c.entity_str => None,
            Some(_) => match self.nodes[i].entity {
                Some(e) if self.nodes[i].exists => Some(self.nodes[e as usize].key.id.as_str()),
                _ => self.node(id).fields.get("entity").and_then(Value::as_str),
            },
        }
    }

    /// The fields `names` of node `id` (those it has), decoded for the call alone when the node
    /// is cold and not yet viewed: a pass over many nodes neither keeps them all nor builds the
    /// fields it does not read.
    fn fields_of(&self, id: NodeId, names: &[&str]) -> Cow<'_, Map<String, Value>> {
        let i = id as usize;
        match (self.cold[i], self.views[i].get()) {
            (None, _) => Cow::Borrowed(&self.nodes[i].fields),
            (Some(_), Some(v)) => Cow::Borrowed(&v.fields),
            (Some(c), None) => Cow::Owned(self.decode_fields(c, names)),
        }
    }

    /// The fields `names` of a cold node: its fields' JSON is scanned once, and only those
    /// values are built.
    fn decode_fields(&self, c: Cold, names: &[&str]) -> Map<String, Value> {
        let mut scratch = AlignedVec::<16>::new();
        let Some(bytes) = self.source.as_ref().and_then(|src| src.aligned(c.at..c.at + c.len, &mut scratch)) else {
            return Map::new();
        };
        let Ok(ns) = rkyv::access::<ArchivedNodeSnapshot, rancor::Error>(bytes) else { return Map::new() };
        let raw: BTreeMap<Cow<'_, str>, &serde_json::value::RawValue> =
            serde_json::from_str(ns.fields_json.as_str()).unwrap_or_default();
        names
            .iter()
            .filter_map(|&name| {
                let v = raw.get(name)?;
                Some((name.to_owned(), serde_json::from_str(v.get()).ok()?))
            })
            .collect()
    }

    /// The fields and body of a cold node, read from the snapshot body. The body was validated
    /// (checksums, rkyv's checks) when it was restored; what fails here now decodes as empty.
    fn decode_content(&self, c: Cold) -> (Map<String, Value>, String) {
        let Some(src) = &self.source else { return Default::default() };
        let mut scratch = AlignedVec::<16>::new();
        let Some(bytes) = src.aligned(c.at..c.at + c.len, &mut scratch) else { return Default::default() };
        match rkyv::access::<ArchivedNodeSnapshot, rancor::Error>(bytes) {
            Ok(ns) => (serde_json::from_str(ns.fields_json.as_str()).unwrap_or_default(), ns.body.as_str().to_owned()),
            Err(_) => Default::default(),
        }
    }

    /// Makes node `n` warm before a change to what its snapshot records: its fields and body are
    /// decoded into `nodes` and it will be encoded afresh.
    fn warm(&mut self, n: NodeId) {
        let i = n as usize;
        let Some(c) = self.cold[i].take() else { return };
        let (fields, body) = match self.views[i].take() {
            Some(v) => (v.fields, v.body),
            None => self.decode_content(c),
        };
        self.nodes[i].fields = fields;
        self.nodes[i].body = body;
    }

    /// Drops the decoded view of node `n` before a change to what it derives (incoming edges),
    /// which its snapshot does not record.
    fn unview(&mut self, n: NodeId) {
        let i = n as usize;
        if self.cold[i].is_some() {
            self.views[i].take();
        }
    }

    /// Existing artifacts, sorted by key.
    pub fn artifacts(&self) -> Vec<&Node> {
        let mut v: Vec<NodeId> = (0..self.nodes.len() as NodeId).filter(|&n| self.nodes[n as usize].exists).collect();
        v.sort_by(|a, b| self.nodes[*a as usize].key.cmp(&self.nodes[*b as usize].key));
        v.into_iter().map(|n| self.node(n)).collect()
    }

    /// Existing artifacts of `kind`, sorted by key (decodes only those).
    pub fn artifacts_of(&self, kind: ArtifactKind) -> Vec<&Node> {
        let mut v: Vec<NodeId> = (0..self.nodes.len() as NodeId)
            .filter(|&n| self.nodes[n as usize].exists && self.nodes[n as usize].key.kind == kind)
            .collect();
        v.sort_by(|a, b| self.nodes[*a as usize].key.cmp(&self.nodes[*b as usize].key));
        v.into_iter().map(|n| self.node(n)).collect()
    }

    /// Number of existing artifacts.
    pub fn len(&self) -> usize {
        self.nodes.iter().filter(|n| n.exists).count()
    }

    /// True when no artifact exists.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Existing artifacts with id `id`, of any kind.
    pub fn find(&self, id: &str) -> Vec<&Node> {
        let mut v: Vec<&Node> = ArtifactKind::ALL.iter().filter_map(|k| self.get(&ArtifactKey::new(*k, id))).collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }

    /// Node id of `key`, if the graph has a node (existing or placeholder).
    pub fn node_id(&self, key: &ArtifactKey) -> Option<NodeId> {
        self.index.get(&self.nodes, key)
    }

    fn intern(&mut self, key: ArtifactKey) -> NodeId {
        if let Some(i) = self.node_id(&key) {
            return i;
        }
        let i = NodeId::try_from(self.nodes.len()).unwrap_or(NodeId::MAX);
        self.nodes.push(Node {
            key,
            exists: false,
            state: String::new(),
            fields: Map::new(),
            body: String::new(),
            hash: Hash::ZERO,
            version: 0,
            last_seq: 0,
            entity: None,
            out: Vec::new(),
            inn: Vec::new(),
        });
        self.cold.push(None);
        self.views.push(OnceLock::new());
        self.index.insert(&self.nodes, i);
        i
    }

    /// Replaces `n`'s outgoing edges with the ones its fields declare.
    fn relink(&mut self, n: NodeId) {
        self.warm(n);
        let old = std::mem::take(&mut self.nodes[n as usize].out);
        for (lid, t) in old {
            self.unview(t);
            let inn = &mut self.nodes[t as usize].inn;
            if let Some(pos) = inn.iter().position(|&(l, s)| l == lid && s == n) {
                inn.remove(pos);
            }
        }
        self.nodes[n as usize].entity = None;
        if !self.nodes[n as usize].exists {
            return;
        }
        let kind = self.nodes[n as usize].key.kind;
        let mut out = Vec::new();
        for (lid, spec) in links_of(kind) {
            let targets: Vec<String> = match self.nodes[n as usize].fields.get(spec.field) {
                Some(v) => link_targets(v).into_iter().map(str::to_owned).collect(),
                None => continue,
            };
            for t in targets {
                let tid = self.intern(ArtifactKey::new(spec.to, &t));
                if !out.contains(&(lid, tid)) {
                    out.push((lid, tid));
                }
                if spec.field == "entity" {
                    self.nodes[n as usize].entity = Some(tid);
                }
            }
        }
        for &(lid, t) in &out {
            self.unview(t);
            self.nodes[t as usize].inn.push((lid, n));
        }
        self.nodes[n as usize].out = out;
    }

    /// Neighbours of `n` along `flow_of(link)`: outgoing edges whose flow is forward, incoming
    /// edges whose flow is backward. Returns `(link, neighbour, outgoing?)`.
    fn neighbours(
        &self,
        n: NodeId,
        flow_of: fn(&super::links::LinkSpec) -> Flow,
    ) -> impl Iterator<Item = (LinkId, NodeId, bool)> + '_ {
        let node = &self.nodes[n as usize];
        let fwd = node
            .out
            .iter()
            .filter(move |(l, _)| flow_of(&LINKS[usize::from(*l)]) == Flow::Forward)
            .map(|&(l, t)| (l, t, true));
        let back = node
            .inn
            .iter()
            .filter(move |(l, _)| flow_of(&LINKS[usize::from(*l)]) == Flow::Backward)
            .map(|&(l, s)| (l, s, false));
        fwd.chain(back)
    }

    fn mark_suspects(&mut self, cause: NodeId, cause_hash: Hash, seq: u64) {
        let mut seen: BTreeSet<NodeId> = BTreeSet::from([cause]);
        let mut queue: VecDeque<(NodeId, Vec<(LinkId, NodeId)>)> = VecDeque::from([(cause, Vec::new())]);
        while let Some((n, path)) = queue.pop_front() {
            if path.len() >= SUSPECT_DEPTH_MAX {
                continue;
            }
            let next: Vec<(LinkId, NodeId)> = self.neighbours(n, |s| s.suspect).map(|(l, v, _)| (l, v)).collect();
            for (l, v) in next {
                if !self.nodes[v as usize].exists || !seen.insert(v) {
                    continue;
                }
                let mut p = path.clone();
                p.push((l, v));
                self.warm(v);
                let marks = self.suspects.entry(v).or_default();
                marks.retain(|s| s.cause != cause);
                marks.push(Suspicion { cause, cause_hash, seq, path: p.clone() });
                queue.push_back((v, p));
            }
        }
    }

    /// Applies one journal record. Unknown event types are ignored; a knowledge-base event that
    /// contradicts the graph (an illegal transition, an update of a missing artifact) is an
    /// error, because the deciders never append one.
    pub fn apply_record(&mut self, r: &Record<'_>) -> Result<(), String> {
        // The type first: most of a journal is not knowledge-base events, and those must cost a
        // string comparison, not a JSON parse.
        if !event_types::ALL.contains(&r.event_type) {
            return Ok(());
        }
        let about = About::of(r);
        let touched = about.as_ref().and_then(|a| self.touched_entity(r.event_type, a));
        let node = about.as_ref().and_then(|a| self.about_node(r.event_type, a));
        let group_before = node.and_then(|n| self.group_of(n));
        let result = match r.event_type {
            event_types::CREATED => self.on_created(r),
            event_types::UPDATED => self.on_updated(r),
            event_types::TRANSITIONED => self.on_transitioned(r),
            event_types::REVIEWED => self.on_reviewed(r),
            event_types::DELETED => self.on_deleted(r),
            _ => self.on_tier_promoted(r),
        };
        self.seq = r.seq;
        // Mark the entity before and after the event (an update may reclassify the artifact).
        let after = about.as_ref().and_then(|a| self.touched_entity(r.event_type, a));
        self.dirty.extend(touched.into_iter().chain(after));
        // A created node is only interned by the event itself.
        if let Some(n) = node.or_else(|| about.as_ref().and_then(|a| self.about_node(r.event_type, a))) {
            let group_after = self.group_of(n);
            if group_after.is_some() && self.nodes[n as usize].key.id.contains('/') {
                self.slashed.insert(n);
            } else {
                self.slashed.remove(&n);
            }
            if group_after != group_before {
                if let Some(g) = group_before
                    && let Some(set) = self.groups.get_mut(&g)
                {
                    set.remove(&n);
                    if set.is_empty() {
                        self.groups.remove(&g);
                    }
                }
                if let Some(g) = group_after {
                    self.groups.entry(g).or_default().insert(n);
                }
            }
        }
        result
    }

    /// The node an event is about, if the graph has one.
    fn about_node(&self, event_type: &str, about: &About<'_>) -> Option<NodeId> {
        let kind = match (event_type, &about.kind) {
            (event_types::TIER_PROMOTED, _) => ArtifactKind::Entity,
            (_, Some(k)) => ArtifactKind::from_name(k)?,
            (_, None) => return None,
        };
        self.node_id(&ArtifactKey::new(kind, &about.id))
    }

    /// The path group of `n`, if it exists.
    pub fn group_of(&self, n: NodeId) -> Option<Group> {
        let node = &self.nodes[n as usize];
        if !node.exists {
            return None;
        }
        let kind = node.key.kind;
        let filed =
            kind.is_spec() || kind.is_section() || matches!(kind, ArtifactKind::ResearchNote | ArtifactKind::Devlog);
        let entity = if filed { self.entity_field(n).unwrap_or("_") } else { "" };
        Some(Group { kind: node.key.kind, entity: entity.to_owned() })
    }

    /// Existing artifacts by path group.
    pub fn groups(&self) -> &BTreeMap<Group, BTreeSet<NodeId>> {
        &self.groups
    }

    /// Existing artifacts whose id contains `/`.
    pub fn slashed_ids(&self) -> &BTreeSet<NodeId> {
        &self.slashed
    }

    /// The entity node of the artifact an event is about (the artifact itself if it is one).
    fn touched_entity(&self, event_type: &str, about: &About<'_>) -> Option<NodeId> {
        let kind = match (event_type, &about.kind) {
            (event_types::TIER_PROMOTED, _) => ArtifactKind::Entity,
            (_, Some(k)) => ArtifactKind::from_name(k)?,
            (_, None) => return None,
        };
        let n = self.node_id(&ArtifactKey::new(kind, &about.id))?;
        if kind == ArtifactKind::Entity { Some(n) } else { self.nodes[n as usize].entity }
    }

    /// Entities whose summaries may have changed since the last call, by id.
    pub fn take_dirty_entities(&mut self) -> Vec<String> {
        std::mem::take(&mut self.dirty).into_iter().map(|n| self.nodes[n as usize].key.id.clone()).collect()
    }

    /// Existing artifacts classified under entity `entity`, sorted by key.
    pub fn members(&self, entity: &str) -> Vec<&Node> {
        let Some(e) = self.node_id(&ArtifactKey::new(ArtifactKind::Entity, entity)) else {
            return Vec::new();
        };
        let mut v: Vec<&Node> = self.nodes[e as usize]
            .inn
            .iter()
            .filter(|(l, _)| LINKS[usize::from(*l)].field == "entity")
            .filter(|&&(_, s)| self.nodes[s as usize].exists)
            .map(|&(_, s)| self.node(s))
            .collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }

    fn payload<'a, T: serde::Deserialize<'a>>(r: &'a Record<'_>) -> Result<T, String> {
        serde_json::from_slice(r.payload).map_err(|e| format!("payload does not match {} v1: {e}", r.event_type))
    }

    fn touch(&mut self, n: NodeId, r: &Record<'_>) -> Result<(), String> {
        self.warm(n);
        let node = &mut self.nodes[n as usize];
        if r.version != node.version + 1 {
            return Err(format!("{} is at version {} but the event is version {}", node.key, node.version, r.version));
        }
        node.version = r.version;
        node.last_seq = r.seq;
        Ok(())
    }

    fn existing(&self, kind: &str, id: &str) -> Result<NodeId, String> {
        let key = ArtifactKey::new(parse_kind(kind)?, id);
        match self.node_id(&key) {
            Some(n) if self.nodes[n as usize].exists => Ok(n),
            _ => Err(format!("{key} does not exist")),
        }
    }

    fn on_created(&mut self, r: &Record<'_>) -> Result<(), String> {
        let e: Created = Self::payload(r)?;
        let key = ArtifactKey::new(parse_kind(&e.kind)?, &e.id);
        let n = self.intern(key.clone());
        if self.nodes[n as usize].exists {
            return Err(format!("{key} is created twice"));
        }
        if !states(key.kind).contains(&e.state.as_str()) {
            return Err(format!("{key} is created in unknown state {:?}", e.state));
        }
        self.touch(n, r)?;
        let hash = content_hash(&key, &e.fields, &e.body);
        let node = &mut self.nodes[n as usize];
        node.exists = true;
        node.state = e.state;
        node.fields = e.fields;
        node.body = e.body;
        node.hash = hash;
        self.relink(n);
        Ok(())
    }

    fn on_updated(&mut self, r: &Record<'_>) -> Result<(), String> {
        let e: Updated = Self::payload(r)?;
        let n = self.existing(&e.kind, &e.id)?;
        self.touch(n, r)?;
        let key = self.nodes[n as usize].key.clone();
        let hash = content_hash(&key, &e.fields, &e.body);
        let changed = hash != self.nodes[n as usize].hash;
        let node = &mut self.nodes[n as usize];
        node.fields = e.fields;
        node.body = e.body;
        node.hash = hash;
        self.relink(n);
        if changed {
            self.mark_suspects(n, hash, r.seq);
        }
        Ok(())
    }

    fn on_transitioned(&mut self, r: &Record<'_>) -> Result<(), String> {
        let e: Transitioned = Self::payload(r)?;
        let n = self.existing(&e.kind, &e.id)?;
        let node = &self.nodes[n as usize];
        if node.state != e.from || !can_transition(node.key.kind, &e.from, &e.to) {
            return Err(format!("{} cannot go from {} ({:?} recorded) to {}", node.key, node.state, e.from, e.to));
        }
        self.touch(n, r)?;
        self.nodes[n as usize].state = e.to;
        Ok(())
    }

    fn on_reviewed(&mut self, r: &Record<'_>) -> Result<(), String> {
        let e: Reviewed = Self::payload(r)?;
        let n = self.existing(&e.kind, &e.id)?;
        self.touch(n, r)?;
        self.suspects.remove(&n);
        Ok(())
    }

    fn on_deleted(&mut self, r: &Record<'_>) -> Result<(), String> {
        let e: Deleted = Self::payload(r)?;
        let n = self.existing(&e.kind, &e.id)?;
        self.touch(n, r)?;
        // Dependents lose their source: they become suspect, then the artifact goes.
        self.mark_suspects(n, Hash::ZERO, r.seq);
        self.nodes[n as usize].exists = false;
        self.suspects.remove(&n);
        self.relink(n);
        Ok(())
    }

    fn on_tier_promoted(&mut self, r: &Record<'_>) -> Result<(), String> {
        let e: TierPromoted = Self::payload(r)?;
        let n = self.existing(ArtifactKind::Entity.name(), &e.id)?;
        self.warm(n);
        let current = self.nodes[n as usize].fields.get("tier").and_then(Value::as_str).unwrap_or("").to_owned();
        if current != e.from || !can_promote_tier(&e.from, &e.to) {
            return Err(format!(
                "entity {} cannot be promoted from {current} ({:?} recorded) to {}",
                e.id, e.from, e.to
            ));
        }
        self.touch(n, r)?;
        let node = &mut self.nodes[n as usize];
        node.fields.insert("tier".into(), Value::String(e.to));
        node.hash = content_hash(&node.key, &node.fields, &node.body);
        Ok(())
    }

    /// Suspicion of every suspect artifact, by node.
    pub fn suspects(&self) -> &BTreeMap<NodeId, Vec<Suspicion>> {
        &self.suspects
    }

    /// Whether `n` is suspect.
    pub fn is_suspect(&self, n: NodeId) -> bool {
        self.suspects.get(&n).is_some_and(|v| !v.is_empty())
    }

    /// Renders a link path starting at `start`.
    pub fn render_path(&self, start: NodeId, path: &[(LinkId, NodeId)]) -> String {
        let mut s = self.nodes[start as usize].key.id.clone();
        let mut prev = start;
        for &(l, v) in path {
            let spec = &LINKS[usize::from(l)];
            // An edge declared on the previous node reads forward; one declared on the next node
            // (an incoming edge walked backwards) reads as its reverse.
            if spec.from == self.nodes[prev as usize].key.kind && self.nodes[prev as usize].out.contains(&(l, v)) {
                s.push_str(&format!(" -{}-> {}", spec.field, self.nodes[v as usize].key.id));
            } else {
                s.push_str(&format!(" <-{}- {}", spec.field, self.nodes[v as usize].key.id));
            }
            prev = v;
        }
        s
    }

    fn entity_id(&self, n: NodeId) -> Option<String> {
        self.nodes[n as usize].entity.map(|e| self.nodes[e as usize].key.id.clone())
    }

    /// The transitive impact closure of `start`, as compact justification pointers: every
    /// artifact a change to it touches (breadth first, so each has a shortest path), and the
    /// entities of everything reached. Outgoing links are preferred over incoming ones at each
    /// step so paths read downstream. Paths are rendered only on demand ([`Closure::path`]).
    pub fn impact_closure(&self, start: NodeId) -> Closure {
        let mut parent: HashMap<NodeId, (NodeId, LinkId, u32)> = HashMap::new();
        let mut steps = Vec::new();
        let mut queue = VecDeque::from([start]);
        parent.insert(start, (start, 0, 0));
        let mut dangling = Vec::new();
        while let Some(n) = queue.pop_front() {
            let depth = parent[&n].2 + 1;
            for (l, v, _) in self.neighbours(n, |s| s.impact) {
                // A reference to an artifact that does not exist reaches nothing: it is reported
                // as dangling (as `validate` does), never as reached, and never walked through.
                if !self.nodes[v as usize].exists {
                    if !dangling.contains(&(n, l, v)) {
                        dangling.push((n, l, v));
                    }
                    continue;
                }
                if let std::collections::hash_map::Entry::Vacant(e) = parent.entry(v) {
                    e.insert((n, l, depth));
                    steps.push(v);
                    queue.push_back(v);
                }
            }
        }
        // Entities of the start and of everything reached, each via the first artifact (in BFS
        // order) that belongs to it.
        let mut entities: Vec<(NodeId, NodeId)> = Vec::new();
        for &v in std::iter::once(&start).chain(&steps) {
            if let Some(e) = self.nodes[v as usize].entity
                && self.nodes[e as usize].exists
                && !parent.contains_key(&e)
                && !entities.iter().any(|(x, _)| *x == e)
            {
                entities.push((e, v));
            }
        }
        Closure { start, parent, steps, entities, dangling }
    }

    /// [`Graph::impact_closure`] rendered for people: every reached artifact with its path,
    /// sorted by kind, depth and id.
    pub fn impact(&self, start: NodeId) -> Vec<Reached> {
        self.reached(&self.impact_closure(start))
    }

    /// The artifacts of closure `c`, rendered as [`Graph::impact`] renders them.
    pub fn reached(&self, c: &Closure) -> Vec<Reached> {
        let mut out: Vec<Reached> = c
            .steps
            .iter()
            .map(|&v| Reached {
                key: self.nodes[v as usize].key.clone(),
                entity: self.entity_id(v),
                path: c.path(self, v),
                depth: c.depth(v),
            })
            .collect();
        for &(e, via) in &c.entities {
            let path = format!("{} -entity-> {}", c.path(self, via), self.nodes[e as usize].key.id);
            out.push(Reached { key: self.nodes[e as usize].key.clone(), entity: None, path, depth: c.depth(via) + 1 });
        }
        out.sort_by(|a, b| (a.key.kind, a.depth, &a.key.id).cmp(&(b.key.kind, b.depth, &b.key.id)));
        out
    }

    /// The references closure `c` met to artifacts that do not exist, as the `dangling` findings
    /// [`Graph::validate`] gives for them, sorted.
    pub fn dangling(&self, c: &Closure) -> Vec<Finding> {
        let mut out: Vec<Finding> =
            c.dangling.iter().map(|&(n, l, t)| self.dangling_finding(n, &LINKS[usize::from(l)], t)).collect();
        out.sort();
        out
    }

    fn dangling_finding(&self, n: NodeId, spec: &super::links::LinkSpec, t: NodeId) -> Finding {
        let (node, target) = (&self.nodes[n as usize], &self.nodes[t as usize]);
        Finding {
            rule: "dangling",
            artifact: node.key.clone(),
            field: spec.field.into(),
            target: Some(target.key.clone()),
            detail: format!(
                "{}.{} refers to {} {}, which does not exist; create it or remove the reference",
                node.key.id, spec.field, spec.to, target.key.id
            ),
        }
    }

    /// Existing artifacts upstream of `n` along suspect flows (those whose changes would make `n`
    /// suspect), at most [`SUSPECT_DEPTH_MAX`] links away, nearest first; `n` itself excluded.
    pub fn upstream(&self, n: NodeId) -> Vec<NodeId> {
        let mut found = Vec::new();
        let mut seen = BTreeSet::from([n]);
        let mut queue = VecDeque::from([(n, 0usize)]);
        // Upstream = against the suspect flow: incoming-forward and outgoing-backward edges.
        while let Some((u, d)) = queue.pop_front() {
            if d >= SUSPECT_DEPTH_MAX {
                continue;
            }
            let node = &self.nodes[u as usize];
            let ups = node
                .inn
                .iter()
                .filter(|(l, _)| LINKS[usize::from(*l)].suspect == Flow::Forward)
                .chain(node.out.iter().filter(|(l, _)| LINKS[usize::from(*l)].suspect == Flow::Backward));
            for &(_, v) in ups {
                if self.nodes[v as usize].exists && seen.insert(v) {
                    found.push(v);
                    queue.push_back((v, d + 1));
                }
            }
        }
        found
    }

    /// Existing artifacts upstream of `n` along suspect flows that are suspect themselves, plus
    /// `n` if it is suspect.
    pub fn suspect_upstream(&self, n: NodeId) -> Vec<NodeId> {
        let mut found: Vec<NodeId> = self.is_suspect(n).then_some(n).into_iter().collect();
        found.extend(self.upstream(n).into_iter().filter(|&v| self.is_suspect(v)));
        found
    }

    /// Applies planned appends as the journal would record them (each event at the next
    /// sequence, each stream from the version it expects), without a journal: the graph an
    /// accepted plan leads to, for deciding on what a plan would bring about as a whole.
    pub fn apply_appends(&mut self, appends: &[strata_journal::StreamAppend]) -> Result<(), String> {
        for a in appends {
            let strata_journal::ExpectedVersion::Exact(mut version) = a.expected else {
                return Err(format!("the append to {} expects no exact version", a.stream));
            };
            for e in &a.events {
                version += 1;
                self.apply_record(&e.placed(&a.stream, self.seq + 1, version, Hash::ZERO))?;
            }
        }
        Ok(())
    }

    /// Every validation finding, sorted.
    pub fn validate(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        let tier = |n: NodeId| self.nodes[n as usize].entity.and_then(|e| self.entity_tier(e));
        let cross_cutting = |n: NodeId| tier(n) == Some("cross-cutting");
        // (smaller key, larger key) -> (holder key, holder's field, holder, target, whether the
        // link is a module dependency).
        type Crossing<'k> = (&'k ArtifactKey, &'static str, NodeId, NodeId, bool);
        let mut crossed: BTreeMap<(&ArtifactKey, &ArtifactKey), Crossing<'_>> = BTreeMap::new();
        for (ni, node) in self.nodes.iter().enumerate() {
            let n = ni as NodeId;
            if !node.exists {
                continue;
            }
            for &(l, t) in &node.out {
                let spec = &LINKS[usize::from(l)];
                let target = &self.nodes[t as usize];
                if !target.exists {
                    out.push(self.dangling_finding(n, spec, t));
                    continue;
                }
                if let Some(inv) = spec.inverse
                    && !target.out.iter().any(|&(tl, tt)| tt == n && LINKS[usize::from(tl)].field == inv)
                {
                    out.push(Finding {
                        rule: "missing-inverse",
                        artifact: node.key.clone(),
                        field: spec.field.into(),
                        target: Some(target.key.clone()),
                        detail: format!(
                            "{}.{} lists {} but {}.{} does not list {}; add it there",
                            node.key.id, spec.field, target.key.id, target.key.id, inv, node.key.id
                        ),
                    });
                }
                let module_dep = is_module_dependency(spec);
                // A module may depend across entities only on a module of a foundation or
                // cross-cutting entity: the provider is the target of `dependsOn` and the holder
                // of `dependedOnBy`.
                let provider = if spec.field == "dependsOn" { t } else { n };
                let allowed = if module_dep {
                    matches!(tier(provider), Some("foundation" | "cross-cutting"))
                } else {
                    cross_cutting(n) || cross_cutting(t)
                };
                if spec.field != "entity"
                    && node.entity.is_some()
                    && target.entity.is_some()
                    && node.entity != target.entity
                    && !allowed
                {
                    // Once per pair of artifacts, about the artifact holding the link, with its
                    // own field; when both sides hold one (a link and its inverse), about the
                    // smaller key and field. Keys, not node ids, so intake order cannot matter.
                    // A module dependency is keyed (dependant, provider): its two sides are
                    // one finding, and `a → b` and `b → a` are two.
                    let pair = if module_dep {
                        if spec.field == "dependsOn" { (&node.key, &target.key) } else { (&target.key, &node.key) }
                    } else if node.key <= target.key {
                        (&node.key, &target.key)
                    } else {
                        (&target.key, &node.key)
                    };
                    let candidate = (&node.key, spec.field, n, t, module_dep);
                    crossed
                        .entry(pair)
                        .and_modify(|c| {
                            if (candidate.0, candidate.1) < (c.0, c.1) {
                                *c = candidate;
                            }
                        })
                        .or_insert(candidate);
                }
            }
            for (kind, list, field) in TRACES {
                if node.key.kind != *kind {
                    continue;
                }
                let fields = self.fields_of(n, &["brdRequirements", list]);
                let declared: Vec<&str> = fields.get("brdRequirements").map(link_targets).unwrap_or_default();
                let items = fields.get(*list).and_then(Value::as_array).cloned().unwrap_or_default();
                for (i, item) in items.iter().enumerate() {
                    let Some(brd) = item.get(*field).and_then(Value::as_str) else { continue };
                    let exists = self.get(&ArtifactKey::new(ArtifactKind::BrdRequirement, brd)).is_some();
                    if !exists || !declared.contains(&brd) {
                        out.push(Finding {
                            rule: "untraced",
                            artifact: node.key.clone(),
                            field: format!("{list}/{i}/{field}"),
                            target: Some(ArtifactKey::new(ArtifactKind::BrdRequirement, brd)),
                            detail: if exists {
                                format!("{}.{list}[{i}] traces to {brd}, which {} does not list in brdRequirements; list it there", node.key.id, node.key.id)
                            } else {
                                format!("{}.{list}[{i}] traces to {brd}, which does not exist", node.key.id)
                            },
                        });
                    }
                }
            }
        }
        for (holder, field, n, t, module_dep) in crossed.into_values() {
            let (a, b) = (self.entity_id(n).unwrap_or_default(), self.entity_id(t).unwrap_or_default());
            let target = &self.nodes[t as usize].key;
            let detail = if module_dep {
                let p = if field == "dependsOn" { t } else { n };
                format!(
                    "{}.{field} links module {} ({a}) to module {} ({b}), but {} is a {} entity; a module may depend on another entity's module only when that entity is foundation or cross-cutting: move the shared method there or remove the dependency",
                    holder.id,
                    holder.id,
                    target.id,
                    self.entity_id(p).unwrap_or_default(),
                    tier(p).unwrap_or("tierless"),
                )
            } else {
                format!(
                    "{}.{field} links {} ({a}) to {} ({b}) directly; links between entities go through the cross-cutting entity",
                    holder.id, holder.id, target.id
                )
            };
            out.push(Finding {
                rule: "cross-entity",
                artifact: holder.clone(),
                field: field.into(),
                target: Some(target.clone()),
                detail,
            });
        }
        out.extend(self.unresolved_calls());
        out.extend(self.cycles());
        out.sort();
        out
    }

    /// Cycles along impact flows (in practice through `dependsOn`), one finding per cycle,
    /// found with an iterative Tarjan SCC (no recursion, so depth is not bounded by the stack).
    fn cycles(&self) -> Vec<Finding> {
        let count = self.nodes.len();
        let mut index = vec![u32::MAX; count];
        let mut low = vec![0u32; count];
        let mut on_stack = vec![false; count];
        let mut stack: Vec<NodeId> = Vec::new();
        let mut next = 0u32;
        let mut findings = Vec::new();
        let succ = |n: NodeId| -> Vec<NodeId> {
            self.neighbours(n, |s| s.impact).map(|(_, v, _)| v).filter(|v| self.nodes[*v as usize].exists).collect()
        };
        for root in 0..count as NodeId {
            if index[root as usize] != u32::MAX || !self.nodes[root as usize].exists {
                continue;
            }
            let mut work: Vec<(NodeId, Vec<NodeId>, usize)> = vec![(root, succ(root), 0)];
            index[root as usize] = next;
            low[root as usize] = next;
            next += 1;
            stack.push(root);
            on_stack[root as usize] = true;
            while let Some((v, ws, i)) = work.last_mut() {
                let v = *v;
                if let Some(&w) = ws.get(*i) {
                    *i += 1;
                    if index[w as usize] == u32::MAX {
                        index[w as usize] = next;
                        low[w as usize] = next;
                        next += 1;
                        stack.push(w);
                        on_stack[w as usize] = true;
                        let s = succ(w);
                        work.push((w, s, 0));
                    } else if on_stack[w as usize] {
                        low[v as usize] = low[v as usize].min(index[w as usize]);
                    }
                    continue;
                }
                work.pop();
                if let Some((p, _, _)) = work.last() {
                    low[*p as usize] = low[*p as usize].min(low[v as usize]);
                }
                if low[v as usize] == index[v as usize] {
                    let mut scc = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w as usize] = false;
                        scc.push(w);
                        if w == v {
                            break;
                        }
                    }
                    let self_loop = scc.len() == 1 && succ(v).contains(&v);
                    if scc.len() > 1 || self_loop {
                        let mut keys: Vec<&ArtifactKey> = scc.iter().map(|&w| &self.nodes[w as usize].key).collect();
                        keys.sort();
                        let names: Vec<&str> = keys.iter().map(|k| k.id.as_str()).collect();
                        let first = scc.iter().copied().min_by(|a, b| self.key(*a).cmp(self.key(*b))).unwrap_or(v);
                        let around: Vec<&str> =
                            self.cycle_through(first, &scc, succ).iter().map(|&w| self.key(w).id.as_str()).collect();
                        findings.push(Finding {
                            rule: "cycle",
                            artifact: keys[0].clone(),
                            field: "dependsOn".into(),
                            target: None,
                            detail: format!(
                                "{} depend on each other in a cycle ({}); break it by removing one dependsOn",
                                names.join(", "),
                                around.join(" -> ")
                            ),
                        });
                    }
                }
            }
        }
        findings
    }

    /// A shortest cycle from `first` back to itself inside strongly connected component `scc`
    /// (which holds one), as the nodes on it with `first` at both ends; successors are taken in
    /// key order, so the same graph gives the same cycle.
    fn cycle_through(&self, first: NodeId, scc: &[NodeId], succ: impl Fn(NodeId) -> Vec<NodeId>) -> Vec<NodeId> {
        let members: BTreeSet<NodeId> = scc.iter().copied().collect();
        let mut parent: HashMap<NodeId, NodeId> = HashMap::new();
        let mut queue = VecDeque::from([first]);
        while let Some(u) = queue.pop_front() {
            let mut next: Vec<NodeId> = succ(u).into_iter().filter(|w| members.contains(w)).collect();
            next.sort_by(|a, b| self.key(*a).cmp(self.key(*b)));
            for w in next {
                if w == first {
                    let mut path = vec![first, u];
                    let mut cur = u;
                    while cur != first {
                        cur = parent[&cur];
                        path.push(cur);
                    }
                    path.reverse();
                    return path;
                }
                if let std::collections::hash_map::Entry::Vacant(e) = parent.entry(w) {
                    e.insert(u);
                    queue.push_back(w);
                }
            }
        }
        vec![first, first]
    }

    /// The tier of entity node `e`, if it exists and has one.
    fn entity_tier(&self, e: NodeId) -> Option<&str> {
        if !self.exists(e) {
            return None;
        }
        match self.fields_of(e, &["tier"]) {
            Cow::Borrowed(f) => f.get("tier").and_then(Value::as_str),
            // A cold entity not yet viewed: decode the whole node once (entities are few).
            Cow::Owned(_) => self.node(e).fields.get("tier").and_then(Value::as_str),
        }
    }

    /// Screen data bindings and actions that name a backend method as `module#method` and do
    /// not resolve to one of that module's `apiMethods`: one `unresolved` finding each.
    fn unresolved_calls(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        let Some(screens) = self.groups_of_kind(ArtifactKind::UiScreen) else { return out };
        for n in screens {
            let fields = self.fields_of(n, &["dataBindings", "actions"]);
            let mut calls: Vec<(String, &str)> = Vec::new();
            for (list, field) in [("dataBindings", "source"), ("actions", "call")] {
                let items = fields.get(list).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                for (i, item) in items.iter().enumerate() {
                    if let Some(c) = item.get(field).and_then(Value::as_str)
                        && c.contains('#')
                    {
                        calls.push((format!("{list}/{i}/{field}"), c));
                    }
                }
            }
            for (pointer, call) in calls {
                let (module, method) = call.split_once('#').unwrap_or((call, ""));
                let mkey = ArtifactKey::new(ArtifactKind::BackendModule, module);
                let found = self.node_id(&mkey).filter(|&m| self.exists(m));
                let resolves = found.is_some_and(|m| {
                    self.fields_of(m, &["apiMethods"])
                        .get("apiMethods")
                        .and_then(Value::as_array)
                        .is_some_and(|ms| ms.iter().any(|x| x.get("name").and_then(Value::as_str) == Some(method)))
                });
                if resolves {
                    continue;
                }
                let id = &self.key(n).id;
                out.push(Finding {
                    rule: "unresolved",
                    artifact: self.key(n).clone(),
                    field: pointer.clone(),
                    target: Some(mkey),
                    detail: if found.is_some() {
                        format!("{id}.{pointer} calls {call}, but module {module} has no apiMethod {method:?}; add the method to {module} or correct the call")
                    } else {
                        format!("{id}.{pointer} calls {call}, but there is no backend module {module}; create it or correct the call")
                    },
                });
            }
        }
        out
    }

    /// Existing artifacts of `kind`, in node order, from the path groups (no pass over every
    /// node); `None` when there are none.
    fn groups_of_kind(&self, kind: ArtifactKind) -> Option<Vec<NodeId>> {
        let v: Vec<NodeId> = self
            .groups
            .range(Group { kind, entity: String::new() }..)
            .take_while(|(g, _)| g.kind == kind)
            .flat_map(|(_, m)| m.iter().copied())
            .collect();
        (!v.is_empty()).then_some(v)
    }

    /// Entities by tier (in [`super::lifecycle::TIERS`] order, then id), with artifact counts.
    pub fn entities(&self) -> Vec<EntitySummary> {
        let mut counts: HashMap<NodeId, BTreeMap<ArtifactKind, usize>> = HashMap::new();
        for node in self.nodes.iter().filter(|n| n.exists) {
            if let Some(e) = node.entity {
                *counts.entry(e).or_default().entry(node.key.kind).or_default() += 1;
            }
        }
        let mut out: Vec<EntitySummary> = (0..self.nodes.len() as NodeId)
            .filter(|&i| self.nodes[i as usize].exists && self.nodes[i as usize].key.kind == ArtifactKind::Entity)
            .map(|i| {
                let n = self.node(i);
                EntitySummary {
                    id: n.key.id.clone(),
                    name: n.fields.get("name").and_then(Value::as_str).unwrap_or(&n.key.id).to_owned(),
                    tier: n.fields.get("tier").and_then(Value::as_str).unwrap_or("").to_owned(),
                    state: n.state.clone(),
                    counts: counts.remove(&i).unwrap_or_default(),
                }
            })
            .collect();
        let tier_rank = |t: &str| super::lifecycle::TIERS.iter().position(|x| *x == t).unwrap_or(usize::MAX);
        out.sort_by(|a, b| (tier_rank(&a.tier), &a.id).cmp(&(tier_rank(&b.tier), &b.id)));
        out
    }

    /// The graph as of journal sequence `at`, rebuilt from the journal.
    pub fn at(journal: &strata_journal::Journal, at: u64) -> Result<Graph, String> {
        let mut g = Graph::new();
        let r = journal.scan(1, at, |rec, _| g.apply_record(rec).map(|()| true)).map_err(|e| e.to_string())?;
        r.map_err(|e| format!("replay to {at} failed: {e}"))?;
        Ok(g)
    }
}

/// Magic of a graph snapshot body (format 3: one archive per node).
const SNAPSHOT_MAGIC: &[u8; 4] = b"GRS3";
/// Bytes of the body's header: magic, node count (u32 LE), sequence (u64 LE), link fingerprint.
const SNAPSHOT_HEADER: usize = 4 + 4 + 8 + 32;
/// Bytes before each node's archive: its length (u32 LE) and zeros, so the archive is 16-aligned.
const FRAME_HEADER: usize = 16;

const _: () = assert!(SNAPSHOT_HEADER.is_multiple_of(16) && FRAME_HEADER.is_multiple_of(16));

/// One node as a snapshot records it. Each node is its own rkyv archive in the body
/// (`header | per node: frame header, archive, zeros to 16`), so:
/// * a change to one artifact changes its own frame and no other bytes (no offsets elsewhere
///   move), and the snapshot store's content-defined chunks around the other nodes stay as
///   they were;
/// * a restore validates every archive once and decodes only what every query needs (key,
///   state, hash, edges, suspicion); fields and body stay in the body and are decoded for a node
///   only when something reads them ([`Graph::node`]);
/// * a save copies the archives of nodes that did not change instead of encoding them again.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct NodeSnapshot {
    kind: u8,
    id: String,
    exists: bool,
    state: String,
    /// Whether the `entity` field is a string (then the entity link names it).
    entity_str: bool,
    fields_json: String,
    body: String,
    /// The content hash as folded (not recomputed on restore).
    hash: [u8; 32],
    version: u64,
    last_seq: u64,
    /// Outgoing edges as folded, so a restore need not re-derive them from the fields.
    out: Vec<(u16, u32)>,
    suspects: Vec<SuspicionSnapshot>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct SuspicionSnapshot {
    cause: u32,
    cause_hash: [u8; 32],
    seq: u64,
    path: Vec<(u16, u32)>,
}

fn kind_code(k: ArtifactKind) -> u8 {
    ArtifactKind::ALL.iter().position(|x| *x == k).unwrap_or(0) as u8
}

/// blake3 over every link's (from, field, to, impact flow, suspect flow), in table order, and the
/// kind order.
fn links_fingerprint() -> [u8; 32] {
    let mut h = StateHasher::new("graph-links/1");
    for k in ArtifactKind::ALL {
        h.str(k.name());
    }
    let flow = |f: Flow| match f {
        Flow::None => "none",
        Flow::Forward => "forward",
        Flow::Backward => "backward",
    };
    for l in LINKS {
        h.str(l.from.name());
        h.str(l.field);
        h.str(l.to.name());
        // Suspicion marks in a snapshot follow the flows: another flow, another table.
        h.str(flow(l.impact));
        h.str(flow(l.suspect));
    }
    h.finish().0
}

/// Lower-case hex of `h` in `buf` (what [`Hash::to_hex`] gives, without an allocation).
fn hex_of<'b>(h: &Hash, buf: &'b mut [u8; 64]) -> &'b [u8] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in h.0.iter().enumerate() {
        buf[2 * i] = DIGITS[usize::from(b >> 4)];
        buf[2 * i + 1] = DIGITS[usize::from(b & 15)];
    }
    buf
}

fn le_u32(b: &[u8]) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[..4]);
    u32::from_le_bytes(x)
}

/// A node's frame decoded: the node without its incoming edges or entity, where its archive
/// lies, and its suspicion marks.
struct Restored {
    node: Node,
    cold: Cold,
    suspects: Vec<Suspicion>,
}

/// Validates and decodes the frame at `off` of a snapshot of `count` nodes; returns it and the
/// offset of the next frame. `scratch` holds an archive that is not 16-aligned where it lies.
fn decode_frame(
    body: &Body,
    off: usize,
    count: usize,
    scratch: &mut AlignedVec<16>,
) -> Result<(Restored, usize), String> {
    let frame = body.aligned(off..off + FRAME_HEADER, scratch).ok_or("snapshot ends inside a node")?;
    let len = le_u32(frame) as usize;
    let at = off + FRAME_HEADER;
    let archive = body.aligned(at..at + len, scratch).ok_or("snapshot ends inside a node")?;
    let ns = rkyv::access::<ArchivedNodeSnapshot, rancor::Error>(archive).map_err(|e| e.to_string())?;
    let kind = *ArtifactKind::ALL.get(usize::from(ns.kind)).ok_or("bad kind in snapshot")?;
    let inside = |l: u16, t: u32| usize::from(l) < LINKS.len() && (t as usize) < count;
    let mut out = Vec::with_capacity(ns.out.len());
    for e in ns.out.iter() {
        let (l, t) = (e.0.to_native(), e.1.to_native());
        if !inside(l, t) {
            return Err("edge refers outside the snapshot".into());
        }
        out.push((l, t));
    }
    let mut suspects = Vec::new();
    for m in ns.suspects.iter() {
        let cause = m.cause.to_native();
        let path: Vec<(LinkId, NodeId)> = m.path.iter().map(|e| (e.0.to_native(), e.1.to_native())).collect();
        if cause as usize >= count || !path.iter().all(|&(l, v)| inside(l, v)) {
            return Err("suspicion refers outside the snapshot".into());
        }
        suspects.push(Suspicion { cause, cause_hash: Hash(m.cause_hash), seq: m.seq.to_native(), path });
    }
    let node = Node {
        key: ArtifactKey::new(kind, ns.id.as_str()),
        exists: ns.exists,
        state: ns.state.as_str().to_owned(),
        fields: Map::new(),
        body: String::new(),
        hash: Hash(ns.hash),
        version: ns.version.to_native(),
        last_seq: ns.last_seq.to_native(),
        entity: None,
        out,
        inn: Vec::new(),
    };
    Ok((
        Restored { node, cold: Cold { at, len, entity_str: ns.entity_str }, suspects },
        (at + len).next_multiple_of(16),
    ))
}

impl Graph {
    /// Adds the next node of a snapshot being restored.
    fn add_restored(&mut self, r: Restored) -> Result<(), String> {
        let n = self.nodes.len() as NodeId;
        if !r.suspects.is_empty() {
            self.suspects.insert(n, r.suspects);
        }
        self.nodes.push(r.node);
        self.cold.push(Some(r.cold));
        if !self.index.insert(&self.nodes, n) {
            return Err("duplicate node in snapshot".into());
        }
        Ok(())
    }

    /// The rkyv archive of warm node `i`.
    fn encode_node(&self, i: usize) -> Result<Vec<u8>, String> {
        let n = &self.nodes[i];
        let ns = NodeSnapshot {
            kind: kind_code(n.key.kind),
            id: n.key.id.clone(),
            exists: n.exists,
            state: n.state.clone(),
            entity_str: matches!(n.fields.get("entity"), Some(Value::String(_))),
            fields_json: crate::canonical::to_string(&Value::Object(n.fields.clone())),
            body: n.body.clone(),
            hash: n.hash.0,
            version: n.version,
            last_seq: n.last_seq,
            out: n.out.clone(),
            suspects: self
                .suspects
                .get(&(i as NodeId))
                .map(|v| {
                    v.iter()
                        .map(|s| SuspicionSnapshot {
                            cause: s.cause,
                            cause_hash: s.cause_hash.0,
                            seq: s.seq,
                            path: s.path.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        };
        rkyv::to_bytes::<rancor::Error>(&ns).map(|b| b.to_vec()).map_err(|e| e.to_string())
    }

    /// Restores from a snapshot body in 16-aligned memory, which the graph keeps: every node's
    /// archive is validated, its identity, state and links decoded, its fields and body left in
    /// place until read.
    fn restore_from(body: Body) -> Result<Graph, String> {
        let mut scratch = AlignedVec::<16>::new();
        let mut header = [0u8; SNAPSHOT_HEADER];
        let b = body.aligned(0..SNAPSHOT_HEADER, &mut scratch).ok_or("not a graph snapshot of this format")?;
        header.copy_from_slice(b);
        let b = &header;
        if &b[..4] != SNAPSHOT_MAGIC {
            return Err("not a graph snapshot of this format".into());
        }
        if b[16..48] != links_fingerprint() {
            return Err("snapshot was written for another link table".into());
        }
        let count = le_u32(&b[4..8]) as usize;
        let mut sb = [0u8; 8];
        sb.copy_from_slice(&b[8..16]);
        let seq = u64::from_le_bytes(sb);
        // A node's frame is at least its header and a minimal archive: a count past what the
        // body could hold is refused before anything is reserved for it.
        if count > (body.len() - SNAPSHOT_HEADER) / (FRAME_HEADER + 16) {
            return Err("snapshot says it holds more nodes than its size allows".into());
        }
        let mut g = Graph::new();
        g.nodes.reserve(count);
        g.index.reserve(&g.nodes, count);
        g.cold.reserve(count);
        let mut off = SNAPSHOT_HEADER;
        for _ in 0..count {
            let (restored, next) = decode_frame(&body, off, count, &mut scratch)?;
            g.add_restored(restored)?;
            off = next;
        }
        if off != body.len() {
            return Err("snapshot holds more than its nodes".into());
        }
        g.views = (0..count).map(|_| OnceLock::new()).collect();
        // Incoming edges and entities as relinking every node in id order would set them; each
        // node's incoming list is sized once, not grown edge by edge.
        let mut incoming = vec![0usize; count];
        for node in &g.nodes {
            for &(_, t) in &node.out {
                incoming[t as usize] += 1;
            }
        }
        for (node, k) in g.nodes.iter_mut().zip(incoming) {
            node.inn = Vec::with_capacity(k);
        }
        for n in 0..count {
            let out = std::mem::take(&mut g.nodes[n].out);
            for &(l, t) in &out {
                if LINKS[usize::from(l)].field == "entity" {
                    g.nodes[n].entity = Some(t);
                }
                g.nodes[t as usize].inn.push((l, n as NodeId));
            }
            g.nodes[n].out = out;
        }
        // Nodes of a group mostly follow each other (intake order): one map lookup per run.
        let mut run: Option<(Group, BTreeSet<NodeId>)> = None;
        for n in 0..count as NodeId {
            let Some(group) = g.group_of(n) else { continue };
            if g.nodes[n as usize].key.id.contains('/') {
                g.slashed.insert(n);
            }
            match &mut run {
                Some((current, members)) if *current == group => {
                    members.insert(n);
                }
                _ => {
                    if let Some((done, members)) = run.take() {
                        g.groups.entry(done).or_default().extend(members);
                    }
                    run = Some((group, BTreeSet::from([n])));
                }
            }
        }
        if let Some((done, members)) = run {
            g.groups.entry(done).or_default().extend(members);
        }
        g.seq = seq;
        g.source = Some(Arc::new(body));
        Ok(g)
    }
}

impl Projection for Graph {
    fn name(&self) -> &str {
        "graph"
    }

    fn version(&self) -> u32 {
        // 3: one archive per node, fields and body decoded on demand.
        3
    }

    fn apply(&mut self, record: &Record<'_>) -> Result<(), String> {
        self.apply_record(record)
    }

    fn state_hash(&self) -> Hash {
        let mut h = StateHasher::new("graph/1");
        let mut order: Vec<(&Node, NodeId)> = self.nodes.iter().zip(0..).filter(|(node, _)| node.version > 0).collect();
        // Keys are unique, so an unstable sort gives the one order.
        order.sort_unstable_by(|a, b| a.0.key.cmp(&b.0.key));
        let mut hex = [0u8; 64];
        for (node, n) in order {
            h.str(node.key.kind.name());
            h.str(&node.key.id);
            h.u64(u64::from(node.exists));
            h.str(&node.state);
            h.bytes(hex_of(&node.hash, &mut hex));
            h.u64(node.version);
            let mut marks: Vec<String> = self
                .suspects
                .get(&n)
                .map(|v| v.iter().map(|s| format!("{}@{}", self.nodes[s.cause as usize].key, s.seq)).collect())
                .unwrap_or_default();
            marks.sort();
            h.u64(marks.len() as u64);
            for m in marks {
                h.str(&m);
            }
        }
        h.finish()
    }

    fn encode_snapshot(&self) -> Result<Vec<u8>, String> {
        let count = u32::try_from(self.nodes.len()).map_err(|_| "too many nodes for a snapshot")?;
        let mut out = Vec::with_capacity(self.source.as_ref().map_or(0, |s| s.len() + s.len() / 64));
        let mut scratch = AlignedVec::<16>::new();
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&count.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&links_fingerprint());
        for i in 0..self.nodes.len() {
            let fresh;
            // A cold node is unchanged since its snapshot: its archive is copied as it is.
            let archive: &[u8] = match (self.cold[i], &self.source) {
                (Some(c), Some(src)) => {
                    src.aligned(c.at..c.at + c.len, &mut scratch).ok_or("a cold node lies past its snapshot's end")?
                }
                _ => {
                    fresh = self.encode_node(i)?;
                    &fresh
                }
            };
            let len = u32::try_from(archive.len()).map_err(|_| "node too large for a snapshot")?;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&[0u8; FRAME_HEADER - 4]);
            out.extend_from_slice(archive);
            out.resize(out.len().next_multiple_of(16), 0);
        }
        Ok(out)
    }

    fn restore_snapshot(&mut self, bytes: &[u8]) -> Result<(), String> {
        let mut body = AlignedVec::<16>::with_capacity(bytes.len());
        body.extend_from_slice(bytes);
        self.restore_snapshot_body(Body::from(body))
    }

    fn restore_snapshot_body(&mut self, body: Body) -> Result<(), String> {
        *self = Graph::restore_from(body)?;
        Ok(())
    }

    fn event_types(&self) -> Option<&[&'static str]> {
        Some(&event_types::ALL)
    }

    fn snapshot_cut_align(&self) -> usize {
        // Frames are 16-padded: chunks start aligned, and most archives are read in place.
        16
    }

    fn reset(&mut self) {
        *self = Graph::new();
    }
}
