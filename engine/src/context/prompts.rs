//! Assembled prompts in the journal: the `prompt.assembled` and `context.superseded` events,
//! their projection, the decider that flags superseded context, and verification of a manifest
//! against the journal.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use strata_journal::{ExpectedVersion, Journal, Record, StreamAppend};

use super::assemble::{Inputs, Manifest, Task, TokenCounter, assemble, compliance};
use super::profile::{ProfileIndex, hash as profile_hash};
use super::summary::Summaries;
use crate::kb::graph::Graph;
use crate::kb::kind::{ArtifactKey, ArtifactKind};
use crate::ports::{Clock, Ids};

/// Event type of an assembly.
pub const ASSEMBLED: &str = "prompt.assembled";
/// Event type of a supersession.
pub const SUPERSEDED: &str = "context.superseded";

/// The stream of a task's prompts.
pub fn stream(task: &str) -> String {
    format!("prompt/{task}")
}

/// `prompt.assembled` v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assembled {
    /// The bill of materials.
    pub manifest: Manifest,
}

/// One item whose content changed after a prompt included it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Changed {
    /// `kind:id`.
    pub item: String,
    /// Content hash the prompt was given (hex).
    pub was: String,
    /// Content hash now (hex), empty if the artifact was deleted.
    pub now: String,
}

/// `context.superseded` v1: a prompt's context changed after it was assembled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Superseded {
    /// Task id.
    pub task: String,
    /// Version of the `prompt.assembled` event on the task's stream.
    pub prompt_version: u64,
    /// What changed.
    pub items: Vec<Changed>,
}

/// One assembled prompt as the projection knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptRecord {
    /// Journal sequence of the assembly event.
    pub seq: u64,
    /// The manifest.
    pub manifest: Manifest,
    /// Items flagged as superseded so far, with the hash they changed to.
    pub superseded: BTreeMap<String, String>,
    /// Items fetched later through `get_context`, each serve with its journal sequence.
    pub fetched: Vec<(u64, super::fetch::Fetched)>,
    /// Requests refused, with their journal sequence.
    pub refused: Vec<(u64, super::fetch::FetchRefused)>,
}

/// Every assembled prompt, by `(task, prompt version)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PromptIndex {
    prompts: BTreeMap<(String, u64), PromptRecord>,
    /// The version of each `prompt/<task>` stream (its last event's).
    versions: BTreeMap<String, u64>,
}

impl PromptIndex {
    /// Applies one record.
    pub fn apply(&mut self, r: &Record<'_>) -> Result<(), String> {
        if matches!(r.event_type, ASSEMBLED | SUPERSEDED | super::fetch::FETCHED | super::fetch::REFUSED) {
            self.versions.insert(r.stream.to_owned(), r.version);
        }
        match r.event_type {
            ASSEMBLED => {
                let e: Assembled = serde_json::from_slice(r.payload).map_err(|e| format!("prompt.assembled: {e}"))?;
                self.prompts.insert(
                    (e.manifest.task.id.clone(), r.version),
                    PromptRecord {
                        seq: r.seq,
                        manifest: e.manifest,
                        superseded: BTreeMap::new(),
                        fetched: Vec::new(),
                        refused: Vec::new(),
                    },
                );
            }
            SUPERSEDED => {
                let e: Superseded =
                    serde_json::from_slice(r.payload).map_err(|e| format!("context.superseded: {e}"))?;
                if let Some(p) = self.prompts.get_mut(&(e.task.clone(), e.prompt_version)) {
                    for c in e.items {
                        p.superseded.insert(c.item, c.now);
                    }
                }
            }
            super::fetch::FETCHED => {
                let e: super::fetch::Fetched =
                    serde_json::from_slice(r.payload).map_err(|e| format!("context.fetched: {e}"))?;
                if let Some(p) = self.prompts.get_mut(&(e.task.clone(), e.prompt_version)) {
                    p.fetched.push((r.seq, e));
                }
            }
            super::fetch::REFUSED => {
                let e: super::fetch::FetchRefused =
                    serde_json::from_slice(r.payload).map_err(|e| format!("context.fetch-refused: {e}"))?;
                if let Some(p) = self.prompts.get_mut(&(e.task.clone(), e.prompt_version)) {
                    p.refused.push((r.seq, e));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The prompts of `task`, oldest first, with their versions.
    pub fn of_task(&self, task: &str) -> Vec<(u64, &PromptRecord)> {
        self.prompts.range((task.to_owned(), 0)..=(task.to_owned(), u64::MAX)).map(|((_, v), p)| (*v, p)).collect()
    }

    /// The version of `task`'s prompt stream (0: no prompt was assembled for it).
    pub fn stream_version(&self, task: &str) -> u64 {
        self.versions.get(&stream(task)).copied().unwrap_or(0)
    }

    /// Every prompt.
    pub fn all(&self) -> impl Iterator<Item = (&(String, u64), &PromptRecord)> {
        self.prompts.iter()
    }
}

/// The append that records an assembly on the task's stream.
pub fn record(manifest: &Manifest, ids: &mut dyn Ids, clock: &dyn Clock) -> Result<StreamAppend, String> {
    let e = crate::kb::intake::event(ids, clock, ASSEMBLED, &Assembled { manifest: manifest.clone() }, None)?;
    Ok(StreamAppend { stream: stream(&manifest.task.id), expected: ExpectedVersion::Any, events: vec![e] })
}

fn artifact_of(item: &str) -> Option<ArtifactKey> {
    let (kind, id) = item.split_once(':')?;
    Some(ArtifactKey::new(ArtifactKind::from_name(kind)?, id))
}

/// `context.superseded` events for every prompt that included (or later fetched) an artifact
/// whose content has changed (or which was deleted) since, and that has not been flagged for that
/// change yet. Each
/// append expects the task's prompt stream at the version `prompts` read, so two processes
/// reacting to the same change flag it once.
pub fn supersede(
    prompts: &PromptIndex,
    g: &Graph,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Vec<StreamAppend>, String> {
    let mut out: Vec<StreamAppend> = Vec::new();
    for ((task, version), p) in prompts.all() {
        let mut items = Vec::new();
        let fetched = p.fetched.iter().flat_map(|(_, f)| &f.items);
        for i in p.manifest.included.iter().chain(fetched) {
            let Some(key) = artifact_of(&i.item) else { continue };
            let now = g.get(&key).map(|n| n.hash.to_hex()).unwrap_or_default();
            if now != i.content_hash && p.superseded.get(&i.item) != Some(&now) {
                items.push(Changed { item: i.item.clone(), was: i.content_hash.clone(), now });
            }
        }
        if items.is_empty() {
            continue;
        }
        let e = crate::kb::intake::event(
            ids,
            clock,
            SUPERSEDED,
            &Superseded { task: task.clone(), prompt_version: *version, items },
            None,
        )?;
        // One append per task stream, holding every prompt of the task that is flagged.
        match out.last_mut() {
            Some(last) if last.stream == stream(task) => last.events.push(e),
            _ => out.push(StreamAppend {
                stream: stream(task),
                expected: ExpectedVersion::Exact(prompts.stream_version(task)),
                events: vec![e],
            }),
        }
    }
    Ok(out)
}

/// Whether `bytes` are the prompt `m` describes; the problem if not.
pub fn prompt_problem(m: &Manifest, bytes: &[u8]) -> Option<String> {
    let h = strata_journal::Hash(*blake3::hash(bytes).as_bytes()).to_hex();
    (h != m.prompt_hash).then(|| {
        format!("the prompt file hashes to {h}, the manifest records {}: the prompt was edited", m.prompt_hash)
    })
}

/// Re-runs an assembly from the journal at the manifest's position and compares. Returns every
/// problem found (empty: the manifest is exactly what the journal gives, and it complies).
pub fn verify(journal: &Journal, m: &Manifest, prompt: Option<&[u8]>) -> Result<Vec<String>, String> {
    verify_with(journal, m, prompt, &[], &mut BTreeMap::new())
}

/// [`verify`], and every item `fetched` (records of this manifest) served later through
/// `get_context`, re-rendered at the manifest's position and compared with what was recorded.
pub fn verify_with_fetched(
    journal: &Journal,
    m: &Manifest,
    prompt: Option<&[u8]>,
    fetched: &[&PromptRecord],
) -> Result<Vec<String>, String> {
    verify_with(journal, m, prompt, fetched, &mut BTreeMap::new())
}

/// [`verify`] for many prompts (manifest and bytes each), replaying the graph once per journal
/// position they were assembled at rather than once per prompt: what a run's planning gate
/// checks a phase's prompts with.
pub fn verify_all(journal: &Journal, items: &[(&Manifest, &[u8])]) -> Result<Vec<Vec<String>>, String> {
    let mut graphs = BTreeMap::new();
    items.iter().map(|(m, bytes)| verify_with(journal, m, Some(bytes), &[], &mut graphs)).collect()
}

/// Graphs at a journal position, with their summaries, built once.
type AtPosition = BTreeMap<u64, (Graph, Summaries)>;

fn verify_with(
    journal: &Journal,
    m: &Manifest,
    prompt: Option<&[u8]>,
    fetched: &[&PromptRecord],
    graphs: &mut AtPosition,
) -> Result<Vec<String>, String> {
    let mut problems = Vec::new();
    if let Some(p) = prompt.and_then(|bytes| prompt_problem(m, bytes)) {
        problems.push(p);
    }
    let at = journal.hash_at(m.position).map_err(|e| e.to_string())?;
    if at.map(|h| h.to_hex()).as_deref() != Some(m.position_hash.as_str()) {
        problems.push(format!("the journal has no event {} with hash {}", m.position, m.position_hash));
        return Ok(problems);
    }
    let (g, summaries) = match graphs.entry(m.position) {
        std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::btree_map::Entry::Vacant(e) => {
            let mut g = Graph::at(journal, m.position)?;
            let summaries = Summaries::build(&mut g);
            e.insert((g, summaries))
        }
    };
    let (g, summaries) = (&*g, &*summaries);
    // The profile version is one event of the profile's stream, read directly.
    let mut profiles = ProfileIndex::default();
    let version =
        journal.read_stream(&super::profile::stream(&m.profile), m.profile_version, 1).map_err(|e| e.to_string())?;
    for e in version.iter().filter(|e| e.seq <= m.position) {
        profiles.apply(&e.as_record())?;
    }
    let Some(profile) = profiles.version(&m.profile, m.profile_version) else {
        problems.push(format!(
            "profile {} version {} is not in the journal before sequence {}",
            m.profile, m.profile_version, m.position
        ));
        return Ok(problems);
    };
    if profile_hash(profile).to_hex() != m.profile_hash {
        problems.push("the profile recorded differs from the registered one".into());
    }
    let task = Task { id: m.task.id.clone(), objective: m.task.objective.clone(), plan: m.task.plan.clone() };
    // The continuation status, read again from the workgroup stream where the manifest says.
    let continuation = match &m.continuation {
        None => None,
        Some(src) if journal.hash_at(src.position).map_err(|e| e.to_string())?.is_none() => {
            problems.push(format!("the journal has no event {} to read the continuation status through", src.position));
            return Ok(problems);
        }
        Some(src) => match super::continuation::read(journal, &src.workgroup, &src.task, src.position)? {
            Some(c) => Some(c),
            None => {
                problems.push(format!(
                    "the journal shows no ended attempt of task {} of workgroup {} through sequence {}, but the prompt has a continuation status",
                    src.task, src.workgroup, src.position
                ));
                return Ok(problems);
            }
        },
    };
    let inputs = Inputs {
        graph: g,
        summaries,
        profile,
        profile_version: m.profile_version,
        task: &task,
        position: m.position,
        position_hash: at.unwrap_or_default(),
        continuation: continuation.as_ref(),
    };
    match assemble(&inputs, &mut TokenCounter::new(m.factor_milli)) {
        Ok(a) => {
            if a.manifest.prompt_hash != m.prompt_hash {
                problems.push(format!(
                    "re-assembly gives prompt {}, the manifest records {}",
                    a.manifest.prompt_hash, m.prompt_hash
                ));
            }
            if a.manifest != *m {
                problems.push("re-assembly gives a different bill of materials".into());
            }
        }
        Err(e) => problems.push(format!("re-assembly was refused: {e}")),
    }
    for r in fetched {
        problems.extend(super::fetch::verify_fetched(r, profile, g, summaries));
    }
    problems.extend(compliance(m, &profile.context_profile.never));
    Ok(problems)
}
