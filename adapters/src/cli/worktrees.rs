//! `strata worktrees` and `strata worktrees prune`: the git worktrees `strata run` made for its
//! workgroups, all under the workspace's `.strata/worktrees/<workgroup>/` (`<task>.<attempt>`
//! for a writer, `_integration` for the workgroup's integration branch), each with whether a
//! live workgroup still owns it; and the removal of the ones none does.
//!
//! A workgroup owns its worktrees while it is `unfinished` or `paused` (a `strata run --resume`
//! needs them); once it `completed`, `failed` or was `held`, and for a directory no workgroup of
//! the journal names, they are left-overs. Pruning removes a left-over worktree the way `git
//! worktree remove --force` does, through the repository the worktree's `.git` file names, then
//! runs `git worktree prune` there, so git forgets it too; branches are never touched (the
//! integration branch holds the result). Nothing is appended to the journal.
//!
//! Runs of strata before worktrees moved into the workspace made them under
//! `$TMPDIR/strata-worktrees/<key>/<workgroup>/`, keyed by the repository's path: for every
//! workgroup of the journal whose repository is recorded, that place is listed and pruned too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::json;
use strata_engine::workgroup::state::Workgroups;
use strata_journal::projection::catch_up_state;

use crate::app::workspace::Workspace;
use crate::coordinator::git::{INTEGRATION_WORKTREE, worktrees_dir};
use crate::table::Table;

/// Most worktree directories listed.
pub const WORKTREES_MAX: usize = 10_000;

#[derive(Subcommand, Debug)]
pub(crate) enum WorktreesCommand {
    /// Remove the worktrees no live (unfinished or paused) workgroup owns, and let git forget
    /// them (`git worktree prune`); branches stay.
    Prune {
        /// Say what would be removed, and remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// One worktree directory.
#[derive(Clone, Debug)]
struct Found {
    workgroup: String,
    /// `None`: the integration worktree.
    task: Option<String>,
    attempt: Option<u32>,
    path: PathBuf,
    /// The workgroup's state (`None`: the journal has no such workgroup).
    state: Option<&'static str>,
}

impl Found {
    fn live(&self) -> bool {
        matches!(self.state, Some("unfinished" | "paused"))
    }
}

fn entries(dir: &Path) -> anyhow::Result<Vec<(String, PathBuf, std::fs::FileType)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let e = e.with_context(|| format!("cannot list {}", dir.display()))?;
        let Some(name) = e.file_name().to_str().map(str::to_owned) else { continue };
        out.push((name, e.path(), e.file_type().with_context(|| format!("cannot list {}", dir.display()))?));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Where runs before worktrees moved into the workspace put `workgroup`'s worktrees of the
/// repository whose top directory is `repo`: the system's temporary directory, keyed by the path.
fn legacy_dir(repo: &str, workgroup: &str) -> PathBuf {
    let key = blake3::hash(Path::new(repo).as_os_str().as_encoded_bytes()).to_hex();
    std::env::temp_dir().join("strata-worktrees").join(&key[..16]).join(workgroup)
}

/// The worktree directories under `root` (`.strata/worktrees`), then in the old places of the
/// workgroups in `repos`, with their workgroups' states.
fn find(
    root: &Path,
    states: &BTreeMap<String, &'static str>,
    repos: &BTreeMap<String, String>,
) -> anyhow::Result<Vec<Found>> {
    let mut groups = Vec::new();
    if root.is_dir() {
        for (wg, dir, t) in entries(root)? {
            // Only directories are looked into; a link is never followed out of the workspace.
            if t.is_dir() {
                groups.push((wg, dir));
            }
        }
    }
    for (wg, repo) in repos {
        let dir = legacy_dir(repo, wg);
        if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            groups.push((wg.clone(), dir));
        }
    }
    let mut out = Vec::new();
    for (wg, dir) in groups {
        for (name, path, t) in entries(&dir)? {
            if !t.is_dir() {
                continue;
            }
            let (task, attempt) = if name == INTEGRATION_WORKTREE {
                (None, None)
            } else {
                match name.rsplit_once('.').map(|(t, a)| (t, a.parse::<u32>())) {
                    Some((t, Ok(a))) => (Some(t.to_owned()), Some(a)),
                    _ => (Some(name.clone()), None),
                }
            };
            out.push(Found { workgroup: wg.clone(), task, attempt, path, state: states.get(&wg).copied() });
            if out.len() > WORKTREES_MAX {
                anyhow::bail!(
                    "[STRATA-E2656] more than {WORKTREES_MAX} worktree directories under {}; remove some by hand",
                    root.display()
                );
            }
        }
    }
    Ok(out)
}

/// The git directory shared by the repository the worktree at `path` belongs to, from its
/// `.git` file (`gitdir: <common>/worktrees/<name>`).
fn common_dir(path: &Path) -> Option<PathBuf> {
    let text = crate::files::read_text_bounded(&path.join(".git"), 4096, "a worktree's .git file").ok()?;
    let admin = PathBuf::from(text.trim().strip_prefix("gitdir:")?.trim());
    let admin = if admin.is_relative() { path.join(admin) } else { admin };
    let parent = admin.parent()?;
    (parent.file_name()? == "worktrees").then(|| parent.parent().map(Path::to_owned))?
}

fn git(common: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(common)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .context("cannot run git")?;
    if out.status.success() {
        Ok(())
    } else {
        anyhow::bail!("git {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim())
    }
}

/// Removes the worktree at `path` (as `git worktree remove --force`; by hand when git cannot),
/// then lets its repository forget worktrees that are gone.
fn remove(path: &Path) -> anyhow::Result<()> {
    let common = common_dir(path);
    if let Some(c) = &common
        && git(c, &["worktree", "remove", "--force", &path.to_string_lossy()]).is_ok()
    {
        return Ok(());
    }
    std::fs::remove_dir_all(path).with_context(|| {
        format!(
            "[STRATA-E2657] cannot remove the worktree {}; remove it by hand, then `git worktree prune`",
            path.display()
        )
    })?;
    if let Some(c) = &common {
        git(c, &["worktree", "prune"])?;
    }
    Ok(())
}

pub(crate) fn run(ws: &Workspace, cmd: Option<WorktreesCommand>, json: bool) -> anyhow::Result<ExitCode> {
    let journal = ws.open_journal("worktrees")?;
    let mut groups = Workgroups::default();
    catch_up_state(&mut groups, &journal)?;
    ws.finish(&journal)?;
    let states: BTreeMap<String, &'static str> =
        groups.groups().iter().map(|(n, g)| (n.clone(), super::workgroups::state_of(g))).collect();
    let root = worktrees_dir(ws.root());
    let repos: BTreeMap<String, String> =
        groups.groups().iter().filter_map(|(n, g)| Some((n.clone(), g.started.repo.clone()?))).collect();
    let found = find(&root, &states, &repos)?;
    let row = |f: &Found| {
        json!({"workgroup": f.workgroup, "task": f.task, "attempt": f.attempt, "integration": f.task.is_none(),
            "path": f.path.display().to_string(), "workgroup_state": f.state, "live": f.live()})
    };
    let Some(WorktreesCommand::Prune { dry_run }) = cmd else {
        if json {
            outln!(
                ws,
                "{}",
                json!({"dir": root.display().to_string(), "worktrees": found.iter().map(row).collect::<Vec<_>>()})
            );
        } else if found.is_empty() {
            outln!(ws, "no worktrees under {}", root.display());
        } else {
            let mut t = Table::new(&["WORKGROUP", "TASK", "ATTEMPT", "STATE", "OWNED", "PATH"]);
            for f in &found {
                t.row(vec![
                    f.workgroup.clone(),
                    f.task.clone().unwrap_or_else(|| "(integration)".into()),
                    f.attempt.map_or_else(|| "-".into(), |a| a.to_string()),
                    f.state.unwrap_or("not in the journal").to_owned(),
                    if f.live() { "yes".into() } else { "no: `strata worktrees prune` removes it".into() },
                    f.path.display().to_string(),
                ]);
            }
            out!(ws, "{}", t.render());
            let left = found.iter().filter(|f| !f.live()).count() as u64;
            outln!(
                ws,
                "{}; {} no live workgroup owns",
                crate::plural::count(found.len() as u64, "worktree", "worktrees"),
                left
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    let doomed: Vec<&Found> = found.iter().filter(|f| !f.live()).collect();
    if !dry_run {
        for f in &doomed {
            remove(&f.path)?;
        }
        // A workgroup's directory left empty goes too.
        for f in &doomed {
            if let Some(parent) = f.path.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
    let kept = found.len() - doomed.len();
    if json {
        outln!(
            ws,
            "{}",
            json!({"dry_run": dry_run, "removed": doomed.iter().map(|f| row(f)).collect::<Vec<_>>(), "kept": kept})
        );
    } else {
        for f in &doomed {
            outln!(ws, "{} {}", if dry_run { "would remove" } else { "removed" }, f.path.display());
        }
        outln!(
            ws,
            "{} {}, kept {} a live workgroup owns{}",
            if dry_run { "would remove" } else { "removed" },
            crate::plural::count(doomed.len() as u64, "worktree", "worktrees"),
            kept,
            if dry_run { " (dry run: nothing removed)" } else { "" }
        );
    }
    Ok(ExitCode::SUCCESS)
}
