//! Prompt assembly: a pure function of (journal position, profile version, task) that produces a
//! prompt and its context bill of materials, with the budget, the never-list and `maxFullSpecs`
//! enforced mechanically.
//!
//! Steps, in order:
//! 1. expand every profile entry (template variables resolve from the task's change request: its
//!    impact closure gives the requirements, domains, modules and screens; globs match virtual
//!    paths) into candidate items with a reason (`forCurrentTask: CR-189 -brdRefs-> BRD-19.1`);
//! 2. drop every candidate whose virtual path matches a `never` glob, whatever entry brought it;
//! 3. keep the first occurrence of each item (always before forCurrentTask before onDemand);
//! 4. keep the first `maxFullSpecs` specifications at L1 in listed order, step the rest to L2
//!    (onDemand items are not in the prompt, so they do not count);
//! 5. while over budget: drop onDemand offers, last listed first; then step forCurrentTask items
//!    from L1 to L2, last listed first; then from L2 to L3, last listed first. `always` items at
//!    their level and forCurrentTask items at L3 are mandatory: if they do not fit, assembly is
//!    refused with the shortfall in tokens and nothing is written;
//! 6. render the sections in one fixed order and count the whole prompt.
//!
//! `onDemand` items are never put into the prompt up front. Each is *offered*: one line in the
//! prompt's last section ("On demand") names it with its level and size, and the manifest lists
//! it under `offered` with the hash and tokens of its content. A worker fetches one later through
//! the `get_context` tool ([`super::fetch`]), within what the prompt left of its budget.
//!
//! Token counts are o200k counts scaled by the model family's factor (an integer per mille, so
//! rounding is exact) and cached by the hash of the counted text.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use strata_journal::Hash;

use super::paths::{SYSTEM_SUMMARY, any_matching, artifact_path, entity_summary, glob_match, matching, node_path};
use super::profile::{Entry, Profile};
use super::render::{Level, render};
use super::summary::Summaries;
use crate::kb::graph::{Graph, NodeId};
use crate::kb::kind::{ArtifactKey, ArtifactKind};

/// The pipeline rules every orchestrator is given (`{pipelineRules}`).
pub const PIPELINE_RULES: &str = include_str!("pipeline-rules.md");
/// Virtual path of the pipeline rules.
pub const PIPELINE_RULES_PATH: &str = "rules/pipeline";

/// The fixed section order of every prompt (the seed's: orientation, then how the entity looks
/// and what its stack demands, then the change and its specifications, then where they are
/// implemented and how a change is made, then what earlier attempts did).
pub const SECTIONS: [&str; 16] = [
    "Pipeline rules",
    "System summary",
    "Entity summary",
    "Design profile",
    "Stack concerns",
    "Tech skills",
    "Change request",
    "Requirements",
    "Domains",
    "Modules",
    "Screens",
    "Implementation references",
    "Modification routes",
    "Related",
    CONTINUATION,
    ON_DEMAND,
];

/// The section of the continuation status (what earlier attempts of the task did).
pub const CONTINUATION: &str = "Continuation status";

/// The section that offers the onDemand items (one line each; their content is fetched later).
pub const ON_DEMAND: &str = "On demand";

/// What is being assembled for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// Task id (also the journal stream `prompt/<id>`).
    pub id: String,
    /// What the agent is asked to do.
    pub objective: String,
    /// The change request whose plan resolves the template variables, if any.
    pub plan: Option<String>,
}

/// Token counting with a model-family factor and a cache keyed by text hash.
#[derive(Debug)]
pub struct TokenCounter {
    /// Factor per mille (1300 = ×1.3).
    pub factor_milli: u32,
    cache: HashMap<Hash, usize>,
}

impl TokenCounter {
    /// A counter with the given factor.
    pub fn new(factor_milli: u32) -> TokenCounter {
        TokenCounter { factor_milli, cache: HashMap::new() }
    }

    /// Scaled tokens of `text`.
    pub fn count(&mut self, text: &str) -> usize {
        let key = Hash(*blake3::hash(text.as_bytes()).as_bytes());
        let raw = *self.cache.entry(key).or_insert_with(|| crate::tokens::count(text));
        (raw * self.factor_milli as usize).div_ceil(1000)
    }

    /// Texts counted so far.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }
}

/// The model family whose token factor applies to `model`: `claude` (claude, opus, sonnet,
/// haiku), `openai` (gpt, codex, o1/o3/o4) or `default`.
pub fn family(model: &str) -> &'static str {
    let m = model.to_ascii_lowercase();
    if ["claude", "opus", "sonnet", "haiku"].iter().any(|f| m.contains(f)) {
        "claude"
    } else if ["gpt", "codex"].iter().any(|f| m.contains(f)) || ["o1", "o3", "o4"].iter().any(|f| m.starts_with(f)) {
        "openai"
    } else {
        "default"
    }
}

/// One item of the bill of materials.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Item {
    /// `kind:id`, `summary:L3`, `summary:L2/<entity>` or `rules:pipeline`.
    pub item: String,
    /// Virtual path.
    pub path: String,
    /// Level included at (or considered at, for exclusions).
    pub level: String,
    /// Content hash of the artifact or summary (hex).
    pub content_hash: String,
    /// blake3 of the rendered block (hex).
    pub text_hash: String,
    /// Scaled tokens of the rendered block.
    pub tokens: usize,
    /// Why it is included (or excluded).
    pub reason: String,
    /// Section it appears in.
    pub section: String,
    /// The level the profile asked for, when a rule stepped it down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded_from: Option<String>,
}

/// The context bill of materials of one prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Manifest {
    /// `strata-context-manifest/1`.
    pub format: String,
    /// The task.
    pub task: Task,
    /// Profile id.
    pub profile: String,
    /// Profile version (its stream version).
    pub profile_version: u64,
    /// Profile hash (hex).
    pub profile_hash: String,
    /// Journal sequence the assembly read.
    pub position: u64,
    /// Hash of the event at that sequence (hex).
    pub position_hash: String,
    /// Tokenizer id.
    pub tokenizer: String,
    /// Model the factor was chosen for.
    pub model: String,
    /// Factor per mille.
    pub factor_milli: u32,
    /// Budget.
    pub token_budget: u32,
    /// Cap on L1 specifications.
    pub max_full_specs: u32,
    /// Scaled tokens of the whole prompt.
    pub total_tokens: usize,
    /// blake3 of the prompt bytes (hex).
    pub prompt_hash: String,
    /// Sections present, in order.
    pub sections: Vec<String>,
    /// Included items, in prompt order.
    pub included: Vec<Item>,
    /// Excluded items with their reasons.
    pub excluded: Vec<Item>,
    /// Where the continuation status was read from, when the assembly was given one (a retry in
    /// `strata run`): `prompt verify` reads it again there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<ContinuationSource>,
    /// The onDemand items the prompt offers (a line each in its "On demand" section), with the
    /// hash and tokens of their content at the level offered; a worker fetches them later.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offered: Vec<Item>,
}

/// Where a prompt's continuation status comes from: the workgroup stream through a journal
/// sequence, and the hash of the prompt the same assembly gives without it (the prompt its phase
/// was planned with, for the planning gate).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ContinuationSource {
    /// The workgroup.
    pub workgroup: String,
    /// The plan's task id.
    pub task: String,
    /// Journal sequence the attempts were read through.
    pub position: u64,
    /// blake3 of the prompt assembled from the same inputs without the continuation (hex).
    pub base_prompt_hash: String,
}

/// The item id of a retry's continuation status in a manifest.
pub const CONTINUATION_ITEM: &str = "continuation:status";

/// Format marker of manifests.
pub const MANIFEST_FORMAT: &str = "strata-context-manifest/1";

impl Manifest {
    /// A digest of the knowledge the prompt was assembled from: each included item with its
    /// level and content hash, in prompt order. Unlike `prompt_hash` it ignores the journal
    /// position in the header, so it changes only when what the prompt says changes. The
    /// continuation status is left out: it is the task's own history from the journal, not
    /// knowledge, so a retried task's knowledge is the same as its first attempt's.
    pub fn knowledge_digest(&self) -> String {
        let mut h = blake3::Hasher::new();
        for i in self.included.iter().filter(|i| i.item != CONTINUATION_ITEM) {
            for part in [&i.item, &i.level, &i.content_hash] {
                h.update(part.as_bytes());
                h.update(b"\t");
            }
            h.update(b"\n");
        }
        h.finalize().to_hex().to_string()
    }
}

/// A prompt and its manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assembly {
    /// The prompt text.
    pub prompt: String,
    /// Its bill of materials.
    pub manifest: Manifest,
}

/// Why assembly was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// Mandatory content does not fit.
    #[error(
        "[STRATA-E0902] the mandatory content of profile {profile} needs {needed} tokens but the budget is {budget}: {shortfall} tokens short; raise tokenBudget, or move entries from always/forCurrentTask to onDemand"
    )]
    OverBudget {
        /// Profile id.
        profile: String,
        /// Tokens the mandatory content needs.
        needed: usize,
        /// Budget.
        budget: usize,
        /// `needed - budget`.
        shortfall: usize,
    },
    /// The plan is not a change request in the knowledge base.
    #[error("[STRATA-E0903] plan {0} is not a change request in the knowledge base; pass --plan CR-n")]
    UnknownPlan(String),
    /// A task id that cannot name a stream.
    #[error("[STRATA-E0904] task id {0:?} must be 1 to 100 characters of A-Z a-z 0-9 . _ -")]
    BadTaskId(String),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Ref {
    Rules,
    System,
    Entity(String),
    Artifact(NodeId),
    Continuation,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Class {
    Always,
    ForCurrentTask,
    OnDemand,
}

impl Class {
    pub(super) fn name(self) -> &'static str {
        match self {
            Class::Always => "always",
            Class::ForCurrentTask => "forCurrentTask",
            Class::OnDemand => "onDemand",
        }
    }
}

#[derive(Clone, Debug)]
pub(super) struct Candidate {
    pub(super) what: Ref,
    pub(super) path: String,
    pub(super) level: Level,
    pub(super) asked: Level,
    pub(super) class: Class,
    pub(super) reason: String,
    /// The profile entry's path that brought it.
    pub(super) entry: String,
}

/// Everything assembly reads.
pub struct Inputs<'a> {
    /// The graph at the assembly position.
    pub graph: &'a Graph,
    /// Summaries of that graph.
    pub summaries: &'a Summaries,
    /// The profile.
    pub profile: &'a Profile,
    /// Its version.
    pub profile_version: u64,
    /// The task.
    pub task: &'a Task,
    /// Journal sequence of the graph.
    pub position: u64,
    /// Hash of the event at `position`.
    pub position_hash: Hash,
    /// What earlier attempts of the task did (a retry), for `{continuationStatus}`.
    pub continuation: Option<&'a super::continuation::Continuation>,
}

impl<'a> Inputs<'a> {
    /// Inputs that read the journal at `head`.
    pub fn at_head(
        graph: &'a Graph,
        summaries: &'a Summaries,
        profile: &'a Profile,
        profile_version: u64,
        task: &'a Task,
        head: &strata_journal::Head,
    ) -> Inputs<'a> {
        Inputs {
            graph,
            summaries,
            profile,
            profile_version,
            task,
            position: head.seq,
            position_hash: head.hash,
            continuation: None,
        }
    }
}

fn valid_task_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 100 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

pub(super) fn section_of(g: &Graph, r: &Ref) -> &'static str {
    match r {
        Ref::Rules => "Pipeline rules",
        Ref::System => "System summary",
        Ref::Entity(_) => "Entity summary",
        Ref::Continuation => CONTINUATION,
        Ref::Artifact(n) => match g.node(*n).key.kind {
            ArtifactKind::DesignProfile => "Design profile",
            ArtifactKind::StackConcern => "Stack concerns",
            ArtifactKind::TechSkill => "Tech skills",
            ArtifactKind::ChangeRequest => "Change request",
            ArtifactKind::BrdRequirement => "Requirements",
            ArtifactKind::FunctionalDomain => "Domains",
            ArtifactKind::BackendModule => "Modules",
            ArtifactKind::UiScreen => "Screens",
            ArtifactKind::ImplementationRef => "Implementation references",
            ArtifactKind::ModificationRoute => "Modification routes",
            _ => "Related",
        },
    }
}

pub(super) fn is_spec(g: &Graph, r: &Ref) -> bool {
    matches!(r, Ref::Artifact(n) if g.node(*n).key.kind.is_spec())
}

pub(super) struct Ctx<'a> {
    g: &'a Graph,
    s: &'a Summaries,
    plan: Option<NodeId>,
    entity: Option<String>,
    closure: Option<std::sync::Arc<crate::kb::graph::Closure>>,
    continuation: Option<&'a super::continuation::Continuation>,
    /// The task's id (the virtual path of its continuation status).
    task: &'a str,
}

impl Ctx<'_> {
    fn closure_of(&self, kind: ArtifactKind) -> Vec<(NodeId, String)> {
        let Some(c) = &self.closure else { return Vec::new() };
        c.steps.iter().filter(|&&v| self.g.node(v).key.kind == kind).map(|&v| (v, c.path(self.g, v))).collect()
    }

    /// The artifacts of `kind` classified under the task's entity (and, with `shared`, under every
    /// cross-cutting entity), sorted by key.
    fn of_entity(
        &self,
        e: &Entry,
        class: Class,
        kind: ArtifactKind,
        shared: bool,
    ) -> Result<Vec<(Ref, String, String)>, String> {
        let Some(en) = &self.entity else {
            return Err(format!("{} resolves from the task's change request; assemble with --plan", e.path));
        };
        let cross = |entity: &str| {
            shared
                && self
                    .g
                    .get(&ArtifactKey::new(ArtifactKind::Entity, entity))
                    .and_then(|n| n.fields.get("tier"))
                    .and_then(|t| t.as_str())
                    == Some("cross-cutting")
        };
        // By path group (kind and entity), so the cost follows the groups, not the base.
        let mut found: Vec<(NodeId, &str)> = self
            .g
            .groups()
            .iter()
            .filter(|(group, _)| group.kind == kind && (group.entity == *en || cross(&group.entity)))
            .flat_map(|(group, members)| members.iter().map(move |&n| (n, group.entity.as_str())))
            .collect();
        found.sort_by(|a, b| self.g.key(a.0).cmp(self.g.key(b.0)));
        let out: Vec<(Ref, String, String)> = found
            .into_iter()
            .map(|(n, of)| {
                let via = if of == en { format!("entity {en}") } else { format!("cross-cutting entity {of}") };
                (Ref::Artifact(n), node_path(self.g, n), format!("{}: {} ({via})", class.name(), e.path))
            })
            .collect();
        if out.is_empty() {
            Err(format!(
                "entity {en} has no {}{}",
                kind.group(),
                if shared { ", nor has any cross-cutting entity" } else { "" }
            ))
        } else {
            Ok(out)
        }
    }

    /// Expands one entry into `(item, path, reason)` candidates, or a note of why it resolved to
    /// nothing.
    fn expand(&self, e: &Entry, class: Class) -> Result<Vec<(Ref, String, String)>, String> {
        let why = |detail: &str| format!("{}: {}{detail}", class.name(), e.path);
        let needs_plan = |var: &str| format!("{var} resolves from the task's change request; assemble with --plan");
        let closure_kind = match e.path.as_str() {
            "{systemSummary}" => return Ok(vec![(Ref::System, SYSTEM_SUMMARY.into(), why(""))]),
            "{pipelineRules}" => return Ok(vec![(Ref::Rules, PIPELINE_RULES_PATH.into(), why(""))]),
            "{entitySummary}" => {
                return match &self.entity {
                    Some(en) if self.s.entity(en).is_some() => {
                        Ok(vec![(Ref::Entity(en.clone()), entity_summary(en), why(""))])
                    }
                    Some(en) => Err(format!("entity {en} has no summary")),
                    None => Err(needs_plan("{entitySummary}")),
                };
            }
            "{crFile}" => {
                return match self.plan {
                    Some(n) => Ok(vec![(Ref::Artifact(n), artifact_path(self.g.node(n)), why(""))]),
                    None => Err(needs_plan("{crFile}")),
                };
            }
            "{continuationStatus}" => {
                return match self.continuation {
                    Some(_) => Ok(vec![(Ref::Continuation, super::paths::continuation(self.task), why(""))]),
                    None => Err(format!(
                        "no earlier attempt of task {} had ended (a first attempt, or assembled outside a run)",
                        self.task
                    )),
                };
            }
            "{designProfile}" => return self.of_entity(e, class, ArtifactKind::DesignProfile, false),
            "{stackConcerns}" => return self.of_entity(e, class, ArtifactKind::StackConcern, true),
            "{techSkills}" => return self.of_entity(e, class, ArtifactKind::TechSkill, true),
            "{modificationRoutes}" => return self.of_entity(e, class, ArtifactKind::ModificationRoute, true),
            "{targetRequirements}" => Some(ArtifactKind::BrdRequirement),
            "{functionalDomainSpec}" => Some(ArtifactKind::FunctionalDomain),
            "{targetModuleSpec}" => Some(ArtifactKind::BackendModule),
            "{targetScreenSpec}" => Some(ArtifactKind::UiScreen),
            "{implementationRefs}" => Some(ArtifactKind::ImplementationRef),
            _ => None,
        };
        if let Some(kind) = closure_kind {
            if self.plan.is_none() {
                return Err(needs_plan(&e.path));
            }
            return Ok(self
                .closure_of(kind)
                .into_iter()
                .map(|(n, path)| (Ref::Artifact(n), artifact_path(self.g.node(n)), format!("{}: {path}", class.name())))
                .collect());
        }
        // A glob, possibly with {docRoot} / {entity}.
        let mut glob = e.path.clone();
        if glob.contains("{docRoot}") || glob.contains("{entity}") {
            let Some(en) = &self.entity else { return Err(needs_plan(&e.path)) };
            glob = glob.replace("{docRoot}", &format!("docs/{en}")).replace("{entity}", en);
        }
        let mut out: Vec<(Ref, String, String)> = Vec::new();
        if glob_match(&glob, SYSTEM_SUMMARY) {
            out.push((Ref::System, SYSTEM_SUMMARY.into(), why("")));
        }
        if glob_match(&glob, PIPELINE_RULES_PATH) {
            out.push((Ref::Rules, PIPELINE_RULES_PATH.into(), why("")));
        }
        for (l, _) in self.s.all() {
            let p = entity_summary(&l.entity);
            if glob_match(&glob, &p) {
                out.push((Ref::Entity(l.entity.clone()), p, why("")));
            }
        }
        // The continuation status is read when the prompt is assembled: never offered for later.
        if self.continuation.is_some()
            && class != Class::OnDemand
            && glob_match(&glob, &super::paths::continuation(self.task))
        {
            out.push((Ref::Continuation, super::paths::continuation(self.task), why("")));
        }
        for id in matching(self.g, &glob) {
            out.push((Ref::Artifact(id), artifact_path(self.g.node(id)), why("")));
        }
        if out.is_empty() { Err(format!("{glob} matches nothing")) } else { Ok(out) }
    }
}

pub(super) struct Rendered {
    pub(super) text: String,
    pub(super) tokens: usize,
    pub(super) content_hash: Hash,
}

/// The artifacts a profile's never-list withholds; summaries included in its prompts are made
/// without them, so nothing never-listed reaches a prompt through a summary either. Decided per
/// artifact on demand (only for the members of summaries that are made), never for the whole base.
pub(super) struct Withheld<'a> {
    never: &'a [String],
    /// Whether the never-list withholds anything at all.
    any: bool,
    /// Where whether an entity withholds one of its members is kept (per never-list, until the
    /// graph changes), so it is decided once, not at every assembly.
    summaries: &'a Summaries,
}

impl Withheld<'_> {
    fn holds(&self, n: &crate::kb::graph::Node) -> bool {
        self.any && self.never.iter().any(|glob| glob_match(glob, &artifact_path(n)))
    }

    fn touches(&self, g: &Graph, r: &Ref) -> bool {
        match r {
            Ref::System => self.any,
            Ref::Entity(e) if self.any => {
                self.summaries.withholds_member(g, self.never, e, &|| g.members(e).iter().any(|n| self.holds(n)))
            }
            _ => false,
        }
    }
}

pub(super) fn render_item(
    g: &Graph,
    s: &Summaries,
    w: &Withheld<'_>,
    r: &Ref,
    level: Level,
    tc: &mut TokenCounter,
) -> Rendered {
    render_with(g, s, w, None, r, level, tc)
}

/// [`render_item`], with the task's continuation status for [`Ref::Continuation`].
pub(super) fn render_with(
    g: &Graph,
    s: &Summaries,
    w: &Withheld<'_>,
    continuation: Option<&super::continuation::Continuation>,
    r: &Ref,
    level: Level,
    tc: &mut TokenCounter,
) -> Rendered {
    let keep = |n: &crate::kb::graph::Node| !w.holds(n);
    let (text, content_hash) = match r {
        Ref::Continuation => continuation.map(|c| (c.render(level), c.hash())).unwrap_or_default(),
        Ref::Rules => (PIPELINE_RULES.to_owned(), Hash(*blake3::hash(PIPELINE_RULES.as_bytes()).as_bytes())),
        Ref::System if w.touches(g, r) => s.system_without(g, w.never, &keep),
        Ref::System => s.system_text(g),
        Ref::Entity(e) if w.touches(g, r) => {
            s.entity_without(g, w.never, e, level == Level::L3, &keep).unwrap_or_default()
        }
        Ref::Entity(e) => {
            let sum = if level == Level::L3 { s.line(e) } else { s.entity(e) };
            sum.map(|x| (x.text.clone(), x.hash)).unwrap_or_default()
        }
        Ref::Artifact(n) => {
            let node = g.node(*n);
            (render(node, level), node.hash)
        }
    };
    let text = under_its_section(r, text);
    let tokens = tc.count(&text);
    Rendered { text, tokens, content_hash }
}

/// A block as it sits under its section's `##` heading, so the prompt has one heading per
/// section: the system summary's own `# System summary` line is dropped (the section says it),
/// and an entity summary's `# Name (…)` title becomes a `###` heading like every artifact's.
fn under_its_section(r: &Ref, text: String) -> String {
    match r {
        Ref::System => match text.strip_prefix(super::summary::SYSTEM_HEADING) {
            Some(rest) => rest.to_owned(),
            None => text,
        },
        Ref::Entity(_) => match text.strip_prefix("# ") {
            Some(rest) => format!("### {rest}"),
            None => text,
        },
        _ => text,
    }
}

pub(super) fn item_id(g: &Graph, r: &Ref) -> String {
    match r {
        Ref::Rules => "rules:pipeline".into(),
        Ref::System => "summary:L3".into(),
        Ref::Entity(e) => format!("summary:L2/{e}"),
        Ref::Artifact(n) => g.node(*n).key.to_string(),
        Ref::Continuation => CONTINUATION_ITEM.into(),
    }
}

fn header(task: &Task, p: &Profile, version: u64, position: u64, budget: u32, factor: u32) -> String {
    let mut h = format!("# Task {}\n\n{}\n\n", task.id, task.objective.trim());
    h.push_str(&format!(
        "Context: profile {} v{version}, journal sequence {position}, budget {budget} tokens (o200k x{}.{:03}).\n",
        p.agent_id,
        factor / 1000,
        factor % 1000
    ));
    h
}

/// What assembly reads of the knowledge base for one profile and plan: the resolution context of
/// the template variables and the artifacts the never-list withholds.
pub(super) struct Scope<'a> {
    pub(super) ctx: Ctx<'a>,
    pub(super) withheld: Withheld<'a>,
}

impl<'a> Scope<'a> {
    /// The scope of `profile` for a task whose plan is `plan`.
    pub(super) fn new(
        g: &'a Graph,
        summaries: &'a Summaries,
        profile: &'a Profile,
        plan: Option<&str>,
        task: &'a str,
        continuation: Option<&'a super::continuation::Continuation>,
    ) -> Result<Scope<'a>, Refusal> {
        let cp = &profile.context_profile;
        let plan = match plan {
            Some(cr) => {
                let key = ArtifactKey::new(ArtifactKind::ChangeRequest, cr);
                match g.get(&key) {
                    Some(_) => g.node_id(&key),
                    None => return Err(Refusal::UnknownPlan(cr.to_owned())),
                }
            }
            None => None,
        };
        let entity = plan.and_then(|n| g.node(n).fields.get("entity").and_then(|v| v.as_str()).map(str::to_owned));
        let ctx =
            Ctx { g, s: summaries, plan, entity, closure: plan.map(|n| summaries.closure(g, n)), continuation, task };
        let withheld = Withheld {
            never: &cp.never,
            any: summaries.withholds_any(g, &cp.never, &|| cp.never.iter().any(|glob| any_matching(g, glob))),
            summaries,
        };
        Ok(Scope { ctx, withheld })
    }

    /// Steps 1–3: every entry expanded, the never-list applied, the first occurrence of each item
    /// kept; with the exclusions.
    pub(super) fn candidates(&self, profile: &Profile) -> (Vec<Candidate>, Vec<Item>) {
        let (g, cp, ctx, withheld) = (self.ctx.g, &profile.context_profile, &self.ctx, &self.withheld);
        let mut kept: Vec<Candidate> = Vec::new();
        let mut excluded: Vec<Item> = Vec::new();
        let mut seen: BTreeSet<Ref> = BTreeSet::new();
        let empty = |item: String, path: String, level: Level, reason: String| Item {
            item,
            path,
            level: level.name().into(),
            content_hash: String::new(),
            text_hash: String::new(),
            tokens: 0,
            reason,
            section: String::new(),
            degraded_from: None,
        };
        for (class, entries) in [
            (Class::Always, &cp.always),
            (Class::ForCurrentTask, &cp.for_current_task),
            (Class::OnDemand, &cp.on_demand),
        ] {
            for e in entries {
                let level = e.level();
                match ctx.expand(e, class) {
                    Err(note) => excluded.push(empty(
                        e.path.clone(),
                        e.path.clone(),
                        level,
                        format!("{}: unresolved: {note}", class.name()),
                    )),
                    Ok(found) => {
                        for (what, path, reason) in found {
                            if let Some(glob) = cp.never.iter().find(|n| glob_match(n, &path)) {
                                excluded.push(empty(
                                    item_id(g, &what),
                                    path,
                                    level,
                                    format!("never: {glob} ({reason})"),
                                ));
                                continue;
                            }
                            // An implementation reference says where a specification lives: it
                            // is withheld with the specification it implements.
                            let implemented = implemented_path(g, &what);
                            if let Some((spec, glob)) = implemented
                                .as_ref()
                                .and_then(|p| cp.never.iter().find(|n| glob_match(n, p)).map(|n| (p, n)))
                            {
                                excluded.push(empty(
                                    item_id(g, &what),
                                    path,
                                    level,
                                    format!("never: {glob} (implements {spec}; {reason})"),
                                ));
                                continue;
                            }
                            if !seen.insert(what.clone()) {
                                continue;
                            }
                            let reason = if withheld.touches(g, &what) {
                                format!("{reason} (made without the never-listed artifacts)")
                            } else {
                                reason
                            };
                            kept.push(Candidate {
                                what,
                                path,
                                level,
                                asked: level,
                                class,
                                reason,
                                entry: e.path.clone(),
                            });
                        }
                    }
                }
            }
        }
        (kept, excluded)
    }
}

/// The virtual path of the specification an implementation reference implements.
pub(super) fn implemented_path(g: &Graph, r: &Ref) -> Option<String> {
    let Ref::Artifact(n) = r else { return None };
    let node = g.node(*n);
    if node.key.kind != ArtifactKind::ImplementationRef {
        return None;
    }
    [
        ("functionalDomain", ArtifactKind::FunctionalDomain),
        ("backendModule", ArtifactKind::BackendModule),
        ("uiScreen", ArtifactKind::UiScreen),
    ]
    .into_iter()
    .find_map(|(field, kind)| {
        let id = node.fields.get(field)?.as_str()?;
        g.get(&ArtifactKey::new(kind, id)).map(artifact_path)
    })
}

/// The block a candidate takes in the prompt: its content, or for an onDemand item the line that
/// offers it.
fn section_for(g: &Graph, c: &Candidate) -> &'static str {
    if c.class == Class::OnDemand { ON_DEMAND } else { section_of(g, &c.what) }
}

/// A section's heading; the "On demand" section says how to fetch what it lists.
fn heading(section: &str, task: &str) -> String {
    if section == ON_DEMAND {
        format!(
            "\n## {section}\n\nNot included above; fetch one when you need it with the get_context tool (task {task:?}, the item, a level no finer than listed, and why), within what is left of this prompt's budget.\n\n"
        )
    } else {
        format!("\n## {section}\n\n")
    }
}

/// The line offering an onDemand item whose content renders to `content`.
fn offer_line(item: &str, level: Level, path: &str, content: &Rendered) -> String {
    format!("- {item} at {}, {} tokens: {path}\n", level.name(), content.tokens)
}

/// Assembles a prompt. Given a continuation status, the manifest names where it was read and
/// the hash of the prompt the same inputs give without it ([`ContinuationSource`]).
pub fn assemble(inp: &Inputs<'_>, tc: &mut TokenCounter) -> Result<Assembly, Refusal> {
    let mut a = assemble_once(inp, tc)?;
    if let Some(c) = inp.continuation {
        let base = Inputs {
            graph: inp.graph,
            summaries: inp.summaries,
            profile: inp.profile,
            profile_version: inp.profile_version,
            task: inp.task,
            position: inp.position,
            position_hash: inp.position_hash,
            continuation: None,
        };
        let base_prompt_hash = assemble_once(&base, tc)?.manifest.prompt_hash;
        a.manifest.continuation = Some(ContinuationSource {
            workgroup: c.workgroup.clone(),
            task: c.task.clone(),
            position: c.position,
            base_prompt_hash,
        });
    }
    Ok(a)
}

fn assemble_once(inp: &Inputs<'_>, tc: &mut TokenCounter) -> Result<Assembly, Refusal> {
    let g = inp.graph;
    let cp = &inp.profile.context_profile;
    if !valid_task_id(&inp.task.id) {
        return Err(Refusal::BadTaskId(inp.task.id.clone()));
    }
    let scope = Scope::new(g, inp.summaries, inp.profile, inp.task.plan.as_deref(), &inp.task.id, inp.continuation)?;
    let cont = inp.continuation;
    let withheld = &scope.withheld;
    // 1–3: expand, apply the never-list, de-duplicate.
    let (mut kept, mut excluded) = scope.candidates(inp.profile);
    // 4: maxFullSpecs.
    let mut full = 0u32;
    for c in kept.iter_mut() {
        if c.level == Level::L1 && c.class != Class::OnDemand && is_spec(g, &c.what) {
            full += 1;
            if full > cp.max_full_specs {
                let why = format!("maxFullSpecs {}: included at L2 instead ({})", cp.max_full_specs, c.reason);
                excluded.push(given_up(g, inp.summaries, withheld, cont, c, why, tc, &BTreeMap::new()));
                c.level = Level::L2;
                c.reason = format!("{} (stepped to L2: maxFullSpecs {})", c.reason, cp.max_full_specs);
            }
        }
    }
    // 5: budget. Each block is counted alone (cached by its hash); their sum plus the headings is
    // an estimate of the whole. Whenever the estimate is within `slack` of the budget the whole
    // prompt is counted exactly, and only an exact count decides that a prompt fits or that
    // mandatory content does not.
    let budget = cp.token_budget as usize;
    let head = header(inp.task, inp.profile, inp.profile_version, inp.position, cp.token_budget, tc.factor_milli);
    let head_tokens = tc.count(&head);
    // Each block is rendered once per level: a pass of the budget loop changes one candidate.
    let mut rendered: BTreeMap<(Ref, Level), Rendered> = BTreeMap::new();
    // The line offering each onDemand item (its content stays out of the prompt).
    let mut offers: BTreeMap<Ref, Rendered> = BTreeMap::new();
    loop {
        for c in &kept {
            if let std::collections::btree_map::Entry::Vacant(e) = rendered.entry((c.what.clone(), c.level)) {
                e.insert(render_with(g, inp.summaries, withheld, cont, &c.what, c.level, tc));
            }
            if c.class == Class::OnDemand
                && !offers.contains_key(&c.what)
                && let Some(content) = rendered.get(&(c.what.clone(), c.level))
            {
                let text = offer_line(&item_id(g, &c.what), c.level, &c.path, content);
                let tokens = tc.count(&text);
                offers.insert(c.what.clone(), Rendered { text, tokens, content_hash: content.content_hash });
            }
        }
        let blocks: Vec<&Rendered> = kept
            .iter()
            .filter_map(|c| match c.class {
                Class::OnDemand => offers.get(&c.what),
                _ => rendered.get(&(c.what.clone(), c.level)),
            })
            .collect();
        let mut present: Vec<&str> = kept.iter().map(|c| section_for(g, c)).collect();
        present.sort_by_key(|s| SECTIONS.iter().position(|x| x == s));
        present.dedup();
        let section_tokens: usize = present.iter().map(|s| tc.count(&heading(s, &inp.task.id))).sum();
        let estimate = head_tokens + section_tokens + blocks.iter().map(|b| b.tokens + 1).sum::<usize>();
        let slack = 4 * (blocks.len() + present.len()) + 16;
        let exact = |tc: &mut TokenCounter| {
            let (prompt, order) = layout(g, &head, &inp.task.id, &kept, &blocks);
            let total = tc.count(&prompt);
            (prompt, order, total)
        };
        let mut fitted = None;
        if estimate <= budget + slack {
            let (prompt, order, total) = exact(tc);
            if total <= budget {
                fitted = Some((prompt, order, total));
            }
        }
        if fitted.is_none() && !can_degrade(&kept) {
            let (prompt, order, total) = exact(tc);
            if total > budget {
                return Err(Refusal::OverBudget {
                    profile: inp.profile.agent_id.clone(),
                    needed: total,
                    budget,
                    shortfall: total - budget,
                });
            }
            fitted = Some((prompt, order, total));
        }
        if let Some((prompt, order, total)) = fitted {
            let item = |i: usize, b: &Rendered, section: &str| {
                let c = &kept[i];
                Item {
                    item: item_id(g, &c.what),
                    path: c.path.clone(),
                    level: c.level.name().into(),
                    content_hash: b.content_hash.to_hex(),
                    text_hash: Hash(*blake3::hash(b.text.as_bytes()).as_bytes()).to_hex(),
                    tokens: b.tokens,
                    reason: c.reason.clone(),
                    section: section.into(),
                    degraded_from: (c.level != c.asked).then(|| c.asked.name().to_owned()),
                }
            };
            let (on_demand, in_prompt): (Vec<usize>, Vec<usize>) =
                order.iter().partition(|&&i| kept[i].class == Class::OnDemand);
            let included = in_prompt.iter().map(|&i| item(i, blocks[i], section_of(g, &kept[i].what))).collect();
            // An offered item's hash and tokens are its content's, at the level offered.
            let offered = on_demand
                .iter()
                .filter_map(|&i| rendered.get(&(kept[i].what.clone(), kept[i].level)).map(|b| item(i, b, ON_DEMAND)))
                .collect();
            excluded.sort_by(|a, b| (&a.item, &a.reason).cmp(&(&b.item, &b.reason)));
            let manifest = Manifest {
                format: MANIFEST_FORMAT.into(),
                task: inp.task.clone(),
                profile: inp.profile.agent_id.clone(),
                profile_version: inp.profile_version,
                profile_hash: super::profile::hash(inp.profile).to_hex(),
                position: inp.position,
                position_hash: inp.position_hash.to_hex(),
                tokenizer: crate::tokens::TOKENIZER_ID.into(),
                model: inp.profile.model.clone(),
                factor_milli: tc.factor_milli,
                token_budget: cp.token_budget,
                max_full_specs: cp.max_full_specs,
                total_tokens: total,
                prompt_hash: Hash(*blake3::hash(prompt.as_bytes()).as_bytes()).to_hex(),
                sections: present.iter().map(|s| (*s).to_owned()).collect(),
                included,
                excluded,
                continuation: None,
                offered,
            };
            return Ok(Assembly { prompt, manifest });
        }
        // Over budget: one degradation step, in the documented order.
        if let Some(i) = kept.iter().rposition(|c| c.class == Class::OnDemand) {
            let c = kept.remove(i);
            let why = format!("over budget: onDemand dropped from the offer ({})", c.reason);
            excluded.push(given_up(g, inp.summaries, withheld, cont, &c, why, tc, &rendered));
            continue;
        }
        for from in [Level::L1, Level::L2] {
            if let Some(i) = kept.iter().rposition(|c| c.class == Class::ForCurrentTask && c.level == from) {
                let to = from.coarser().unwrap_or(from);
                let why = format!("over budget: included at {} instead ({})", to.name(), kept[i].reason);
                excluded.push(given_up(g, inp.summaries, withheld, cont, &kept[i], why, tc, &rendered));
                kept[i].level = to;
                kept[i].reason = format!("{} (stepped to {} to fit the budget)", kept[i].reason, kept[i].level.name());
                break;
            }
        }
    }
}

/// The excluded entry for the level a candidate is about to give up; `rendered` holds the
/// blocks the budget loop has rendered, so one is not rendered twice.
#[allow(clippy::too_many_arguments)]
fn given_up(
    g: &Graph,
    s: &Summaries,
    w: &Withheld<'_>,
    cont: Option<&super::continuation::Continuation>,
    c: &Candidate,
    reason: String,
    tc: &mut TokenCounter,
    rendered: &BTreeMap<(Ref, Level), Rendered>,
) -> Item {
    let fresh;
    let b = match rendered.get(&(c.what.clone(), c.level)) {
        Some(b) => b,
        None => {
            fresh = render_with(g, s, w, cont, &c.what, c.level, tc);
            &fresh
        }
    };
    Item {
        item: item_id(g, &c.what),
        path: c.path.clone(),
        level: c.level.name().into(),
        content_hash: b.content_hash.to_hex(),
        text_hash: String::new(),
        tokens: b.tokens,
        reason,
        section: section_of(g, &c.what).into(),
        degraded_from: None,
    }
}

/// Whether one more degradation step exists: an onDemand item to drop, or a forCurrentTask item
/// above L3.
fn can_degrade(kept: &[Candidate]) -> bool {
    kept.iter().any(|c| c.class == Class::OnDemand || (c.class == Class::ForCurrentTask && c.level != Level::L3))
}

/// Lays the blocks out in section order; returns the prompt and the candidate order used.
fn layout(g: &Graph, head: &str, task: &str, kept: &[Candidate], blocks: &[&Rendered]) -> (String, Vec<usize>) {
    let mut order: Vec<usize> = (0..kept.len()).collect();
    order.sort_by_key(|&i| (SECTIONS.iter().position(|s| *s == section_for(g, &kept[i])), i));
    let mut out = String::from(head);
    let mut current = "";
    for &i in &order {
        let s = section_for(g, &kept[i]);
        if s != current {
            out.push_str(&heading(s, task));
            current = s;
        }
        out.push_str(&blocks[i].text);
        if !blocks[i].text.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
    }
    (out, order)
}

/// Checks a manifest's own claims: budget, never-list, maxFullSpecs (used by verify and tests).
pub fn compliance(m: &Manifest, never: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    if m.total_tokens > m.token_budget as usize {
        problems.push(format!("total {} tokens exceeds the budget {}", m.total_tokens, m.token_budget));
    }
    for i in &m.included {
        if let Some(n) = never.iter().find(|n| glob_match(n, &i.path)) {
            problems.push(format!("{} ({}) matches never glob {n}", i.item, i.path));
        }
    }
    let full = m
        .included
        .iter()
        .filter(|i| i.level == "L1" && ["Requirements", "Domains", "Modules", "Screens"].contains(&i.section.as_str()))
        .count();
    if full > m.max_full_specs as usize {
        problems.push(format!("{full} specifications at L1, more than maxFullSpecs {}", m.max_full_specs));
    }
    problems
}
