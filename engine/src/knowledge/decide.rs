//! Pure deciders of the Knowledge API: each takes the projection at a known position and returns
//! the appends to make (with expected versions where a stream's history matters) or a typed
//! refusal. Nothing here touches the journal.
//!
//! Idempotency: a caller may pass an idempotency key with a serve or a log; the event id is then
//! derived from (stream, key), so a retry of the same call is recognised by the journal and
//! appends nothing. A serve also records its key, and a retry is answered from the recorded serve
//! before anything is decided again: once the catalogue has changed, a fresh answer would differ
//! from the recorded one and the journal would refuse the retry as a different event.

use strata_journal::{EventData, ExpectedVersion, StreamAppend};
use uuid::Uuid;

use super::chunk::{self, ChunkDraft};
use super::events::{self, Declared, Put, Retired, Served, ServedChunk, SessionStarted};
use super::state::{Answer, Knowledge, Request};
use super::{KnowledgeError, NAME_RULE, TEXT_BYTES_MAX, VOCABULARY_MAX, valid_name};
use crate::kb::intake::{IntakeProblem, SourceFile};
use crate::ports::{Clock, Ids};

/// Longest session id or idempotency key.
pub const KEY_BYTES_MAX: usize = 128;

fn event(id: Uuid, clock: &dyn Clock, t: &str, payload: &impl serde::Serialize) -> Result<EventData, KnowledgeError> {
    Ok(EventData {
        id,
        event_type: t.to_owned(),
        schema_version: 1,
        recorded_at_ns: clock.now_ns(),
        causation: None,
        correlation: None,
        payload: serde_json::to_vec(payload).map_err(|e| KnowledgeError::Internal(e.to_string()))?,
    })
}

/// The event id for `key` on `stream`, or a fresh one.
pub fn event_id(ids: &mut dyn Ids, stream: &str, key: Option<&str>) -> Uuid {
    match key {
        Some(k) => {
            let mut h = blake3::Hasher::new();
            h.update(b"strata.idempotency/1\0");
            h.update(stream.as_bytes());
            h.update(b"\0");
            h.update(k.as_bytes());
            let mut b = [0u8; 16];
            b.copy_from_slice(&h.finalize().as_bytes()[..16]);
            uuid::Builder::from_random_bytes(b).into_uuid()
        }
        None => ids.next_id(),
    }
}

fn check_key(what: &'static str, v: &str) -> Result<(), KnowledgeError> {
    if v.is_empty() || v.len() > KEY_BYTES_MAX || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
    {
        return Err(KnowledgeError::BadName {
            what,
            value: v.to_owned(),
            rule: "1 to 128 characters of A-Z a-z 0-9 . _ : -",
        });
    }
    Ok(())
}

fn check_text(what: &'static str, v: Option<&str>) -> Result<(), KnowledgeError> {
    match v {
        Some(t) if t.len() > TEXT_BYTES_MAX => Err(KnowledgeError::TooLong { what, len: t.len(), max: TEXT_BYTES_MAX }),
        _ => Ok(()),
    }
}

/// Adds concerns and projects to the vocabulary; `None` when all are declared already.
pub fn declare(
    k: &Knowledge,
    concerns: &[String],
    projects: &[String],
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Option<StreamAppend>, KnowledgeError> {
    for (what, list) in [("concern", concerns), ("project", projects)] {
        if let Some(bad) = list.iter().find(|n| !valid_name(n)) {
            return Err(KnowledgeError::BadName { what, value: bad.clone(), rule: NAME_RULE });
        }
    }
    let mut new_concerns: Vec<String> = concerns.iter().filter(|c| !k.has_concern(c)).cloned().collect();
    let mut new_projects: Vec<String> = projects.iter().filter(|p| !k.has_project(p)).cloned().collect();
    new_concerns.sort();
    new_concerns.dedup();
    new_projects.sort();
    new_projects.dedup();
    if new_concerns.is_empty() && new_projects.is_empty() {
        return Ok(None);
    }
    let total = k.concerns().count() + k.projects().count() + new_concerns.len() + new_projects.len();
    if total > VOCABULARY_MAX {
        return Err(KnowledgeError::TooMany {
            what: "concerns and projects in the vocabulary",
            n: total,
            max: VOCABULARY_MAX,
        });
    }
    let e =
        event(ids.next_id(), clock, events::DECLARED, &Declared { concerns: new_concerns, projects: new_projects })?;
    Ok(Some(StreamAppend { stream: events::VOCABULARY_STREAM.into(), expected: ExpectedVersion::Any, events: vec![e] }))
}

/// What `put` will append.
#[derive(Clone, Debug, Default)]
pub struct PutPlan {
    /// One append per new or changed chunk, expecting the version read.
    pub appends: Vec<StreamAppend>,
    /// `(slug, version, tokens)` of new chunks.
    pub created: Vec<(String, u64, u32)>,
    /// `(slug, version, tokens)` of changed chunks.
    pub updated: Vec<(String, u64, u32)>,
    /// Slugs stored exactly as given.
    pub unchanged: Vec<String>,
}

/// Most chunk files in one put: one atomic append holds at most this many streams (one per
/// chunk).
pub const PUT_FILES_MAX: usize = strata_journal::limits::STREAMS_PER_APPEND_MAX;

/// Parses, checks and versions chunk files; all or nothing.
pub fn put(
    k: &Knowledge,
    files: &[SourceFile],
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<PutPlan, Vec<IntakeProblem>> {
    let mut problems = Vec::new();
    if files.len() > PUT_FILES_MAX {
        problems.push(IntakeProblem {
            file: String::new(),
            pointer: String::new(),
            rule: "size".into(),
            detail: format!("{} files; at most {PUT_FILES_MAX} per put", files.len()),
            hint: "put them in several batches".into(),
        });
        return Err(problems);
    }
    let mut drafts: Vec<ChunkDraft> = Vec::new();
    for f in files {
        match chunk::parse(f, k) {
            Ok(d) => {
                if let Some(first) = drafts.iter().find(|x| x.slug == d.slug) {
                    problems.push(IntakeProblem {
                        file: f.path.clone(),
                        pointer: "/slug".into(),
                        rule: "duplicate".into(),
                        detail: format!("slug {} is also in {}", d.slug, first.source),
                        hint: "give every chunk its own slug".into(),
                    });
                } else {
                    drafts.push(d);
                }
            }
            Err(mut p) => problems.append(&mut p),
        }
    }
    if !problems.is_empty() {
        problems.sort();
        return Err(problems);
    }
    version_drafts(k, drafts, ids, clock)
}

/// Versions checked chunk drafts against the catalogue: one append per new or changed chunk
/// (expecting the version read), nothing for a chunk stored exactly as drafted.
pub fn version_drafts(
    k: &Knowledge,
    mut drafts: Vec<ChunkDraft>,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<PutPlan, Vec<IntakeProblem>> {
    drafts.sort_by(|a, b| a.slug.cmp(&b.slug));
    let mut plan = PutPlan::default();
    for d in drafts {
        let hash = d.hash();
        let prior = k.chunk(&d.slug);
        if prior.is_some_and(|c| c.hash == hash && !c.retired) {
            plan.unchanged.push(d.slug);
            continue;
        }
        let version = prior.map_or(1, |c| c.version + 1);
        let tokens = u32::try_from(crate::tokens::count(&d.content)).unwrap_or(u32::MAX);
        let stream = events::chunk_stream(&d.slug);
        let expected = ExpectedVersion::Exact(prior.map_or(0, |c| c.stream_version()));
        let payload = Put {
            slug: d.slug.clone(),
            title: d.title,
            concerns: d.concerns,
            project_scope: d.project_scope,
            content: d.content,
            hash,
            tokens,
            version,
            source: Some(d.source),
        };
        let e = event(ids.next_id(), clock, events::PUT, &payload).map_err(|e| {
            vec![IntakeProblem {
                file: String::new(),
                pointer: String::new(),
                rule: "internal".into(),
                detail: e.to_string(),
                hint: String::new(),
            }]
        })?;
        plan.appends.push(StreamAppend { stream, expected, events: vec![e] });
        if prior.is_some() {
            plan.updated.push((d.slug, version, tokens));
        } else {
            plan.created.push((d.slug, version, tokens));
        }
    }
    Ok(plan)
}

/// Retires a chunk: it is never served again (a later put revives it as a new version).
pub fn retire(
    k: &Knowledge,
    slug: &str,
    reason: Option<&str>,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<StreamAppend, KnowledgeError> {
    check_text("reason", reason)?;
    let c = match k.chunk(slug) {
        Some(c) if !c.retired => c,
        _ => {
            let live: Vec<String> = k.chunks().filter(|c| !c.retired).map(|c| c.slug.clone()).collect();
            return Err(KnowledgeError::UnknownChunk {
                slug: slug.to_owned(),
                suggestions: super::closest(slug, live.iter()),
            });
        }
    };
    let e = event(
        ids.next_id(),
        clock,
        events::RETIRED,
        &Retired { slug: slug.to_owned(), version: c.version, reason: reason.map(str::to_owned) },
    )?;
    Ok(StreamAppend {
        stream: events::chunk_stream(slug),
        expected: ExpectedVersion::Exact(c.stream_version()),
        events: vec![e],
    })
}

/// Starts a session (or finds the one already started under that id): returns its id and the
/// append, if any.
pub fn start_session(
    k: &Knowledge,
    s: SessionStarted,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<(String, Option<StreamAppend>), KnowledgeError> {
    let mut s = s;
    if s.session.is_empty() {
        s.session = ids.next_id().to_string();
    }
    check_key("session", &s.session)?;
    check_text("task_context", s.task_context.as_deref())?;
    check_text("agent", s.agent.as_deref())?;
    if let Some(p) = &s.project
        && !k.has_project(p)
    {
        return Err(k.unknown_project(p));
    }
    if k.session(&s.session).is_some_and(|x| x.started) {
        return Ok((s.session, None));
    }
    let stream = events::session_stream(&s.session);
    let id = event_id(ids, &stream, Some("start"));
    let e = event(id, clock, events::SESSION_STARTED, &s)?;
    Ok((s.session, Some(StreamAppend { stream, expected: ExpectedVersion::Any, events: vec![e] })))
}

fn known_session(k: &Knowledge, session: &str) -> Result<(), KnowledgeError> {
    check_key("session", session)?;
    if !k.session(session).is_some_and(|s| s.started) {
        return Err(KnowledgeError::UnknownSession(session.to_owned()));
    }
    Ok(())
}

/// How a `get_knowledge` answer is recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServeRecord {
    /// A new serve: append this to record it.
    New(StreamAppend),
    /// A retry under the idempotency key of the serve recorded at this journal sequence: the
    /// answer is that serve's, and nothing is appended.
    Duplicate(u64),
}

/// Answers a `get_knowledge` request: the answer with the append that logs the serve or, for a
/// retry with the idempotency key of a recorded serve, that serve's answer as it was given (the
/// chunk versions it served, whatever was put or retired since). A key reused for a different
/// request is refused.
pub fn serve<'k>(
    k: &'k Knowledge,
    req: &Request,
    session: Option<&str>,
    task_context: Option<&str>,
    idempotency_key: Option<&str>,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<(Answer<'k>, ServeRecord), KnowledgeError> {
    if let Some(s) = session {
        known_session(k, s)?;
    }
    if let Some(key) = idempotency_key {
        check_key("idempotency key", key)?;
    }
    check_text("task_context", task_context)?;
    let mut concerns = req.concerns.clone();
    concerns.sort();
    concerns.dedup();
    if let Some(key) = idempotency_key
        && let Some((seq, first)) = k.keyed_serve(session, key)
    {
        if first.concerns != concerns || first.project != req.project || first.task_context.as_deref() != task_context {
            return Err(KnowledgeError::KeyReused { key: key.to_owned(), seq });
        }
        let mut chunks = Vec::with_capacity(first.chunks.len());
        for c in &first.chunks {
            let chunk = k.chunk_at(&c.slug, c.version).filter(|x| x.hash == c.hash).ok_or_else(|| {
                KnowledgeError::Internal(format!(
                    "the serve at sequence {seq} gave {} v{}, which the projection does not hold",
                    c.slug, c.version
                ))
            })?;
            chunks.push(chunk);
        }
        let omitted = first.omitted.into_iter().map(std::borrow::Cow::Owned).collect();
        return Ok((Answer { chunks, omitted, total_tokens: first.total_tokens }, ServeRecord::Duplicate(seq)));
    }
    let answer = k.get(req)?;
    let payload = Served {
        session: session.map(str::to_owned),
        task_context: task_context.map(str::to_owned),
        concerns,
        project: req.project.clone(),
        chunks: answer
            .chunks
            .iter()
            .map(|c| ServedChunk { slug: c.slug.clone(), version: c.version, hash: c.hash.clone(), tokens: c.tokens })
            .collect(),
        omitted: answer.omitted.iter().map(|s| s.to_string()).collect(),
        total_tokens: answer.total_tokens,
        idempotency_key: idempotency_key.map(str::to_owned),
    };
    let stream = session.map_or_else(|| events::UNSESSIONED_STREAM.to_owned(), events::session_stream);
    let id = event_id(ids, &stream, idempotency_key);
    let e = event(id, clock, events::SERVED, &payload)?;
    Ok((answer, ServeRecord::New(StreamAppend { stream, expected: ExpectedVersion::Any, events: vec![e] })))
}

/// What a session logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Log {
    /// A learning, with the concerns it relates to.
    Learning {
        /// Text.
        text: String,
        /// Concerns (checked against the vocabulary).
        concerns: Vec<String>,
    },
    /// A decision.
    Decision {
        /// What.
        decision: String,
        /// Why.
        rationale: Option<String>,
    },
    /// The session's outcome.
    Outcome {
        /// One of success, failure, partial, abandoned.
        outcome: String,
        /// Details.
        detail: Option<String>,
    },
}

/// Logs a learning, a decision or an outcome in a started session.
pub fn log(
    k: &Knowledge,
    session: &str,
    entry: Log,
    key: Option<&str>,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<StreamAppend, KnowledgeError> {
    known_session(k, session)?;
    if let Some(key) = key {
        check_key("idempotency key", key)?;
    }
    let stream = events::session_stream(session);
    let id = event_id(ids, &stream, key);
    let s = session.to_owned();
    let e = match entry {
        Log::Learning { text, concerns } => {
            if text.trim().is_empty() {
                return Err(KnowledgeError::TooLong { what: "learning (empty)", len: 0, max: TEXT_BYTES_MAX });
            }
            check_text("learning", Some(&text))?;
            if let Some(c) = concerns.iter().find(|c| !k.has_concern(c)) {
                return Err(k.unknown_concern(c));
            }
            event(id, clock, events::LEARNING, &events::Learning { session: s, text, concerns })?
        }
        Log::Decision { decision, rationale } => {
            if decision.trim().is_empty() {
                return Err(KnowledgeError::TooLong { what: "decision (empty)", len: 0, max: TEXT_BYTES_MAX });
            }
            check_text("decision", Some(&decision))?;
            check_text("rationale", rationale.as_deref())?;
            event(id, clock, events::DECISION, &events::Decision { session: s, decision, rationale })?
        }
        Log::Outcome { outcome, detail } => {
            if !events::OUTCOMES.contains(&outcome.as_str()) {
                return Err(KnowledgeError::BadOutcome(outcome));
            }
            check_text("detail", detail.as_deref())?;
            event(id, clock, events::OUTCOME, &events::Outcome { session: s, outcome, detail })?
        }
    };
    Ok(StreamAppend { stream, expected: ExpectedVersion::Any, events: vec![e] })
}
