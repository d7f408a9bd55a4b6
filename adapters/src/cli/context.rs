//! `strata summary …`, `strata profile …`, `strata prompt …`, `strata audit context` and
//! `strata context measure`: context assembly on the command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::{Value, json};
use strata_engine::context::assemble::{Assembly, Inputs, Manifest, Task, TokenCounter, assemble};
use strata_engine::context::profile::{self, BUILTIN, Profile};
use strata_engine::context::prompts;
use strata_engine::context::state::ContextState;
use strata_engine::context::summary::{self, Problem, Summaries};
use strata_journal::Journal;
use strata_journal::projection::catch_up_one;

use super::EXIT_PROBLEMS;
use crate::app::append::{Decided, decide_and_append};
use crate::app::kb::load_graph;
use crate::app::workspace::Workspace;
use crate::system::{SystemClock, V7Ids};
use crate::table::Table;

/// Largest profile or manifest file read.
pub const DOC_BYTES_MAX: u64 = 16 * 1024 * 1024;

#[derive(Subcommand, Debug)]
pub(crate) enum SummaryCommand {
    /// Print a summary: L3 (the system summary, or one entity's line) or L2 (one entity).
    Show {
        /// `L3` or `L2`.
        #[arg(long, default_value = "L3")]
        level: String,
        /// Entity (required for L2).
        entity: Option<String>,
    },
    /// Report every published summary that is stale (a source edited, added, deleted or renamed)
    /// or orphaned (its entity is gone), and every entity whose summaries were never published;
    /// exit 3 on any.
    Check,
    /// Publish the current summaries (only those that changed) and retract orphans.
    Publish,
}

#[derive(Subcommand, Debug)]
pub(crate) enum ProfileCommand {
    /// Register context profiles (JSON files) as new versions; an unchanged profile is skipped.
    Register {
        #[arg(value_parser = crate::cli::path_arg)]
        /// Profile files.
        files: Vec<PathBuf>,
        /// Also register the profiles strata ships (orchestrator, ui-developer,
        /// backend-developer, reviewer; `prompt assemble` registers one on first use).
        #[arg(long)]
        builtin: bool,
    },
    /// Every registered profile at its latest version.
    List,
    /// One profile as registered.
    Show {
        /// Agent id.
        id: String,
        /// Version (default: the latest).
        #[arg(long)]
        version: Option<u64>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum PromptCommand {
    /// Assemble a task's prompt under a profile: writes the prompt and its bill of materials
    /// and records a `prompt.assembled` event; a refusal writes nothing.
    Assemble {
        /// Task id (1 to 100 of A-Z a-z 0-9 . _ -).
        #[arg(long)]
        task: String,
        /// Registered profile (agent id).
        #[arg(long)]
        profile: String,
        /// Change request whose plan resolves the profile's template variables.
        #[arg(long)]
        plan: Option<String>,
        /// What the agent is asked to do (default: carry out the plan).
        #[arg(long)]
        objective: Option<String>,
        /// Prompt file to write.
        #[arg(value_parser = crate::cli::path_arg, long)]
        out: PathBuf,
        /// Manifest file to write (default: `<out>.manifest.json`).
        #[arg(value_parser = crate::cli::path_arg, long)]
        manifest: Option<PathBuf>,
    },
    /// Recompute a prompt from the journal at its manifest's position and confirm its hash,
    /// its bill of materials and its compliance; exit 3 on any difference.
    Verify {
        #[arg(value_parser = crate::cli::path_arg)]
        /// Manifest file.
        manifest: PathBuf,
        /// Prompt file (default: the manifest path without `.manifest.json`, if it exists).
        #[arg(value_parser = crate::cli::path_arg, long)]
        prompt: Option<PathBuf>,
    },
    /// List the knowledge base's virtual paths a glob matches, sorted: what a profile's entry or
    /// `never` glob reaches (artifacts, `summaries/L3`, `summaries/L2/<entity>`,
    /// `rules/pipeline`).
    Paths {
        /// A glob over virtual paths: `*` within a segment, `**` across segments, `?` one
        /// character; e.g. `specs/*/backend/**`.
        glob: String,
    },
}

/// Longest glob `prompt paths` takes, bytes (a profile's globs are at most as long).
pub const GLOB_BYTES_MAX: usize = 300;

#[derive(Subcommand, Debug)]
pub(crate) enum AuditCommand {
    /// What a task's agents were given, and why: every assembly, its items with their reasons,
    /// what was left out, and what has changed since.
    Context {
        /// Task id.
        #[arg(long)]
        task: String,
    },
    /// Which task, session and prompt preceded each recorded write of a file.
    File {
        /// Repository-relative path.
        path: String,
    },
    /// What a worker session did: its tasks, prompts, changes, violations and usage.
    Session {
        /// The provider's session id.
        id: String,
    },
    /// A workgroup's run: every task with its mode, reasons, prompt, outcome and cost.
    Run {
        /// The workgroup.
        workgroup: String,
    },
    /// From an integration commit to the journal: its `Strata-*` trailers name the workgroup,
    /// task, attempt, prompt and dispatch; the task's audit for that attempt, checked against
    /// them.
    Commit {
        /// The commit (any revision git resolves).
        sha: String,
        /// The repository holding it (default: the repositories the journal's workgroups ran
        /// on, then the workspace's directory).
        #[arg(long, value_parser = crate::cli::path_arg)]
        repo: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ContextCommand {
    /// Measure orientation and prompt sizes on the seed-scale fixture and write the report.
    Measure {
        /// Report to write.
        #[arg(value_parser = crate::cli::path_arg, long, default_value = "docs/context-efficiency.md")]
        out: PathBuf,
        /// Fixture seed.
        #[arg(long, default_value_t = 7)]
        seed: u64,
    },
}

/// The knowledge base and the context state at the journal head.
pub(crate) struct Loaded {
    pub journal: Journal,
    pub graph: strata_engine::kb::graph::Graph,
    pub state: ContextState,
    pub summaries: Summaries,
}

pub(crate) fn load(ws: &Workspace, command: &str) -> anyhow::Result<Loaded> {
    let journal = ws.open_journal(command)?;
    let mut graph = load_graph(&journal)?;
    let mut state = ContextState::default();
    catch_up_one(&mut state, &journal)?;
    let summaries = Summaries::build(&mut graph);
    Ok(Loaded { journal, graph, state, summaries })
}

fn read_doc(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    Ok(crate::files::read_bounded(path, DOC_BYTES_MAX, what)?)
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a reader never sees half.
fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let tmp = PathBuf::from(format!("{}.tmp-{}", path.display(), std::process::id()));
    let mut f = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

fn problem_text(p: &Problem) -> (String, String) {
    match p {
        Problem::Stale { changed, removed, added } => {
            let mut parts = Vec::new();
            if !changed.is_empty() {
                parts.push(format!("changed: {}", changed.join(", ")));
            }
            if !removed.is_empty() {
                parts.push(format!("gone (deleted or renamed away): {}", removed.join(", ")));
            }
            if !added.is_empty() {
                parts.push(format!("new (created or renamed in): {}", added.join(", ")));
            }
            ("stale".into(), parts.join("; "))
        }
        Problem::Orphaned => ("orphaned".into(), "its entity no longer exists".into()),
        Problem::Missing => ("missing".into(), "never published".into()),
    }
}

pub(crate) fn summary_cmd(ws: &Workspace, cmd: SummaryCommand, json: bool) -> anyhow::Result<ExitCode> {
    let l = load(ws, "summary")?;
    match cmd {
        SummaryCommand::Show { level, entity } => {
            let s = match (level.as_str(), entity.as_deref()) {
                ("L3", None) => l.summaries.system(&l.graph),
                ("L3", Some(e)) => l.summaries.line(e).cloned().ok_or_else(|| unknown_entity(&l, e))?,
                ("L2", Some(e)) => l.summaries.entity(e).cloned().ok_or_else(|| unknown_entity(&l, e))?,
                ("L2", None) => anyhow::bail!(
                    "[STRATA-E0906] an L2 summary is per entity; name one: `strata summary show --level L2 ENTITY`"
                ),
                (other, _) => anyhow::bail!(
                    "[STRATA-E0906] --level {other:?}: levels are L3 and L2 (L1 is the artifact itself: `strata artifact show`)"
                ),
            };
            let tokens = strata_engine::tokens::count(&s.text);
            if json {
                outln!(
                    ws,
                    "{}",
                    json!({"level": s.level, "entity": if s.entity.is_empty() { Value::Null } else { json!(s.entity) }, "text": s.text,
                           "hash": s.hash.to_hex(), "tokens": tokens, "tokenizer": strata_engine::tokens::TOKENIZER_ID, "sources": s.sources,
                           "position": l.journal.head().seq})
                );
            } else {
                out!(ws, "{}", s.text);
                errln!(
                    ws,
                    "({tokens} {} tokens, {} sources, journal sequence {})",
                    strata_engine::tokens::TOKENIZER_ID,
                    s.sources.len(),
                    l.journal.head().seq
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        SummaryCommand::Check => {
            let findings = summary::check(&l.summaries, &l.state.published);
            if json {
                let rows: Vec<Value> = findings
                    .iter()
                    .map(|f| {
                        let (problem, detail) = problem_text(&f.problem);
                        let mut v = json!({"level": f.level, "entity": f.entity, "problem": problem, "detail": detail});
                        if let Problem::Stale { changed, removed, added } = &f.problem {
                            v["changed"] = json!(changed);
                            v["removed"] = json!(removed);
                            v["added"] = json!(added);
                        }
                        v
                    })
                    .collect();
                outln!(
                    ws,
                    "{}",
                    json!({"ok": findings.is_empty(), "findings": rows, "position": l.journal.head().seq})
                );
            } else if findings.is_empty() {
                outln!(ws, "every published summary matches the knowledge base at sequence {}", l.journal.head().seq);
            } else {
                let mut t = Table::new(&["LEVEL", "ENTITY", "PROBLEM", "DETAIL"]);
                for f in &findings {
                    let (p, d) = problem_text(&f.problem);
                    t.row(vec![f.level.clone(), f.entity.clone(), p, d]);
                }
                out!(ws, "{}", t.render());
                errln!(
                    ws,
                    "{}; `strata summary publish` publishes the current summaries",
                    crate::plural::count(findings.len() as u64, "summary problem", "summary problems")
                );
            }
            Ok(if findings.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_PROBLEMS) })
        }
        SummaryCommand::Publish => {
            // Decided on the published summaries at the head, against the summaries of the graph
            // loaded above.
            let done = super::appended(
                decide_and_append(&l.journal, &mut ContextState::default(), |state| {
                    let appends = summary::publish(&l.summaries, &state.published, &mut V7Ids, &SystemClock)?;
                    let count = |t: &str| appends.iter().flat_map(|a| &a.events).filter(|e| e.event_type == t).count();
                    let answer = (count(summary::PUBLISHED), count(summary::RETRACTED));
                    Ok(Decided { appends, answer })
                }),
                anyhow::Error::msg::<String>,
            )?;
            let ((published, retracted), head) = (done.answer, done.seq);
            ws.finish(&l.journal)?;
            if json {
                outln!(ws, "{}", json!({"ok": true, "published": published, "retracted": retracted, "head": head}));
            } else {
                outln!(ws, "published {published} summaries, retracted {retracted} (head {head})");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn unknown_entity(l: &Loaded, e: &str) -> anyhow::Error {
    let known: Vec<String> = l.summaries.all().map(|(s, _)| s.entity.clone()).collect();
    anyhow::anyhow!("[STRATA-E0906] no entity {e:?} in the knowledge base; entities: {}", known.join(", "))
}

pub(crate) fn profile_cmd(ws: &Workspace, cmd: ProfileCommand, json: bool) -> anyhow::Result<ExitCode> {
    let journal = ws.open_journal("profile")?;
    let mut state = ContextState::default();
    catch_up_one(&mut state, &journal)?;
    match cmd {
        ProfileCommand::Register { files, builtin } => {
            if files.is_empty() && !builtin {
                anyhow::bail!("[STRATA-E0905] name profile files to register, or pass --builtin for the shipped ones");
            }
            let mut docs: Vec<(String, String)> = Vec::new();
            if builtin {
                docs.extend(BUILTIN.iter().map(|(n, t)| ((*n).to_owned(), (*t).to_owned())));
            }
            for f in &files {
                let bytes = read_doc(f, "profile")?;
                let text = String::from_utf8(bytes)
                    .map_err(|_| anyhow::anyhow!("[STRATA-E0901] {} is not UTF-8", f.display()))?;
                docs.push((f.display().to_string(), text));
            }
            // Validate everything before registering anything.
            let parsed: Vec<Profile> = docs.iter().map(|(n, t)| profile::parse(n, t)).collect::<Result<_, _>>()?;
            // A glob that matches nothing is registered (the knowledge base may grow into it),
            // but said: a run's preflight refuses it unless the profile lists it in `guards`.
            let graph = load_graph(&journal)?;
            for p in &parsed {
                for d in strata_engine::workgroup::preflight::dead_globs(p, &graph) {
                    errln!(
                        ws,
                        "warning: profile {}: {} {:?} matches no path in the knowledge base; `strata run` refuses it ({}) unless it is listed in guards; `strata prompt paths GLOB` lists what a glob matches",
                        p.agent_id,
                        d.at,
                        d.glob,
                        if d.never { "STRATA-E2110" } else { "STRATA-E2111" }
                    );
                }
            }
            // All of them in one append: each new or changed one as the next version of its stream.
            let done = super::appended(
                decide_and_append(&journal, &mut state, |state| {
                    let mut appends = Vec::new();
                    let mut changed = Vec::new();
                    for p in &parsed {
                        let a = profile::register(&state.profiles, p, &mut V7Ids, &SystemClock)?;
                        changed.push(a.is_some());
                        appends.extend(a);
                    }
                    Ok(Decided { appends, answer: changed })
                }),
                anyhow::Error::msg::<String>,
            )?;
            let rows: Vec<Value> = parsed
                .iter()
                .zip(done.answer)
                .map(|(p, registered)| {
                    let v = state.profiles.latest(&p.agent_id).map_or(0, |(v, _)| v);
                    json!({"profile": p.agent_id, "version": v, "registered": registered})
                })
                .collect();
            ws.finish(&journal)?;
            if json {
                outln!(ws, "{}", json!({"ok": true, "profiles": rows}));
            } else {
                for r in rows {
                    let what = if r["registered"] == true { "registered as" } else { "unchanged at" };
                    outln!(ws, "{} {what} version {}", r["profile"].as_str().unwrap_or(""), r["version"]);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ProfileCommand::List => {
            let all: Vec<(&str, u64, &Profile)> = state.profiles.all().collect();
            if json {
                let rows: Vec<Value> = all
                    .iter()
                    .map(|(id, v, p)| json!({"profile": id, "version": v, "tier": p.tier, "model": p.model, "tokenBudget": p.context_profile.token_budget, "maxFullSpecs": p.context_profile.max_full_specs, "hash": profile::hash(p).to_hex()}))
                    .collect();
                outln!(ws, "{}", json!({"profiles": rows}));
            } else if all.is_empty() {
                outln!(ws, "no profiles registered; `strata profile register --builtin` registers the shipped ones");
            } else {
                let mut t = Table::new(&["PROFILE", "VERSION", "TIER", "MODEL", "BUDGET", "MAX L1 SPECS"]);
                for (id, v, p) in all {
                    t.row(vec![
                        id.to_owned(),
                        v.to_string(),
                        p.tier.clone(),
                        p.model.clone(),
                        p.context_profile.token_budget.to_string(),
                        p.context_profile.max_full_specs.to_string(),
                    ]);
                }
                out!(ws, "{}", t.render());
            }
            Ok(ExitCode::SUCCESS)
        }
        ProfileCommand::Show { id, version } => {
            let found = match version {
                Some(v) => state.profiles.version(&id, v).map(|p| (v, p)),
                None => state.profiles.latest(&id),
            };
            let Some((v, p)) = found else {
                let known: Vec<&str> = state.profiles.all().map(|(k, _, _)| k).collect();
                anyhow::bail!(
                    "[STRATA-E0905] profile {id}{} is not registered; registered: {}",
                    version.map(|v| format!(" version {v}")).unwrap_or_default(),
                    if known.is_empty() {
                        "none (`strata profile register --builtin`)".into()
                    } else {
                        known.join(", ")
                    }
                );
            };
            if json {
                outln!(ws, "{}", json!({"profile": p, "version": v, "hash": profile::hash(p).to_hex()}));
            } else {
                outln!(ws, "{id} version {v} (hash {})", profile::hash(p).to_hex());
                outln!(ws, "{}", serde_json::to_string_pretty(p)?);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn default_manifest_path(out: &Path) -> PathBuf {
    PathBuf::from(format!("{}.manifest.json", out.display()))
}

pub(crate) fn prompt_cmd(ws: &Workspace, cmd: PromptCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        PromptCommand::Assemble { task, profile: pid, plan, objective, out, manifest } => {
            let config = ws.config()?;
            let mut l = load(ws, "prompt assemble")?;
            // A shipped profile is registered on first use.
            if l.state.profiles.latest(&pid).is_none()
                && let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == pid)
            {
                let p = profile::parse(name, text)?;
                let done = super::appended(
                    decide_and_append(&l.journal, &mut l.state, |state| {
                        let appends = profile::register(&state.profiles, &p, &mut V7Ids, &SystemClock)?;
                        Ok(Decided { appends: appends.into_iter().collect(), answer: () })
                    }),
                    anyhow::Error::msg::<String>,
                )?;
                if done.events > 0 && !json {
                    errln!(ws, "registered the shipped profile {pid} as version 1");
                }
            }
            let Some((version, p)) = l.state.profiles.latest(&pid) else {
                let known: Vec<&str> = l.state.profiles.all().map(|(k, _, _)| k).collect();
                anyhow::bail!(
                    "[STRATA-E0905] profile {pid} is not registered; registered: {}",
                    if known.is_empty() {
                        "none (`strata profile register --builtin`)".into()
                    } else {
                        known.join(", ")
                    }
                );
            };
            let objective = match (objective, &plan) {
                (Some(o), _) => o,
                (None, Some(cr)) => format!("Carry out change request {cr}."),
                (None, None) => anyhow::bail!("[STRATA-E0907] say what the task is: --objective TEXT (or --plan CR-n)"),
            };
            if objective.len() > 64 * 1024 {
                anyhow::bail!("[STRATA-E0907] --objective is {} bytes; the limit is 65536", objective.len());
            }
            let head = l.journal.head();
            let t = Task { id: task, objective, plan };
            let inputs = Inputs::at_head(&l.graph, &l.summaries, p, version, &t, &head);
            let mut tc = TokenCounter::new(config.token_factor(&p.model));
            let Assembly { prompt, manifest: m } = assemble(&inputs, &mut tc)?;
            let recorded = decide_and_append(&l.journal, &mut l.state, |_| {
                Ok(Decided { appends: vec![prompts::record(&m, &mut V7Ids, &SystemClock)?], answer: () })
            });
            let seq = super::appended(recorded, anyhow::Error::msg::<String>)?.seq;
            let manifest_path = manifest.unwrap_or_else(|| default_manifest_path(&out));
            write_atomic(&out, prompt.as_bytes())?;
            write_atomic(&manifest_path, format!("{}\n", serde_json::to_string_pretty(&m)?).as_bytes())?;
            ws.finish(&l.journal)?;
            if json {
                outln!(
                    ws,
                    "{}",
                    json!({"ok": true, "prompt": out.display().to_string(), "manifest": manifest_path.display().to_string(), "recorded_at": seq,
                           "total_tokens": m.total_tokens, "token_budget": m.token_budget, "included": m.included.len(), "excluded": m.excluded.len(),
                           "prompt_hash": m.prompt_hash, "position": m.position, "profile": m.profile, "profile_version": m.profile_version})
                );
            } else {
                outln!(
                    ws,
                    "assembled {} for task {} with {} v{}: {} of {} tokens, {} in, {} left out",
                    out.display(),
                    m.task.id,
                    m.profile,
                    m.profile_version,
                    m.total_tokens,
                    m.token_budget,
                    crate::plural::count(m.included.len() as u64, "item", "items"),
                    m.excluded.len()
                );
                outln!(ws, "bill of materials: {} (recorded at journal sequence {seq})", manifest_path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        PromptCommand::Paths { glob } => {
            if glob.is_empty() || glob.len() > GLOB_BYTES_MAX || glob.chars().any(char::is_control) {
                anyhow::bail!(
                    "[STRATA-E2112] glob {glob:?}: 1 to {GLOB_BYTES_MAX} bytes without control characters; e.g. `strata prompt paths 'specs/*/backend/**'`"
                );
            }
            let journal = ws.open_journal("prompt paths")?;
            let graph = load_graph(&journal)?;
            let paths = strata_engine::context::paths::virtual_paths(&graph, &glob);
            let position = journal.head().seq;
            ws.finish(&journal)?;
            if json {
                outln!(ws, "{}", json!({"glob": glob, "paths": paths, "count": paths.len(), "position": position}));
            } else {
                for p in &paths {
                    outln!(ws, "{p}");
                }
                errln!(
                    ws,
                    "{} {glob} at journal sequence {position}",
                    crate::plural::count(paths.len() as u64, "path matches", "paths match")
                );
                if paths.is_empty() {
                    errln!(ws, "{}", strata_engine::context::paths::LAYOUT);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        PromptCommand::Verify { manifest, prompt } => {
            let bytes = read_doc(&manifest, "manifest")?;
            let m: Manifest = serde_json::from_slice(&bytes)
                .map_err(|e| anyhow::anyhow!("[STRATA-E0908] {} is not a context manifest: {e}", manifest.display()))?;
            if m.format != strata_engine::context::assemble::MANIFEST_FORMAT {
                anyhow::bail!(
                    "[STRATA-E0908] {} has format {:?}; this strata reads {}",
                    manifest.display(),
                    m.format,
                    strata_engine::context::assemble::MANIFEST_FORMAT
                );
            }
            let prompt_path = prompt.or_else(|| {
                let s = manifest.display().to_string();
                s.strip_suffix(".manifest.json").map(PathBuf::from).filter(|p| p.exists())
            });
            let prompt_bytes = prompt_path.as_deref().map(|p| read_doc(p, "prompt")).transpose()?;
            let journal = ws.open_journal("prompt verify")?;
            let mut state = ContextState::default();
            catch_up_one(&mut state, &journal)?;
            let recorded: Vec<&prompts::PromptRecord> =
                state.prompts.of_task(&m.task.id).into_iter().map(|(_, r)| r).filter(|r| r.manifest == m).collect();
            // What was fetched later is checked too: each item re-rendered at the prompt's position.
            let fetched: Vec<&prompts::PromptRecord> =
                recorded.iter().copied().filter(|r| !r.fetched.is_empty()).collect();
            let mut problems = prompts::verify_with_fetched(&journal, &m, prompt_bytes.as_deref(), &fetched)
                .map_err(anyhow::Error::msg)?;
            if recorded.is_empty() {
                problems.push(format!("no prompt.assembled event of task {} records this manifest", m.task.id));
            }
            let fetches: usize = recorded.iter().map(|r| r.fetched.len()).sum();
            ws.finish(&journal)?;
            if json {
                outln!(
                    ws,
                    "{}",
                    json!({"ok": problems.is_empty(), "problems": problems, "prompt_checked": prompt_path.as_ref().map(|p| p.display().to_string()),
                           "prompt_hash": m.prompt_hash, "position": m.position})
                );
            } else if problems.is_empty() {
                outln!(
                    ws,
                    "verified: the journal at sequence {} under {} v{} gives exactly this prompt ({}) and bill of materials; {} of {} tokens, never-list and maxFullSpecs hold{}{}",
                    m.position,
                    m.profile,
                    m.profile_version,
                    &m.prompt_hash[..16],
                    m.total_tokens,
                    m.token_budget,
                    if fetches > 0 {
                        format!("; and the {} fetched later", crate::plural::count(fetches as u64, "serve", "serves"))
                    } else {
                        String::new()
                    },
                    if prompt_path.is_none() { " (no prompt file given: only the manifest was checked)" } else { "" }
                );
            } else {
                for p in &problems {
                    outln!(ws, "FAIL {p}");
                }
            }
            Ok(if problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_PROBLEMS) })
        }
    }
}

pub(crate) fn audit_cmd(
    ws: &Workspace,
    cmd: AuditCommand,
    json: bool,
    paint: crate::style::Paint,
) -> anyhow::Result<ExitCode> {
    let task = match cmd {
        AuditCommand::Context { task } => task,
        other => return super::audit::run(ws, other, json, paint),
    };
    let journal = ws.open_journal("audit")?;
    let mut state = ContextState::default();
    catch_up_one(&mut state, &journal)?;
    ws.finish(&journal)?;
    let found = state.prompts.of_task(&task);
    if found.is_empty() {
        anyhow::bail!(
            "[STRATA-E0909] task {task} has no assembled prompt; `strata prompt assemble --task {task} …` makes one"
        );
    }
    if json {
        let rows: Vec<Value> = found
            .iter()
            .map(|(v, r)| {
                let fetched: Vec<Value> = r.fetched.iter().map(|(seq, f)| json!({"seq": seq, "fetch": f})).collect();
                let refused: Vec<Value> = r.refused.iter().map(|(seq, f)| json!({"seq": seq, "refusal": f})).collect();
                json!({"version": v, "recorded_at": r.seq, "manifest": r.manifest, "superseded": r.superseded,
                       "fetched_later": fetched, "refused_fetches": refused})
            })
            .collect();
        outln!(ws, "{}", json!({"task": task, "prompts": rows}));
        return Ok(ExitCode::SUCCESS);
    }
    for (v, r) in found {
        let m = &r.manifest;
        outln!(
            ws,
            "prompt {v} of task {task}: recorded at sequence {}, assembled from sequence {} with {} v{}; {} of {} tokens ({}, x{}.{:03}); hash {}",
            r.seq,
            m.position,
            m.profile,
            m.profile_version,
            m.total_tokens,
            m.token_budget,
            m.tokenizer,
            m.factor_milli / 1000,
            m.factor_milli % 1000,
            &m.prompt_hash[..16]
        );
        outln!(ws, "objective: {}", m.task.objective);
        let mut t = Table::new(&["SECTION", "ITEM", "LEVEL", "TOKENS", "WHY"]);
        for i in &m.included {
            let level = match &i.degraded_from {
                Some(d) => format!("{} (asked {d})", i.level),
                None => i.level.clone(),
            };
            t.row(vec![i.section.clone(), i.item.clone(), level, i.tokens.to_string(), i.reason.clone()]);
        }
        out!(ws, "{}", t.render());
        if !m.excluded.is_empty() {
            outln!(ws, "left out:");
            let mut t = Table::new(&["ITEM", "LEVEL", "WHY"]);
            for i in &m.excluded {
                t.row(vec![i.item.clone(), i.level.clone(), i.reason.clone()]);
            }
            out!(ws, "{}", t.render());
        }
        if !m.offered.is_empty() {
            let names: Vec<String> = m.offered.iter().map(|i| format!("{} at {}", i.item, i.level)).collect();
            outln!(ws, "offered on demand: {}", names.join(", "));
        }
        if !r.fetched.is_empty() {
            outln!(ws, "fetched later (get_context):");
            let mut t = Table::new(&["SEQ", "ITEM", "LEVEL", "TOKENS", "WHY"]);
            for (seq, f) in &r.fetched {
                for i in &f.items {
                    t.row(vec![
                        seq.to_string(),
                        i.item.clone(),
                        i.level.clone(),
                        i.tokens.to_string(),
                        i.reason.clone(),
                    ]);
                }
            }
            out!(ws, "{}", t.render());
        }
        if !r.refused.is_empty() {
            outln!(ws, "refused requests (get_context):");
            let mut t = Table::new(&["SEQ", "ASKED", "RULE", "WHY ASKED"]);
            for (seq, f) in &r.refused {
                t.row(vec![seq.to_string(), f.asked.clone(), f.rule.clone(), f.reason.clone()]);
            }
            out!(ws, "{}", t.render());
        }
        if r.superseded.is_empty() {
            outln!(ws, "nothing it was given has changed since\n");
        } else {
            outln!(ws, "SUPERSEDED since: {}\n", r.superseded.keys().cloned().collect::<Vec<_>>().join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn context_cmd(o: &crate::output::Out, cmd: ContextCommand, json: bool) -> anyhow::Result<ExitCode> {
    let ContextCommand::Measure { out, seed } = cmd;
    let report = crate::measure::measure(seed)?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    write_atomic(&out, report.markdown.as_bytes())?;
    if json {
        outln!(o, "{}", json!({"ok": true, "out": out.display().to_string(), "figures": report.figures}));
    } else {
        out!(o, "{}", report.markdown);
        errln!(o, "wrote {}", out.display());
    }
    Ok(ExitCode::SUCCESS)
}
