//! `strata intake`, `strata artifact …` and `strata graph …`: the knowledge base on the command
//! line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::{Value, json};
use strata_engine::kb::commands::{self, Ctx};
use strata_engine::kb::graph::{Graph, Reached};
use strata_engine::kb::intake::{self, FILE_BYTES_MAX, FILES_MAX, IntakeProblem, SourceFile};
use strata_engine::kb::kind::{ArtifactKey, ArtifactKind};
use strata_engine::kb::links::LINKS;
use strata_journal::{Journal, StreamAppend};

use super::EXIT_PROBLEMS;
use crate::app::append::{AppendError, Decided, decide_and_append};
use crate::app::kb::load_graph;
use crate::app::workspace::Workspace;
use crate::files::{self, ScanLimits};
use crate::system::{SystemClock, V7Ids};
use crate::table::Table;

/// Most bytes one intake reads across all files.
pub const INTAKE_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// Most entries the directories given to one intake (or `knowledge put`) may list, hidden ones
/// and directories included.
pub const SCAN_ENTRIES_MAX: usize = 100_000;
/// Most directories an intake descends below a directory it is given.
pub const SCAN_DEPTH_MAX: usize = 32;

#[derive(Subcommand, Debug)]
pub(crate) enum ArtifactCommand {
    /// Show an artifact: fields, state, hash, links both ways, suspicion.
    Show {
        /// Artifact id (add --kind when the id names artifacts of several kinds).
        id: String,
        /// Kind, when the id is ambiguous.
        #[arg(long)]
        kind: Option<String>,
    },
    /// Move an artifact to another lifecycle state.
    Transition {
        /// Artifact id.
        id: String,
        /// Target state.
        #[arg(long)]
        to: String,
        /// Why (recorded in the event).
        #[arg(long)]
        reason: Option<String>,
        /// Kind, when the id is ambiguous.
        #[arg(long)]
        kind: Option<String>,
    },
    /// Promote: an issue to a change request (--to-cr), change requests into an initiative
    /// (--to-initiative), or an entity to a higher tier (--tier).
    Promote {
        /// The issue, the change requests, or the entity.
        #[arg(required = true)]
        ids: Vec<String>,
        /// New change request id for an issue promotion.
        #[arg(long, conflicts_with_all = ["to_initiative", "tier"])]
        to_cr: Option<String>,
        /// New backlog item id grouping the given change requests.
        #[arg(long, conflicts_with = "tier")]
        to_initiative: Option<String>,
        /// New tier for an entity.
        #[arg(long)]
        tier: Option<String>,
        /// Title of the new change request or initiative.
        #[arg(long)]
        title: Option<String>,
        /// Entity of a new initiative whose change requests span entities.
        #[arg(long)]
        entity: Option<String>,
    },
    /// Delete an artifact: what depends on it becomes suspect, links to it become dangling, and
    /// prompts that were given it are flagged as superseded.
    Delete {
        /// Artifact id.
        id: String,
        /// Kind, when the id is ambiguous.
        #[arg(long)]
        kind: Option<String>,
    },
    /// Clear an artifact's suspicion after checking it against the changes that caused it.
    Review {
        /// Artifact id.
        id: String,
        /// Kind, when the id is ambiguous.
        #[arg(long)]
        kind: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum GraphCommand {
    /// Report dangling references, missing inverses, cycles, cross-entity links that bypass the
    /// cross-cutting entity and untraced methods/actions; exit 3 on any.
    Validate,
    /// Transitive impact of an artifact, grouped by kind, each with the link path behind it.
    Impact {
        /// Artifact id.
        id: String,
        /// Kind, when the id is ambiguous.
        #[arg(long)]
        kind: Option<String>,
        /// Answer as of this journal sequence.
        #[arg(long)]
        at: Option<u64>,
    },
    /// Every suspect artifact with the change that made it suspect.
    Suspects,
    /// Entities by tier, with their artifact counts.
    Entities,
}

fn parse_kind(kind: Option<&str>) -> anyhow::Result<Option<ArtifactKind>> {
    kind.map(|k| {
        ArtifactKind::from_name(k).ok_or_else(|| {
            anyhow::anyhow!(
                "[STRATA-E0709] unknown kind {k:?}; kinds are {}",
                ArtifactKind::ALL.map(|k| k.name()).join(", ")
            )
        })
    })
    .transpose()
}

/// Resolves an id (optionally with a kind) to an existing artifact.
pub(crate) fn resolve(g: &Graph, id: &str, kind: Option<&str>) -> anyhow::Result<ArtifactKey> {
    if let Some(k) = parse_kind(kind)? {
        let key = ArtifactKey::new(k, id);
        return match g.get(&key) {
            Some(_) => Ok(key),
            None => Err(commands::Rejection::Unknown { key }.into()),
        };
    }
    let found = g.find(id);
    match found.as_slice() {
        [one] => Ok(one.key.clone()),
        [] => {
            let mut near: Vec<(usize, &str)> =
                g.artifacts().into_iter().map(|n| (intake::edit_distance(id, &n.key.id), n.key.id.as_str())).collect();
            near.sort();
            let near: Vec<&str> = near.into_iter().take(3).map(|(_, k)| k).collect();
            anyhow::bail!(
                "[STRATA-E0701] no artifact has id {id:?}{}",
                if near.is_empty() { String::new() } else { format!("; closest: {}", near.join(", ")) }
            )
        }
        many => anyhow::bail!(
            "[STRATA-E0709] {id:?} names a {}; pass --kind",
            many.iter().map(|n| n.key.kind.name()).collect::<Vec<_>>().join(" and a ")
        ),
    }
}

/// Reads every artifact file under `paths` (files as given; directories recursively, skipping
/// hidden entries), sorted by path; `what` names the input in errors (`intake`, `knowledge put`).
/// Nothing but regular files is read and nothing blocks: see [`crate::files`].
pub(crate) fn read_sources(paths: &[PathBuf], what: &str) -> anyhow::Result<Vec<SourceFile>> {
    let limits = ScanLimits { entries_max: SCAN_ENTRIES_MAX, depth_max: SCAN_DEPTH_MAX };
    let found = files::input_files(paths, limits, what)?;
    if found.len() > FILES_MAX {
        anyhow::bail!("[STRATA-E0801] {} files given; one intake takes at most {FILES_MAX}", found.len());
    }
    let mut out = Vec::with_capacity(found.len());
    let mut total = 0u64;
    for f in found {
        // Oversize files are read only up to one byte past the limit: intake reports them.
        let bytes = files::read_prefix(&f, FILE_BYTES_MAX as u64 + 1, &format!("{what} file"))?;
        total += bytes.len() as u64;
        if total > INTAKE_BYTES_MAX {
            anyhow::bail!(
                "[STRATA-E0801] the files add up to more than {INTAKE_BYTES_MAX} bytes; take them in over several intakes"
            );
        }
        out.push(SourceFile { path: f.display().to_string(), bytes });
    }
    Ok(out)
}

pub(crate) fn problems_json(problems: &[IntakeProblem]) -> Value {
    json!(
        problems
            .iter()
            .map(|p| json!({"file": p.file, "pointer": p.pointer, "rule": p.rule, "detail": p.detail, "hint": p.hint}))
            .collect::<Vec<_>>()
    )
}

/// Prints refused input as a table (file, pointer, rule, problem, hint), or as JSON.
/// Prints a refusal's problems: a table, then `summary` (`[CODE] …; hint`) on stderr; with
/// `json` one object, `{"ok": false, "appended": 0, "problems"}` with the five error keys of
/// [`super::failure`] (`summary` read into them).
pub(crate) fn print_problems(o: &crate::output::Out, problems: &[intake::IntakeProblem], json: bool, summary: &str) {
    if json {
        let f = super::failure::Failure::from_text(summary);
        outln!(o, "{}", f.merged(json!({"ok": false, "appended": 0, "problems": problems_json(problems)})));
        return;
    }
    let mut t = Table::new(&["FILE", "POINTER", "RULE", "PROBLEM", "HINT"]);
    for p in problems {
        t.row(vec![
            p.file.clone(),
            if p.pointer.is_empty() { "/".into() } else { p.pointer.clone() },
            p.rule.clone(),
            p.detail.clone(),
            p.hint.clone(),
        ]);
    }
    out!(o, "{}", t.render());
    errln!(o, "{summary}");
}

pub(crate) fn intake(ws: &Workspace, paths: &[PathBuf], dry_run: bool, json: bool) -> anyhow::Result<ExitCode> {
    let sources = read_sources(paths, "intake")?;
    let journal = ws.open_journal("intake")?;
    let decided = decide_and_append(&journal, &mut Graph::new(), |g| -> Result<_, Vec<IntakeProblem>> {
        let plan = intake::plan(g, &sources, &mut V7Ids, &SystemClock)?;
        let appends = if dry_run { Vec::new() } else { plan.appends.clone() };
        Ok(Decided { appends, answer: plan })
    });
    let done = match decided {
        Err(AppendError::Refused(problems)) => {
            let summary = format!(
                "[STRATA-E0802] intake refused: {} in {}; nothing was appended: fix the files listed",
                crate::plural::count(problems.len() as u64, "problem", "problems"),
                crate::plural::count(sources.len() as u64, "file", "files")
            );
            print_problems(ws.out(), &problems, json, &summary);
            return Ok(ExitCode::from(1));
        }
        r => super::appended(r, |_: Vec<IntakeProblem>| anyhow::anyhow!("refusals are answered above"))?,
    };
    let plan = &done.answer;
    let events: usize = plan.appends.iter().map(|a| a.events.len()).sum();
    let head = if dry_run { journal.head().seq } else { done.seq };
    let superseded = done.reacted.get(crate::app::react::SUPERSEDED_CONTEXT).copied().unwrap_or(0);
    ws.finish(&journal)?;
    let keys = |v: &[ArtifactKey]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
    if json {
        outln!(
            ws,
            "{}",
            json!({"ok": true, "dry_run": dry_run, "files": sources.len(), "appended": if dry_run { 0 } else { events }, "head": head,
                   "created": keys(&plan.created), "updated": keys(&plan.updated), "transitioned": keys(&plan.transitioned), "unchanged": plan.unchanged.len(),
                   "prompts_superseded": superseded, "peak_rss_mib": crate::system::peak_rss_mib()})
        );
    } else {
        outln!(
            ws,
            "{} {}: {} created, {} updated, {} transitioned, {} unchanged; {}{}",
            if dry_run { "would take in" } else { "took in" },
            crate::plural::count(sources.len() as u64, "file", "files"),
            plan.created.len(),
            plan.updated.len(),
            plan.transitioned.len(),
            plan.unchanged.len(),
            events,
            if dry_run { " (dry run: nothing appended)".to_owned() } else { format!(", head {head}") }
        );
        if superseded > 0 {
            outln!(
                ws,
                "{superseded} assembled prompt(s) were given context that has changed since: context.superseded recorded (`strata audit context --task T`)"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn links_json(g: &Graph, key: &ArtifactKey) -> (Value, Value) {
    let Some(id) = g.node_id(key) else { return (json!([]), json!([])) };
    let n = g.node(id);
    let out: Vec<Value> = n
        .out
        .iter()
        .map(|&(l, t)| json!({"field": LINKS[usize::from(l)].field, "to": g.node(t).key.to_string(), "exists": g.node(t).exists}))
        .collect();
    let inn: Vec<Value> = n
        .inn
        .iter()
        .map(|&(l, s)| json!({"field": LINKS[usize::from(l)].field, "from": g.node(s).key.to_string()}))
        .collect();
    (json!(out), json!(inn))
}

pub(crate) fn artifact(ws: &Workspace, cmd: ArtifactCommand, json: bool) -> anyhow::Result<ExitCode> {
    let journal = ws.open_journal("artifact")?;
    let g = load_graph(&journal)?;
    // What to record, decided on the graph at the head (again, if another writer moved it).
    type Decide = Box<dyn Fn(&Graph, &mut Ctx<'_>) -> Result<Vec<StreamAppend>, commands::Rejection>>;
    let (what, decide): (String, Decide) = match cmd {
        ArtifactCommand::Show { id, kind } => {
            let key = resolve(&g, &id, kind.as_deref())?;
            let Some(node) = g.get(&key) else { anyhow::bail!("{key} vanished") };
            let n = g.node_id(&key).unwrap_or(0);
            let (out, inn) = links_json(&g, &key);
            let suspicion: Vec<Value> = g
                .suspects()
                .get(&n)
                .map(|v| v.iter().map(|s| json!({"cause": g.node(s.cause).key.to_string(), "seq": s.seq, "path": g.render_path(s.cause, &s.path)})).collect())
                .unwrap_or_default();
            if json {
                outln!(
                    ws,
                    "{}",
                    json!({"kind": key.kind.name(), "id": key.id, "state": node.state, "hash": node.hash.to_hex(), "version": node.version,
                           "entity": node.fields.get("entity"), "fields": node.fields, "body": node.body, "links_out": out, "links_in": inn, "suspect": suspicion})
                );
            } else {
                outln!(ws, "{key}  state {}  version {}  hash {}", node.state, node.version, &node.hash.to_hex()[..16]);
                for (k, v) in &node.fields {
                    outln!(ws, "  {k}: {v}");
                }
                for l in out.as_array().into_iter().flatten() {
                    outln!(
                        ws,
                        "  -> {} {}{}",
                        l["field"].as_str().unwrap_or(""),
                        l["to"].as_str().unwrap_or(""),
                        if l["exists"] == false { " (MISSING)" } else { "" }
                    );
                }
                for l in inn.as_array().into_iter().flatten() {
                    outln!(ws, "  <- {} {}", l["field"].as_str().unwrap_or(""), l["from"].as_str().unwrap_or(""));
                }
                for s in &suspicion {
                    outln!(
                        ws,
                        "  SUSPECT since {} changed: {}",
                        s["cause"].as_str().unwrap_or(""),
                        s["path"].as_str().unwrap_or("")
                    );
                }
                if !node.body.is_empty() {
                    outln!(ws, "\n{}", node.body);
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        ArtifactCommand::Transition { id, to, reason, kind } => {
            let key = resolve(&g, &id, kind.as_deref())?;
            let what = format!("{key} -> {to}");
            (what, Box::new(move |g, ctx| commands::transition(g, &key, &to, reason.as_deref(), ctx)))
        }
        ArtifactCommand::Review { id, kind } => {
            let key = resolve(&g, &id, kind.as_deref())?;
            (format!("{key} reviewed"), Box::new(move |g, ctx| commands::review(g, &key, ctx)))
        }
        ArtifactCommand::Delete { id, kind } => {
            let key = resolve(&g, &id, kind.as_deref())?;
            (format!("{key} deleted"), Box::new(move |g, ctx| commands::delete(g, &key, ctx)))
        }
        ArtifactCommand::Promote { ids: targets, to_cr, to_initiative, tier, title, entity } => {
            match (to_cr, to_initiative, tier) {
                (Some(cr), None, None) => {
                    let [issue] = targets.as_slice() else {
                        anyhow::bail!("[STRATA-E0706] --to-cr promotes exactly one issue")
                    };
                    let issue = issue.clone();
                    (
                        format!("issue {issue} promoted to {cr}"),
                        Box::new(move |g, ctx| commands::promote_issue(g, &issue, &cr, title.as_deref(), ctx)),
                    )
                }
                (None, Some(bi), None) => {
                    let title = title.unwrap_or_else(|| format!("Initiative {bi}"));
                    (
                        format!("{} change request(s) grouped into {bi}", targets.len()),
                        Box::new(move |g, ctx| {
                            commands::group_initiative(g, &bi, &title, entity.as_deref(), &targets, ctx)
                        }),
                    )
                }
                (None, None, Some(t)) => {
                    let [e] = targets.as_slice() else {
                        anyhow::bail!("[STRATA-E0706] --tier promotes exactly one entity")
                    };
                    let e = e.clone();
                    (
                        format!("entity {e} promoted to {t}"),
                        Box::new(move |g, ctx| commands::promote_tier(g, &e, &t, ctx)),
                    )
                }
                _ => anyhow::bail!(
                    "[STRATA-E0706] say what to promote to: --to-cr CR-n (an issue), --to-initiative BI-n (change requests) or --tier TIER (an entity)"
                ),
            }
        }
    };
    let done = super::appended(
        decide_and_append(&journal, &mut Graph::new(), |g| {
            let mut ctx = Ctx { ids: &mut V7Ids, clock: &SystemClock };
            Ok(Decided { appends: decide(g, &mut ctx)?, answer: () })
        }),
        |e: commands::Rejection| e.into(),
    )?;
    let head = done.seq;
    let superseded = done.reacted.get(crate::app::react::SUPERSEDED_CONTEXT).copied().unwrap_or(0);
    ws.finish(&journal)?;
    if json {
        outln!(ws, "{}", json!({"ok": true, "done": what, "head": head, "prompts_superseded": superseded}));
    } else {
        outln!(ws, "{what} (head {head})");
        if superseded > 0 {
            outln!(
                ws,
                "{superseded} assembled prompt(s) were given context that has changed since: context.superseded recorded"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn reached_json(r: &Reached) -> Value {
    json!({"kind": r.key.kind.name(), "id": r.key.id, "entity": r.entity, "depth": r.depth, "path": r.path})
}

pub(crate) fn graph(ws: &Workspace, cmd: GraphCommand, json: bool) -> anyhow::Result<ExitCode> {
    let journal = ws.open_journal("graph")?;
    let answer = graph_query(ws, &journal, cmd, json);
    ws.finish_query(journal)?;
    answer
}

fn graph_query(ws: &Workspace, journal: &Journal, cmd: GraphCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        GraphCommand::Validate => ws.with_graph_at_head(journal, |g| {
            let findings = g.validate();
            if json {
                let items: Vec<Value> = findings
                    .iter()
                    .map(|f| json!({"severity": "error", "rule": f.rule, "artifact": f.artifact.to_string(), "field": f.field, "target": f.target.as_ref().map(ToString::to_string), "detail": f.detail}))
                    .collect();
                outln!(ws,
                    "{}",
                    json!({"ok": findings.is_empty(), "artifacts": g.len(), "errors": findings.len(), "findings": items})
                );
            } else if findings.is_empty() {
                outln!(ws,
                    "graph valid: {} artifacts, no dangling references, missing inverses, cycles or bypassing links",
                    g.len()
                );
            } else {
                let mut t = Table::new(&["RULE", "ARTIFACT", "FIELD", "PROBLEM"]);
                for f in &findings {
                    t.row(vec![f.rule.into(), f.artifact.to_string(), f.field.clone(), f.detail.clone()]);
                }
                out!(ws, "{}", t.render());
                outln!(ws,
                    "{} in {}",
                    crate::plural::count(findings.len() as u64, "error", "errors"),
                    crate::plural::count(g.len() as u64, "artifact", "artifacts")
                );
            }
            Ok(if findings.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_PROBLEMS) })
        }),
        GraphCommand::Impact { id, kind, at } => {
            let head = journal.head().seq;
            let answer = |g: &Graph| -> anyhow::Result<ExitCode> {
                let key = resolve(g, &id, kind.as_deref())?;
                let n = g.node_id(&key).unwrap_or(0);
                let closure = g.impact_closure(n);
                let reached = g.reached(&closure);
                let dangling = g.dangling(&closure);
                let mut groups: std::collections::BTreeMap<&str, Vec<&Reached>> = std::collections::BTreeMap::new();
                for r in &reached {
                    groups.entry(r.key.kind.group()).or_default().push(r);
                }
                if json {
                    let g2: serde_json::Map<String, Value> = groups
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), json!(v.iter().map(|r| reached_json(r)).collect::<Vec<_>>())))
                        .collect();
                    let dangling: Vec<Value> = dangling
                        .iter()
                        .map(|f| json!({"artifact": f.artifact.to_string(), "field": f.field, "target": f.target.as_ref().map(ToString::to_string), "detail": f.detail}))
                        .collect();
                    outln!(ws,
                        "{}",
                        json!({"artifact": key.to_string(), "at": at.unwrap_or(head), "reached": reached.len(), "groups": g2, "dangling": dangling})
                    );
                } else {
                    outln!(ws, "impact of {key} (as of sequence {}): {} artifacts", at.unwrap_or(head), reached.len());
                    for (group, items) in &groups {
                        outln!(ws, "\n{group} ({})", items.len());
                        for r in items {
                            outln!(ws, "  {:<32} {}", r.key.id, r.path);
                        }
                    }
                    if !dangling.is_empty() {
                        outln!(ws, "\ndangling references, not reached ({})", dangling.len());
                        for f in &dangling {
                            outln!(ws, "  {}", f.detail);
                        }
                    }
                }
                Ok(ExitCode::SUCCESS)
            };
            match at {
                Some(seq) if seq > head => anyhow::bail!("[STRATA-E0803] --at {seq} is past the journal head {head}"),
                Some(seq) => answer(&Graph::at(journal, seq).map_err(|e| anyhow::anyhow!(e))?),
                None => ws.with_graph_at_head(journal, answer),
            }
        }
        GraphCommand::Suspects => {
            let g = load_graph(journal)?;
            let mut rows = Vec::new();
            for (&n, marks) in g.suspects() {
                for m in marks {
                    rows.push((
                        g.node(n).key.clone(),
                        g.node(m.cause).key.clone(),
                        m.seq,
                        g.render_path(m.cause, &m.path),
                    ));
                }
            }
            rows.sort();
            if json {
                let items: Vec<Value> = rows
                    .iter()
                    .map(|(k, c, s, p)| json!({"artifact": k.to_string(), "cause": c.to_string(), "seq": s, "path": p}))
                    .collect();
                outln!(ws, "{}", json!({"suspects": items}));
            } else if rows.is_empty() {
                outln!(ws, "no suspect artifacts");
            } else {
                let mut t = Table::new(&["SUSPECT", "BECAUSE", "AT SEQ", "PATH"]);
                for (k, c, s, p) in &rows {
                    t.row(vec![k.to_string(), c.to_string(), s.to_string(), p.clone()]);
                }
                out!(ws, "{}", t.render());
                outln!(ws, "clear each with `strata artifact review <id>` once checked");
            }
            Ok(ExitCode::SUCCESS)
        }
        GraphCommand::Entities => {
            let g = load_graph(journal)?;
            let entities = g.entities();
            if json {
                let items: Vec<Value> = entities
                    .iter()
                    .map(|e| {
                        let counts: serde_json::Map<String, Value> =
                            e.counts.iter().map(|(k, v)| (k.name().to_owned(), json!(v))).collect();
                        json!({"id": e.id, "name": e.name, "tier": e.tier, "state": e.state, "counts": counts})
                    })
                    .collect();
                outln!(ws, "{}", json!({"entities": items}));
            } else {
                let kinds = [
                    ArtifactKind::BrdRequirement,
                    ArtifactKind::FunctionalDomain,
                    ArtifactKind::BackendModule,
                    ArtifactKind::UiScreen,
                    ArtifactKind::ChangeRequest,
                    ArtifactKind::Issue,
                ];
                let mut t =
                    Table::new(&["TIER", "ENTITY", "STATE", "REQS", "DOMAINS", "MODULES", "SCREENS", "CRS", "ISSUES"]);
                for e in &entities {
                    let mut row = vec![e.tier.clone(), e.id.clone(), e.state.clone()];
                    row.extend(kinds.iter().map(|k| e.counts.get(k).copied().unwrap_or(0).to_string()));
                    t.row(row);
                }
                out!(ws, "{}", t.render());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

pub(crate) fn fixture(
    o: &crate::output::Out,
    seed: u64,
    out: &Path,
    plant: &[String],
    json: bool,
) -> anyhow::Result<ExitCode> {
    use strata_engine::kb::fixture::{Defect, FixtureSpec, generate, plant as plant_defect};
    if out.exists() && std::fs::read_dir(out)?.next().is_some() {
        anyhow::bail!("[STRATA-E0602] {} exists and is not empty; choose a new --out", out.display());
    }
    let mut fx = generate(&FixtureSpec::seed_scale(seed));
    let mut planted = Vec::new();
    for (i, name) in plant.iter().enumerate() {
        let defect = match name.as_str() {
            "missing-inverse" => Defect::MissingInverse,
            "dangling" => Defect::Dangling,
            "cycle" => Defect::Cycle,
            "cross-entity" => Defect::CrossEntity,
            "module-cycle" => Defect::ModuleCycle,
            "module-cross-entity" => Defect::ModuleCrossEntity,
            "unresolved-call" => Defect::UnresolvedCall,
            other => anyhow::bail!(
                "[STRATA-E0804] unknown defect {other:?}; choose missing-inverse, dangling, cycle, cross-entity, module-cycle, module-cross-entity or unresolved-call"
            ),
        };
        let p = plant_defect(&mut fx, defect, seed.wrapping_add(i as u64))
            .ok_or_else(|| anyhow::anyhow!("[STRATA-E0804] the fixture has no place to plant {name}"))?;
        planted.push(p);
    }
    let files = fx.files();
    for f in &files {
        let path = out.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, &f.bytes).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let specs = fx.drafts.iter().filter(|d| d.key.kind.is_spec()).count();
    if json {
        let p: Vec<Value> = planted
            .iter()
            .map(|p| json!({"rule": p.rule, "artifact": p.artifact.to_string(), "field": p.field}))
            .collect();
        outln!(
            o,
            "{}",
            json!({"seed": seed, "out": out.display().to_string(), "files": files.len(), "spec_files": specs, "planted": p})
        );
    } else {
        outln!(o, "wrote {} files ({specs} specification files) to {} (seed {seed})", files.len(), out.display());
        for p in &planted {
            outln!(
                o,
                "planted {} at {}{}",
                p.rule,
                p.artifact,
                if p.field.is_empty() { String::new() } else { format!(".{}", p.field) }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
