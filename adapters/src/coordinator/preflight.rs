//! The probing half of `strata run`'s preflight: the facts the engine's decision
//! (`strata_engine::workgroup::preflight::check`) needs from the machine, gathered before the
//! run records anything. It asks git where the repository is, what its base is and whether the
//! workgroup's branch exists; resolves each owned path inside the repository; finds each real
//! provider's CLI (on `PATH`, or where `STRATA_CLAUDE` / `STRATA_CODEX` names it) and runs its
//! `--version` and `--help` (each bounded in time and output) for its version and the
//! capabilities its help shows. Nothing here writes: not the journal, not the repository.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use strata_engine::context::state::ContextState;
use strata_engine::workgroup::plan::{Checked, Plan};
use strata_engine::workgroup::preflight::{self, CliFact, Facts, Inputs, Problem, RepoFact};
use strata_engine::workgroup::state::Workgroups;
use strata_journal::Journal;
use strata_journal::projection::catch_up_one;

/// Longest one probe (`git …`, a CLI's `--version` or `--help`) may run before it is killed.
pub const PROBE_MS_MAX: u64 = 10_000;
/// Most bytes of a probe's output read.
pub const PROBE_OUTPUT_BYTES_MAX: usize = 256 * 1024;

/// What the run checks: a new plan, or a recorded workgroup it continues.
pub enum Subject {
    /// A new workgroup's plan, as written.
    New(Box<Plan>),
    /// `--resume WG`: the plan, provider and repository as recorded.
    Resume(String),
}

/// The preflight's answer, with the facts it decided on (shown by `--check`).
pub struct Report {
    /// The workgroup.
    pub workgroup: String,
    /// The checked plan, or every problem.
    pub result: Result<Checked, Vec<Problem>>,
    /// What was probed.
    pub facts: Facts,
}

/// Runs the preflight for `subject` against `journal` (read only) and this machine: `provider`
/// is the run's `--provider`, `repo` the repository writers change. `Ok(None)` for a resumed
/// workgroup this journal does not have (the run refuses it as before).
pub fn run(
    journal: &Journal,
    config: &crate::config::Config,
    subject: &Subject,
    provider: Option<&str>,
    repo: Option<&Path>,
) -> anyhow::Result<Option<Report>> {
    let mut groups = Workgroups::default();
    catch_up_one(&mut groups, journal)?;
    let auto = super::from_env::auto();
    let (mut plan, provider, repo, resuming) = match subject {
        Subject::New(plan) => (
            (**plan).clone(),
            provider.map(|p| if p == "auto" { auto } else { p }).map(str::to_owned),
            repo.map(Path::to_path_buf),
            false,
        ),
        Subject::Resume(wg) => {
            let Some(g) = groups.get(wg) else { return Ok(None) };
            let recorded = g.started.repo.as_ref().map(PathBuf::from).or_else(|| repo.map(Path::to_path_buf));
            (preflight::as_written(&g.plan), g.started.provider.clone(), recorded, true)
        }
    };
    let mut graph = crate::app::kb::load_graph(journal)?;
    let mut context = ContextState::default();
    catch_up_one(&mut context, journal)?;
    let profiles = preflight::run_profiles(&context.profiles)?;
    let discovered = resolve_requests(journal, &graph, &mut plan)?;
    let mut facts = probe(&plan, provider.as_deref(), auto, repo.as_deref());
    facts.discovered = discovered;
    facts.prompt_tokens = prompt_tokens(journal, config, &plan, &mut graph, &context, &profiles);
    let result = preflight::check(&Inputs {
        plan: &plan,
        provider: provider.as_deref(),
        auto,
        resuming,
        groups: &groups,
        graph: &graph,
        profiles: &profiles,
        facts: &facts,
        configured: &config.efficiency.caps,
    });
    Ok(Some(Report { workgroup: plan.workgroup.clone(), result, facts }))
}

/// Resolves every task's `request` not resolved yet to specifications: ranks the knowledge base
/// at the head for it (specification kinds only, [`strata_engine::workgroup::discovery`]) and
/// fills the task's `specs` and `discovered` with the choice. The index is built only when a
/// task needs it.
fn resolve_requests(
    journal: &Journal,
    graph: &strata_engine::kb::graph::Graph,
    plan: &mut Plan,
) -> anyhow::Result<BTreeMap<String, strata_engine::workgroup::discovery::Discovered>> {
    use strata_engine::workgroup::discovery::{self, CANDIDATES_MAX, Candidate, Discovered, SPEC_KINDS};
    let mut out = BTreeMap::new();
    // A task naming specs too is refused by the plan check: not ranked.
    let asking = |t: &strata_engine::workgroup::plan::TaskSpec| {
        t.request.is_some() && t.discovered.is_none() && t.specs.is_empty()
    };
    if !plan.tasks.iter().any(asking) {
        return Ok(out);
    }
    // The graph the preflight loaded, with the knowledge chunks, as `strata discover` indexes them.
    let mut knowledge = strata_engine::knowledge::state::Knowledge::default();
    catch_up_one(&mut knowledge, journal)?;
    let docs = strata_engine::kb::discover::documents(graph, Some(&knowledge));
    let index = crate::discover::Discovery::build(docs, journal.head().seq)?;
    for t in plan.tasks.iter_mut().filter(|t| asking(t)) {
        let Some(request) = t.request.as_deref() else { continue };
        // A request over the index's limit is refused by the plan check; nothing to rank.
        let Ok(hits) = index.search(request, CANDIDATES_MAX, &SPEC_KINDS) else { continue };
        let candidates: Vec<Candidate> = hits
            .iter()
            .map(|h| Candidate {
                rank: u32::try_from(h.rank).unwrap_or(u32::MAX),
                kind: h.kind.to_owned(),
                id: h.id.clone(),
                score_milli: (f64::from(h.score) * 1000.0).round() as u64,
                matched: h.matched.clone(),
            })
            .collect();
        let chosen = discovery::choose(&candidates);
        let d = Discovered { seq: index.seq, candidates, chosen };
        t.specs.clone_from(&d.chosen);
        t.discovered = Some(d.clone());
        out.insert(t.id.clone(), d);
    }
    Ok(out)
}

/// Each task's prompt tokens, assembled at the journal's head the way the run assembles it
/// (its profile as the run will have it, the token factor of the profile's model), only when
/// some input-token cap could need them. A task whose prompt does not assemble is left out: the
/// run reports it at its phase's planning.
fn prompt_tokens(
    journal: &Journal,
    config: &crate::config::Config,
    plan: &Plan,
    graph: &mut strata_engine::kb::graph::Graph,
    context: &ContextState,
    profiles: &BTreeMap<String, strata_engine::context::profile::Profile>,
) -> BTreeMap<String, u64> {
    use strata_engine::context::assemble::{Inputs as Assembly, TokenCounter, assemble};
    let capped = |t: &strata_engine::workgroup::plan::TaskSpec| {
        t.caps.and_then(|c| c.input_tokens).is_some()
            || plan.caps.task.input_tokens.is_some()
            || config.efficiency.caps.task.input_tokens.is_some()
    };
    let wg_capped =
        plan.caps.workgroup.input_tokens.is_some() || config.efficiency.caps.workgroup.input_tokens.is_some();
    if !wg_capped && !plan.tasks.iter().any(capped) {
        return BTreeMap::new();
    }
    let summaries = strata_engine::context::summary::Summaries::build(graph);
    let head = journal.head();
    let mut counters: BTreeMap<u32, TokenCounter> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for t in &plan.tasks {
        let name = strata_engine::workgroup::plan::task_profile(plan.profile.as_deref(), t);
        let Some(profile) = profiles.get(&name) else { continue };
        // The version the run's registration leaves it at: the registered one when the same.
        let version = match context.profiles.latest(&name) {
            Some((v, p)) if p == profile => v,
            Some((v, _)) => v + 1,
            None => 1,
        };
        let lineage = strata_engine::workgroup::lineage_id(&plan.workgroup, &t.id);
        let task = super::assembly_task(t, &lineage);
        let factor = config.token_factor(&profile.model);
        let counter = counters.entry(factor).or_insert_with(|| TokenCounter::new(factor));
        if let Ok(a) = assemble(&Assembly::at_head(graph, &summaries, profile, version, &task, &head), counter) {
            out.insert(t.id.clone(), a.manifest.total_tokens as u64);
        }
    }
    out
}

/// Probes what the plan needs of this machine.
pub fn probe(plan: &Plan, provider: Option<&str>, auto: &str, repo: Option<&Path>) -> Facts {
    let repo = match repo {
        Some(dir) => repo_fact(dir, &plan.workgroup),
        None => RepoFact::NotGiven,
    };
    let outside = match &repo {
        RepoFact::Ready { top, .. } => outside(Path::new(top), preflight::owned_paths(plan)),
        _ => BTreeMap::new(),
    };
    let clis = preflight::real_providers(plan, provider, auto).into_iter().map(|p| (p.clone(), cli_fact(&p))).collect();
    Facts { repo, clis, outside, prompt_tokens: BTreeMap::new(), discovered: BTreeMap::new() }
}

/// Runs `program args…` in `dir` (if given) for at most [`PROBE_MS_MAX`]: its exit status and
/// output (stdout, then stderr), or why it could not run.
fn probe_output(program: &Path, args: &[&str], dir: Option<&Path>) -> Result<(bool, String), String> {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.env_remove("GIT_DIR").env_remove("GIT_WORK_TREE");
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot run it: {e}"))?;
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(p) = pipe {
                let _ = p.take(PROBE_OUTPUT_BYTES_MAX as u64).read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let out = read(child.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
    let err = read(child.stderr.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
    use wait_timeout::ChildExt as _;
    let status = match child.wait_timeout(Duration::from_millis(PROBE_MS_MAX)) {
        Ok(Some(status)) => status,
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no answer within {} s", PROBE_MS_MAX / 1000));
        }
        Err(e) => return Err(format!("cannot wait for it: {e}")),
    };
    let text = format!("{}{}", out.join().unwrap_or_default(), err.join().unwrap_or_default());
    Ok((status.success(), text))
}

fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let mut all = vec!["-C", dir.to_str().ok_or("the path is not UTF-8")?];
    all.extend_from_slice(args);
    match probe_output(Path::new("git"), &all, None) {
        Ok((true, text)) => Ok(text.trim().to_owned()),
        Ok((false, text)) => Err(text.lines().next().unwrap_or("git failed").trim().to_owned()),
        Err(e) => Err(format!("git: {e}")),
    }
}

fn repo_fact(dir: &Path, workgroup: &str) -> RepoFact {
    let top = match git(dir, &["rev-parse", "--show-toplevel"]) {
        Ok(top) => std::fs::canonicalize(&top).unwrap_or_else(|_| PathBuf::from(&top)),
        Err(detail) => return RepoFact::NotGit { dir: dir.display().to_string(), detail },
    };
    let Ok(base) = git(&top, &["rev-parse", "--verify", "HEAD"]) else {
        return RepoFact::NoCommit { top: top.display().to_string() };
    };
    let branch = format!("refs/heads/strata/{workgroup}");
    let branch_taken = git(&top, &["rev-parse", "--verify", "--quiet", &branch]).is_ok();
    RepoFact::Ready { top: top.display().to_string(), base, branch_taken }
}

/// The owned paths that resolve outside `top` through a symbolic link, with where they resolve.
fn outside(top: &Path, owned: impl IntoIterator<Item = String>) -> BTreeMap<String, String> {
    let top = std::fs::canonicalize(top).unwrap_or_else(|_| top.to_path_buf());
    let mut out = BTreeMap::new();
    for p in owned {
        let mut at = top.clone();
        for seg in p.split('/') {
            at.push(seg);
            let Ok(meta) = std::fs::symlink_metadata(&at) else { break };
            if meta.file_type().is_symlink() {
                let real = std::fs::canonicalize(&at)
                    .or_else(|_| std::fs::read_link(&at).map(|t| at.parent().unwrap_or(&top).join(t)))
                    .unwrap_or_else(|_| at.clone());
                if !real.starts_with(&top) {
                    out.insert(p.clone(), real.display().to_string());
                }
                break;
            }
        }
    }
    out
}

/// Where `program` is: itself when it names a path, else the first executable file of that name
/// on `PATH`.
fn find_program(program: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let runnable = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.components().count() > 1 {
        return runnable(program).then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| runnable(p))
}

/// Capabilities a CLI's `--help` shows: the words strata looks for.
fn capabilities(provider: &str, help: &str) -> Vec<String> {
    let flag = |f: &str| help.split(|c: char| c.is_whitespace() || c == ',' || c == '=').any(|w| w == f);
    let command = |c: &str| help.lines().any(|l| l.split_whitespace().next() == Some(c) && l.starts_with("  "));
    let found: Vec<&str> = match provider {
        "claude" => {
            [("fork-session", flag("--fork-session")), ("resume", flag("--resume")), ("print", flag("--print"))]
                .into_iter()
                .filter_map(|(name, has)| has.then_some(name))
                .collect()
        }
        _ => [("fork", command("fork")), ("resume", command("resume")), ("exec", command("exec"))]
            .into_iter()
            .filter_map(|(name, has)| has.then_some(name))
            .collect(),
    };
    found.into_iter().map(str::to_owned).collect()
}

fn cli_fact(provider: &str) -> CliFact {
    let var = format!("STRATA_{}", provider.to_ascii_uppercase());
    let (program, searched) = match std::env::var_os(&var).filter(|v| !v.is_empty()) {
        Some(p) => (PathBuf::from(p), format!("named by {var}")),
        None => (PathBuf::from(provider), "on PATH".to_owned()),
    };
    let Some(path) = find_program(&program) else {
        return CliFact::Missing { program: program.display().to_string(), searched };
    };
    let shown = path.display().to_string();
    let version = match probe_output(&path, &["--version"], None) {
        Ok((true, text)) => text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("").to_owned(),
        Ok((false, text)) => {
            let detail = text.lines().next().unwrap_or("").trim().to_owned();
            return CliFact::Broken { path: shown, detail: format!("it failed: {detail}") };
        }
        Err(detail) => return CliFact::Broken { path: shown, detail },
    };
    let help = match probe_output(&path, &["--help"], None) {
        Ok((_, text)) => text,
        Err(_) => String::new(),
    };
    CliFact::Found { path: shown, version, capabilities: capabilities(provider, &help) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_read_from_help_text() {
        let claude = "Options:\n  -r, --resume [value]   Resume\n  --fork-session   When resuming, create a new session ID\n  -p, --print  Print\n";
        assert_eq!(capabilities("claude", claude), ["fork-session", "resume", "print"]);
        assert_eq!(capabilities("claude", "Options:\n  --resume-later x\n"), Vec::<String>::new());
        let codex =
            "Commands:\n  exec   Run Codex non-interactively\n  resume  Resume\n  fork   Fork a previous session\n";
        assert_eq!(capabilities("codex", codex), ["fork", "resume", "exec"]);
        assert!(capabilities("codex", "Commands:\n  exec  run; use fork later\n").contains(&"exec".to_owned()));
        assert!(!capabilities("codex", "Commands:\n  exec  run; fork later\n").contains(&"fork".to_owned()));
    }

    #[test]
    fn a_link_out_of_the_repository_is_found_and_one_inside_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        let (top, away) = (tmp.path().join("repo"), tmp.path().join("away"));
        std::fs::create_dir_all(top.join("src")).unwrap();
        std::fs::create_dir_all(&away).unwrap();
        std::os::unix::fs::symlink(&away, top.join("out")).unwrap();
        std::os::unix::fs::symlink(top.join("src"), top.join("in")).unwrap();
        let found = outside(&top, ["out/x.rs".to_owned(), "in/y.rs".to_owned(), "src/new/z.rs".to_owned()]);
        assert_eq!(found.keys().collect::<Vec<_>>(), ["out/x.rs"]);
        assert!(found["out/x.rs"].ends_with("away"), "{found:?}");
    }

    #[test]
    fn a_program_that_does_not_answer_in_time_or_cannot_run_is_reported() {
        assert!(probe_output(Path::new("/nonexistent/strata-probe"), &[], None).unwrap_err().contains("cannot run"));
        let (ok, text) = probe_output(Path::new("sh"), &["-c", "echo one; echo two >&2; exit 3"], None).unwrap();
        assert!(!ok && text.contains("one") && text.contains("two"));
    }
}
