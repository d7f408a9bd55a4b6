//! On-demand context: a worker asks, after its prompt was assembled, for an item its profile
//! lists under `onDemand`, and the decision here serves it or refuses it; either way it is
//! recorded on the prompt's stream, so the bill of materials still says what the agent saw.
//!
//! A request names the prompt (its task id, the latest prompt unless a version is given), what
//! it wants (an item id such as `domain:billing-domain-1`, a virtual path, or an `onDemand`
//! entry's path as the profile writes it, `{functionalDomainSpec}`, which asks for everything the
//! entry resolves to), optionally a level, and why. It is decided on the knowledge base at the
//! prompt's own position (so what is served is what the prompt offered, byte for byte), with the
//! profile version the prompt was assembled under:
//!
//! 1. anything a `never` glob matches is refused, whatever route it is asked by ([`Refusal::Never`]);
//! 2. only what the profile's `onDemand` entries resolve to for this prompt is served (not what
//!    is already in the prompt, nor anything no entry reaches: [`Refusal::NotOnDemand`]);
//! 3. at the entry's level or coarser ([`Refusal::TooFine`]);
//! 4. without more specifications at L1 than `maxFullSpecs`, counting the prompt's and earlier
//!    fetches' ([`Refusal::MaxFullSpecs`]);
//! 5. within what is left of the prompt's token budget after the prompt and every earlier fetch
//!    ([`Refusal::OverBudget`], with the shortfall).
//!
//! A serve is `context.fetched` (the items as bill-of-materials entries, each with its content
//! hash, text hash, tokens and the reason "fetched later: …"), a refusal `context.fetch-refused`;
//! both append to `prompt/<task>` expecting the version read, so two concurrent fetches cannot
//! both spend the same remaining budget. Input that names no prompt, or is malformed, is a
//! [`FetchError`] and appends nothing.

use serde::{Deserialize, Serialize};
use strata_journal::{ExpectedVersion, Hash, StreamAppend};

use super::assemble::{
    Candidate, Class, Item, PIPELINE_RULES_PATH, Ref, Scope, TokenCounter, implemented_path, is_spec, item_id,
    render_item, section_of,
};
use super::paths::{SYSTEM_SUMMARY, artifact_path, entity_summary, glob_match, matching};
use super::profile::Profile;
use super::prompts::{PromptIndex, PromptRecord, stream};
use super::render::Level;
use super::summary::Summaries;
use crate::kb::graph::Graph;
use crate::kb::kind::{ArtifactKey, ArtifactKind};
use crate::ports::{Clock, Ids};

/// Event type of a serve.
pub const FETCHED: &str = "context.fetched";
/// Event type of a refused request.
pub const REFUSED: &str = "context.fetch-refused";

/// Longest `item` a request may name, bytes (a profile's paths are at most 300).
pub const ITEM_BYTES_MAX: usize = 300;
/// Longest reason, bytes.
pub const REASON_BYTES_MAX: usize = 1_000;
/// Longest session id, bytes.
pub const SESSION_BYTES_MAX: usize = 200;

/// What a worker asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ask {
    /// The prompt's task id (the first line of the prompt: `# Task <id>`).
    pub task: String,
    /// Which prompt of the task (its version on `prompt/<task>`); the latest when `None`.
    pub prompt_version: Option<u64>,
    /// An item id, a virtual path, or an `onDemand` entry's path.
    pub item: String,
    /// The level wanted; the entry's when `None`.
    pub level: Option<String>,
    /// Why the worker needs it (recorded).
    pub reason: String,
    /// The worker's session, when it says (recorded).
    pub session: Option<String>,
}

/// `context.fetched` v1: items served to a prompt's worker after assembly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fetched {
    /// Task id.
    pub task: String,
    /// Version of the `prompt.assembled` event on the task's stream.
    pub prompt_version: u64,
    /// The prompt's hash (hex).
    pub prompt_hash: String,
    /// What was asked, as written.
    pub asked: String,
    /// The worker's reason.
    pub reason: String,
    /// The worker's session, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The items served, as bill-of-materials entries (reason `fetched later: …`).
    pub items: Vec<Item>,
    /// Tokens served.
    pub tokens: usize,
    /// What is left of the budget after this serve.
    pub remaining: usize,
}

/// `context.fetch-refused` v1: a request that was refused, with the rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchRefused {
    /// Task id.
    pub task: String,
    /// Version of the `prompt.assembled` event on the task's stream.
    pub prompt_version: u64,
    /// The prompt's hash (hex).
    pub prompt_hash: String,
    /// What was asked, as written.
    pub asked: String,
    /// The level asked for, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    /// The worker's reason.
    pub reason: String,
    /// The worker's session, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The rule that refused it: `never`, `not-on-demand`, `too-fine`, `max-full-specs`,
    /// `over-budget` or `unknown`.
    pub rule: String,
    /// The refusal as the worker was told it.
    pub message: String,
    /// Tokens short, for `over-budget`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shortfall: Option<usize>,
}

/// Why a request was refused (recorded as `context.fetch-refused`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// A `never` glob matches it.
    #[error(
        "[STRATA-E2705] {asked} is never given to profile {profile}: its path {path} matches the never glob {glob}; this refusal is recorded, and no request can reach it"
    )]
    Never {
        /// What was asked.
        asked: String,
        /// Its virtual path.
        path: String,
        /// The profile.
        profile: String,
        /// The glob.
        glob: String,
    },
    /// No `onDemand` entry reaches it for this prompt.
    #[error(
        "[STRATA-E2706] {asked} is not on demand for this prompt: {detail}; ask for an item of the prompt's \"On demand\" section, or one of the onDemand entries of profile {profile}: {entries}"
    )]
    NotOnDemand {
        /// What was asked.
        asked: String,
        /// Why not.
        detail: String,
        /// The profile.
        profile: String,
        /// Its onDemand entries.
        entries: String,
    },
    /// A level finer than the profile lists.
    #[error(
        "[STRATA-E2707] {asked} is on demand at {allowed} or coarser, not {level}; ask with level {allowed} (or L2, L3)"
    )]
    TooFine {
        /// What was asked.
        asked: String,
        /// The level asked.
        level: String,
        /// The entry's level.
        allowed: String,
    },
    /// More L1 specifications than `maxFullSpecs`.
    #[error(
        "[STRATA-E2708] {asked} at L1 would make {would} specifications at L1 for this prompt, more than maxFullSpecs {max} ({already} already, in the prompt and earlier fetches); ask at L2"
    )]
    MaxFullSpecs {
        /// What was asked.
        asked: String,
        /// L1 specifications so far.
        already: usize,
        /// With this request.
        would: usize,
        /// The cap.
        max: u32,
    },
    /// Beyond the remaining budget.
    #[error(
        "[STRATA-E2709] {asked} needs {needed} tokens but only {remaining} of the prompt's budget of {budget} are left (the prompt used {used}, earlier fetches {fetched}): {shortfall} tokens short; ask at a coarser level or for one item instead of a whole entry"
    )]
    OverBudget {
        /// What was asked.
        asked: String,
        /// Tokens it needs.
        needed: usize,
        /// Tokens left.
        remaining: usize,
        /// The prompt's budget.
        budget: u32,
        /// The prompt's own tokens.
        used: usize,
        /// Tokens fetched before.
        fetched: usize,
        /// `needed - remaining`.
        shortfall: usize,
    },
    /// Nothing of that id or path exists at the prompt's position.
    #[error(
        "[STRATA-E2710] nothing in the knowledge base at the prompt's position (sequence {position}) is {asked}; name an item as the \"On demand\" section writes it (kind:id) or an onDemand entry of the profile"
    )]
    Unknown {
        /// What was asked.
        asked: String,
        /// The prompt's position.
        position: u64,
    },
}

impl Refusal {
    /// The rule's name, as recorded.
    pub fn rule(&self) -> &'static str {
        match self {
            Refusal::Never { .. } => "never",
            Refusal::NotOnDemand { .. } => "not-on-demand",
            Refusal::TooFine { .. } => "too-fine",
            Refusal::MaxFullSpecs { .. } => "max-full-specs",
            Refusal::OverBudget { .. } => "over-budget",
            Refusal::Unknown { .. } => "unknown",
        }
    }

    fn shortfall(&self) -> Option<usize> {
        match self {
            Refusal::OverBudget { shortfall, .. } => Some(*shortfall),
            _ => None,
        }
    }
}

/// A request that names no prompt or is malformed; nothing is recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// No prompt of that task.
    #[error(
        "[STRATA-E2700] no prompt was assembled for task {0:?}; get_context serves the onDemand items of an assembled prompt: pass the task id from your prompt's first line (`# Task <id>`)"
    )]
    UnknownTask(String),
    /// No prompt of that version.
    #[error(
        "[STRATA-E2701] task {task} has no prompt version {version}; its prompts are versions {versions}; omit prompt_version for the latest"
    )]
    UnknownVersion {
        /// Task.
        task: String,
        /// Version asked.
        version: u64,
        /// The versions there are.
        versions: String,
    },
    /// A malformed argument.
    #[error("[STRATA-E2702] get_context {field}: {rule}")]
    BadInput {
        /// The argument.
        field: &'static str,
        /// What it must be.
        rule: String,
    },
    /// The prompt's profile version is not in the journal (a damaged journal).
    #[error(
        "[STRATA-E2703] the prompt of task {task} was assembled under profile {profile} v{version}, which the journal does not hold; run `strata journal verify`"
    )]
    NoProfile {
        /// Task.
        task: String,
        /// Profile.
        profile: String,
        /// Version.
        version: u64,
    },
    /// The knowledge base at the prompt's position cannot resolve the prompt's plan (a journal
    /// that does not match the prompt).
    #[error(
        "[STRATA-E2704] the prompt of task {task} cannot be resolved at its own position: {detail}; run `strata prompt verify` on its manifest"
    )]
    Unresolvable {
        /// Task.
        task: String,
        /// What failed.
        detail: String,
    },
}

/// What a decided request gives the worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Served: each item with its text, the tokens served and what is left.
    Served {
        /// The items, with the text served for each.
        items: Vec<(Item, String)>,
        /// Tokens served.
        tokens: usize,
        /// Tokens left of the budget.
        remaining: usize,
    },
    /// Refused, with the rule.
    Refused(Refusal),
}

/// A decided request: what to answer and the one append that records it.
#[derive(Clone, Debug)]
pub struct Decision {
    /// The prompt version decided on.
    pub prompt_version: u64,
    /// The answer.
    pub outcome: Outcome,
    /// `context.fetched` or `context.fetch-refused` on `prompt/<task>`.
    pub append: StreamAppend,
}

fn check(ask: &Ask) -> Result<(), FetchError> {
    let bad = |field, rule: String| Err(FetchError::BadInput { field, rule });
    if ask.item.trim().is_empty() || ask.item.len() > ITEM_BYTES_MAX || ask.item.chars().any(char::is_control) {
        return bad(
            "item",
            format!(
                "1 to {ITEM_BYTES_MAX} bytes without control characters: an item id (domain:billing-domain-1), a virtual path or an onDemand entry's path"
            ),
        );
    }
    if ask.reason.trim().is_empty() || ask.reason.len() > REASON_BYTES_MAX {
        return bad("reason", format!("say why you need it, in 1 to {REASON_BYTES_MAX} bytes (it is recorded)"));
    }
    if ask.session.as_ref().is_some_and(|s| s.is_empty() || s.len() > SESSION_BYTES_MAX) {
        return bad("session", format!("1 to {SESSION_BYTES_MAX} bytes, or leave it out"));
    }
    if let Some(l) = &ask.level
        && Level::parse(l).is_none()
    {
        return bad("level", format!("{l:?} is not a level; use L1 (full), L2 (summary) or L3 (one line)"));
    }
    Ok(())
}

/// The prompt a request names: its version and record.
pub fn resolve<'p>(prompts: &'p PromptIndex, ask: &Ask) -> Result<(u64, &'p PromptRecord), FetchError> {
    let all = prompts.of_task(&ask.task);
    let Some(&(latest, _)) = all.last() else { return Err(FetchError::UnknownTask(ask.task.clone())) };
    let version = ask.prompt_version.unwrap_or(latest);
    all.iter().find(|(v, _)| *v == version).map(|(v, r)| (*v, *r)).ok_or_else(|| FetchError::UnknownVersion {
        task: ask.task.clone(),
        version,
        versions: all.iter().map(|(v, _)| v.to_string()).collect::<Vec<_>>().join(", "),
    })
}

/// What `asked` names as an item id or virtual path in `g`, with its virtual path.
fn locate(g: &Graph, s: &Summaries, asked: &str) -> Option<(Ref, String)> {
    match asked {
        "rules:pipeline" | PIPELINE_RULES_PATH => return Some((Ref::Rules, PIPELINE_RULES_PATH.into())),
        "summary:L3" | SYSTEM_SUMMARY => return Some((Ref::System, SYSTEM_SUMMARY.into())),
        _ => {}
    }
    if let Some(e) = asked.strip_prefix("summary:L2/").or_else(|| asked.strip_prefix("summaries/L2/")) {
        return s.entity(e).map(|_| (Ref::Entity(e.to_owned()), entity_summary(e)));
    }
    if let Some((kind, id)) = asked.split_once(':')
        && let Some(kind) = ArtifactKind::from_name(kind)
    {
        let key = ArtifactKey::new(kind, id);
        return g.get(&key).and(g.node_id(&key)).map(|n| (Ref::Artifact(n), artifact_path(g.node(n))));
    }
    if asked.contains(['*', '?', '[', '{']) {
        return None;
    }
    matching(g, asked).first().map(|&n| (Ref::Artifact(n), artifact_path(g.node(n))))
}

const SPEC_SECTIONS: [&str; 4] = ["Requirements", "Domains", "Modules", "Screens"];

/// Decides `ask` against the prompt `version` of its task. `profile` is the profile version that
/// prompt was assembled under, `graph` and `summaries` the knowledge base at its position.
#[allow(clippy::too_many_arguments)]
pub fn decide(
    prompts: &PromptIndex,
    profile: &Profile,
    graph: &Graph,
    summaries: &Summaries,
    ask: &Ask,
    version: u64,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Decision, FetchError> {
    check(ask)?;
    let (version, rec) = resolve(prompts, &Ask { prompt_version: Some(version), ..ask.clone() })?;
    let m = &rec.manifest;
    let cp = &profile.context_profile;
    let scope = Scope::new(graph, summaries, profile, m.task.plan.as_deref(), &m.task.id, None)
        .map_err(|e| FetchError::Unresolvable { task: ask.task.clone(), detail: e.to_string() })?;
    let (kept, _) = scope.candidates(profile);
    let allowed: Vec<&Candidate> = kept.iter().filter(|c| c.class == Class::OnDemand).collect();
    let entries = || {
        if cp.on_demand.is_empty() {
            "none".to_owned()
        } else {
            cp.on_demand.iter().map(|e| format!("{} at {}", e.path, e.level)).collect::<Vec<_>>().join(", ")
        }
    };
    let not_on_demand = |detail: String| Refusal::NotOnDemand {
        asked: ask.item.clone(),
        detail,
        profile: profile.agent_id.clone(),
        entries: entries(),
    };
    let targets: Result<Vec<&Candidate>, Refusal> = if cp.on_demand.iter().any(|e| e.path == ask.item) {
        let t: Vec<&Candidate> = allowed.iter().filter(|c| c.entry == ask.item).copied().collect();
        if t.is_empty() {
            Err(not_on_demand(
                "the entry resolves to nothing that may be served for this prompt (unresolved, never-listed, or already in the prompt)".into(),
            ))
        } else {
            Ok(t)
        }
    } else if let Some(e) = cp.always.iter().chain(&cp.for_current_task).find(|e| e.path == ask.item) {
        Err(not_on_demand(format!("{} is an always or forCurrentTask entry; what it gives is in the prompt", e.path)))
    } else {
        match locate(graph, summaries, &ask.item) {
            None => Err(Refusal::Unknown { asked: ask.item.clone(), position: m.position }),
            Some((what, path)) => match cp
                .never
                .iter()
                .find(|n| glob_match(n, &path) || implemented_path(graph, &what).is_some_and(|p| glob_match(n, &p)))
            {
                Some(glob) => Err(Refusal::Never {
                    asked: ask.item.clone(),
                    path,
                    profile: profile.agent_id.clone(),
                    glob: glob.clone(),
                }),
                None => match allowed.iter().find(|c| c.what == what) {
                    Some(c) => Ok(vec![*c]),
                    None => {
                        let id = item_id(graph, &what);
                        Err(not_on_demand(match m.included.iter().find(|i| i.item == id) {
                            Some(i) => format!("it is in the prompt at {} (section {})", i.level, i.section),
                            None => format!("no onDemand entry of profile {} resolves to {id}", profile.agent_id),
                        }))
                    }
                },
            },
        }
    };
    let asked_level = ask.level.as_deref().and_then(Level::parse);
    let outcome = match targets {
        Err(r) => Outcome::Refused(r),
        Ok(targets) => serve(graph, summaries, &scope, rec, cp, ask, asked_level, &targets),
    };
    let payload_event = match &outcome {
        Outcome::Served { items, tokens, remaining } => crate::kb::intake::event(
            ids,
            clock,
            FETCHED,
            &Fetched {
                task: ask.task.clone(),
                prompt_version: version,
                prompt_hash: m.prompt_hash.clone(),
                asked: ask.item.clone(),
                reason: ask.reason.clone(),
                session: ask.session.clone(),
                items: items.iter().map(|(i, _)| i.clone()).collect(),
                tokens: *tokens,
                remaining: *remaining,
            },
            None,
        ),
        Outcome::Refused(r) => crate::kb::intake::event(
            ids,
            clock,
            REFUSED,
            &FetchRefused {
                task: ask.task.clone(),
                prompt_version: version,
                prompt_hash: m.prompt_hash.clone(),
                asked: ask.item.clone(),
                level: ask.level.clone(),
                reason: ask.reason.clone(),
                session: ask.session.clone(),
                rule: r.rule().into(),
                message: r.to_string(),
                shortfall: r.shortfall(),
            },
            None,
        ),
    }
    .map_err(|detail| FetchError::Unresolvable { task: ask.task.clone(), detail })?;
    let append = StreamAppend {
        stream: stream(&ask.task),
        expected: ExpectedVersion::Exact(prompts.stream_version(&ask.task)),
        events: vec![payload_event],
    };
    Ok(Decision { prompt_version: version, outcome, append })
}

/// Steps 3–5 for the items a request reaches.
#[allow(clippy::too_many_arguments)]
fn serve(
    g: &Graph,
    s: &Summaries,
    scope: &Scope<'_>,
    rec: &PromptRecord,
    cp: &super::profile::ContextProfile,
    ask: &Ask,
    asked_level: Option<Level>,
    targets: &[&Candidate],
) -> Outcome {
    let m = &rec.manifest;
    let mut levels = Vec::with_capacity(targets.len());
    for c in targets {
        let level = asked_level.unwrap_or(c.level);
        if level < c.level {
            return Outcome::Refused(Refusal::TooFine {
                asked: ask.item.clone(),
                level: level.name().into(),
                allowed: c.level.name().into(),
            });
        }
        levels.push(level);
    }
    let new_full = targets.iter().zip(&levels).filter(|(c, l)| **l == Level::L1 && is_spec(g, &c.what)).count();
    if new_full > 0 {
        let fetched = rec.fetched.iter().flat_map(|(_, f)| &f.items);
        let already = m
            .included
            .iter()
            .chain(fetched)
            .filter(|i| i.level == "L1" && SPEC_SECTIONS.contains(&i.section.as_str()))
            .count();
        if already + new_full > cp.max_full_specs as usize {
            return Outcome::Refused(Refusal::MaxFullSpecs {
                asked: ask.item.clone(),
                already,
                would: already + new_full,
                max: cp.max_full_specs,
            });
        }
    }
    let mut tc = TokenCounter::new(m.factor_milli);
    let mut items = Vec::with_capacity(targets.len());
    for (c, level) in targets.iter().zip(&levels) {
        let b = render_item(g, s, &scope.withheld, &c.what, *level, &mut tc);
        let item = Item {
            item: item_id(g, &c.what),
            path: c.path.clone(),
            level: level.name().into(),
            content_hash: b.content_hash.to_hex(),
            text_hash: Hash(*blake3::hash(b.text.as_bytes()).as_bytes()).to_hex(),
            tokens: b.tokens,
            reason: format!("fetched later: {} ({})", ask.reason.trim(), c.reason),
            section: section_of(g, &c.what).into(),
            degraded_from: None,
        };
        items.push((item, b.text));
    }
    let fetched: usize = rec.fetched.iter().map(|(_, f)| f.tokens).sum();
    let used = m.total_tokens;
    let remaining = (cp.token_budget as usize).saturating_sub(used + fetched);
    let needed: usize = items.iter().map(|(i, _)| i.tokens).sum();
    if needed > remaining {
        return Outcome::Refused(Refusal::OverBudget {
            asked: ask.item.clone(),
            needed,
            remaining,
            budget: cp.token_budget,
            used,
            fetched,
            shortfall: needed - remaining,
        });
    }
    Outcome::Served { items, tokens: needed, remaining: remaining - needed }
}

/// Re-renders every item fetched for `rec` on the knowledge base at the prompt's position and
/// compares it with what was recorded; returns every difference (empty: each fetched item is
/// exactly what the journal gives).
pub fn verify_fetched(rec: &PromptRecord, profile: &Profile, graph: &Graph, summaries: &Summaries) -> Vec<String> {
    let mut problems = Vec::new();
    if rec.fetched.is_empty() {
        return problems;
    }
    let scope =
        match Scope::new(graph, summaries, profile, rec.manifest.task.plan.as_deref(), &rec.manifest.task.id, None) {
            Ok(s) => s,
            Err(e) => return vec![format!("the fetched items cannot be re-rendered: {e}")],
        };
    let mut tc = TokenCounter::new(rec.manifest.factor_milli);
    for (seq, f) in &rec.fetched {
        for i in &f.items {
            let Some((what, _)) = locate(graph, summaries, &i.item) else {
                problems.push(format!(
                    "fetched {} (sequence {seq}) is not in the knowledge base at the prompt's position",
                    i.item
                ));
                continue;
            };
            let level = Level::parse(&i.level).unwrap_or(Level::L1);
            let b = render_item(graph, summaries, &scope.withheld, &what, level, &mut tc);
            let text_hash = Hash(*blake3::hash(b.text.as_bytes()).as_bytes()).to_hex();
            if text_hash != i.text_hash || b.content_hash.to_hex() != i.content_hash || b.tokens != i.tokens {
                problems.push(format!(
                    "fetched {} at {} (sequence {seq}) re-renders to text {text_hash} ({} tokens), the record says {} ({} tokens)",
                    i.item, i.level, b.tokens, i.text_hash, i.tokens
                ));
            }
            if let Some(glob) = profile.context_profile.never.iter().find(|n| glob_match(n, &i.path)) {
                problems.push(format!("fetched {} ({}) matches never glob {glob}", i.item, i.path));
            }
        }
    }
    problems
}
