//! Intake: files in, a plan of events out, all or nothing.
//!
//! The adapter reads files (Markdown with YAML front matter, or JSON) and hands their bytes here;
//! this module parses, validates against the schemas, checks entity classification, lifecycle and
//! duplicates against the current graph, and either returns one atomic multi-stream append (one
//! stream per artifact, each with the version it was decided against) or every problem found,
//! each as file, JSON pointer, rule and hint. It reads no files itself.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use strata_journal::{EventData, ExpectedVersion, StreamAppend};

use super::artifact::{ArtifactDraft, Created, Transitioned, Updated, event_types};
use super::commands::{Rejection, check_move, suspect_gate};
use super::frontmatter;
use super::graph::{Graph, NodeId};
use super::kind::{ArtifactKey, ArtifactKind};
use super::lifecycle::{Gate, can_transition, creation_path, gate, initial, states};
use super::schema;
use crate::ports::{Clock, Ids};

/// Largest file intake reads, in bytes.
pub const FILE_BYTES_MAX: usize = 192 * 1024;
/// Most files in one intake.
pub const FILES_MAX: usize = 4000;

/// A file handed to intake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// Path, as given (for messages and audit).
    pub path: String,
    /// Contents.
    pub bytes: Vec<u8>,
}

/// One problem with one file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct IntakeProblem {
    /// The file.
    pub file: String,
    /// JSON pointer into the artifact document (`""` for the whole file).
    pub pointer: String,
    /// Stable rule name (`schema:pattern`, `entity`, `lifecycle`, `duplicate`, …).
    pub rule: String,
    /// What is wrong.
    pub detail: String,
    /// What to do.
    pub hint: String,
}

/// What an accepted intake will append.
#[derive(Clone, Debug, Default)]
pub struct IntakePlan {
    /// One entry per changed artifact, each with the version it was decided against.
    pub appends: Vec<StreamAppend>,
    /// Artifacts created.
    pub created: Vec<ArtifactKey>,
    /// Artifacts whose content changed.
    pub updated: Vec<ArtifactKey>,
    /// Artifacts whose state changed.
    pub transitioned: Vec<ArtifactKey>,
    /// Artifacts already stored exactly as given.
    pub unchanged: Vec<ArtifactKey>,
}

/// An intake problem: the file, the JSON pointer into it, the rule broken, what is wrong, the fix.
pub(crate) fn problem(
    file: &str,
    pointer: &str,
    rule: &str,
    detail: impl Into<String>,
    hint: impl Into<String>,
) -> IntakeProblem {
    IntakeProblem {
        file: file.to_owned(),
        pointer: pointer.to_owned(),
        rule: rule.to_owned(),
        detail: detail.into(),
        hint: hint.into(),
    }
}

/// Parses one file into a draft, checking it against its kind's schema.
pub fn parse_file(f: &SourceFile) -> Result<ArtifactDraft, Vec<IntakeProblem>> {
    let p = |pointer: &str, rule: &str, detail: String, hint: &str| vec![problem(&f.path, pointer, rule, detail, hint)];
    if f.bytes.len() > FILE_BYTES_MAX {
        return Err(p(
            "",
            "size",
            format!("the file is more than {FILE_BYTES_MAX} bytes; intake reads at most that"),
            "split the artifact, or move bulky material out and reference it",
        ));
    }
    if f.bytes.contains(&0) {
        return Err(p(
            "",
            "encoding",
            "the file contains NUL bytes: it is binary, not text".into(),
            "intake reads Markdown and JSON text",
        ));
    }
    let Ok(text) = std::str::from_utf8(&f.bytes) else {
        return Err(p("", "encoding", "the file is not valid UTF-8".into(), "save it as UTF-8 text"));
    };
    let lower = f.path.to_ascii_lowercase();
    let (mut fields, body_from_file) = if lower.ends_with(".md") || lower.ends_with(".markdown") {
        match frontmatter::split(text) {
            Ok((m, body)) => (m, Some(body)),
            Err(e) => {
                let at = e.line.map(|l| format!(" (line {l})")).unwrap_or_default();
                return Err(p("", "front-matter", format!("{}{at}", e.detail), e.hint));
            }
        }
    } else if lower.ends_with(".json") {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => (m, None),
            Ok(_) => {
                return Err(p(
                    "",
                    "json",
                    "the JSON file is not an object".into(),
                    "write the artifact as one JSON object",
                ));
            }
            Err(e) => {
                return Err(p(
                    "",
                    "json",
                    format!("not valid JSON (line {}, column {}): {e}", e.line(), e.column()),
                    "fix the JSON syntax",
                ));
            }
        }
    } else {
        return Err(p(
            "",
            "file-type",
            "only .md, .markdown and .json files are taken in".into(),
            "rename the file or leave it out",
        ));
    };
    if let Some(body) = body_from_file {
        if fields.contains_key("body") {
            return Err(p(
                "/body",
                "body",
                "a Markdown file's body is its content; `body` in the front matter is ambiguous".into(),
                "remove `body` from the front matter",
            ));
        }
        if !body.is_empty() {
            fields.insert("body".into(), Value::String(body));
        }
    }
    let Some(kind_name) = fields.get("kind").and_then(Value::as_str).map(str::to_owned) else {
        return Err(p("/kind", "kind", "the artifact has no `kind`".into(), KIND_HINT));
    };
    let Some(kind) = ArtifactKind::from_name(&kind_name) else {
        return Err(p("/kind", "kind", format!("unknown kind {kind_name:?}"), KIND_HINT));
    };
    let doc = Value::Object(fields.clone());
    let violations =
        schema::validate(kind, &doc).map_err(|e| p("", "schema", e, "this is a bug in strata; report it"))?;
    if !violations.is_empty() {
        return Err(violations
            .into_iter()
            .map(|v| {
                let hint = hint_for(&v.keyword, &v.pointer);
                problem(&f.path, &v.pointer, &format!("schema:{}", v.keyword), v.message, hint)
            })
            .collect());
    }
    let id = fields.remove("id").and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    let state = fields.remove("state").and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    let body = fields.remove("body").and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    fields.remove("kind");
    Ok(ArtifactDraft { key: ArtifactKey::new(kind, &id), state, fields, body, source: Some(f.path.clone()) })
}

const KIND_HINT: &str = "set `kind` to one of: entity, issue, change-request, backlog-item, brd-requirement, functional-domain, backend-module, ui-screen, research-note, devlog";

fn hint_for(keyword: &str, pointer: &str) -> String {
    match keyword {
        "required" => "add the missing field".into(),
        "additionalProperties" => "remove the field, or check its spelling against the schema".into(),
        "pattern" if pointer == "/id" => {
            "use the id format of this kind (ISS-n, CR-n, BI-n, BRD-n.m, RN-n, DL-n, or a lower-case slug)".into()
        }
        "pattern" => {
            "use the id format of the referenced kind (ISS-n, CR-n, BI-n, BRD-n.m, RN-n, DL-n, or a lower-case slug)"
                .into()
        }
        "enum" | "const" => "use one of the values the schema lists".into(),
        "type" => "use the JSON type the schema expects".into(),
        "maxLength" | "maxItems" => "shorten it".into(),
        "minLength" | "minItems" => "it must not be empty".into(),
        "uniqueItems" => "remove the repeated entries".into(),
        _ => format!("see schemas/ for the `{keyword}` rule"),
    }
}

/// Entity ids closest to `wanted`, for hints.
fn closest<'a>(wanted: &str, known: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut scored: Vec<(usize, &str)> = known.map(|k| (edit_distance(wanted, k), k)).collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, k)| k).collect()
}

/// Levenshtein distance (inputs are short ids).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Builds one event.
pub fn event(
    ids: &mut dyn Ids,
    clock: &dyn Clock,
    event_type: &str,
    payload: &impl serde::Serialize,
    correlation: Option<uuid::Uuid>,
) -> Result<EventData, String> {
    Ok(EventData {
        id: ids.next_id(),
        event_type: event_type.to_owned(),
        schema_version: 1,
        recorded_at_ns: clock.now_ns(),
        causation: None,
        correlation,
        payload: serde_json::to_vec(payload).map_err(|e| e.to_string())?,
    })
}

/// Plans the intake of `files` against `graph`.
pub fn plan(
    graph: &Graph,
    files: &[SourceFile],
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<IntakePlan, Vec<IntakeProblem>> {
    let mut problems = Vec::new();
    if files.len() > FILES_MAX {
        return Err(vec![problem(
            "",
            "",
            "files",
            format!("{} files in one intake; at most {FILES_MAX}", files.len()),
            "take the files in over several intakes",
        )]);
    }
    let mut drafts: BTreeMap<ArtifactKey, ArtifactDraft> = BTreeMap::new();
    for f in files {
        match parse_file(f) {
            Ok(d) => {
                if let Some(first) = drafts.get(&d.key) {
                    problems.push(problem(
                        &f.path,
                        "/id",
                        "duplicate",
                        format!("{} is also defined in {}", d.key, first.source.as_deref().unwrap_or("?")),
                        "keep one file per artifact",
                    ));
                } else {
                    drafts.insert(d.key.clone(), d);
                }
            }
            Err(p) => problems.extend(p),
        }
    }
    // Classification: every non-entity artifact names an entity that exists or arrives now.
    let known_entities: Vec<String> = graph
        .artifacts_of(ArtifactKind::Entity)
        .into_iter()
        .map(|n| n.key.id.clone())
        .chain(drafts.keys().filter(|k| k.kind == ArtifactKind::Entity).map(|k| k.id.clone()))
        .collect();
    for d in drafts.values() {
        if d.key.kind == ArtifactKind::Entity {
            continue;
        }
        let entity = d.entity().unwrap_or("");
        if !known_entities.iter().any(|e| e == entity) {
            let near = closest(entity, known_entities.iter().map(String::as_str));
            problems.push(problem(
                d.source.as_deref().unwrap_or(""),
                "/entity",
                "entity",
                format!("entity {entity:?} does not exist and is not part of this intake"),
                if near.is_empty() {
                    "take the entity's file in first (or in the same intake)".to_owned()
                } else {
                    format!("classify it under an existing entity (closest: {})", near.join(", "))
                },
            ));
        }
    }
    let correlation = Some(ids.next_id());
    let mut out = IntakePlan::default();
    // Artifacts this intake moves (or creates past) a suspect-gated state, with that state:
    // checked once the whole plan is known, since the plan itself may make things suspect.
    let mut pending: Vec<(ArtifactKey, String)> = Vec::new();
    for d in drafts.values() {
        let file = d.source.as_deref().unwrap_or("");
        let expected = ExpectedVersion::Exact(graph.version(&d.key));
        let mut events = Vec::new();
        let hash = d.content_hash();
        let internal = |e: String| problem(file, "", "internal", e, "this is a bug in strata; report it");
        match graph.get(&d.key) {
            None => {
                match creation_gates(d, &drafts, graph) {
                    Ok(Some(to)) => pending.push((d.key.clone(), to)),
                    Ok(None) => {}
                    Err(p) => problems.push(p),
                }
                let c = Created {
                    kind: d.key.kind.name().into(),
                    id: d.key.id.clone(),
                    state: d.state.clone(),
                    fields: d.fields.clone(),
                    body: d.body.clone(),
                    hash: hash.to_hex(),
                    source: d.source.clone(),
                };
                match event(ids, clock, event_types::CREATED, &c, correlation).map_err(internal) {
                    Ok(e) => events.push(e),
                    Err(p) => problems.push(p),
                }
                out.created.push(d.key.clone());
            }
            Some(node) => {
                if node.hash != hash {
                    if d.key.kind == ArtifactKind::Entity {
                        let (old, new) = (node.fields.get("tier"), d.fields.get("tier"));
                        if old != new {
                            problems.push(problem(
                                file,
                                "/tier",
                                "tier",
                                format!("the tier of entity {} is {} in the journal", d.key.id, old.and_then(Value::as_str).unwrap_or("?")),
                                "change tiers with `strata artifact promote <entity> --tier <tier>`, then update the file",
                            ));
                        }
                    }
                    let u = Updated {
                        kind: d.key.kind.name().into(),
                        id: d.key.id.clone(),
                        fields: d.fields.clone(),
                        body: d.body.clone(),
                        hash: hash.to_hex(),
                        previous_hash: node.hash.to_hex(),
                        source: d.source.clone(),
                    };
                    match event(ids, clock, event_types::UPDATED, &u, correlation).map_err(internal) {
                        Ok(e) => events.push(e),
                        Err(p) => problems.push(p),
                    }
                    out.updated.push(d.key.clone());
                }
                if node.state != d.state {
                    match check_move(&d.key, &node.state, &d.state) {
                        Err(rejection) => {
                            let hint = match rejection {
                                Rejection::PromotionOnly { .. } => {
                                    "promote it with `strata artifact promote`, then update the file's state".to_owned()
                                }
                                _ => "if a command moved it, update the file's state".to_owned(),
                            };
                            problems.push(problem(file, "/state", "lifecycle", rejection.to_string(), hint));
                        }
                        Ok(gate) => {
                            if gate == Gate::Suspects {
                                pending.push((d.key.clone(), d.state.clone()));
                            }
                            let t = Transitioned {
                                kind: d.key.kind.name().into(),
                                id: d.key.id.clone(),
                                from: node.state.clone(),
                                to: d.state.clone(),
                                reason: d.source.as_ref().map(|s| format!("intake of {s}")),
                            };
                            match event(ids, clock, event_types::TRANSITIONED, &t, correlation).map_err(internal) {
                                Ok(e) => events.push(e),
                                Err(p) => problems.push(p),
                            }
                            out.transitioned.push(d.key.clone());
                        }
                    }
                }
                if events.is_empty() && node.hash == hash && node.state == d.state {
                    out.unchanged.push(d.key.clone());
                }
            }
        }
        if !events.is_empty() {
            out.appends.push(StreamAppend { stream: d.key.stream(), expected, events });
        }
    }
    problems.extend(suspect_gates(graph, &out, &drafts, &pending));
    if problems.is_empty() {
        Ok(out)
    } else {
        problems.sort();
        problems.dedup();
        Err(problems)
    }
}

/// The lifecycle gates on creating `d` in its state. An artifact may be created in any state its
/// kind's lifecycle reaches from the initial state along allowed transitions, provided every
/// gate on the way holds now, as if each transition had been made by `strata artifact transition`:
/// the history is the same, only not spelled out. A promotion-only state on the way holds only
/// when the file records the promotion with both back-links (an issue's `promotedTo` naming a
/// change request whose `promotedFrom` names the issue, in the journal or in this intake). Returns
/// the suspect-gated state the way passes through, if it must pass one, for [`suspect_gates`].
fn creation_gates(
    d: &ArtifactDraft,
    drafts: &BTreeMap<ArtifactKey, ArtifactDraft>,
    graph: &Graph,
) -> Result<Option<String>, IntakeProblem> {
    let kind = d.key.kind;
    let file = d.source.as_deref().unwrap_or("");
    let promoted = promotion_recorded(d, drafts, graph);
    let holds = |g: Gate| g == Gate::Open || (g == Gate::Promotion && promoted);
    if creation_path(kind, &d.state, holds).is_some() {
        return Ok(None);
    }
    let Some(path) = creation_path(kind, &d.state, |g| holds(g) || g == Gate::Suspects) else {
        // The way needs a promotion the file does not record (the schema keeps states known).
        let via = creation_path(kind, &d.state, |_| true)
            .and_then(|p| p.into_iter().find(|s| gate(kind, s) == Gate::Promotion))
            .unwrap_or(&d.state);
        let rejection = Rejection::PromotionOnly { key: d.key.clone(), to: via.to_owned() };
        return Err(problem(
            file,
            "/state",
            "lifecycle",
            rejection.to_string(),
            format!(
                "create it as {} and promote it with `strata artifact promote`, or record the promotion: promotedTo naming a change request whose promotedFrom names {}",
                before_gate(kind, via),
                d.key.id
            ),
        ));
    };
    Ok(path.into_iter().find(|s| gate(kind, s) == Gate::Suspects).map(str::to_owned))
}

/// A state the artifact can be created in without passing `gated` (for hints).
fn before_gate(kind: ArtifactKind, gated: &str) -> &'static str {
    states(kind).iter().copied().find(|s| can_transition(kind, s, gated)).unwrap_or(initial(kind))
}

/// Whether draft `d` records its promotion with both back-links.
fn promotion_recorded(d: &ArtifactDraft, drafts: &BTreeMap<ArtifactKey, ArtifactDraft>, graph: &Graph) -> bool {
    let Some(cr) = d.fields.get("promotedTo").and_then(Value::as_str) else { return false };
    let key = ArtifactKey::new(ArtifactKind::ChangeRequest, cr);
    let back = match drafts.get(&key) {
        Some(c) => c.fields.get("promotedFrom"),
        None => graph.get(&key).and_then(|n| n.fields.get("promotedFrom")),
    };
    back.and_then(Value::as_str) == Some(d.key.id.as_str())
}

/// The suspect gate on every artifact `pending` names, decided on the graph the whole plan
/// leads to: refused while the artifact or anything upstream of it is suspect, or while this
/// intake changes the content of anything upstream of it (which would make it suspect).
fn suspect_gates(
    graph: &Graph,
    plan: &IntakePlan,
    drafts: &BTreeMap<ArtifactKey, ArtifactDraft>,
    pending: &[(ArtifactKey, String)],
) -> Vec<IntakeProblem> {
    // Nothing can be suspect without a suspect artifact now or a content change in this plan.
    if pending.is_empty() || (graph.suspects().is_empty() && plan.updated.is_empty()) {
        return Vec::new();
    }
    let mut after = graph.clone();
    if let Err(e) = after.apply_appends(&plan.appends) {
        return vec![problem("", "", "internal", e, "this is a bug in strata; report it")];
    }
    let changing: BTreeSet<NodeId> = plan.updated.iter().filter_map(|k| after.node_id(k)).collect();
    let mut problems = Vec::new();
    for (key, to) in pending {
        let Some(n) = after.node_id(key) else { continue };
        let Err(rejection) = suspect_gate(&after, key, n, to, &changing) else { continue };
        let d = drafts.get(key);
        let file = d.and_then(|d| d.source.as_deref()).unwrap_or("");
        let state = d.map_or(to.as_str(), |d| d.state.as_str());
        let changed: Vec<String> = after
            .upstream(n)
            .into_iter()
            .filter(|u| changing.contains(u))
            .map(|u| after.node(u).key.to_string())
            .collect();
        let mut hint = String::new();
        if state != to {
            hint.push_str(&format!("{state} is reached only through {to}; "));
        }
        if changed.is_empty() {
            hint.push_str("review them with `strata artifact review`, then take the file in again");
        } else {
            hint.push_str(&format!(
                "this intake changes {} upstream of it: take that change in first, review {}, then take this file in",
                changed.join(", "),
                key
            ));
        }
        hint.push_str(&format!("; or take it in as {}", before_gate(key.kind, to)));
        problems.push(problem(file, "/state", "suspect", rejection.to_string(), hint));
    }
    problems
}

/// Removes `id` from the fields map (helper for commands that edit links).
pub fn without(list: &Value, id: &str) -> Value {
    match list {
        Value::Array(items) => Value::Array(items.iter().filter(|v| v.as_str() != Some(id)).cloned().collect()),
        other => other.clone(),
    }
}

/// Adds `id` to a list field if missing.
pub fn with(fields: &mut Map<String, Value>, field: &str, id: &str) {
    let entry = fields.entry(field.to_owned()).or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(items) = entry
        && !items.iter().any(|v| v.as_str() == Some(id))
    {
        items.push(Value::String(id.to_owned()));
    }
}
