//! `strata audit file|session|run`: answers from the journal alone about what workers wrote and
//! what they had been given before they wrote it. Nothing is read from the repository or from
//! files the run left behind: the `workgroups`, `context` and `telemetry` projections are rebuilt
//! from the journal (or its snapshots, which carry the journal hash they were taken at).

use std::process::ExitCode;

use serde_json::{Value, json};
use strata_engine::context::state::ContextState;
use strata_engine::workgroup::models::Choice;
use strata_engine::workgroup::state::{Workgroups, Write};
use strata_journal::projection::catch_up_one;

use super::context::AuditCommand;
use crate::app::workspace::Workspace;
use crate::coordinator::summary;
use crate::table::Table;

/// The prompt assembly a write followed: the one recorded for its task with its hash, before it.
fn prompt_of(context: &ContextState, w: &Write) -> Value {
    let found = context
        .prompts
        .of_task(&w.prompt_task)
        .into_iter()
        .filter(|(_, r)| r.seq < w.seq && r.manifest.prompt_hash == w.prompt_hash)
        .max_by_key(|(_, r)| r.seq);
    match found {
        Some((version, r)) => json!({
            "task": w.prompt_task, "version": version, "recorded_at": r.seq, "prompt_hash": r.manifest.prompt_hash,
            "profile": r.manifest.profile, "profile_version": r.manifest.profile_version,
            "tokens": r.manifest.total_tokens, "items": r.manifest.included.len(), "left_out": r.manifest.excluded.len(),
            "superseded_items": r.superseded.len(),
        }),
        None => Value::Null,
    }
}

/// The guard's refusals for workgroup `wg` (and `task`, when given), in journal order, each with
/// the path it refused.
fn denials_of(groups: &Workgroups, wg: &str, task: Option<&str>) -> Vec<Value> {
    let mut found: Vec<(u64, Value)> = Vec::new();
    for (path, ds) in groups.denials() {
        for d in ds {
            let ours = d.workgroup.as_deref() == Some(wg) && task.is_none_or(|t| d.task.as_deref() == Some(t));
            if ours {
                let mut v = serde_json::to_value(d).unwrap_or(Value::Null);
                if let Some(o) = v.as_object_mut() {
                    o.insert("path".into(), path.clone().into());
                }
                found.push((d.seq, v));
            }
        }
    }
    found.sort_by_key(|(seq, _)| *seq);
    found.into_iter().map(|(_, v)| v).collect()
}

/// The guard's refusals as a table.
fn denial_table(denied: &[Value]) -> String {
    let mut t = Table::new(&["seq", "task", "tool", "path", "reason"]);
    for d in denied {
        let text = |k: &str| d[k].as_str().unwrap_or("-").to_owned();
        t.row(vec![d["seq"].to_string(), text("task"), text("tool"), text("path"), text("reason")]);
    }
    t.render()
}

/// Normalises a path argument to the repository-relative form writes are recorded in.
fn relative(path: &str) -> String {
    let mut p = path.trim();
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    p.trim_end_matches('/').to_owned()
}

pub(crate) fn run(
    ws: &Workspace,
    cmd: AuditCommand,
    json: bool,
    paint: crate::style::Paint,
) -> anyhow::Result<ExitCode> {
    let journal = ws.open_journal("audit")?;
    let mut groups = Workgroups::default();
    let mut context = ContextState::default();
    catch_up_one(&mut groups, &journal)?;
    catch_up_one(&mut context, &journal)?;
    ws.finish(&journal)?;
    match cmd {
        AuditCommand::Context { .. } => anyhow::bail!("audit context is answered by the context commands"),
        AuditCommand::File { path } => {
            let path = relative(&path);
            let writes = groups.writes().get(&path).cloned().unwrap_or_default();
            let rows: Vec<Value> = writes
                .iter()
                .map(|w| {
                    let mut v = serde_json::to_value(w).unwrap_or(Value::Null);
                    if let Some(o) = v.as_object_mut() {
                        o.insert("prompt".into(), prompt_of(&context, w));
                    }
                    v
                })
                .collect();
            let denied = groups.denials().get(&path).cloned().unwrap_or_default();
            if json {
                outln!(ws, "{}", json!({"path": path, "writes": rows, "denied": denied}));
                return Ok(ExitCode::SUCCESS);
            }
            if !denied.is_empty() {
                let mut t = Table::new(&["seq", "lineage", "workgroup", "task", "tool", "reason"]);
                for d in &denied {
                    t.row(vec![
                        d.seq.to_string(),
                        d.lineage_id.clone(),
                        d.workgroup.clone().unwrap_or_else(|| "-".into()),
                        d.task.clone().unwrap_or_else(|| "-".into()),
                        d.tool.clone().unwrap_or_else(|| "-".into()),
                        d.reason.clone(),
                    ]);
                }
                outln!(
                    ws,
                    "denied writes of {path} (the write guard refused them; nothing was written)\n{}",
                    t.render()
                );
            }
            if rows.is_empty() {
                outln!(
                    ws,
                    "no recorded write of {path} (writes are recorded from completed tasks' diffs and allowed hook calls)"
                );
            } else {
                let mut t = Table::new(&[
                    "seq",
                    "source",
                    "workgroup",
                    "task",
                    "attempt",
                    "session",
                    "prompt",
                    "prompt seq",
                    "tokens",
                ]);
                for (w, r) in writes.iter().zip(&rows) {
                    t.row(vec![
                        w.seq.to_string(),
                        w.source.to_owned(),
                        w.workgroup.clone(),
                        w.task.clone(),
                        w.attempt.to_string(),
                        w.session_id.clone().unwrap_or_else(|| "-".into()),
                        format!("{} {}", w.prompt_task, short(&w.prompt_hash)),
                        r["prompt"]["recorded_at"].as_u64().map_or("-".into(), |s| s.to_string()),
                        r["prompt"]["tokens"].as_u64().map_or("-".into(), |s| s.to_string()),
                    ]);
                }
                outln!(ws, "{}", t.render());
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Commit { sha, repo } => super::audit_commit::run(&groups, ws, &sha, repo.as_deref(), json, paint),
        AuditCommand::Session { id } => {
            let found = groups.by_session(&id);
            if found.is_empty() {
                anyhow::bail!(
                    "[STRATA-E1703] no task in this journal ran in session {id}; `strata audit run WG` lists sessions"
                );
            }
            let rows: Vec<Value> =
                found.into_iter().map(|(wg, task, s)| task_row(&groups, Some(&context), wg, task, s)).collect();
            if json {
                outln!(ws, "{}", json!({"session": id, "tasks": rows}));
            } else {
                outln!(ws, "session {id}\n{}", task_table(&rows, paint));
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Run { workgroup } => {
            let Some(g) = groups.get(&workgroup) else {
                let known: Vec<&str> = groups.groups().keys().map(String::as_str).collect();
                anyhow::bail!(
                    "[STRATA-E1703] no workgroup {workgroup} in this journal; known: {}",
                    if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                );
            };
            let s = summary(g);
            let denied = denials_of(&groups, &workgroup, None);
            // Every gate decision recorded: passed with a dispatch, refused with a hold.
            let gates: Vec<(String, &strata_engine::workgroup::gates::GateCheck)> = g
                .plan
                .tasks
                .iter()
                .filter_map(|t| {
                    let st = g.tasks.get(t.id())?;
                    let held = st.held.as_ref().and_then(|h| h.gate.as_deref());
                    let passed = st.dispatch.as_ref().and_then(|(_, d)| d.gate.as_ref());
                    held.or(passed).map(|c| (t.id().to_owned(), c))
                })
                .collect();
            // The routing evidence of each task's last dispatch.
            type Routed<'a> = (String, &'a strata_engine::workgroup::events::Evidence, Option<&'a Choice>);
            let routing: Vec<Routed<'_>> = g
                .plan
                .tasks
                .iter()
                .filter_map(|t| {
                    let (_, d) = g.tasks.get(t.id())?.dispatch.as_ref()?;
                    d.evidence.as_deref().map(|e| (t.id().to_owned(), e, d.model.as_ref()))
                })
                .collect();
            if json {
                let mut v = serde_json::to_value(&s)?;
                let sessions: Vec<Value> = g
                    .plan
                    .tasks
                    .iter()
                    .map(|t| json!({"task": t.id(), "session": g.tasks.get(t.id()).and_then(|s| s.session_id.clone())}))
                    .collect();
                if let Some(o) = v.as_object_mut() {
                    o.insert("plan_digest".into(), g.plan_digest.clone().into());
                    o.insert("sessions".into(), sessions.into());
                    o.insert("denied".into(), denied.into());
                    let gates: Vec<Value> = gates
                        .iter()
                        .map(|(task, c)| json!({"task": task, "gate": c.gate, "passed": c.passed, "reasons": c.reasons, "facts": c.facts, "builds": c.builds, "checks": c.checks, "suite": c.suite}))
                        .collect();
                    o.insert("gates".into(), gates.into());
                    // The planning gate's decision per phase, and the consolidated suite's last run.
                    o.insert("phases".into(), serde_json::to_value(g.planned.values().collect::<Vec<_>>())?);
                    o.insert("suite".into(), serde_json::to_value(g.suite.as_ref().map(|(_, x)| x))?);
                    let routing: Vec<Value> =
                        routing.iter().map(|(task, e, m)| json!({"task": task, "evidence": e, "model": m})).collect();
                    o.insert("routing".into(), routing.into());
                }
                outln!(ws, "{v}");
            } else {
                outln!(ws, "workgroup {} (plan {})", g.plan.workgroup, short(&g.plan_digest));
                super::run::print_summary(ws.out(), &s, None, false, paint)?;
                for (task, e, m) in &routing {
                    outln!(ws, "{task}: routed on {}; {}", evidence_line(e), model_line(*m));
                }
                for (task, c) in &gates {
                    let said =
                        if c.passed { "passed".to_owned() } else { format!("refused: {}", c.reasons.join("; ")) };
                    let on = if c.facts.change_request.is_empty() { "the plan" } else { &c.facts.change_request };
                    let builds =
                        if c.builds.is_empty() { String::new() } else { format!(" on {}", c.builds.join(", ")) };
                    outln!(ws, "{task}: {} gate ({on}) {said}{builds}", c.gate);
                }
                for p in g.planned.values() {
                    let said = if p.problems.is_empty() {
                        format!(
                            "passed: {} verified",
                            crate::plural::count(p.prompts.len() as u64, "prompt", "prompts")
                        )
                    } else {
                        format!("refused: {}", p.problems.join("; "))
                    };
                    outln!(ws, "{} phase: planning gate {said}", p.phase);
                }
                if let Some((_, x)) = &g.suite {
                    outln!(ws, "consolidated suite (run {}): {}", x.run, x.describe(g.plan.suite.len()));
                }
                if !denied.is_empty() {
                    outln!(
                        ws,
                        "{} refused by the write guard (nothing was written)\n{}",
                        crate::plural::count(denied.len() as u64, "write", "writes"),
                        denial_table(&denied)
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// One task's audit (`audit session`, `audit commit`): status, mode, prompt, files, violations,
/// usage, failure and the writes the guard refused it.
pub(crate) fn task_row(
    groups: &Workgroups,
    context: Option<&ContextState>,
    wg: &str,
    task: &str,
    s: &strata_engine::workgroup::state::TaskState,
) -> Value {
    let d = s.dispatch.as_ref().map(|(_, d)| d);
    let files = s.completed.as_ref().map(|(_, c)| c.files.clone()).unwrap_or_default();
    let prompt = d.map(|d| d.prompt.clone());
    let mut row = json!({
        "workgroup": wg, "task": task, "status": s.status.as_str(), "attempts": s.attempts,
        "provider": d.map(|d| d.provider.clone()), "mode": d.map(|d| d.runs_as.as_str()),
        "reason_codes": d.map(|d| d.reason_codes.clone()), "from_session": d.and_then(|d| d.from_session.clone()),
        "model": d.and_then(|d| d.model.clone()),
        "prompt": prompt, "files": files, "violations": s.violations,
        "usage": s.spent, "failure": s.failed.as_ref().map(|(_, f)| f.reason.clone()),
        "denied": denials_of(groups, wg, Some(task)),
    });
    // What the worker fetched later through get_context, and what it was refused.
    if let (Some(context), Some(o)) = (context, row.as_object_mut()) {
        let record = d.and_then(|d| {
            context
                .prompts
                .of_task(&d.prompt.prompt_task)
                .into_iter()
                .filter(|(_, r)| r.manifest.prompt_hash == d.prompt.prompt_hash)
                .max_by_key(|(_, r)| r.seq)
                .map(|(_, r)| r)
        });
        let fetched: Vec<Value> = record
            .map(|r| {
                r.fetched
                    .iter()
                    .flat_map(|(seq, f)| {
                        f.items.iter().map(move |i| {
                            json!({"seq": seq, "item": i.item, "level": i.level, "tokens": i.tokens,
                                "content_hash": i.content_hash, "reason": i.reason})
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let refused: Vec<Value> = record
            .map(|r| {
                r.refused
                    .iter()
                    .map(|(seq, f)| json!({"seq": seq, "asked": f.asked, "rule": f.rule, "reason": f.reason}))
                    .collect()
            })
            .unwrap_or_default();
        o.insert("fetched_later".into(), fetched.into());
        o.insert("refused_fetches".into(), refused.into());
    }
    row
}

/// [`task_row`]s as a table, a failed row red and a held one yellow.
pub(crate) fn task_table(rows: &[Value], paint: crate::style::Paint) -> String {
    // The fetched column where the rows say what was fetched later (`audit session`).
    let fetched = rows.iter().any(|r| r.get("fetched_later").is_some());
    let mut header = vec!["workgroup", "task", "status", "mode", "prompt tokens"];
    if fetched {
        header.push("fetched");
    }
    header.extend(["files", "violations", "denied"]);
    let mut t = Table::new(&header);
    for r in rows {
        let status = r["status"].as_str().unwrap_or_default();
        let mut cells = vec![
            r["workgroup"].as_str().unwrap_or_default().to_owned(),
            r["task"].as_str().unwrap_or_default().to_owned(),
            status.to_owned(),
            r["mode"].as_str().unwrap_or("-").to_owned(),
            r["prompt"]["tokens"].as_u64().map_or("-".into(), |n| n.to_string()),
        ];
        if fetched {
            cells.push(r["fetched_later"].as_array().map_or(0, Vec::len).to_string());
        }
        cells.extend([
            r["files"].as_array().map_or(0, Vec::len).to_string(),
            r["violations"].as_array().map_or(0, Vec::len).to_string(),
            r["denied"].as_array().map_or(0, Vec::len).to_string(),
        ]);
        t.toned_row(cells, crate::style::tone_of(status));
    }
    t.render_painted(paint)
}

/// One line of a dispatch's routing evidence.
fn evidence_line(e: &strata_engine::workgroup::events::Evidence) -> String {
    let opt = |v: Option<u64>, unit: &str| v.map_or("-".to_owned(), |n| format!("{n} {unit}"));
    format!(
        "node {}, {} {}, after [{}], coupling {}, reuse {}, sensitivity {}{}, {}capsule {}, prompt {} tokens, inherited {}, output {}, latency {}, candidate {}{}, nesting {}/{}, inherited writers {}/{}{}",
        e.node.as_deref().unwrap_or("-"),
        e.phase,
        e.role,
        e.after.join(", "),
        e.coupling,
        e.expected_reuse,
        e.sensitivity,
        if e.sensitivity_declared { "" } else { " (default)" },
        if e.independent_reviewer { "independent reviewer, " } else { "" },
        opt(e.capsule_bytes, "B"),
        e.prompt_tokens,
        opt(e.inherited_tokens, "tokens"),
        opt(e.expected_output_tokens, "tokens"),
        e.latency_priority,
        e.lineage_candidate.as_deref().unwrap_or("-"),
        e.invalidation.as_deref().map_or(String::new(), |s| format!(" ({s})")),
        e.nesting_depth,
        e.max_nesting_depth,
        e.active_inherited_writers,
        e.max_active_inherited,
        if e.efficiency { "" } else { ", context efficiency off" }
    )
}

/// What a dispatch's model choice says, for people.
fn model_line(m: Option<&Choice>) -> String {
    match m {
        None => "model: the provider's default (context efficiency off)".to_owned(),
        Some(c) => format!(
            "model {} (tier {} from the {})",
            c.name.as_deref().unwrap_or("the provider's default"),
            c.tier.as_str(),
            c.from
        ),
    }
}

fn short(hash: &str) -> &str {
    let h = hash.strip_prefix("sha256:").unwrap_or(hash);
    &h[..h.len().min(12)]
}
