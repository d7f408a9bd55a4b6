//! Isolated workspaces for writing workers, with the `git` command line and, for the two steps
//! every writing task takes (its worktree, its commit), in process through gix ([`inproc`]),
//! which falls back to the command line wherever it would not do exactly what git does.
//!
//! A workgroup integrates on its own branch, `strata/<workgroup>`, checked out in an integration
//! worktree. Each writing task's worker gets a detached worktree at the integration branch's tip
//! at dispatch, so it sees what its dependencies produced and nothing else. The worktrees live
//! in the workspace, at `.strata/worktrees/<workgroup>/<task>.<attempt>` (the integration
//! worktree at `.strata/worktrees/<workgroup>/_integration`), the one place `strata worktrees`
//! lists and `strata worktrees prune` cleans; `.strata/` is in the repository's
//! `.git/info/exclude`, so when the workspace is inside the repository nothing under it is ever
//! staged, committed or integrated (each worktree is a checkout of its own, with its own `.git`
//! file: a worker's `git` stops there). After the turn, everything the worker changed is staged and
//! committed in its worktree; the coordinator lists the files (the post-turn diff check), records
//! the completion, then cherry-picks the commit onto the integration branch (completion order is
//! dependency order). A conflict aborts the pick and is reported, never half applied; after a
//! crash, completed commits missing from the branch are found by their `cherry picked from`
//! trailers and applied.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context as _;

pub mod inproc;

/// Author of strata's commits; and no `git maintenance run --auto` after each of strata's commits
/// and picks (one more process each, in the middle of a run; the repository's owner's own git use
/// still runs it).
const IDENTITY: [&str; 6] =
    ["-c", "user.name=strata", "-c", "user.email=strata@localhost", "-c", "maintenance.auto=false"];

/// The environment variable naming the author (and committer) of strata's commits, as
/// `Name <email>`; without it, `strata <strata@localhost>`.
pub const AUTHOR_ENV: &str = "STRATA_GIT_AUTHOR";

/// Largest author name or email, bytes.
pub const AUTHOR_BYTES_MAX: usize = 200;

/// Who strata's commits are by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Author {
    /// `user.name`.
    pub name: String,
    /// `user.email`.
    pub email: String,
}

impl Default for Author {
    fn default() -> Author {
        Author { name: "strata".into(), email: "strata@localhost".into() }
    }
}

impl Author {
    /// Parses `Name <email>`: a non-empty name and email of at most [`AUTHOR_BYTES_MAX`] bytes
    /// each, no control characters, no `<` or `>` inside either.
    pub fn parse(text: &str) -> Result<Author, String> {
        let t = text.trim();
        let (name, rest) = t.split_once('<').ok_or("not of the form `Name <email>`")?;
        let email = rest.strip_suffix('>').ok_or("not of the form `Name <email>` (no closing `>`)")?;
        let (name, email) = (name.trim(), email.trim());
        for (what, v) in [("name", name), ("email", email)] {
            if v.is_empty() || v.len() > AUTHOR_BYTES_MAX {
                return Err(format!("the {what} must be 1 to {AUTHOR_BYTES_MAX} bytes"));
            }
            if v.chars().any(|c| c.is_control() || c == '<' || c == '>') {
                return Err(format!("the {what} has a control character, `<` or `>`"));
            }
        }
        Ok(Author { name: name.to_owned(), email: email.to_owned() })
    }

    /// The author [`AUTHOR_ENV`] names, or the default when it is unset or empty.
    pub fn from_env() -> anyhow::Result<Author> {
        match std::env::var(AUTHOR_ENV) {
            Ok(v) if !v.trim().is_empty() => Author::parse(&v).map_err(|why| {
                anyhow::anyhow!(
                    "[STRATA-E2453] {AUTHOR_ENV}={v:?}: {why}; set it to `Name <email>`, or unset it for `strata <strata@localhost>`"
                )
            }),
            _ => Ok(Author::default()),
        }
    }
}

/// The message of a task's commit: a subject, then trailers that lead back to the journal
/// (`git log --format=%(trailers)`, `git interpret-trailers --parse`): the workgroup, task and
/// attempt, the hash of the prompt the worker was given, and the journal sequence of the
/// dispatch that gave it.
pub fn commit_message(workgroup: &str, task: &str, attempt: u32, dispatch: Option<(u64, &str)>) -> String {
    let mut m = format!(
        "strata: {workgroup}/{task} (attempt {attempt})\n\nStrata-Workgroup: {workgroup}\nStrata-Task: {task}\nStrata-Attempt: {attempt}"
    );
    if let Some((seq, prompt_hash)) = dispatch {
        m.push_str(&format!("\nStrata-Prompt: {prompt_hash}\nStrata-Journal: {seq}"));
    }
    m
}

/// Runs `git -C dir args…`; its stdout, or an error with its stderr.
fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    git_as(dir, &[], args)
}

/// [`git`] with commits made as `author` (the `-c user.…` options go after the defaults).
fn git_by(dir: &Path, author: &Author, args: &[&str]) -> anyhow::Result<String> {
    let name = format!("user.name={}", author.name);
    let email = format!("user.email={}", author.email);
    git_as(dir, &["-c", &name, "-c", &email], args)
}

fn git_as(dir: &Path, identity: &[&str], args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(IDENTITY)
        .args(identity)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .with_context(|| format!("cannot run git in {} (is git installed?)", dir.display()))?;
    if !out.status.success() {
        anyhow::bail!(
            "[STRATA-E1721] git {} in {} failed: {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Largest `info/exclude` read.
const EXCLUDE_BYTES_MAX: u64 = 1024 * 1024;

/// Largest `.git` file, `HEAD`, `commondir` or loose ref read without `git`.
const REF_FILE_BYTES_MAX: u64 = 4096;
/// Largest `packed-refs` read without `git` (a larger one is left to `git rev-parse`).
const PACKED_REFS_BYTES_MAX: u64 = 8 * 1024 * 1024;

// Reads of a worktree's administrative files, so a task does not start a `git` process to learn
// a commit id or to drop its worktree. Each returns `None` on anything unexpected (a layout this
// code does not know, such as the reftable backend), and the caller then runs `git` as before.

fn small_file(path: &Path, max: u64) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() > max {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// The administrative directory of the worktree at `worktree` (what its `.git` file names).
fn admin_dir(worktree: &Path) -> Option<PathBuf> {
    let text = small_file(&worktree.join(".git"), REF_FILE_BYTES_MAX)?;
    let dir = text.strip_prefix("gitdir:")?.trim();
    Some(worktree.join(dir))
}

fn is_object_id(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The commit `HEAD` of the worktree at `worktree` points at: detached, or through a branch's
/// loose or packed ref.
fn read_head(worktree: &Path) -> Option<String> {
    let admin = admin_dir(worktree)?;
    let head = small_file(&admin.join("HEAD"), REF_FILE_BYTES_MAX)?;
    let head = head.trim();
    if is_object_id(head) {
        return Some(head.to_owned());
    }
    let name = head.strip_prefix("ref: ")?.trim();
    if !name.starts_with("refs/heads/") || name.split('/').any(|s| s.is_empty() || s == "..") {
        return None;
    }
    let common = admin.join(small_file(&admin.join("commondir"), REF_FILE_BYTES_MAX)?.trim());
    if let Some(loose) = small_file(&common.join(name), REF_FILE_BYTES_MAX) {
        let id = loose.trim();
        return is_object_id(id).then(|| id.to_owned());
    }
    let packed = small_file(&common.join("packed-refs"), PACKED_REFS_BYTES_MAX)?;
    packed.lines().find_map(|l| {
        let (id, r) = l.split_once(' ')?;
        (r == name && is_object_id(id)).then(|| id.to_owned())
    })
}

/// The top directory and `HEAD` commit of the git repository holding `dir`, if it is one.
pub fn top_and_head(dir: &Path) -> Option<(PathBuf, String)> {
    let top = git(dir, &["rev-parse", "--show-toplevel"]).ok()?;
    let top = PathBuf::from(top.trim());
    let head = git(&top, &["rev-parse", "--verify", "HEAD"]).ok()?;
    Some((top, head.trim().to_owned()))
}

/// Keeps `.strata/` (a workspace inside the repository) out of `git status` and of every
/// worker's `git add -A`, through the repository's own `info/exclude`.
fn exclude_strata(root: &Path) -> anyhow::Result<()> {
    let common = git(root, &["rev-parse", "--git-common-dir"])?;
    let common = root.join(common.trim());
    let exclude = common.join("info").join("exclude");
    let text = match crate::files::read_text_bounded(&exclude, EXCLUDE_BYTES_MAX, "the repository's exclude file") {
        Ok(t) => t,
        Err(crate::files::InputError::Unreadable { .. }) if !exclude.exists() => String::new(),
        Err(e) => return Err(e.into()),
    };
    if text.lines().any(|l| l.trim() == ".strata/") {
        return Ok(());
    }
    std::fs::create_dir_all(common.join("info")).with_context(|| format!("cannot create {}", common.display()))?;
    let sep = if text.is_empty() || text.ends_with('\n') { "" } else { "\n" };
    std::fs::write(&exclude, format!("{text}{sep}.strata/\n"))
        .with_context(|| format!("cannot write {}", exclude.display()))
}

/// Where the workspace whose root is `workspace` keeps its workgroups' worktrees.
pub fn worktrees_dir(workspace: &Path) -> PathBuf {
    workspace.join(".strata").join("worktrees")
}

/// Where `workgroup`'s worktrees live in the workspace whose root is `workspace`.
fn worktrees_of(workspace: &Path, workgroup: &str) -> PathBuf {
    worktrees_dir(workspace).join(workgroup)
}

/// The name of a workgroup's integration worktree in its directory of worktrees.
pub const INTEGRATION_WORKTREE: &str = "_integration";

/// The worktree `task`'s `attempt` of `workgroup` runs in, in the workspace whose root is
/// `workspace` (canonical, as `strata run` resolves it).
pub fn worktree_path(workspace: &Path, workgroup: &str, task: &str, attempt: u32) -> PathBuf {
    worktrees_of(workspace, workgroup).join(format!("{task}.{attempt}"))
}

/// The repository a workgroup writes to, and its integration worktree.
#[derive(Clone, Debug)]
pub struct Repo {
    root: PathBuf,
    branch: String,
    base: PathBuf,
    /// Who its commits and picks are by ([`AUTHOR_ENV`]).
    author: Author,
    /// Worktrees being removed off the caller's thread ([`Repo::remove_soon`]).
    removing: Arc<Mutex<Vec<Removal>>>,
}

/// A worktree's removal on a thread of its own.
type Removal = std::thread::JoinHandle<anyhow::Result<()>>;

/// What a worker changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Files changed (added, modified, deleted, renamed), repository-relative, sorted.
    pub files: Vec<String>,
    /// The commit holding them, when there were any.
    pub commit: Option<String>,
}

impl Repo {
    /// Opens the repository holding `dir` for `workgroup` of the workspace whose root is
    /// `workspace`: creates the integration branch at `HEAD` and its worktree, or reuses them
    /// when a run of the workgroup made them before.
    pub fn open(dir: &Path, workspace: &Path, workgroup: &str) -> anyhow::Result<Repo> {
        let top = git(dir, &["rev-parse", "--show-toplevel"]).with_context(|| {
            format!("[STRATA-E1722] {} is not in a git repository; writing tasks run in git worktrees (git init, commit, rerun)", dir.display())
        })?;
        let root = PathBuf::from(top.trim());
        git(&root, &["rev-parse", "--verify", "HEAD"])
            .context("[STRATA-E1722] the repository has no commit yet; commit once, then rerun")?;
        exclude_strata(&root)?;
        let base = worktrees_of(workspace, workgroup);
        let author = Author::from_env()?;
        let repo = Repo { root, branch: format!("strata/{workgroup}"), base, author, removing: Arc::default() };
        let integration = repo.integration();
        if !integration.join(".git").exists() {
            std::fs::create_dir_all(&repo.base).with_context(|| format!("cannot create {}", repo.base.display()))?;
            let _ = git(&repo.root, &["worktree", "prune"]);
            let exists =
                git(&repo.root, &["rev-parse", "--verify", "--quiet", &format!("refs/heads/{}", repo.branch)]).is_ok();
            let path = integration.to_string_lossy().into_owned();
            if exists {
                git(&repo.root, &["worktree", "add", "--force", &path, &repo.branch])?;
            } else {
                git(&repo.root, &["worktree", "add", "-b", &repo.branch, &path, "HEAD"])?;
            }
        }
        // A stop in the middle of a pick leaves it half done: undo it (its task is recorded as
        // completed and applied again by the coordinator's reconciliation).
        if integration.join(".git").exists() {
            let _ = git(&integration, &["cherry-pick", "--abort"]);
            git(&integration, &["reset", "-q", "--hard", "HEAD"])?;
        }
        Ok(repo)
    }

    /// The commits already applied to the integration branch (by the `cherry picked from`
    /// trailer each pick records).
    pub fn applied(&self) -> anyhow::Result<std::collections::BTreeSet<String>> {
        let log = git(&self.integration(), &["log", "--format=%B", "HEAD"])?;
        Ok(log
            .lines()
            .filter_map(|l| l.trim().strip_prefix("(cherry picked from commit ")?.strip_suffix(')'))
            .map(str::to_owned)
            .collect())
    }

    /// The integration branch's tip.
    pub fn tip(&self) -> anyhow::Result<String> {
        let integration = self.integration();
        match read_head(&integration) {
            Some(id) => Ok(id),
            None => Ok(git(&integration, &["rev-parse", "HEAD"])?.trim().to_owned()),
        }
    }

    /// The repository's top directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The integration branch.
    pub fn branch(&self) -> &str {
        &self.branch
    }

    fn integration(&self) -> PathBuf {
        self.base.join(INTEGRATION_WORKTREE)
    }

    /// A fresh worktree for `task`'s `attempt` at the integration tip (an earlier one at that
    /// path, from a run that stopped, is removed first): made in process ([`inproc::add_worktree`]),
    /// else by `git worktree add`.
    pub fn worktree(&self, task: &str, attempt: u32) -> anyhow::Result<PathBuf> {
        self.settle(false)?;
        let path = self.base.join(format!("{task}.{attempt}"));
        if path.exists() {
            self.remove(&path)?;
        }
        // The branch, not a commit id read first: `--detach` checks out its tip, as it is now.
        let reference = format!("refs/heads/{}", self.branch);
        if inproc::add_worktree(&self.root, &path, &reference).is_some() {
            return Ok(path);
        }
        git(&self.root, &["worktree", "add", "--detach", &path.to_string_lossy(), &reference])?;
        Ok(path)
    }

    /// Stages and commits everything changed in `worktree`; the files and the commit.
    ///
    /// The files are what `git status` reports against `HEAD` (untracked files one by one,
    /// ignored ones left out, no rename pairing): the same set `git add -A` then stages. In
    /// process ([`inproc::collect`]) it starts no process; where that path declines, nothing
    /// changed costs one `git` process and changes cost three (status, add, commit).
    pub fn collect(&self, worktree: &Path, message: &str) -> anyhow::Result<Changes> {
        if let Some(changes) = inproc::collect_as(worktree, message, &self.author) {
            return Ok(changes);
        }
        let status = git(worktree, &["status", "--porcelain=v1", "-z", "--no-renames", "--untracked-files=all"])?;
        let mut files: Vec<String> =
            status.split('\0').filter_map(|e| e.get(3..)).filter(|s| !s.is_empty()).map(str::to_owned).collect();
        files.sort();
        files.dedup();
        if files.is_empty() {
            return Ok(Changes::default());
        }
        git(worktree, &["add", "-A"])?;
        git_by(worktree, &self.author, &["commit", "-q", "--no-verify", "-m", message])?;
        let commit = match read_head(worktree) {
            Some(id) => id,
            None => git(worktree, &["rev-parse", "HEAD"])?.trim().to_owned(),
        };
        Ok(Changes { files, commit: Some(commit) })
    }

    /// The patch `commit` makes against its parent (`git show --format= --binary`).
    pub fn diff_of(&self, commit: &str) -> anyhow::Result<String> {
        git(&self.root, &["show", "--format=", "--binary", commit])
    }

    /// Applies `commit` to the integration branch; on a conflict the pick is aborted and the
    /// conflicting files returned.
    pub fn apply(&self, commit: &str) -> anyhow::Result<Result<(), Vec<String>>> {
        let integration = self.integration();
        if git_by(&integration, &self.author, &["cherry-pick", "--allow-empty", "-x", commit]).is_ok() {
            return Ok(Ok(()));
        }
        let conflicted = git(&integration, &["diff", "--name-only", "--diff-filter=U"]).unwrap_or_default();
        git(&integration, &["cherry-pick", "--abort"])?;
        Ok(Err(conflicted.lines().map(str::to_owned).collect()))
    }

    /// Removes a task's worktree: its directory and its administrative directory, as `git
    /// worktree remove --force` does (which runs when the layout is not the expected one).
    pub fn remove(&self, worktree: &Path) -> anyhow::Result<()> {
        let common = self.root.join(".git").join("worktrees");
        if let Some(admin) = admin_dir(worktree)
            && let (Ok(admin), Ok(common)) = (std::fs::canonicalize(&admin), std::fs::canonicalize(&common))
            && admin.parent() == Some(common.as_path())
        {
            std::fs::remove_dir_all(worktree).with_context(|| format!("cannot remove {}", worktree.display()))?;
            std::fs::remove_dir_all(&admin).with_context(|| format!("cannot remove {}", admin.display()))?;
            return Ok(());
        }
        git(&self.root, &["worktree", "remove", "--force", &worktree.to_string_lossy()])
            .or_else(|e| if worktree.exists() { Err(e) } else { Ok(String::new()) })?;
        Ok(())
    }

    /// [`Repo::remove`] on a thread of its own, so a task's end does not wait for its worktree's
    /// files to be deleted: nothing reads a worktree once its commit is made (every attempt and
    /// every suite run has a path of its own). A removal's error is returned by the next
    /// [`Repo::worktree`] or by [`Repo::close`], which waits for every removal; a stop before
    /// then leaves the worktree, as a stop in the middle of [`Repo::remove`] would, for `strata
    /// worktrees prune`. Without a thread to be had, it is removed at once.
    pub fn remove_soon(&self, worktree: &Path) -> anyhow::Result<()> {
        let (repo, path) = (self.clone(), worktree.to_path_buf());
        match std::thread::Builder::new().name("strata-worktree-remove".into()).spawn(move || repo.remove(&path)) {
            Ok(h) => {
                self.removing.lock().unwrap_or_else(PoisonError::into_inner).push(h);
                Ok(())
            }
            // No thread to be had: removed here.
            Err(_) => self.remove(worktree),
        }
    }

    /// Joins the removals that have ended (all of them with `all`); the first error among them.
    fn settle(&self, all: bool) -> anyhow::Result<()> {
        let handles: Vec<Removal> = {
            let mut removing = self.removing.lock().unwrap_or_else(PoisonError::into_inner);
            if all {
                std::mem::take(&mut *removing)
            } else {
                let (ended, running) = std::mem::take(&mut *removing).into_iter().partition(|h| h.is_finished());
                *removing = running;
                ended
            }
        };
        let mut first = Ok(());
        for h in handles {
            let r = h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a worktree's removal panicked")));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Waits for every removal [`Repo::remove_soon`] began; the first error among them.
    pub fn wait_for_removals(&self) -> anyhow::Result<()> {
        self.settle(true)
    }

    /// Removes the integration worktree (the branch stays, holding the result), once every
    /// removal [`Repo::remove_soon`] began has ended.
    pub fn close(&self) -> anyhow::Result<()> {
        self.settle(true)?;
        self.remove(&self.integration())?;
        let _ = std::fs::remove_dir(&self.base);
        Ok(())
    }
}

#[cfg(test)]
mod author_tests {
    use super::*;

    #[test]
    fn an_author_is_name_and_email_and_nothing_looser() {
        let a = Author::parse(" Ada Example <ada@example.org> ").expect("parses");
        assert_eq!((a.name.as_str(), a.email.as_str()), ("Ada Example", "ada@example.org"));
        for bad in ["ada@example.org", "Ada <>", "<ada@example.org>", "Ada <a<b>", "A\u{7}da <a@b>", "Ada <a@b"] {
            assert!(Author::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Author::parse(&format!("{} <a@b>", "n".repeat(AUTHOR_BYTES_MAX + 1))).is_err());
    }

    #[test]
    fn a_commit_message_carries_trailers_back_to_the_journal() {
        assert_eq!(
            commit_message("wg", "t", 2, Some((41, "sha256:ab"))),
            "strata: wg/t (attempt 2)\n\nStrata-Workgroup: wg\nStrata-Task: t\nStrata-Attempt: 2\nStrata-Prompt: sha256:ab\nStrata-Journal: 41"
        );
        assert!(!commit_message("wg", "t", 1, None).contains("Strata-Prompt"));
    }
}
