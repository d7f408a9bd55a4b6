//! Hierarchical summaries: L3 (one line per entity, and the system summary made of them), L2 (one
//! entity), derived from the spec graph, each recording the content hashes and states of the
//! artifacts it was made from.
//!
//! Two things are kept apart. [`Summaries`] is derived state: it is regenerated incrementally
//! (only the entities whose artifacts changed) and is never stale; prompt assembly uses it (or the
//! same functions over the graph at an earlier position). *Published* summaries are what was
//! handed to agents and people as documents (`summary.published` events): those can fall behind
//! the knowledge base, and [`check`] says exactly which ones did, and why — an edited, added,
//! deleted or renamed source, or an entity that no longer exists.
//!
//! What an L3 line carries, per entity: id, tier, state; how many domains, modules, screens and
//! requirements it has; its change requests in flight and done; its open issues. That is what an
//! orchestrator needs to pick the entity a task touches; everything finer is in L2.
//! What an L2 summary carries: the entity's name and tier; its domains with their actors; its
//! modules with their method counts; its screen ids; its requirement ids; and every change
//! request in flight with its state and title. That is enough to choose the specification files
//! to load at L1.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use strata_journal::{Hash, Record};

use crate::kb::graph::{Closure, Graph, Node, NodeId};
use crate::kb::kind::{ArtifactKey, ArtifactKind};
use crate::kb::lifecycle::TIERS;

/// One input of a summary.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// Kind name.
    pub kind: String,
    /// Id.
    pub id: String,
    /// Content hash (hex).
    pub hash: String,
    /// Lifecycle state (counts depend on it).
    pub state: String,
}

/// A summary with its provenance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// `L2` or `L3`.
    pub level: &'static str,
    /// The entity.
    pub entity: String,
    /// The text.
    pub text: String,
    /// blake3 of the text.
    pub hash: Hash,
    /// Every artifact it was made from, sorted.
    pub sources: Vec<Source>,
}

fn source(n: &Node) -> Source {
    Source { kind: n.key.kind.name().into(), id: n.key.id.clone(), hash: n.hash.to_hex(), state: n.state.clone() }
}

fn text_hash(text: &str) -> Hash {
    Hash(*blake3::hash(text.as_bytes()).as_bytes())
}

const ACTIVE_CR: &[&str] = &["draft", "proposed", "approved", "in-progress", "review"];
const OPEN_ISSUE: &[&str] = &["open", "triaged"];

/// Which members a summary may draw on (assembly passes the profile's never-list).
pub type Keep<'k> = &'k dyn Fn(&Node) -> bool;

fn entity_sources<'g>(g: &'g Graph, entity: &Node, keep: Keep<'_>) -> (Vec<&'g Node>, Vec<Source>) {
    let members: Vec<&Node> = g.members(&entity.key.id).into_iter().filter(|n| keep(n)).collect();
    let mut sources: Vec<Source> = std::iter::once(entity).chain(members.iter().copied()).map(source).collect();
    sources.sort();
    (members, sources)
}

/// One entity's L3 line.
pub fn l3_line(g: &Graph, entity: &Node) -> Summary {
    l3_line_with(g, entity, &|_| true)
}

/// One entity's L3 line, made only from the members `keep` accepts.
pub fn l3_line_with(g: &Graph, entity: &Node, keep: Keep<'_>) -> Summary {
    let (members, sources) = entity_sources(g, entity, keep);
    let count = |k: ArtifactKind| members.iter().filter(|n| n.key.kind == k).count();
    let crs_active = members
        .iter()
        .filter(|n| n.key.kind == ArtifactKind::ChangeRequest && ACTIVE_CR.contains(&n.state.as_str()))
        .count();
    let crs_done = members.iter().filter(|n| n.key.kind == ArtifactKind::ChangeRequest && n.state == "done").count();
    let issues =
        members.iter().filter(|n| n.key.kind == ArtifactKind::Issue && OPEN_ISSUE.contains(&n.state.as_str())).count();
    let tier = entity.fields.get("tier").and_then(Value::as_str).unwrap_or("?");
    let text = format!(
        "- {} ({tier}, {}): {} dom, {} mod, {} scr, {} req; CR {crs_active}/{crs_done}; {issues} iss\n",
        entity.key.id,
        entity.state,
        count(ArtifactKind::FunctionalDomain),
        count(ArtifactKind::BackendModule),
        count(ArtifactKind::UiScreen),
        count(ArtifactKind::BrdRequirement),
    );
    Summary { level: "L3", entity: entity.key.id.clone(), hash: text_hash(&text), text, sources }
}

/// One entity's L2 summary.
pub fn l2(g: &Graph, entity: &Node) -> Summary {
    l2_with(g, entity, &|_| true)
}

/// One entity's L2 summary, made only from the members `keep` accepts.
pub fn l2_with(g: &Graph, entity: &Node, keep: Keep<'_>) -> Summary {
    let (members, sources) = entity_sources(g, entity, keep);
    let of = |k: ArtifactKind| members.iter().filter(move |n| n.key.kind == k);
    let name = entity.fields.get("name").and_then(Value::as_str).unwrap_or(&entity.key.id);
    let tier = entity.fields.get("tier").and_then(Value::as_str).unwrap_or("?");
    let mut text = format!("# {name} ({}, {tier}, {})\n", entity.key.id, entity.state);
    let domains: Vec<String> = of(ArtifactKind::FunctionalDomain)
        .map(|d| {
            let actors = d
                .fields
                .get("actors")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                .unwrap_or_default();
            if actors.is_empty() { d.key.id.clone() } else { format!("{} (actors: {actors})", d.key.id) }
        })
        .collect();
    if !domains.is_empty() {
        text.push_str(&format!("Domains: {}\n", domains.join("; ")));
    }
    let modules: Vec<String> = of(ArtifactKind::BackendModule)
        .map(|m| {
            format!(
                "{} ({} methods)",
                m.key.id,
                m.fields.get("apiMethods").and_then(Value::as_array).map_or(0, Vec::len)
            )
        })
        .collect();
    if !modules.is_empty() {
        text.push_str(&format!("Modules: {}\n", modules.join(", ")));
    }
    let screens: Vec<&str> = of(ArtifactKind::UiScreen).map(|s| s.key.id.as_str()).collect();
    if !screens.is_empty() {
        text.push_str(&format!("Screens: {}\n", screens.join(", ")));
    }
    let reqs: Vec<&str> = of(ArtifactKind::BrdRequirement).map(|r| r.key.id.as_str()).collect();
    if !reqs.is_empty() {
        text.push_str(&format!("Requirements: {}\n", reqs.join(", ")));
    }
    let crs: Vec<String> = of(ArtifactKind::ChangeRequest)
        .filter(|c| ACTIVE_CR.contains(&c.state.as_str()))
        .map(|c| format!("{} ({}): {}", c.key.id, c.state, c.fields.get("title").and_then(Value::as_str).unwrap_or("")))
        .collect();
    if !crs.is_empty() {
        text.push_str(&format!("Open changes: {}\n", crs.join("; ")));
    }
    Summary { level: "L2", entity: entity.key.id.clone(), hash: text_hash(&text), text, sources }
}

fn tier_rank(g: &Graph, entity: &str) -> usize {
    g.get(&ArtifactKey::new(ArtifactKind::Entity, entity))
        .and_then(|n| n.fields.get("tier").and_then(Value::as_str))
        .and_then(|t| TIERS.iter().position(|x| *x == t))
        .unwrap_or(usize::MAX)
}

/// Current summaries, regenerated incrementally.
#[derive(Clone, Debug, Default)]
pub struct Summaries {
    l3: BTreeMap<String, Summary>,
    l2: BTreeMap<String, Summary>,
    /// Summaries regenerated since creation (two per dirty entity), for tests and benchmarks.
    pub regenerated: u64,
    memo: MemoCell,
}

/// Most never-lists whose summaries [`Summaries`] keeps at once (one per profile in practice);
/// past it, the kept ones are dropped and made again on demand.
pub const MEMO_NEVER_LISTS_MAX: usize = 32;

/// Rendered text and hash of summaries assembly asks for on every call: the system summary, and
/// per never-list the summaries made without the never-listed artifacts. Each is made once and
/// dropped, entity by entity, when [`Summaries::refresh`] regenerates that entity, so an
/// assembly costs what its prompt holds, not the size of the base.
#[derive(Clone, Default)]
struct Memo {
    system: Option<(String, Hash)>,
    without: BTreeMap<Vec<String>, Without>,
    /// Impact closures of the plans assembled at graph sequence `closures_at` (every task of a
    /// change request starts from the same one).
    closures: BTreeMap<NodeId, Arc<Closure>>,
    closures_at: u64,
}

/// Most impact closures [`Summaries`] keeps at once; past it, the kept ones are dropped and
/// walked again on demand.
pub const MEMO_CLOSURES_MAX: usize = 64;

/// The summaries made without the artifacts one never-list withholds.
#[derive(Clone, Default)]
struct Without {
    system: Option<(String, Hash)>,
    l3: BTreeMap<String, (String, Hash)>,
    l2: BTreeMap<String, (String, Hash)>,
    /// The graph sequence `any` and `touches` were decided at.
    at: u64,
    /// Whether the never-list withholds any artifact at all.
    any: Option<bool>,
    /// Per entity, whether the never-list withholds one of its members.
    touches: BTreeMap<String, bool>,
}

impl Without {
    /// Forgets what was decided for another graph sequence.
    fn at(&mut self, seq: u64) -> &mut Without {
        if self.at != seq {
            self.at = seq;
            self.any = None;
            self.touches.clear();
        }
        self
    }
}

#[derive(Default)]
struct MemoCell(std::sync::Mutex<Memo>);

impl MemoCell {
    fn lock(&self) -> std::sync::MutexGuard<'_, Memo> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Clone for MemoCell {
    fn clone(&self) -> Self {
        MemoCell(std::sync::Mutex::new(self.lock().clone()))
    }
}

impl std::fmt::Debug for MemoCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.lock();
        write!(f, "Memo {{ system: {}, never_lists: {} }}", m.system.is_some(), m.without.len())
    }
}

impl Summaries {
    /// Every summary of `g` (and clears `g`'s dirty set).
    pub fn build(g: &mut Graph) -> Summaries {
        g.take_dirty_entities();
        let mut s = Summaries::default();
        for n in g.artifacts_of(ArtifactKind::Entity) {
            s.l3.insert(n.key.id.clone(), l3_line(g, n));
            s.l2.insert(n.key.id.clone(), l2(g, n));
            s.regenerated += 2;
        }
        s
    }

    /// Regenerates the summaries of the entities `g` marked dirty since the last call, and only
    /// those; drops the summaries of entities that no longer exist.
    pub fn refresh(&mut self, g: &mut Graph) {
        let dirty = g.take_dirty_entities();
        if !dirty.is_empty() {
            let mut memo = self.memo.lock();
            memo.system = None;
            for w in memo.without.values_mut() {
                w.system = None;
                for e in &dirty {
                    w.l3.remove(e);
                    w.l2.remove(e);
                }
            }
        }
        for e in dirty {
            match g.get(&ArtifactKey::new(ArtifactKind::Entity, &e)) {
                Some(n) => {
                    self.l3.insert(e.clone(), l3_line(g, n));
                    self.l2.insert(e, l2(g, n));
                    self.regenerated += 2;
                }
                None => {
                    self.l3.remove(&e);
                    self.l2.remove(&e);
                }
            }
        }
    }

    /// An entity's L2 summary.
    pub fn entity(&self, id: &str) -> Option<&Summary> {
        self.l2.get(id)
    }

    /// An entity's L3 line.
    pub fn line(&self, id: &str) -> Option<&Summary> {
        self.l3.get(id)
    }

    /// Every `(L3 line, L2)` by entity.
    pub fn all(&self) -> impl Iterator<Item = (&Summary, &Summary)> {
        self.l3.values().filter_map(|l| self.l2.get(&l.entity).map(|e| (l, e)))
    }

    /// The system summary: a header and every L3 line, by tier then id.
    pub fn system(&self, g: &Graph) -> Summary {
        system_of(g, self.l3.values().collect())
    }

    /// The system summary's text and hash, made once per regeneration.
    pub fn system_text(&self, g: &Graph) -> (String, Hash) {
        let mut memo = self.memo.lock();
        if let Some(t) = &memo.system {
            return t.clone();
        }
        let t = system_text(g, self.l3.values().map(|l| (l.entity.as_str(), l.text.as_str())).collect());
        memo.system = Some(t.clone());
        t
    }

    /// The system summary made only from the members `keep` accepts, where `keep` withholds what
    /// the never-list `never` names (the caller's promise: the same list, the same `keep`).
    /// Lines of entities not regenerated since are reused.
    pub fn system_without(&self, g: &Graph, never: &[String], keep: Keep<'_>) -> (String, Hash) {
        let mut memo = self.memo.lock();
        let w = without(&mut memo, never);
        if let Some(t) = &w.system {
            return t.clone();
        }
        for e in self.l3.keys() {
            if !w.l3.contains_key(e)
                && let Some(n) = g.get(&ArtifactKey::new(ArtifactKind::Entity, e))
            {
                let l = l3_line_with(g, n, keep);
                w.l3.insert(e.clone(), (l.text, l.hash));
            }
        }
        let t = system_text(g, w.l3.iter().map(|(e, (text, _))| (e.as_str(), text.as_str())).collect());
        w.system = Some(t.clone());
        t
    }

    /// Entity `e`'s L3 line (`l3`) or L2 summary made only from the members `keep` accepts (see
    /// [`Summaries::system_without`]).
    pub fn entity_without(
        &self,
        g: &Graph,
        never: &[String],
        e: &str,
        l3: bool,
        keep: Keep<'_>,
    ) -> Option<(String, Hash)> {
        let mut memo = self.memo.lock();
        let w = without(&mut memo, never);
        let map = if l3 { &mut w.l3 } else { &mut w.l2 };
        if let Some(t) = map.get(e) {
            return Some(t.clone());
        }
        let n = g.get(&ArtifactKey::new(ArtifactKind::Entity, e))?;
        let s = if l3 { l3_line_with(g, n, keep) } else { l2_with(g, n, keep) };
        map.insert(e.to_owned(), (s.text.clone(), s.hash));
        Some((s.text, s.hash))
    }
}

impl Summaries {
    /// The impact closure of `start` in `g` ([`Graph::impact_closure`]), walked once until `g`
    /// changes.
    pub fn closure(&self, g: &Graph, start: NodeId) -> Arc<Closure> {
        let mut memo = self.memo.lock();
        if memo.closures_at != g.seq()
            || (memo.closures.len() >= MEMO_CLOSURES_MAX && !memo.closures.contains_key(&start))
        {
            memo.closures.clear();
            memo.closures_at = g.seq();
        }
        memo.closures.entry(start).or_insert_with(|| Arc::new(g.impact_closure(start))).clone()
    }

    /// Whether the never-list `never` withholds any artifact of `g`, as `decide` answers it,
    /// asked once until `g` changes.
    pub fn withholds_any(&self, g: &Graph, never: &[String], decide: &dyn Fn() -> bool) -> bool {
        let mut memo = self.memo.lock();
        let w = without(&mut memo, never).at(g.seq());
        *w.any.get_or_insert_with(decide)
    }

    /// Whether the never-list `never` withholds a member of entity `e`, as `decide` answers it,
    /// asked once per entity until `g` changes.
    pub fn withholds_member(&self, g: &Graph, never: &[String], e: &str, decide: &dyn Fn() -> bool) -> bool {
        let mut memo = self.memo.lock();
        let w = without(&mut memo, never).at(g.seq());
        if let Some(&t) = w.touches.get(e) {
            return t;
        }
        let t = decide();
        w.touches.insert(e.to_owned(), t);
        t
    }
}

fn without<'m>(memo: &'m mut Memo, never: &[String]) -> &'m mut Without {
    if !memo.without.contains_key(never) && memo.without.len() >= MEMO_NEVER_LISTS_MAX {
        memo.without.clear();
    }
    memo.without.entry(never.to_vec()).or_default()
}

/// The system summary made only from the members `keep` accepts (every line regenerated).
pub fn system_with(g: &Graph, keep: Keep<'_>) -> Summary {
    let lines: Vec<Summary> =
        g.artifacts_of(ArtifactKind::Entity).into_iter().map(|n| l3_line_with(g, n, keep)).collect();
    system_of(g, lines.iter().collect())
}

fn system_of(g: &Graph, lines: Vec<&Summary>) -> Summary {
    let (text, hash) = system_text(g, lines.iter().map(|l| (l.entity.as_str(), l.text.as_str())).collect());
    let mut sources: Vec<Source> = lines.iter().flat_map(|l| l.sources.iter().cloned()).collect();
    sources.sort();
    Summary { level: "L3", entity: String::new(), hash, text, sources }
}

/// The first line of the system summary's text (a prompt drops it: its section says the same).
pub(super) const SYSTEM_HEADING: &str = "# System summary\n";

/// The system summary's text from `(entity, L3 line)` pairs, and its hash.
fn system_text(g: &Graph, mut lines: Vec<(&str, &str)>) -> (String, Hash) {
    lines.sort_by_key(|(e, _)| (tier_rank(g, e), e.to_string()));
    let mut tiers: BTreeMap<usize, (String, usize)> = BTreeMap::new();
    for (e, _) in &lines {
        let r = tier_rank(g, e);
        let name = TIERS.get(r).copied().unwrap_or("other").to_owned();
        tiers.entry(r).or_insert((name, 0)).1 += 1;
    }
    let counts: Vec<String> = tiers.values().map(|(t, n)| format!("{n} {t}")).collect();
    let mut text = SYSTEM_HEADING.to_owned();
    text += &format!(
        "{} entities ({}). Line: id (tier, state): counts of domains, modules, screens, requirements; CR = change requests in flight/done; iss = open issues.\n",
        lines.len(),
        counts.join(", ")
    );
    for (_, l) in lines {
        text.push_str(l);
    }
    let hash = text_hash(&text);
    (text, hash)
}

/// `summary.published` v1: a summary handed out as a document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Published {
    /// `L2` or `L3` (an L3 line).
    pub level: String,
    /// Entity.
    pub entity: String,
    /// Text as published.
    pub text: String,
    /// blake3 of the text (hex).
    pub hash: String,
    /// Sources it was made from.
    pub sources: Vec<Source>,
}

/// `summary.retracted` v1: a published summary whose entity no longer exists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retracted {
    /// Level.
    pub level: String,
    /// Entity.
    pub entity: String,
    /// Why.
    pub reason: String,
}

/// Event types.
pub const PUBLISHED: &str = "summary.published";
/// Event types.
pub const RETRACTED: &str = "summary.retracted";

/// The journal stream of a published summary.
pub fn stream(level: &str, entity: &str) -> String {
    format!("summary/{level}/{entity}")
}

/// The latest published summaries, by (level, entity); a projection of the journal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishedIndex {
    latest: BTreeMap<(String, String), (Published, u64)>,
}

impl PublishedIndex {
    /// Applies one record (ignores other event types).
    pub fn apply(&mut self, r: &Record<'_>) -> Result<(), String> {
        match r.event_type {
            PUBLISHED => {
                let p: Published = serde_json::from_slice(r.payload).map_err(|e| format!("summary.published: {e}"))?;
                self.latest.insert((p.level.clone(), p.entity.clone()), (p, r.version));
            }
            RETRACTED => {
                let p: Retracted = serde_json::from_slice(r.payload).map_err(|e| format!("summary.retracted: {e}"))?;
                self.latest.remove(&(p.level, p.entity));
            }
            _ => {}
        }
        Ok(())
    }

    /// The latest published summary of `(level, entity)` with its stream version.
    pub fn get(&self, level: &str, entity: &str) -> Option<&(Published, u64)> {
        self.latest.get(&(level.to_owned(), entity.to_owned()))
    }

    /// Every published summary.
    pub fn iter(&self) -> impl Iterator<Item = &(Published, u64)> {
        self.latest.values()
    }
}

/// What is wrong with a published summary.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Problem {
    /// Its sources changed since it was published.
    Stale {
        /// Sources whose content or state changed.
        changed: Vec<String>,
        /// Sources that no longer exist (deleted, or renamed away).
        removed: Vec<String>,
        /// Artifacts that joined the entity since (created, or renamed in).
        added: Vec<String>,
    },
    /// Its entity no longer exists.
    Orphaned,
    /// The entity has never had this summary published.
    Missing,
}

/// One finding of [`check`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// `L2` or `L3`.
    pub level: String,
    /// Entity.
    pub entity: String,
    /// What is wrong.
    pub problem: Problem,
}

fn diff(published: &[Source], current: &[Source]) -> Option<Problem> {
    let key = |s: &Source| format!("{}:{}", s.kind, s.id);
    let old: BTreeMap<String, &Source> = published.iter().map(|s| (key(s), s)).collect();
    let new: BTreeMap<String, &Source> = current.iter().map(|s| (key(s), s)).collect();
    let changed: Vec<String> = old
        .iter()
        .filter(|(k, s)| new.get(*k).is_some_and(|n| n.hash != s.hash || n.state != s.state))
        .map(|(k, _)| k.clone())
        .collect();
    let removed: Vec<String> = old.keys().filter(|k| !new.contains_key(*k)).cloned().collect();
    let added: Vec<String> = new.keys().filter(|k| !old.contains_key(*k)).cloned().collect();
    if changed.is_empty() && removed.is_empty() && added.is_empty() {
        None
    } else {
        Some(Problem::Stale { changed, removed, added })
    }
}

/// Every published summary that no longer matches the knowledge base, every orphaned one, and
/// every entity with a summary never published.
pub fn check(summaries: &Summaries, published: &PublishedIndex) -> Vec<Finding> {
    let mut out = Vec::new();
    for (line, l2s) in summaries.all() {
        for current in [line, l2s] {
            match published.get(current.level, &current.entity) {
                None => out.push(Finding {
                    level: current.level.into(),
                    entity: current.entity.clone(),
                    problem: Problem::Missing,
                }),
                Some((p, _)) => {
                    if let Some(problem) = diff(&p.sources, &current.sources) {
                        out.push(Finding { level: current.level.into(), entity: current.entity.clone(), problem });
                    }
                }
            }
        }
    }
    for (p, _) in published.iter() {
        let exists = match p.level.as_str() {
            "L3" => summaries.line(&p.entity).is_some(),
            _ => summaries.entity(&p.entity).is_some(),
        };
        if !exists {
            out.push(Finding { level: p.level.clone(), entity: p.entity.clone(), problem: Problem::Orphaned });
        }
    }
    out.sort();
    out
}

/// What `strata summary publish` appends: a new version of every summary whose sources or text
/// changed (and only those), and a retraction of every orphan.
pub fn publish(
    summaries: &Summaries,
    published: &PublishedIndex,
    ids: &mut dyn crate::ports::Ids,
    clock: &dyn crate::ports::Clock,
) -> Result<Vec<strata_journal::StreamAppend>, String> {
    let mut out = Vec::new();
    for (line, l2s) in summaries.all() {
        for s in [line, l2s] {
            let prior = published.get(s.level, &s.entity);
            if prior.is_some_and(|(p, _)| p.hash == s.hash.to_hex() && diff(&p.sources, &s.sources).is_none()) {
                continue;
            }
            let payload = Published {
                level: s.level.into(),
                entity: s.entity.clone(),
                text: s.text.clone(),
                hash: s.hash.to_hex(),
                sources: s.sources.clone(),
            };
            let e = crate::kb::intake::event(ids, clock, PUBLISHED, &payload, None)?;
            let stream = stream(s.level, &s.entity);
            let expected = strata_journal::ExpectedVersion::Any;
            out.push(strata_journal::StreamAppend { stream, expected, events: vec![e] });
        }
    }
    for f in check(summaries, published).into_iter().filter(|f| f.problem == Problem::Orphaned) {
        let payload = Retracted {
            level: f.level.clone(),
            entity: f.entity.clone(),
            reason: "the entity no longer exists".into(),
        };
        let e = crate::kb::intake::event(ids, clock, RETRACTED, &payload, None)?;
        out.push(strata_journal::StreamAppend {
            stream: stream(&f.level, &f.entity),
            expected: strata_journal::ExpectedVersion::Any,
            events: vec![e],
        });
    }
    Ok(out)
}
