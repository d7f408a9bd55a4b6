//! `strata audit commit SHA`: from a commit of an integration branch back to the journal.
//!
//! strata's commits carry `Strata-Workgroup`, `Strata-Task`, `Strata-Attempt` and (when the
//! task had a prompt) `Strata-Prompt` (the prompt hash) and `Strata-Journal` (the dispatch's
//! sequence) trailers. This reads them with `git` from the repository holding the commit, finds
//! the task in the journal and prints its audit (as `audit session` does, with the files each
//! write of that attempt recorded), each trailer checked against what the journal recorded: a
//! commit whose trailers disagree with the journal is reported, not explained away. A commit
//! without the trailers is an error that says so.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Value, json};
use strata_engine::workgroup::state::Workgroups;

use crate::app::workspace::Workspace;

/// Largest commit message read.
const MESSAGE_BYTES_MAX: usize = 64 * 1024;

/// The trailers of one commit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Trailers {
    pub workgroup: Option<String>,
    pub task: Option<String>,
    pub attempt: Option<String>,
    pub prompt: Option<String>,
    pub journal: Option<String>,
    /// `(cherry picked from commit X)`: the worker's own commit.
    pub picked_from: Option<String>,
}

/// Reads the `Strata-*` trailers from a commit message (the last of each wins, as git's
/// trailer rules say for repeated keys read by a tool that wants one).
pub(crate) fn trailers(message: &str) -> Trailers {
    let mut t = Trailers::default();
    for line in message.lines().map(str::trim) {
        if let Some(p) = line.strip_prefix("(cherry picked from commit ").and_then(|r| r.strip_suffix(')')) {
            t.picked_from = Some(p.to_owned());
            continue;
        }
        let Some((k, v)) = line.split_once(':') else { continue };
        let v = Some(v.trim().to_owned());
        match k.trim() {
            "Strata-Workgroup" => t.workgroup = v,
            "Strata-Task" => t.task = v,
            "Strata-Attempt" => t.attempt = v,
            "Strata-Prompt" => t.prompt = v,
            "Strata-Journal" => t.journal = v,
            _ => {}
        }
    }
    t
}

/// One trailer checked against the journal: what, the trailer's value, the journal's, and
/// whether they agree (`None`: not checked).
type Check = (&'static str, Option<String>, Option<String>, Option<bool>);

/// `git -C dir args…`, its stdout, or `None`.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The commit id and message of `sha` in the first of `repos` that has it.
fn find_commit(repos: &[PathBuf], sha: &str) -> Option<(PathBuf, String, String)> {
    let rev = format!("{sha}^{{commit}}");
    repos.iter().find_map(|r| {
        let id = git(r, &["rev-parse", "--verify", "--quiet", "--end-of-options", &rev])?;
        let id = id.trim().to_owned();
        let message = git(r, &["show", "-s", "--format=%B", &id])?;
        Some((r.clone(), id, message.chars().take(MESSAGE_BYTES_MAX).collect()))
    })
}

pub(crate) fn run(
    groups: &Workgroups,
    ws: &Workspace,
    sha: &str,
    repo: Option<&Path>,
    json: bool,
    paint: crate::style::Paint,
) -> anyhow::Result<ExitCode> {
    if sha.is_empty() || sha.starts_with('-') || sha.len() > 256 {
        anyhow::bail!("[STRATA-E2658] audit commit {sha:?}: not a revision; give a commit id, e.g. from `git log`");
    }
    let repos: Vec<PathBuf> = match repo {
        Some(r) => vec![ws.resolve(r)],
        None => {
            let mut v: Vec<PathBuf> =
                groups.groups().values().filter_map(|g| g.started.repo.as_ref().map(PathBuf::from)).collect();
            v.sort();
            v.dedup();
            v.push(ws.root().to_owned());
            v
        }
    };
    let Some((repo, id, message)) = find_commit(&repos, sha) else {
        anyhow::bail!(
            "[STRATA-E2659] audit commit {sha}: no such commit in {}; pass --repo DIR, the repository holding it",
            repos.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    };
    let t = trailers(&message);
    let (Some(wg), Some(task), Some(attempt)) = (&t.workgroup, &t.task, &t.attempt) else {
        anyhow::bail!(
            "[STRATA-E2660] audit commit {id}: the commit has no Strata-Workgroup, Strata-Task and Strata-Attempt trailers, so strata did not make it (or made it before trailers existed); `git log --format=%B -1 {id}` shows its message, `strata audit file PATH` finds a file's writes"
        );
    };
    let attempt: u32 = attempt.parse().map_err(|_| {
        anyhow::anyhow!("[STRATA-E2661] audit commit {id}: Strata-Attempt {attempt:?} is not a whole number; the trailer was changed by hand")
    })?;
    let Some(g) = groups.get(wg) else {
        anyhow::bail!(
            "[STRATA-E2662] audit commit {id}: its workgroup {wg} is not in this journal; give the workspace that ran it with --dir"
        );
    };
    let Some(s) = g.tasks.get(task.as_str()) else {
        anyhow::bail!(
            "[STRATA-E2662] audit commit {id}: workgroup {wg} has no task {task}; give the workspace that ran it with --dir"
        );
    };
    // What the journal recorded for this attempt, checked against each trailer.
    let latest = s.dispatch.as_ref().filter(|(_, d)| d.attempt == attempt);
    let mut checks: Vec<Check> = Vec::new();
    checks.push((
        "Strata-Journal (the dispatch's sequence)",
        t.journal.clone(),
        latest.map(|(seq, _)| seq.to_string()),
        latest.map(|(seq, _)| t.journal.as_deref() == Some(seq.to_string().as_str())),
    ));
    checks.push((
        "Strata-Prompt (the prompt hash)",
        t.prompt.clone(),
        latest.map(|(_, d)| d.prompt.prompt_hash.clone()),
        latest.map(|(_, d)| t.prompt.as_deref() == Some(d.prompt.prompt_hash.as_str())),
    ));
    let completed = s.completed.as_ref().filter(|(_, c)| c.attempt == attempt);
    if t.picked_from.is_some() || completed.is_some_and(|(_, c)| c.commit.is_some()) {
        let recorded = completed.and_then(|(_, c)| c.commit.clone());
        let matched = match (&t.picked_from, &recorded) {
            (Some(p), Some(r)) => Some(p == r),
            (None, Some(r)) => Some(*r == id),
            _ => None,
        };
        checks.push((
            "the worker's commit (task.completed)",
            t.picked_from.clone().or(Some(id.clone())),
            recorded,
            matched,
        ));
    }
    let writes: Vec<Value> = groups
        .writes()
        .iter()
        .flat_map(|(path, list)| list.iter().map(move |w| (path, w)))
        .filter(|(_, w)| w.workgroup == *wg && w.task == *task && w.attempt == attempt)
        .map(|(path, w)| json!({"path": path, "seq": w.seq, "source": w.source, "session": w.session_id, "prompt_hash": w.prompt_hash}))
        .collect();
    let row = super::audit::task_row(groups, None, wg, task, s);
    let agree = checks.iter().all(|c| c.3 != Some(false));
    if json {
        let checks: Vec<Value> = checks
            .iter()
            .map(|(what, trailer, journal, ok)| json!({"check": what, "trailer": trailer, "journal": journal, "agrees": ok}))
            .collect();
        outln!(
            ws,
            "{}",
            json!({"commit": id, "repository": repo.display().to_string(),
                "trailers": {"workgroup": wg, "task": task, "attempt": attempt, "prompt": t.prompt, "journal": t.journal, "picked_from": t.picked_from},
                "agrees": agree, "checks": checks, "attempt_is_latest": latest.is_some(), "writes": writes, "task": row})
        );
        return Ok(if agree { ExitCode::SUCCESS } else { ExitCode::from(3) });
    }
    outln!(ws, "commit {id} in {}: workgroup {wg}, task {task}, attempt {attempt}", repo.display());
    for (what, trailer, journal, ok) in &checks {
        let said = match ok {
            Some(true) => "agrees with the journal".to_owned(),
            Some(false) => format!("DIFFERS: the journal recorded {}", journal.as_deref().unwrap_or("nothing")),
            None => "not checked: the journal's latest attempt of the task is another one".to_owned(),
        };
        outln!(ws, "  {what}: {} — {said}", trailer.as_deref().unwrap_or("(absent)"));
    }
    if latest.is_none() {
        outln!(ws, "  attempt {attempt} is not the task's latest ({}); the row below is the latest", s.attempts);
    }
    outln!(ws, "{}", super::audit::task_table(std::slice::from_ref(&row), paint).trim_end());
    for w in &writes {
        outln!(
            ws,
            "  wrote {} (seq {}, {})",
            w["path"].as_str().unwrap_or_default(),
            w["seq"],
            w["source"].as_str().unwrap_or_default()
        );
    }
    outln!(ws, "more: strata audit run {wg}");
    Ok(if agree { ExitCode::SUCCESS } else { ExitCode::from(3) })
}

#[cfg(test)]
mod tests {
    #[test]
    fn trailers_are_read_from_a_cherry_picked_message() {
        let m = "strata: wg/t (attempt 2)\n\nStrata-Workgroup: wg\nStrata-Task: t\nStrata-Attempt: 2\nStrata-Prompt: sha256:ab\nStrata-Journal: 41\n(cherry picked from commit 0123abcd)\n";
        let t = super::trailers(m);
        assert_eq!(t.workgroup.as_deref(), Some("wg"));
        assert_eq!((t.task.as_deref(), t.attempt.as_deref()), (Some("t"), Some("2")));
        assert_eq!((t.prompt.as_deref(), t.journal.as_deref()), (Some("sha256:ab"), Some("41")));
        assert_eq!(t.picked_from.as_deref(), Some("0123abcd"));
        assert_eq!(super::trailers("fix: a typo\n"), super::Trailers::default());
    }
}
