//! The `knowledge` projection and its queries.
//!
//! Chunks get a dense index on first put. Each declared concern has a bitset over chunk indexes
//! (live chunks carrying it); shared chunks (empty scope) and each project's chunks have one too.
//! `get(concerns, project)` is then an OR of the concern sets, an AND with (shared ∪ project), and
//! a walk over the set bits: a few hundred word operations at 10,000 chunks, no parsing, no scan.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use strata_journal::Record;

use super::events::{self, Declared, Put, Retired, Served, SessionStarted};
use super::{ANSWER_TOKENS_DEFAULT, CONCERNS_MAX, KnowledgeError, closest};
use crate::projections::kept::EventLog;

/// A growable bitset over chunk indexes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bits(Vec<u64>);

impl Bits {
    fn set(&mut self, i: usize, on: bool) {
        let w = i / 64;
        if w >= self.0.len() {
            if !on {
                return;
            }
            self.0.resize(w + 1, 0);
        }
        if on {
            self.0[w] |= 1 << (i % 64);
        } else {
            self.0[w] &= !(1 << (i % 64));
        }
    }

    fn or_into(&self, acc: &mut Vec<u64>) {
        if acc.len() < self.0.len() {
            acc.resize(self.0.len(), 0);
        }
        for (a, b) in acc.iter_mut().zip(&self.0) {
            *a |= b;
        }
    }
}

/// One chunk, current version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Chunk {
    /// Slug.
    pub slug: String,
    /// Title.
    pub title: String,
    /// Concerns, sorted.
    pub concerns: Vec<String>,
    /// Project scope, sorted; empty: shared.
    pub project_scope: Vec<String>,
    /// Content.
    pub content: String,
    /// Content hash (hex).
    pub hash: String,
    /// o200k tokens of the content.
    pub tokens: u32,
    /// Version.
    pub version: u64,
    /// Retired chunks are never served.
    pub retired: bool,
    /// When the current version was put (ns).
    pub updated_ns: i64,
    /// Events on the chunk's stream (puts and retirements).
    pub stream_events: u64,
}

impl Chunk {
    /// The chunk as put `p`, recorded in `r`, says it is.
    fn put(p: Put, r: &Record<'_>) -> Chunk {
        Chunk {
            slug: p.slug,
            title: p.title,
            concerns: p.concerns,
            project_scope: p.project_scope,
            content: p.content,
            hash: p.hash,
            tokens: p.tokens,
            version: p.version,
            retired: false,
            updated_ns: r.recorded_at_ns,
            stream_events: r.version,
        }
    }

    /// The version of the chunk's journal stream (what the next append expects).
    pub fn stream_version(&self) -> u64 {
        self.stream_events
    }
}

/// One serve, as the analysis needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Serve {
    /// Journal sequence.
    pub seq: u64,
    /// Recorded at (ns).
    pub at_ns: i64,
    /// Session.
    pub session: Option<String>,
    /// Concerns requested, sorted.
    pub concerns: Vec<String>,
    /// Project requested.
    pub project: Option<String>,
    /// `(slug, version, tokens)` served.
    pub chunks: Vec<(String, u64, u32)>,
}

/// One session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Session {
    /// Whether `session.started` was recorded.
    pub started: bool,
    /// Started at (ns).
    pub started_ns: i64,
    /// Agent.
    pub agent: Option<String>,
    /// Project.
    pub project: Option<String>,
    /// Task context.
    pub task_context: Option<String>,
    /// The latest outcome logged, with its time.
    pub outcome: Option<(String, i64)>,
    /// Learnings logged.
    pub learnings: u32,
    /// Decisions logged.
    pub decisions: u32,
}

/// The knowledge projection.
#[derive(Clone, Debug, Default)]
pub struct Knowledge {
    kept: EventLog,
    concerns: BTreeMap<String, usize>,
    concern_bits: Vec<Bits>,
    projects: BTreeSet<String>,
    chunks: Vec<Chunk>,
    by_slug: BTreeMap<String, usize>,
    shared: Bits,
    by_project: BTreeMap<String, Bits>,
    sessions: BTreeMap<String, Session>,
    serves: Vec<Serve>,
    /// `(slug, version)` → journal sequence of the put that recorded it.
    put_at: BTreeMap<(String, u64), u64>,
    /// `(session, idempotency key)` → journal sequence of the serve recorded under it.
    keyed: BTreeMap<(Option<String>, String), u64>,
}

/// A `get_knowledge` request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// Concerns.
    pub concerns: Vec<String>,
    /// Project (none: shared chunks only).
    pub project: Option<String>,
    /// Token cap of the answer (default [`ANSWER_TOKENS_DEFAULT`]).
    pub max_tokens: Option<usize>,
}

/// A `get_knowledge` answer. Borrowed from the projection when fresh; a retry's answer holds the
/// versions it served first, which may be older than the current ones.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Answer<'k> {
    /// Matching chunks, by slug, within the token cap.
    pub chunks: Vec<Cow<'k, Chunk>>,
    /// Matching chunks left out by the token cap, by slug.
    pub omitted: Vec<Cow<'k, str>>,
    /// Sum of the served chunks' tokens.
    pub total_tokens: u64,
}

/// One line of `list_knowledge`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Listed<'k> {
    /// Slug.
    pub slug: &'k str,
    /// Title.
    pub title: &'k str,
    /// Concerns.
    pub concerns: &'k [String],
    /// Project scope (empty: shared).
    pub project_scope: &'k [String],
    /// Token estimate.
    pub tokens: u32,
    /// Version.
    pub version: u64,
}

impl Knowledge {
    /// Declared concerns, sorted.
    pub fn concerns(&self) -> impl Iterator<Item = &String> {
        self.concerns.keys()
    }

    /// Declared projects, sorted.
    pub fn projects(&self) -> impl Iterator<Item = &String> {
        self.projects.iter()
    }

    /// Whether `c` is a declared concern.
    pub fn has_concern(&self, c: &str) -> bool {
        self.concerns.contains_key(c)
    }

    /// Whether `p` is a declared project.
    pub fn has_project(&self, p: &str) -> bool {
        self.projects.contains(p)
    }

    /// A chunk by slug (retired ones too).
    pub fn chunk(&self, slug: &str) -> Option<&Chunk> {
        self.by_slug.get(slug).map(|&i| &self.chunks[i])
    }

    /// Every chunk ever put, by slug.
    pub fn chunks(&self) -> impl Iterator<Item = &Chunk> {
        self.by_slug.values().map(|&i| &self.chunks[i])
    }

    /// A session.
    pub fn session(&self, id: &str) -> Option<&Session> {
        self.sessions.get(id)
    }

    /// Every session.
    pub fn sessions(&self) -> &BTreeMap<String, Session> {
        &self.sessions
    }

    /// Every serve, in journal order.
    pub fn serves(&self) -> &[Serve] {
        &self.serves
    }

    pub(crate) fn unknown_concern(&self, c: &str) -> KnowledgeError {
        let known = if self.concerns.is_empty() {
            "none yet (`strata knowledge declare --concern NAME`)".to_owned()
        } else {
            self.concerns.keys().cloned().collect::<Vec<_>>().join(", ")
        };
        KnowledgeError::UnknownConcern { concern: c.to_owned(), suggestions: closest(c, self.concerns.keys()), known }
    }

    pub(crate) fn unknown_project(&self, p: &str) -> KnowledgeError {
        let known = if self.projects.is_empty() {
            "none yet (`strata knowledge declare --project NAME`)".to_owned()
        } else {
            self.projects.iter().cloned().collect::<Vec<_>>().join(", ")
        };
        KnowledgeError::UnknownProject { project: p.to_owned(), suggestions: closest(p, self.projects.iter()), known }
    }

    /// `get_knowledge`: chunks whose concerns overlap `concerns` and whose scope contains
    /// `project` or is empty, by slug, within the token cap.
    pub fn get(&self, req: &Request) -> Result<Answer<'_>, KnowledgeError> {
        if req.concerns.is_empty() {
            return Err(KnowledgeError::EmptyConcerns);
        }
        if req.concerns.len() > CONCERNS_MAX {
            return Err(KnowledgeError::TooMany { what: "concerns", n: req.concerns.len(), max: CONCERNS_MAX });
        }
        let mut acc: Vec<u64> = Vec::new();
        for c in &req.concerns {
            match self.concerns.get(c) {
                Some(&i) => self.concern_bits[i].or_into(&mut acc),
                None => return Err(self.unknown_concern(c)),
            }
        }
        let mut allowed: Vec<u64> = Vec::new();
        self.shared.or_into(&mut allowed);
        if let Some(p) = &req.project {
            if !self.projects.contains(p) {
                return Err(self.unknown_project(p));
            }
            if let Some(b) = self.by_project.get(p) {
                b.or_into(&mut allowed);
            }
        }
        let mut found: Vec<&Chunk> = Vec::new();
        for (w, (a, b)) in acc.iter().zip(allowed.iter().chain(std::iter::repeat(&0))).enumerate() {
            let mut word = a & b;
            while word != 0 {
                let bit = word.trailing_zeros() as usize;
                found.push(&self.chunks[w * 64 + bit]);
                word &= word - 1;
            }
        }
        found.sort_unstable_by(|x, y| x.slug.cmp(&y.slug));
        let cap = req.max_tokens.unwrap_or(ANSWER_TOKENS_DEFAULT);
        let mut answer = Answer { chunks: Vec::with_capacity(found.len()), omitted: Vec::new(), total_tokens: 0 };
        for c in found {
            if answer.total_tokens + u64::from(c.tokens) <= cap as u64 {
                answer.total_tokens += u64::from(c.tokens);
                answer.chunks.push(Cow::Borrowed(c));
            } else {
                answer.omitted.push(Cow::Borrowed(&c.slug));
            }
        }
        Ok(answer)
    }

    /// Version `version` of chunk `slug` as it was put, whatever happened to the chunk since
    /// (a later version, a retirement).
    pub fn chunk_at(&self, slug: &str, version: u64) -> Option<Cow<'_, Chunk>> {
        if let Some(c) = self.chunk(slug).filter(|c| c.version == version && !c.retired) {
            return Some(Cow::Borrowed(c));
        }
        let seq = *self.put_at.get(&(slug.to_owned(), version))?;
        let r = self.kept.record(seq)?;
        let p: Put = serde_json::from_slice(r.payload).ok()?;
        Some(Cow::Owned(Chunk::put(p, &r)))
    }

    /// The serve recorded under idempotency key `key` (in `session`, or unsessioned), with its
    /// journal sequence.
    pub fn keyed_serve(&self, session: Option<&str>, key: &str) -> Option<(u64, Served)> {
        let seq = *self.keyed.get(&(session.map(str::to_owned), key.to_owned()))?;
        let r = self.kept.record(seq)?;
        serde_json::from_slice(r.payload).ok().map(|s| (seq, s))
    }

    /// `list_knowledge`: every live chunk, by slug.
    pub fn list(&self) -> Vec<Listed<'_>> {
        self.chunks()
            .filter(|c| !c.retired)
            .map(|c| Listed {
                slug: &c.slug,
                title: &c.title,
                concerns: &c.concerns,
                project_scope: &c.project_scope,
                tokens: c.tokens,
                version: c.version,
            })
            .collect()
    }

    fn index(&mut self, i: usize, on: bool) {
        let c = &self.chunks[i];
        let (concerns, scope) = (c.concerns.clone(), c.project_scope.clone());
        for k in &concerns {
            if let Some(&ci) = self.concerns.get(k) {
                self.concern_bits[ci].set(i, on);
            }
        }
        if scope.is_empty() {
            self.shared.set(i, on);
        }
        for p in &scope {
            self.by_project.entry(p.clone()).or_default().set(i, on);
        }
    }

    fn fold(&mut self, r: &Record<'_>) -> Result<(), String> {
        let bad = |e: serde_json::Error| format!("{} at sequence {}: {e}", r.event_type, r.seq);
        match r.event_type {
            events::DECLARED => {
                let d: Declared = serde_json::from_slice(r.payload).map_err(bad)?;
                for c in d.concerns {
                    if !self.concerns.contains_key(&c) {
                        let i = self.concern_bits.len();
                        self.concerns.insert(c.clone(), i);
                        let mut bits = Bits::default();
                        for (ci, chunk) in self.chunks.iter().enumerate() {
                            if !chunk.retired && chunk.concerns.contains(&c) {
                                bits.set(ci, true);
                            }
                        }
                        self.concern_bits.push(bits);
                    }
                }
                self.projects.extend(d.projects);
            }
            events::PUT => {
                let p: Put = serde_json::from_slice(r.payload).map_err(bad)?;
                let slug = p.slug.clone();
                self.put_at.insert((slug.clone(), p.version), r.seq);
                let chunk = Chunk::put(p, r);
                match self.by_slug.get(&slug).copied() {
                    Some(i) => {
                        self.index(i, false);
                        self.chunks[i] = chunk;
                        self.index(i, true);
                    }
                    None => {
                        let i = self.chunks.len();
                        self.chunks.push(chunk);
                        self.by_slug.insert(slug, i);
                        self.index(i, true);
                    }
                }
            }
            events::RETIRED => {
                let p: Retired = serde_json::from_slice(r.payload).map_err(bad)?;
                let Some(&i) = self.by_slug.get(&p.slug) else {
                    return Err(format!("knowledge.chunk-retired at sequence {}: no chunk {}", r.seq, p.slug));
                };
                self.index(i, false);
                self.chunks[i].retired = true;
                self.chunks[i].stream_events = r.version;
            }
            events::SESSION_STARTED => {
                let s: SessionStarted = serde_json::from_slice(r.payload).map_err(bad)?;
                self.sessions.insert(
                    s.session,
                    Session {
                        started: true,
                        started_ns: r.recorded_at_ns,
                        agent: s.agent,
                        project: s.project,
                        task_context: s.task_context,
                        ..Session::default()
                    },
                );
            }
            events::SERVED => {
                let s: Served = serde_json::from_slice(r.payload).map_err(bad)?;
                if let Some(key) = s.idempotency_key.clone() {
                    // The first serve under a key is the one a retry answers with.
                    self.keyed.entry((s.session.clone(), key)).or_insert(r.seq);
                }
                self.serves.push(Serve {
                    seq: r.seq,
                    at_ns: r.recorded_at_ns,
                    session: s.session,
                    concerns: s.concerns,
                    project: s.project,
                    chunks: s.chunks.into_iter().map(|c| (c.slug, c.version, c.tokens)).collect(),
                });
            }
            events::LEARNING => {
                let l: events::Learning = serde_json::from_slice(r.payload).map_err(bad)?;
                self.sessions.entry(l.session).or_default().learnings += 1;
            }
            events::DECISION => {
                let d: events::Decision = serde_json::from_slice(r.payload).map_err(bad)?;
                self.sessions.entry(d.session).or_default().decisions += 1;
            }
            events::OUTCOME => {
                let o: events::Outcome = serde_json::from_slice(r.payload).map_err(bad)?;
                self.sessions.entry(o.session).or_default().outcome = Some((o.outcome, r.recorded_at_ns));
            }
            _ => return Ok(()),
        }
        Ok(())
    }
}

crate::projections::kept::kept_projection!(Knowledge, "knowledge", 1, events::ALL);
