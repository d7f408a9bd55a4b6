//! `strata knowledge …`: the Knowledge API on the command line (the same calls the MCP tools
//! make, through the same harness).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::json;
use strata_engine::knowledge::decide;
use strata_engine::knowledge::insights::{self, Params, Proposal};
use strata_engine::ports::Clock as _;

use strata_engine::knowledge::state::Knowledge;

use super::kb::{print_problems, read_sources};
use crate::app::append::{AppendError, Decided, decide_and_append};
use crate::app::workspace::Workspace;
use crate::harness::{DecisionArgs, GetArgs, Harness, LearningArgs, OutcomeArgs, StartArgs};
use crate::system::{SystemClock, V7Ids};
use crate::table::Table;

#[derive(Subcommand, Debug)]
pub(crate) enum KnowledgeCommand {
    /// Add concerns and projects to the vocabulary chunks and queries may use.
    Declare {
        /// Concern names (repeatable).
        #[arg(long = "concern")]
        concerns: Vec<String>,
        /// Project names (repeatable).
        #[arg(long = "project")]
        projects: Vec<String>,
    },
    /// Put chunk files (Markdown with front matter, or JSON; files or directories): new chunks
    /// get version 1, changed ones a new version, unchanged ones nothing. All or nothing.
    Put {
        /// Files or directories.
        #[arg(value_parser = crate::cli::path_arg, required = true)]
        paths: Vec<PathBuf>,
        /// Check and report without appending.
        #[arg(long)]
        dry_run: bool,
    },
    /// Import a repository's steering files (AGENTS.md, nested, the nearest winning; CLAUDE.md;
    /// .cursor/rules/*.mdc; .kiro/steering/*.md) as chunks: concerns from front matter or
    /// headings, project scope from the path. All or nothing; a re-import puts new versions only
    /// of what changed.
    Import {
        /// The repository's root (default: the workspace's directory).
        #[arg(long, value_parser = crate::cli::path_arg)]
        root: Option<PathBuf>,
        /// Check and report without appending.
        #[arg(long)]
        dry_run: bool,
    },
    /// Retire a chunk: it is never served again.
    Retire {
        /// Slug.
        slug: String,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
    },
    /// get_knowledge: chunks whose concerns overlap and whose scope holds the project or is
    /// shared. The serve is recorded. With `--suggest-for TEXT`, also the concerns suggested for
    /// that task text; with it and no `--concern`, only the suggestions (nothing recorded).
    Get {
        /// Concerns (repeatable).
        #[arg(long = "concern", required_unless_present = "suggest_for")]
        concerns: Vec<String>,
        /// A task text to suggest concerns for ("multi-currency rounding is wrong on invoices").
        #[arg(long)]
        suggest_for: Option<String>,
        /// Project (omit: shared chunks only).
        #[arg(long)]
        project: Option<String>,
        /// Session to link the serve to.
        #[arg(long)]
        session: Option<String>,
        /// What the agent is doing.
        #[arg(long)]
        task_context: Option<String>,
        /// Token cap of the answer.
        #[arg(long)]
        max_tokens: Option<u32>,
        /// Idempotency key: a retry with the same key gets the first answer, recorded once.
        #[arg(long)]
        key: Option<String>,
    },
    /// list_knowledge: every live chunk with its concerns, scope, token estimate and version.
    List,
    /// Start a session (the id is printed; pass it to get and log).
    Session {
        /// Session id (default: a new one).
        #[arg(long)]
        session: Option<String>,
        /// Agent or interface.
        #[arg(long)]
        agent: Option<String>,
        /// Project.
        #[arg(long)]
        project: Option<String>,
        /// What the session is for.
        #[arg(long)]
        task_context: Option<String>,
    },
    /// Log a learning, a decision or the outcome of a session.
    Log {
        /// Session id.
        #[arg(long)]
        session: String,
        /// A learning.
        #[arg(long, conflicts_with_all = ["decision", "outcome"])]
        learning: Option<String>,
        /// A decision.
        #[arg(long, conflicts_with = "outcome")]
        decision: Option<String>,
        /// Why (with --decision).
        #[arg(long, requires = "decision")]
        rationale: Option<String>,
        /// The outcome: success, failure, partial or abandoned.
        #[arg(long)]
        outcome: Option<String>,
        /// Details (with --outcome).
        #[arg(long, requires = "outcome")]
        detail: Option<String>,
        /// Concerns a learning relates to (repeatable).
        #[arg(long = "concern", requires = "learning")]
        concerns: Vec<String>,
        /// Idempotency key: a retry with the same key is recorded once.
        #[arg(long)]
        key: Option<String>,
    },
    /// Learned routing: merge, removal, review and bundle candidates, and what adopting them
    /// would have changed over the logged sessions.
    Insights {
        /// Only serves recorded at or after this instant (RFC 3339, e.g. 2026-11-01T00:00:00Z).
        #[arg(long)]
        since: Option<String>,
        /// Measure "unused" from this instant instead of now (RFC 3339).
        #[arg(long)]
        now: Option<String>,
        /// Days without a serve that make a chunk a removal candidate.
        #[arg(long, default_value_t = 30)]
        unused_days: u32,
        /// Fewest co-serves (merge) or queries (bundle) to report.
        #[arg(long, default_value_t = 3)]
        min_support: u32,
        /// Fewest judged sessions to review a chunk.
        #[arg(long, default_value_t = 5)]
        min_sessions: u32,
        /// Replay a proposal of your own: `remove:SLUG` or `merge:A+B` (repeatable).
        #[arg(long)]
        propose: Vec<String>,
    },
    /// Write the bundled example catalogue (18 chunks) as files, and print the vocabulary to
    /// declare for it.
    Example {
        /// Directory to write.
        #[arg(value_parser = crate::cli::path_arg, long)]
        out: PathBuf,
    },
}

fn rfc3339(what: &str, s: &str) -> anyhow::Result<i64> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).map_err(|e| {
        anyhow::anyhow!(
            "[STRATA-E1012] --{what} {s:?} is not an RFC 3339 instant ({e}); write e.g. 2026-11-01T00:00:00Z"
        )
    })?;
    i64::try_from(t.unix_timestamp_nanos())
        .map_err(|_| anyhow::anyhow!("[STRATA-E1012] --{what} {s:?} is out of range"))
}

fn parse_proposal(items: &[String]) -> anyhow::Result<Proposal> {
    let mut p = Proposal::default();
    for item in items {
        match item.split_once(':') {
            Some(("remove", slug)) => p.remove.push(slug.to_owned()),
            Some(("merge", pair)) => match pair.split_once('+') {
                Some((a, b)) => p.merge.push((a.to_owned(), b.to_owned())),
                None => anyhow::bail!("[STRATA-E1012] --propose {item:?}: write merge:A+B"),
            },
            _ => anyhow::bail!("[STRATA-E1012] --propose {item:?}: write remove:SLUG or merge:A+B"),
        }
    }
    Ok(p)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

pub(crate) fn run(ws: &Workspace, cmd: KnowledgeCommand, json: bool) -> anyhow::Result<ExitCode> {
    if let KnowledgeCommand::Example { out } = &cmd {
        return example(ws.out(), out, json);
    }
    let journal = ws.open_journal("knowledge")?;
    let h = Harness::new(journal)?;
    let rt = runtime()?;
    let code = match cmd {
        KnowledgeCommand::Example { .. } => ExitCode::SUCCESS,
        KnowledgeCommand::Declare { concerns, projects } => {
            if concerns.is_empty() && projects.is_empty() {
                anyhow::bail!("[STRATA-E1012] name at least one --concern or --project");
            }
            let done = super::appended(
                decide_and_append(h.journal(), &mut Knowledge::default(), |k| {
                    let a = decide::declare(k, &concerns, &projects, &mut V7Ids, &SystemClock)?;
                    Ok(Decided { appends: a.into_iter().collect(), answer: () })
                }),
                |e: strata_engine::knowledge::KnowledgeError| e.into(),
            )?;
            let (added, head) = (done.events > 0, done.seq);
            let (c, p) = h.read(|k| (k.concerns().count(), k.projects().count()))?;
            if json {
                outln!(ws, "{}", json!({"ok": true, "added": added, "concerns": c, "projects": p, "head": head}));
            } else if added {
                outln!(ws, "vocabulary now {c} concerns and {p} projects (head {head})");
            } else {
                outln!(ws, "already declared; vocabulary {c} concerns and {p} projects");
            }
            ExitCode::SUCCESS
        }
        KnowledgeCommand::Put { paths, dry_run } => {
            let files = read_sources(&paths, "knowledge put")?;
            let decided = decide_and_append(h.journal(), &mut Knowledge::default(), |k| {
                let plan = decide::put(k, &files, &mut V7Ids, &SystemClock)?;
                let appends = if dry_run { Vec::new() } else { plan.appends.clone() };
                Ok::<_, Vec<strata_engine::kb::intake::IntakeProblem>>(Decided { appends, answer: plan })
            });
            let done = match decided {
                Err(AppendError::Refused(problems)) => {
                    let summary = format!(
                        "[STRATA-E1013] put refused: {}; nothing was appended: fix the files listed",
                        crate::plural::count(problems.len() as u64, "problem", "problems")
                    );
                    print_problems(ws.out(), &problems, json, &summary);
                    return Ok(ExitCode::from(1));
                }
                r => super::appended(r, |_| anyhow::anyhow!("refusals are answered above"))?,
            };
            let plan = done.answer;
            let n = plan.appends.len();
            let head = if dry_run { h.journal().head().seq } else { done.seq };
            let rows = |v: &[(String, u64, u32)]| {
                v.iter().map(|(s, v, t)| json!({"slug": s, "version": v, "tokens": t})).collect::<Vec<_>>()
            };
            if json {
                outln!(
                    ws,
                    "{}",
                    json!({"ok": true, "dry_run": dry_run, "created": rows(&plan.created), "updated": rows(&plan.updated), "unchanged": plan.unchanged, "appended": if dry_run { 0 } else { n }, "head": head})
                );
            } else {
                for (s, v, t) in &plan.created {
                    outln!(ws, "new      {s} v{v} ({t} tokens)");
                }
                for (s, v, t) in &plan.updated {
                    outln!(ws, "changed  {s} v{v} ({t} tokens)");
                }
                outln!(
                    ws,
                    "{} {} new, {} changed, {} unchanged{}",
                    if dry_run { "would put" } else { "put" },
                    plan.created.len(),
                    plan.updated.len(),
                    plan.unchanged.len(),
                    if dry_run { " (dry run: nothing appended)".to_owned() } else { format!(" (head {head})") }
                );
            }
            ExitCode::SUCCESS
        }
        KnowledgeCommand::Import { root, dry_run } => {
            let root = root.map_or_else(|| ws.root().to_owned(), |r| ws.resolve(&r));
            import(ws.out(), &h, &root, dry_run, json)?
        }
        KnowledgeCommand::Retire { slug, reason } => {
            let done = super::appended(
                decide_and_append(h.journal(), &mut Knowledge::default(), |k| {
                    let a = decide::retire(k, &slug, reason.as_deref(), &mut V7Ids, &SystemClock)?;
                    Ok(Decided { appends: vec![a], answer: () })
                }),
                |e: strata_engine::knowledge::KnowledgeError| e.into(),
            )?;
            let head = done.seq;
            if json {
                outln!(ws, "{}", json!({"ok": true, "retired": slug, "head": head}));
            } else {
                outln!(ws, "retired {slug} (head {head})");
            }
            ExitCode::SUCCESS
        }
        KnowledgeCommand::Get { concerns, suggest_for, project, session, task_context, max_tokens, key } => {
            let only_suggest = concerns.is_empty();
            let r = rt.block_on(h.get_knowledge(GetArgs {
                concerns,
                project,
                session,
                task_context,
                max_tokens,
                idempotency_key: key,
                suggest_for,
            }))?;
            if json {
                outln!(ws, "{}", serde_json::to_string(&r)?);
            } else if only_suggest {
                print_suggested(ws.out(), &r.suggested);
            } else {
                for c in &r.chunks {
                    let scope =
                        if c.project_scope.is_empty() { "shared".to_owned() } else { c.project_scope.join(",") };
                    outln!(ws, "## {} ({scope}, v{}, {} tokens)\n\n{}\n", c.title, c.version, c.tokens, c.content);
                }
                let mut t = Table::new(&["SLUG", "SCOPE", "TOKENS"]);
                for c in &r.chunks {
                    t.row(vec![
                        c.slug.clone(),
                        if c.project_scope.is_empty() { "shared".into() } else { c.project_scope.join(",") },
                        c.tokens.to_string(),
                    ]);
                }
                out!(ws, "{}", t.render());
                outln!(
                    ws,
                    "{} chunks, {} tokens; serve {} at sequence {}",
                    r.chunks.len(),
                    r.total_tokens,
                    if r.duplicate { "already recorded (a retry: the first answer)" } else { "recorded" },
                    r.logged_at
                );
                if !r.omitted.is_empty() {
                    outln!(ws, "left out by the token cap: {}", r.omitted.join(", "));
                }
                if !r.suggested.is_empty() {
                    print_suggested(ws.out(), &r.suggested);
                }
            }
            ExitCode::SUCCESS
        }
        KnowledgeCommand::List => {
            let l = h.list_knowledge()?;
            if json {
                outln!(ws, "{}", serde_json::to_string(&l)?);
            } else {
                let mut t = Table::new(&["SLUG", "TITLE", "CONCERNS", "SCOPE", "TOKENS", "VERSION"]);
                for c in &l.chunks {
                    t.row(vec![
                        c.slug.clone(),
                        c.title.clone(),
                        c.concerns.join(","),
                        if c.project_scope.is_empty() { "shared".into() } else { c.project_scope.join(",") },
                        c.token_estimate.to_string(),
                        c.version.to_string(),
                    ]);
                }
                out!(ws, "{}", t.render());
                outln!(
                    ws,
                    "{} chunks; concerns: {}; projects: {}",
                    l.chunks.len(),
                    l.concerns.join(", "),
                    l.projects.join(", ")
                );
            }
            ExitCode::SUCCESS
        }
        KnowledgeCommand::Session { session, agent, project, task_context } => {
            let r = rt.block_on(h.start_session(StartArgs { session, agent, project, task_context }))?;
            if json {
                outln!(ws, "{}", serde_json::to_string(&r)?);
            } else {
                outln!(ws, "{}{}", r.session, if r.started { "" } else { " (already started)" });
            }
            ExitCode::SUCCESS
        }
        KnowledgeCommand::Log { session, learning, decision, rationale, outcome, detail, concerns, key } => {
            let logged = match (learning, decision, outcome) {
                (Some(text), None, None) => {
                    rt.block_on(h.log_learning(LearningArgs { session, text, concerns, idempotency_key: key }))?
                }
                (None, Some(decision), None) => {
                    rt.block_on(h.log_decision(DecisionArgs { session, decision, rationale, idempotency_key: key }))?
                }
                (None, None, Some(outcome)) => {
                    rt.block_on(h.log_outcome(OutcomeArgs { session, outcome, detail, idempotency_key: key }))?
                }
                _ => anyhow::bail!(
                    "[STRATA-E1012] log one thing: --learning TEXT, --decision TEXT or --outcome success|failure|partial|abandoned"
                ),
            };
            if json {
                outln!(ws, "{}", serde_json::to_string(&logged)?);
            } else {
                outln!(
                    ws,
                    "{} at sequence {}",
                    if logged.duplicate { "already recorded" } else { "recorded" },
                    logged.seq
                );
            }
            ExitCode::SUCCESS
        }
        KnowledgeCommand::Insights { since, now, unused_days, min_support, min_sessions, propose } => {
            let mut p = Params::at(match now {
                Some(n) => rfc3339("now", &n)?,
                None => SystemClock.now_ns(),
            });
            p.since_ns = since.map(|s| rfc3339("since", &s)).transpose()?;
            p.unused_days = unused_days;
            p.min_support = min_support.max(1);
            p.min_sessions = min_sessions.max(1);
            let proposal = parse_proposal(&propose)?;
            let (report, custom) = h.read(|k| {
                let custom = (!proposal.remove.is_empty() || !proposal.merge.is_empty())
                    .then(|| insights::replay(k, &p, &proposal));
                (insights::analyse(k, &p), custom)
            })?;
            if json {
                outln!(
                    ws,
                    "{}",
                    json!({"insights": report, "your_proposal": custom.map(|r| json!({"proposal": proposal, "replay": r}))})
                );
            } else {
                print_insights(ws.out(), &report, custom.as_ref().map(|r| (&proposal, r)));
            }
            ExitCode::SUCCESS
        }
    };
    ws.finish(h.journal())?;
    Ok(code)
}

/// `strata knowledge import`: reads the steering files under `root` and puts them as chunks in
/// one decision (the vocabulary they need declared in the same append).
fn import(o: &crate::output::Out, h: &Harness, root: &Path, dry_run: bool, json: bool) -> anyhow::Result<ExitCode> {
    use strata_engine::knowledge::steering;
    let files = crate::steering::read(root)?;
    let decided = decide_and_append(h.journal(), &mut Knowledge::default(), |k| {
        let plan = steering::import(k, &files, &mut V7Ids, &SystemClock)?;
        let appends = if dry_run { Vec::new() } else { plan.put.appends.clone() };
        Ok::<_, Vec<strata_engine::kb::intake::IntakeProblem>>(Decided { appends, answer: plan })
    });
    let done = match decided {
        Err(AppendError::Refused(problems)) => {
            let summary = format!(
                "[STRATA-E2655] import of {} refused: {}; nothing was appended: fix the files listed",
                root.display(),
                crate::plural::count(problems.len() as u64, "problem", "problems")
            );
            print_problems(o, &problems, json, &summary);
            return Ok(ExitCode::from(1));
        }
        r => super::appended(r, |_| anyhow::anyhow!("refusals are answered above"))?,
    };
    let plan = done.answer;
    let events = if dry_run { 0 } else { done.events };
    let head = if dry_run { h.journal().head().seq } else { done.seq };
    if json {
        let rows = |v: &[(String, u64, u32)]| {
            v.iter().map(|(s, v, t)| json!({"slug": s, "version": v, "tokens": t})).collect::<Vec<_>>()
        };
        outln!(
            o,
            "{}",
            json!({"ok": true, "dry_run": dry_run, "root": root.display().to_string(), "files": files.iter().map(|f| &f.path).collect::<Vec<_>>(), "empty": plan.empty, "declared": {"concerns": plan.declared.0, "projects": plan.declared.1}, "created": rows(&plan.put.created), "updated": rows(&plan.put.updated), "unchanged": plan.put.unchanged, "retired": plan.retired, "appended": events, "head": head})
        );
        return Ok(ExitCode::SUCCESS);
    }
    for (s, v, t) in &plan.put.created {
        outln!(o, "new      {s} v{v} ({t} tokens)");
    }
    for (s, v, t) in &plan.put.updated {
        outln!(o, "changed  {s} v{v} ({t} tokens)");
    }
    for f in &plan.empty {
        outln!(o, "empty    {f} (no chunk)");
    }
    for s in &plan.retired {
        outln!(o, "retired  {s} (its file or section is gone)");
    }
    outln!(
        o,
        "{} from {}: {} new, {} changed, {} unchanged, {} retired; {} and {} declared{}",
        if dry_run { "would import" } else { "imported" },
        crate::plural::count(files.len() as u64, "steering file", "steering files"),
        plan.put.created.len(),
        plan.put.updated.len(),
        plan.put.unchanged.len(),
        plan.retired.len(),
        crate::plural::count(plan.declared.0.len() as u64, "concern", "concerns"),
        crate::plural::count(plan.declared.1.len() as u64, "project", "projects"),
        if dry_run { " (dry run: nothing appended)".to_owned() } else { format!(" (head {head})") }
    );
    Ok(ExitCode::SUCCESS)
}

/// A change in tokens served as words, never a negative saving: `88 fewer`, `88 more`, `same`.
fn token_change(saved: i64) -> String {
    match saved {
        0 => "same".to_owned(),
        n if n > 0 => format!("{n} fewer"),
        n => format!("{} more", n.unsigned_abs()),
    }
}

fn print_insights(o: &crate::output::Out, r: &insights::Insights, custom: Option<(&Proposal, &insights::Replay)>) {
    outln!(o, "{} serves in {} sessions ({} with an outcome)", r.serves, r.sessions, r.sessions_with_outcome);
    outln!(o, "\nmerge candidates (served together):");
    let mut t =
        Table::new(&["A", "B", "TOGETHER", "SUPPORT", "CONF A→B", "CONF B→A", "LIFT", "CANDIDATE", "TOKENS IF MERGED"]);
    for m in &r.merge {
        t.row(vec![
            m.a.clone(),
            m.b.clone(),
            m.together.to_string(),
            format!("{:.2}", m.support),
            format!("{:.2}", m.confidence_a_to_b),
            format!("{:.2}", m.confidence_b_to_a),
            format!("{:.2}", m.lift),
            if m.candidate { "yes".into() } else { "no".into() },
            token_change(m.replay.tokens_saved),
        ]);
    }
    out!(o, "{}", t.render());
    outln!(o, "\nremoval candidates (not served recently):");
    let mut t = Table::new(&["SLUG", "DAYS UNUSED", "TOKENS", "SESSIONS LOSING A USED CHUNK"]);
    for u in &r.removal {
        t.row(vec![
            u.slug.clone(),
            u.days_unused.to_string(),
            u.tokens.to_string(),
            u.replay.sessions_losing_a_used_chunk.len().to_string(),
        ]);
    }
    out!(o, "{}", t.render());
    outln!(o, "\nreview candidates (sessions fail more often with the chunk):");
    let mut t = Table::new(&["SLUG", "FAILED/SERVED", "FAILED/OTHER", "P (FISHER)", "CANDIDATE"]);
    for v in &r.review {
        t.row(vec![
            v.slug.clone(),
            format!("{}/{}", v.failures_served, v.sessions_served),
            format!("{}/{}", v.failures_other, v.sessions_other),
            format!("{:.4}", v.p_value),
            if v.candidate { "yes".into() } else { "no".into() },
        ]);
    }
    out!(o, "{}", t.render());
    outln!(o, "\nbundle candidates (frequent concern combinations):");
    let mut t = Table::new(&["CONCERNS", "QUERIES", "SHARE", "TOP CHUNKS"]);
    for b in &r.bundles {
        let top: Vec<String> = b.chunks.iter().take(5).map(|(s, n)| format!("{s}×{n}")).collect();
        t.row(vec![b.concerns.join("+"), b.queries.to_string(), format!("{:.2}", b.share), top.join(" ")]);
    }
    out!(o, "{}", t.render());
    let show = |label: &str, p: &Proposal, x: &insights::Replay| {
        outln!(
            o,
            "\n{label}: remove {:?}, merge {:?}\n  {} serves would change; tokens {} → {} ({}); sessions that would have lost a chunk they used: {}",
            p.remove,
            p.merge,
            x.serves_changed,
            x.tokens_before,
            x.tokens_after,
            token_change(x.tokens_saved),
            if x.sessions_losing_a_used_chunk.is_empty() {
                "none".to_owned()
            } else {
                x.sessions_losing_a_used_chunk.join(", ")
            }
        );
    };
    show("adopting every candidate", &r.proposal, &r.proposal_replay);
    if let Some((p, x)) = custom {
        show("your proposal", p, x);
    }
}

fn print_suggested(o: &crate::output::Out, suggested: &[crate::harness::SuggestedOut]) {
    if suggested.is_empty() {
        outln!(o, "no concern suggested: no live chunk that applies matches the text");
        return;
    }
    let mut t = Table::new(&["CONCERN", "SCORE", "CHUNKS", "MATCHED"]);
    for s in suggested {
        t.row(vec![s.concern.clone(), format!("{:.4}", s.score), s.chunks.join(","), s.matched.join(" ")]);
    }
    out!(o, "{}", t.render());
    let n = suggested.len();
    outln!(
        o,
        "{n} suggested {} (pass one with --concern to be served its chunks)",
        if n == 1 { "concern" } else { "concerns" }
    );
}

fn example(o: &crate::output::Out, out: &Path, json: bool) -> anyhow::Result<ExitCode> {
    use strata_engine::knowledge::fixture::{EXAMPLE_CONCERNS, EXAMPLE_PROJECTS, example};
    if out.exists() && std::fs::read_dir(out).map(|mut d| d.next().is_some()).unwrap_or(true) {
        anyhow::bail!("[STRATA-E0602] {} exists and is not empty; choose a new --out", out.display());
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let files = example();
    for f in &files {
        std::fs::write(out.join(&f.path), &f.bytes).with_context(|| format!("cannot write {}", f.path))?;
    }
    let declare = format!(
        "strata knowledge declare {} {}",
        EXAMPLE_CONCERNS.iter().map(|c| format!("--concern {c}")).collect::<Vec<_>>().join(" "),
        EXAMPLE_PROJECTS.iter().map(|p| format!("--project {p}")).collect::<Vec<_>>().join(" ")
    );
    if json {
        outln!(
            o,
            "{}",
            json!({"ok": true, "files": files.len(), "out": out.display().to_string(), "concerns": EXAMPLE_CONCERNS, "projects": EXAMPLE_PROJECTS})
        );
    } else {
        outln!(o, "wrote {} chunk files to {}", files.len(), out.display());
        outln!(o, "declare their vocabulary first:\n  {declare}\nthen: strata knowledge put {}", out.display());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_token_change_is_fewer_or_more_never_a_negative_saving() {
        assert_eq!(super::token_change(88), "88 fewer");
        assert_eq!(super::token_change(-88), "88 more");
        assert_eq!(super::token_change(0), "same");
    }
}
