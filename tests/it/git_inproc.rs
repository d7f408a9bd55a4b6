//! A writer task's worktree and commit made in process (`coordinator::git::inproc`, gix) are
//! what the `git` commands they replace make: the same layout git reads and lists, the same
//! files listed, the same tree committed on the same parent; and where that code does not do
//! as git would, it declines and leaves nothing behind, so the caller runs `git`.

use std::path::Path;

use strata_adapters::coordinator::git::{Repo, inproc};
use strata_tests::{git, init_repo};

const FILES: [(&str, &str); 6] = [
    ("README.md", "# r\n"),
    ("src/a.rs", "fn a() {}\n"),
    ("src/b.rs", "fn b() {}\n"),
    ("run.sh", "#!/bin/sh\necho hi\n"),
    ("gone/old.txt", "old\n"),
    (".gitignore", "*.log\n"),
];

/// The same worker's edits, made in `tree`: a change, a deletion, new files in a new directory, an
/// ignored file, an executable bit, a symbolic link, a change staged and then changed again, and
/// a file replaced by a directory.
fn edit(tree: &Path) {
    std::fs::write(tree.join("src/a.rs"), "fn a() { 1 }\n").expect("write");
    std::fs::remove_file(tree.join("src/b.rs")).expect("remove");
    std::fs::create_dir_all(tree.join("new/deep")).expect("mkdir");
    std::fs::write(tree.join("new/deep/c.rs"), "fn c() {}\n").expect("write");
    std::fs::write(tree.join("new/d.txt"), "d\n").expect("write");
    std::fs::write(tree.join("debug.log"), "ignored\n").expect("write");
    std::os::unix::fs::symlink("src/a.rs", tree.join("link-to-a")).expect("symlink");
    let readme = tree.join("README.md");
    std::fs::write(&readme, "# r, staged\n").expect("write");
    git(tree, &["add", "README.md"]);
    std::fs::write(&readme, "# r, staged, then changed again\n").expect("write");
    std::fs::remove_dir_all(tree.join("gone")).expect("remove dir");
    std::fs::write(tree.join("gone"), "a file where a directory was\n").expect("write");
    let script = tree.join("run.sh");
    let mut perms = std::fs::metadata(&script).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).expect("chmod");
}

/// What `git status`, `git add -A` and `git commit` record for `tree`: the listed files and the
/// commit (the path `coordinator::git::Repo::collect` took before).
fn collect_with_git(tree: &Path, message: &str) -> (Vec<String>, String) {
    let status = git(tree, &["status", "--porcelain=v1", "-z", "--no-renames", "--untracked-files=all"]);
    let mut files: Vec<String> =
        status.split('\0').filter_map(|e| e.get(3..)).filter(|s| !s.is_empty()).map(str::to_owned).collect();
    files.sort();
    files.dedup();
    git(tree, &["add", "-A"]);
    git(
        tree,
        &["-c", "user.name=strata", "-c", "user.email=strata@localhost", "commit", "-q", "--no-verify", "-m", message],
    );
    (files, git(tree, &["rev-parse", "HEAD"]).trim().to_owned())
}

#[test]
fn a_worktree_made_in_process_is_one_git_knows_and_its_commit_is_the_one_git_makes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("repo");
    init_repo(&root, &FILES);
    let repo = Repo::open(&root, &root, "inproc").expect("opens");
    let tip = git(&root, &["rev-parse", "refs/heads/strata/inproc"]).trim().to_owned();

    // Made in process: git lists it, sees it clean and detached at the tip.
    let ours = repo.worktree("ours", 1).expect("worktree");
    let listed = git(&root, &["worktree", "list", "--porcelain"]);
    let canonical = std::fs::canonicalize(&ours).expect("canonical");
    assert!(listed.contains(&format!("worktree {}", canonical.display())), "{listed}");
    assert_eq!(git(&ours, &["status", "--porcelain"]), "", "a fresh worktree is clean");
    assert_eq!(git(&ours, &["rev-parse", "HEAD"]).trim(), tip);
    assert_eq!(git(&ours, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(), "HEAD", "detached");
    for (path, text) in FILES {
        assert_eq!(std::fs::read_to_string(ours.join(path)).expect("checked out"), text, "{path}");
    }

    // The reference: the same edits in a worktree git made, committed by git.
    let theirs = tmp.path().join("theirs");
    git(&root, &["worktree", "add", "--detach", theirs.to_str().expect("utf-8"), "refs/heads/strata/inproc"]);
    edit(&ours);
    edit(&theirs);
    let (git_files, git_commit) = collect_with_git(&theirs, "strata: wg/t (attempt 1)");
    let changes = inproc::collect(&ours, "strata: wg/t (attempt 1)").expect("committed in process");
    assert_eq!(changes.files, git_files, "the files git status lists");
    assert!(changes.files.iter().all(|f| f != "debug.log"), "ignored files stay out");
    let commit = changes.commit.expect("a commit");
    let tree_of = |c: &str| git(&root, &["rev-parse", &format!("{c}^{{tree}}")]).trim().to_owned();
    assert_eq!(tree_of(&commit), tree_of(&git_commit), "the same tree");
    assert_eq!(git(&root, &["rev-parse", &format!("{commit}^")]).trim(), tip, "on the tip");
    assert_eq!(
        git(&root, &["log", "-1", "--format=%an <%ae>%n%B", &commit]),
        "strata <strata@localhost>\nstrata: wg/t (attempt 1)\n\n"
    );
    assert_eq!(git(&ours, &["rev-parse", "HEAD"]).trim(), commit, "HEAD moved");
    assert_eq!(git(&ours, &["status", "--porcelain"]), "", "the index matches the commit");
    git(&root, &["fsck", "--no-progress"]);

    // Nothing changed: no commit, HEAD stays.
    let again = inproc::collect(&ours, "again").expect("answered");
    assert_eq!((again.files.len(), again.commit), (0, None));

    // The commit applies to the integration branch like any other, and both worktrees go.
    assert!(repo.apply(&commit).expect("apply").is_ok());
    assert_eq!(git(&root, &["show", "strata/inproc:src/a.rs"]), "fn a() { 1 }\n");
    repo.remove(&ours).expect("remove");
    assert!(!ours.exists());
    git(&root, &["worktree", "remove", "--force", theirs.to_str().expect("utf-8")]);
    assert_eq!(git(&root, &["worktree", "prune", "--dry-run", "-v"]), "", "nothing stale left");
    repo.close().expect("close");
}

#[test]
fn where_git_would_do_more_the_in_process_path_declines_and_leaves_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("repo");
    init_repo(&root, &FILES);
    // A filter driver: checkouts and commits run it, which this code does not.
    git(&root, &["config", "filter.upper.clean", "tr a-z A-Z"]);
    let path = tmp.path().join("wt").join("t.1");
    assert!(inproc::add_worktree(&root, &path, "refs/heads/main").is_none());
    assert!(!path.exists(), "no directory left");
    let admin = root.join(".git").join("worktrees");
    assert!(!admin.exists() || std::fs::read_dir(&admin).expect("read").next().is_none(), "no admin dir left");
    // Through Repo the git commands make it instead, and commit through the filter.
    let repo = Repo::open(&root, &root, "filtered").expect("opens");
    let tree = repo.worktree("t", 1).expect("worktree by git");
    assert_eq!(git(&tree, &["status", "--porcelain"]), "");
    std::fs::write(tree.join(".gitattributes"), "x.txt filter=upper\n").expect("write");
    std::fs::write(tree.join("x.txt"), "lower\n").expect("write");
    assert!(inproc::collect(&tree, "m").is_none(), "declined: a filter driver is configured");
    let changes = repo.collect(&tree, "m").expect("collect by git");
    assert_eq!(changes.files, [".gitattributes", "x.txt"]);
    let commit = changes.commit.expect("commit");
    assert_eq!(git(&root, &["show", &format!("{commit}:x.txt")]), "LOWER\n", "the clean filter ran");
    repo.remove(&tree).expect("remove");
    repo.close().expect("close");
}
