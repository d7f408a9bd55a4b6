//! `strata run PLAN`: a coordinator runs a workgroup's plan end to end on the workspace's
//! journal (see [`crate::coordinator`]); `--resume WG` continues one after a crash; `--example`
//! builds the bundled example (knowledge base, git repository, plan) in a throwaway directory and
//! runs it with the simulated provider.
//!
//! Every run starts with the preflight ([`crate::coordinator::preflight`], deciding through the
//! engine's `workgroup::preflight::check`): every problem it finds is listed at once and the run
//! is refused before anything is recorded. `--check` runs only the preflight.
//!
//! Exit codes: 0 when every task completed (or `--check` found nothing), 3 when a task failed or
//! was held or the plan's consolidated suite failed, 4 when a safety boundary paused the
//! workgroup, 1 on an error or a refused preflight.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use strata_engine::workgroup::plan::Plan;
use strata_engine::workgroup::preflight::{CliFact, Facts, NOT_CHECKED, Problem, RepoFact};

use super::EXIT_PROBLEMS;
use crate::app::workspace::Workspace;
use crate::coordinator::preflight::{self, Subject};
use crate::coordinator::{Coordinator, Measured, Options, Summary, example, summary};
use crate::table::Table;
use strata_engine::workgroup::state::Status;

/// Largest plan file, bytes.
pub const PLAN_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// `strata run`'s arguments.
#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    /// The plan (TOML: workgroup, parallel, provider, pipeline, [[task]] with id, role,
    /// objective, owns, after, phase, sensitivity, change_request, specs, profile, provider,
    /// trivial, continues).
    #[arg(value_parser = crate::cli::path_arg, conflicts_with_all = ["resume", "example"], required_unless_present_any = ["resume", "example"])]
    plan: Option<PathBuf>,
    /// Continue workgroup WG from the journal after a crash or stop.
    #[arg(long, value_name = "WG")]
    resume: Option<String>,
    /// Build and run the bundled example (knowledge base, repository, plan) in --at.
    #[arg(long)]
    example: bool,
    /// Where --example builds its workspace (replaced if it holds an earlier example).
    #[arg(value_parser = crate::cli::path_arg, long, default_value = "target/strata-example")]
    at: PathBuf,
    /// The git repository writing tasks change (default: the workspace directory).
    #[arg(value_parser = crate::cli::path_arg, long)]
    repo: Option<PathBuf>,
    /// Run every task on this provider: sim, claude, codex or auto.
    #[arg(long, value_parser = ["sim", "claude", "codex", "auto"])]
    provider: Option<String>,
    /// Seed of the simulated provider's model (a new workgroup records it).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Simulated latency is waited for divided by this; 0 does not wait.
    #[arg(long, default_value_t = 1000)]
    time_scale: u64,
    /// What a write outside a task's owned files does. Both record a `task.write-violation` event
    /// with the paths, and neither integrates anything of that attempt: the worker's commit
    /// (owned files included) is not applied to the integration branch and its worktree is
    /// removed. `flag`: the task still counts as completed (with no files), the tasks after it
    /// run without its changes, and the run's exit code does not change. `stop` (default): the
    /// task fails and is not retried, the tasks that wait for it and later phases are held,
    /// and the run exits 3.
    #[arg(long, default_value = "stop", value_parser = ["flag", "stop"])]
    on_violation: String,
    /// Run only the preflight: list every problem the run would meet (plan, profiles, change
    /// requests and specs, owned paths, repository, provider CLIs, profile globs), record
    /// nothing; exit 1 if there is any.
    #[arg(long)]
    check: bool,
    /// Decide every dispatch under rollout NAME (`strata rollout start`): both of its policies as
    /// its stage asks, each decision recorded; bounded by `[context_efficiency] rollout` and
    /// `canary_percent`. A resumed run keeps its rollout.
    #[arg(long, value_name = "NAME", conflicts_with = "resume")]
    rollout: Option<String>,
}

pub(crate) fn run(
    o: &crate::output::Out,
    dir: &Path,
    args: RunArgs,
    json: bool,
    paint: crate::style::Paint,
) -> anyhow::Result<ExitCode> {
    let (ws, plan_text, repo) = if args.example {
        let (ws, repo) = example::build(&args.at)?;
        (ws, Some(example::PLAN.to_owned()), Some(repo))
    } else {
        let text = match &args.plan {
            Some(p) => Some(read_plan(p)?),
            None => None,
        };
        (Workspace::at(dir), text, args.repo.clone().or_else(|| Some(dir.to_path_buf())))
    };
    let config = ws.config()?;
    let journal = ws.open_journal("run")?;
    // The preflight, before anything is recorded: a run with problems appends nothing (not even
    // the built-in profiles a run registers), and makes no branch or worktree.
    let subject = match (&plan_text, &args.resume) {
        (Some(text), _) => match toml::from_str::<Plan>(text) {
            // A plan that names no `parallel` gets the efficiency profile's.
            Ok(mut plan) => {
                plan.parallel.get_or_insert(config.efficiency.parallel);
                Subject::New(Box::new(plan))
            }
            Err(e) => {
                let p = Problem {
                    code: "STRATA-E1701",
                    input: args.plan.as_ref().map_or("the plan".into(), |p| p.display().to_string()),
                    rule: format!("not valid TOML of the plan's shape: {}", e.to_string().trim()),
                    fix: "fix the plan file (fields in `strata run --help`)".into(),
                };
                return refuse(o, None, &[p], None, json);
            }
        },
        (None, Some(wg)) => Subject::Resume(wg.clone()),
        (None, None) => anyhow::bail!("give a PLAN, --resume WG or --example"),
    };
    let report = preflight::run(&journal, &config, &subject, args.provider.as_deref(), repo.as_deref())?;
    // What the installed CLIs can do, as their help shows: a mode the CLI lacks degrades.
    let detected: BTreeMap<String, Vec<String>> = report
        .as_ref()
        .map(|r| {
            r.facts
                .clis
                .iter()
                .filter_map(|(p, f)| match f {
                    CliFact::Found { capabilities, .. } => Some((p.clone(), capabilities.clone())),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let checked = match report {
        Some(r) => match r.result {
            Ok(_) if args.check => {
                outln!(o, "{}", check_report(&r.workgroup, &[], &r.facts, json)?);
                return Ok(ExitCode::SUCCESS);
            }
            Ok(checked) => Some(checked),
            Err(problems) => return refuse(o, Some(&r.workgroup), &problems, Some(&r.facts), json),
        },
        // `--resume` of a workgroup this journal does not have: refused below, as before.
        None => None,
    };
    let checked = match subject {
        Subject::New(_) => checked,
        Subject::Resume(_) => None,
    };
    let options = Options {
        provider: args.provider.clone(),
        seed: args.seed,
        time_scale: args.time_scale,
        progress: !json,
        live: !json && ws.out().stderr_is_terminal(),
        repo,
        on_violation: args.on_violation.clone(),
        prompts_dir: ws.strata_dir().join("prompts"),
        workspace: std::fs::canonicalize(ws.root())
            .with_context(|| format!("cannot resolve {}", ws.root().display()))?,
        nesting_depth: crate::coordinator::from_env::nesting_depth()?,
        detected,
        rollout: args.rollout.clone(),
    };
    let under = match &args.rollout {
        Some(name) => Some(crate::coordinator::check_rollout(&journal, &config, name)?),
        None => None,
    };
    let mut c = Coordinator::open(&journal, config, options)?;
    let wg = match (checked, &args.resume) {
        (Some(checked), _) => {
            if !json {
                errln!(
                    o,
                    "running workgroup {} ({}, {} at once)",
                    checked.workgroup,
                    crate::plural::count(checked.tasks.len() as u64, "task", "tasks"),
                    checked.parallel
                );
            }
            if let Some(line) = under.as_deref().filter(|_| !json) {
                errln!(o, "  {line}");
            }
            c.plan(checked)?
        }
        (None, Some(wg)) => {
            c.resume_as(wg, args.provider.as_deref(), args.repo.as_deref())?;
            let g = c.groups().get(wg).ok_or_else(|| strata_engine::workgroup::WorkgroupError::Unknown(wg.clone()))?;
            if !json {
                errln!(
                    o,
                    "resuming workgroup {wg}: {} of {} already completed",
                    g.count(strata_engine::workgroup::state::Status::Completed),
                    crate::plural::count(g.tasks.len() as u64, "task", "tasks")
                );
            }
            wg.clone()
        }
        (None, None) => anyhow::bail!("give a PLAN, --resume WG or --example"),
    };
    let measured = c.run(&wg)?;
    let g = c.groups().get(&wg).cloned().context("the workgroup vanished from the journal")?;
    drop(c);
    ws.finish(&journal)?;
    let s = summary(&g);
    print_summary(o, &s, Some(&measured), json, paint)?;
    if let Some(p) = &s.paused {
        errln!(o, "workgroup {wg} is paused ({}): {}; {}", p.reason.as_str(), p.detail, p.reason.fix());
        return Ok(ExitCode::from(EXIT_PAUSED));
    }
    let suite_failed = s.suite.as_ref().is_some_and(|l| !l.passed);
    Ok(if s.failed + s.held == 0 && !suite_failed { ExitCode::SUCCESS } else { ExitCode::from(EXIT_PROBLEMS) })
}

/// Prints the preflight's problems and refuses the run (exit 1).
fn refuse(
    o: &crate::output::Out,
    workgroup: Option<&str>,
    problems: &[Problem],
    facts: Option<&Facts>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let nothing = Facts {
        repo: RepoFact::NotGiven,
        clis: BTreeMap::new(),
        outside: BTreeMap::new(),
        prompt_tokens: BTreeMap::new(),
        discovered: BTreeMap::new(),
    };
    let report = check_report(workgroup.unwrap_or("-"), problems, facts.unwrap_or(&nothing), json)?;
    let refusal = format!(
        "[STRATA-E2101] the preflight found {}{}; nothing was recorded: fix them, then `strata run PLAN --check`",
        crate::plural::count(problems.len() as u64, "problem", "problems"),
        if json { " (listed in `problems`)" } else { " (listed above)" }
    );
    // The report is the refusal: on stderr as text; with --json one object on stdout, the
    // report with the error's five keys.
    if json {
        let doc: serde_json::Value = serde_json::from_str(&report)?;
        outln!(o, "{}", super::failure::Failure::from_text(&refusal).merged(doc));
        return Ok(ExitCode::from(1));
    }
    errln!(o, "{report}");
    anyhow::bail!("{refusal}")
}

/// The preflight's report: every problem (code, input, rule, fix), what was probed, and what is
/// not checked yet. JSON: `{"ok", "workgroup", "problems": [{code, input, rule, fix}],
/// "repository": {status, top?, base?, dir?, detail?}, "providers": [{provider, status, path?,
/// version?, capabilities?, program?, searched?, detail?}], "not_checked": [{check, why}]}`.
fn check_report(workgroup: &str, problems: &[Problem], facts: &Facts, json: bool) -> anyhow::Result<String> {
    use std::fmt::Write as _;
    let repo = match &facts.repo {
        RepoFact::NotGiven => serde_json::json!({"status": "not-given"}),
        RepoFact::NotGit { dir, detail } => serde_json::json!({"status": "not-git", "dir": dir, "detail": detail}),
        RepoFact::NoCommit { top } => serde_json::json!({"status": "no-commit", "top": top}),
        RepoFact::Ready { top, base, branch_taken } => {
            serde_json::json!({"status": "ready", "top": top, "base": base, "branch_taken": branch_taken})
        }
    };
    if json {
        let mut providers = Vec::new();
        for (name, cli) in &facts.clis {
            let mut v = serde_json::to_value(cli)?;
            if let Some(o) = v.as_object_mut() {
                o.insert("provider".into(), name.clone().into());
            }
            providers.push(v);
        }
        let not_checked: Vec<_> =
            NOT_CHECKED.iter().map(|(check, why)| serde_json::json!({"check": check, "why": why})).collect();
        let v = serde_json::json!({"ok": problems.is_empty(), "workgroup": workgroup, "problems": problems,
            "repository": repo, "providers": providers, "discovered": facts.discovered, "not_checked": not_checked});
        return Ok(v.to_string());
    }
    let mut out = String::new();
    if problems.is_empty() {
        writeln!(out, "preflight of workgroup {workgroup}: no problems")?;
    } else {
        let mut t = Table::new(&["code", "input", "rule", "fix"]);
        for p in problems {
            t.row(vec![p.code.to_owned(), p.input.clone(), p.rule.clone(), p.fix.clone()]);
        }
        writeln!(out, "{}", t.render())?;
        writeln!(
            out,
            "preflight of workgroup {workgroup}: {}",
            crate::plural::count(problems.len() as u64, "problem", "problems")
        )?;
    }
    for (task, d) in &facts.discovered {
        let ranked: Vec<String> =
            d.candidates.iter().map(|c| format!("{} {:.3}", c.id, c.score_milli as f64 / 1000.0)).collect();
        let chosen = if d.chosen.is_empty() { "nothing".to_owned() } else { d.chosen.join(", ") };
        writeln!(
            out,
            "task {task}: request resolved to {chosen} (ranked at journal {}: {})",
            d.seq,
            ranked.join(", ")
        )?;
    }
    match &facts.repo {
        RepoFact::Ready { top, base, .. } => writeln!(out, "repository {top} at base {base}")?,
        RepoFact::NoCommit { top } => writeln!(out, "repository {top}: no commit yet")?,
        RepoFact::NotGit { dir, detail } => writeln!(out, "{dir}: not a git repository ({detail})")?,
        RepoFact::NotGiven => {}
    }
    for (name, cli) in &facts.clis {
        match cli {
            CliFact::Found { path, version, capabilities } => {
                let caps = if capabilities.is_empty() { "-".to_owned() } else { capabilities.join(", ") };
                writeln!(out, "provider {name}: {path}, {version}; capabilities: {caps}")?
            }
            CliFact::Missing { program, searched } => {
                writeln!(out, "provider {name}: {program} not found ({searched})")?
            }
            CliFact::Broken { path, detail } => writeln!(out, "provider {name}: {path}: {detail}")?,
        }
    }
    for (check, why) in NOT_CHECKED {
        writeln!(out, "not checked: {check} ({why})")?;
    }
    Ok(out.trim_end().to_owned())
}

fn read_plan(path: &Path) -> anyhow::Result<String> {
    Ok(crate::files::read_text_bounded(path, PLAN_BYTES_MAX, "the plan")?)
}

/// The summary's cost: unknown is never shown as zero, and a sum of known costs says how many
/// tasks it leaves out.
fn cost_text(s: &Summary) -> String {
    let known = s.tasks.iter().filter(|t| t.cost_micros.is_some()).count();
    match (known, s.cost_unknown_tasks) {
        (0, n) if n > 0 => "cost unknown (the provider reports none)".to_owned(),
        (_, 0) => format!("cost ${:.4}", s.cost_micros as f64 / 1e6),
        (_, n) => format!("cost ${:.4} for the tasks that report one ({n} more unknown)", s.cost_micros as f64 / 1e6),
    }
}

/// The prompts' tokens against the load-everything baseline, saying what the ratio compares;
/// no ratio when there is no baseline (no task named a specification).
fn tokens_text(prompt: u64, baseline: u64) -> String {
    let prompts = crate::plural::count(prompt, "prompt token", "prompt tokens");
    if baseline == 0 {
        return format!("{prompts} (no baseline to compare with: no task named a specification)");
    }
    let pct = prompt as f64 / baseline as f64 * 100.0;
    format!(
        "{prompts} against {baseline} to load every named specification in full: the prompts are {pct:.1}% of that load"
    )
}

/// `strata run`'s exit code when a safety boundary paused the workgroup: a person acts, then
/// `strata run --resume WG` continues it.
pub const EXIT_PAUSED: u8 = 4;

/// Prints a workgroup's summary (with what the run measured, when it just ran).
pub(crate) fn print_summary(
    o: &crate::output::Out,
    s: &Summary,
    measured: Option<&Measured>,
    json: bool,
    paint: crate::style::Paint,
) -> anyhow::Result<()> {
    if json {
        let mut v = serde_json::to_value(s)?;
        if let (Some(m), Some(o)) = (measured, v.as_object_mut()) {
            o.insert("elapsed_ms".into(), m.elapsed_ms.into());
            o.insert("coordinator_overhead_p50_us".into(), m.overhead_p50_us().into());
            o.insert("branch".into(), m.branch.clone().into());
        }
        outln!(o, "{v}");
        return Ok(());
    }
    let mut t =
        Table::new(&["task", "phase", "status", "mode", "reasons", "prompt", "baseline", "cost $", "time s", "files"]);
    let opt = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    for l in &s.tasks {
        t.toned_row(
            vec![
                l.task.clone(),
                l.phase.clone(),
                l.status.as_str().to_owned(),
                l.mode.clone().unwrap_or_else(|| "-".into()),
                if l.reasons.is_empty() { "-".into() } else { l.reasons.join(",") },
                opt(l.prompt_tokens),
                opt(l.baseline_tokens),
                l.cost_micros.map_or("-".into(), |c| format!("{:.4}", c as f64 / 1e6)),
                l.wall_ms.map_or("-".into(), |w| format!("{:.1}", w as f64 / 1e3)),
                l.files.len().to_string(),
            ],
            crate::style::tone_of(l.status.as_str()),
        );
    }
    outln!(o, "{}", t.render_painted(paint));
    for l in s.tasks.iter().filter(|l| l.problem.is_some()) {
        outln!(o, "{}: {}", l.task, l.problem.clone().unwrap_or_default());
    }
    outln!(
        o,
        "workgroup {}: {} completed, {} failed, {} held; {}",
        s.workgroup,
        s.completed,
        s.failed,
        s.held,
        crate::plural::count(s.violations as u64, "violation", "violations")
    );
    if let Some(l) = &s.suite {
        outln!(o, "consolidated suite: {}", l.detail);
    }
    outln!(o, "{}", s.policy.describe());
    let cost = cost_text(s);
    outln!(
        o,
        "{}; {cost}{}",
        tokens_text(s.prompt_tokens, s.baseline_tokens),
        if s.synthetic { " (simulated: estimated, never billed)" } else { "" }
    );
    if let Some(m) = measured {
        let p50 = m.overhead_p50_us().map_or("-".into(), |u| format!("{:.2} ms", u as f64 / 1e3));
        let checks = m
            .with_checks_p50_us()
            .map_or(String::new(), |w| format!(" ({:.2} ms with the checks' own processes)", w as f64 / 1e3));
        outln!(o, "run took {:.2} s; coordinator overhead per task p50 {p50}{checks}", m.elapsed_ms as f64 / 1e3);
        if let Some(b) = &m.branch {
            let integrated = s.tasks.iter().filter(|t| t.status == Status::Completed && !t.files.is_empty()).count();
            if integrated > 0 {
                outln!(
                    o,
                    "changes of {} integrated on branch {b}",
                    crate::plural::count(integrated as u64, "task", "tasks")
                );
            } else {
                outln!(o, "no changes integrated: branch {b} holds no task's change");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::TaskLine;
    use strata_engine::workgroup::state::Status;

    fn line(cost_micros: Option<u64>) -> TaskLine {
        TaskLine {
            task: "t".into(),
            phase: "build".into(),
            status: Status::Completed,
            attempts: 1,
            provider: Some("codex".into()),
            mode: None,
            reasons: vec![],
            prompt_tokens: None,
            baseline_tokens: None,
            cost_micros,
            wall_ms: None,
            files: vec![],
            violations: 0,
            problem: None,
        }
    }

    fn summary(tasks: Vec<TaskLine>, unknown: usize) -> Summary {
        Summary {
            workgroup: "wg".into(),
            cost_micros: tasks.iter().filter_map(|t| t.cost_micros).sum(),
            tasks,
            completed: 1,
            failed: 0,
            held: 0,
            prompt_tokens: 0,
            baseline_tokens: 0,
            cost_unknown_tasks: unknown,
            synthetic: false,
            violations: 0,
            finished: true,
            policy: Default::default(),
            paused: None,
            caps: Default::default(),
            spend: Default::default(),
            suite: None,
        }
    }

    #[test]
    fn the_token_ratio_says_what_it_compares_and_is_absent_without_a_baseline() {
        assert_eq!(
            tokens_text(114, 0),
            "114 prompt tokens (no baseline to compare with: no task named a specification)"
        );
        assert_eq!(
            tokens_text(1741, 996),
            "1741 prompt tokens against 996 to load every named specification in full: the prompts are 174.8% of that load"
        );
        assert!(tokens_text(1, 10).starts_with("1 prompt token against"));
    }

    #[test]
    fn an_unknown_cost_is_never_shown_as_zero() {
        assert_eq!(cost_text(&summary(vec![line(None), line(None)], 2)), "cost unknown (the provider reports none)");
        assert_eq!(cost_text(&summary(vec![line(Some(1_500_000))], 0)), "cost $1.5000");
        assert_eq!(
            cost_text(&summary(vec![line(Some(1_500_000)), line(None)], 1)),
            "cost $1.5000 for the tasks that report one (1 more unknown)"
        );
    }
}
