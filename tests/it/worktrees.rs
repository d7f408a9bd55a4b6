//! Where writers' worktrees live and how they are cleaned up, and the way back from an
//! integration commit to the journal: worktrees are under the workspace's
//! `.strata/worktrees/<workgroup>/` on both git paths (in process and the `git` fallback) and
//! never reach what is committed or integrated; `strata worktrees` lists them with whether a live
//! workgroup owns them and `prune` removes the others (git forgets them too); `strata audit
//! commit SHA` follows a real `strata run --example` commit's trailers to its task's audit.

use std::path::Path;

use serde_json::Value;
use strata_adapters::coordinator::git::{Repo, worktree_path};
use strata_tests::{git, init_repo, run_setting, strata, strata_bin, strata_ok};

const BIN: &str = strata_bin!();

fn json(ws: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&strata_ok(BIN, ws, &all)).expect("json")
}

#[test]
fn worktrees_live_in_the_workspace_on_both_git_paths_and_never_reach_the_branch() {
    for cli_fallback in [false, true] {
        let tmp = tempfile::tempdir().expect("tempdir");
        // The workspace is the repository itself, the usual setting on a person's repository.
        let root = std::fs::canonicalize(tmp.path()).expect("canonical").join("repo");
        init_repo(&root, &[("src/lib.rs", "// lib\n")]);
        if cli_fallback {
            // A filter driver: the in-process path declines, so the `git` commands make it.
            git(&root, &["config", "filter.upper.clean", "cat"]);
        }
        let repo = Repo::open(&root, &root, "wg").expect("opens");
        let tree = repo.worktree("t", 1).expect("worktree");
        assert_eq!(tree, worktree_path(&root, "wg", "t", 1));
        assert_eq!(tree, root.join(".strata/worktrees/wg/t.1"), "fallback {cli_fallback}");
        assert!(root.join(".strata/worktrees/wg/_integration/.git").exists());
        std::fs::write(tree.join("src/new.rs"), "pub fn f() {}\n").expect("write");
        let changes = repo.collect(&tree, "strata: wg/t (attempt 1)").expect("collect");
        assert_eq!(changes.files, ["src/new.rs"], "only the worker's file, nothing of .strata/");
        repo.apply(changes.commit.as_deref().expect("a commit")).expect("apply").expect("applies");
        let branch = git(&root, &["ls-tree", "-r", "--name-only", "strata/wg"]);
        assert_eq!(branch.lines().collect::<Vec<_>>(), ["src/lib.rs", "src/new.rs"], "fallback {cli_fallback}");
        assert_eq!(git(&root, &["status", "--porcelain"]), "", "the repository's own status shows no worktree");
        repo.remove(&tree).expect("remove");
        repo.close().expect("close");
        assert!(!root.join(".strata/worktrees/wg").exists(), "nothing left once the workgroup is closed");
    }
}

/// A writer's plan paused at its workgroup cost cap after its first task: a live workgroup.
const PAUSING: &str = r#"
workgroup = "paused"
pipeline = "light"
parallel = 1
[caps.workgroup]
cost_usd = 0.000001
[[task]]
id = "first"
role = "backend-builder"
objective = "Write the parser."
owns = ["src/parse.rs"]
[[task]]
id = "second"
role = "backend-builder"
objective = "Write the printer."
owns = ["src/print.rs"]
after = ["first"]
"#;

#[test]
fn worktrees_lists_who_owns_each_and_prune_removes_only_the_left_overs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (ws, repo, plan) = run_setting(BIN, tmp.path(), &[("src/lib.rs", "// lib\n")], PAUSING);
    let out = strata(
        BIN,
        &ws,
        &["run", plan.to_str().expect("utf-8"), "--repo", repo.to_str().expect("utf-8"), "--time-scale", "0"],
    );
    assert_eq!(out.status.code(), Some(4), "paused: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json(&ws, &["worktrees"])["worktrees"], serde_json::json!([]), "a stopped run closes its worktrees");

    // What a killed run leaves: a worktree of the paused workgroup (a resume needs it) and one
    // of a workgroup this journal never had.
    let ws = std::fs::canonicalize(&ws).expect("canonical");
    let kept = worktree_path(&ws, "paused", "second", 1);
    let ghost = worktree_path(&ws, "ghost", "t", 3);
    for p in [&kept, &ghost] {
        git(&repo, &["worktree", "add", "--detach", p.to_str().expect("utf-8"), "main"]);
    }
    let listed = json(&ws, &["worktrees"]);
    let rows = listed["worktrees"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{listed}");
    assert_eq!(
        (
            rows[0]["workgroup"].as_str(),
            rows[0]["task"].as_str(),
            rows[0]["attempt"].as_u64(),
            rows[0]["live"].as_bool()
        ),
        (Some("ghost"), Some("t"), Some(3), Some(false))
    );
    assert!(rows[0]["workgroup_state"].is_null(), "not in the journal");
    assert_eq!((rows[1]["workgroup_state"].as_str(), rows[1]["live"].as_bool()), (Some("paused"), Some(true)));
    let text = strata_ok(BIN, &ws, &["worktrees"]);
    assert!(text.contains("2 worktrees; 1 no live workgroup owns"), "{text}");

    let dry = json(&ws, &["worktrees", "prune", "--dry-run"]);
    assert_eq!(dry["removed"].as_array().map(Vec::len), Some(1), "{dry}");
    assert!(ghost.exists(), "a dry run removes nothing");

    let pruned = json(&ws, &["worktrees", "prune"]);
    assert_eq!(pruned["removed"][0]["path"], ghost.display().to_string(), "{pruned}");
    assert_eq!(pruned["kept"], 1);
    assert!(!ghost.exists() && kept.exists());
    let registered = git(&repo, &["worktree", "list", "--porcelain"]);
    assert!(!registered.contains(ghost.to_str().expect("utf-8")), "git forgot it: {registered}");
    assert!(registered.contains(kept.to_str().expect("utf-8")), "{registered}");
    assert!(git(&repo, &["branch", "--list", "strata/paused"]).contains("strata/paused"), "branches stay");
}

#[test]
fn audit_commit_follows_an_example_commit_back_to_its_task_and_refuses_a_commit_without_trailers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let at = tmp.path().join("example");
    let out = std::process::Command::new(BIN).args(["run", "--example", "--at"]).arg(&at).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let repo = at.join("repo");
    let log = git(&repo, &["log", "--format=%H %s", "strata/cr-1-rollout"]);
    let (sha, subject) = log
        .lines()
        .find_map(|l| l.split_once(' ').filter(|(_, s)| s.starts_with("strata: ")))
        .expect("an integration commit");
    let task = subject.trim_start_matches("strata: cr-1-rollout/").split(' ').next().expect("task");

    let audit = json(&at, &["audit", "commit", sha]);
    assert_eq!(audit["agrees"], true, "{audit}");
    assert_eq!(audit["trailers"]["workgroup"], "cr-1-rollout");
    assert_eq!(audit["trailers"]["task"], task);
    assert_eq!(audit["task"]["task"], task);
    assert_eq!(audit["task"]["status"], "completed");
    let checks = audit["checks"].as_array().expect("checks");
    assert!(checks.iter().all(|c| c["agrees"] == true), "{audit}");
    assert_eq!(checks.len(), 3, "journal sequence, prompt hash and the worker's commit: {audit}");
    let written: Vec<&str> =
        audit["writes"].as_array().expect("writes").iter().filter_map(|w| w["path"].as_str()).collect();
    let files = git(&repo, &["show", "--format=", "--name-only", sha]);
    assert_eq!(written, files.lines().collect::<Vec<_>>(), "the journal's writes are the commit's files");
    // A short id and the text form.
    let text = strata_ok(BIN, &at, &["audit", "commit", &sha[..12]]);
    assert!(text.contains(&format!("task {task}")) && text.contains("agrees with the journal"), "{text}");

    let base = git(&repo, &["rev-list", "--max-parents=0", "HEAD"]);
    let refused = strata(BIN, &at, &["--json", "audit", "commit", base.trim()]);
    assert_eq!(refused.status.code(), Some(1));
    let e: Value = serde_json::from_slice(&refused.stdout).expect("one JSON error");
    assert_eq!(e["code"], "STRATA-E2660", "{e}");
    let missing = strata(BIN, &at, &["audit", "commit", "0000000000000000000000000000000000000bad"]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("STRATA-E2659"));
    assert_eq!(json(&at, &["worktrees"])["worktrees"], serde_json::json!([]), "a completed run leaves none");
}

#[test]
fn worktrees_an_earlier_strata_left_in_the_temporary_directory_are_listed_and_pruned() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let plan_text = "workgroup = \"done\"\npipeline = \"light\"\n[[task]]\nid = \"w\"\nrole = \"backend-builder\"\nobjective = \"Write it.\"\nowns = [\"src/w.rs\"]\n";
    let (ws, repo, plan) = run_setting(BIN, tmp.path(), &[("src/lib.rs", "// lib\n")], plan_text);
    let temp = tmp.path().join("tmpdir");
    std::fs::create_dir_all(&temp).expect("tmpdir");
    let strata_in = |args: &[&str]| {
        std::process::Command::new(BIN).arg("--dir").arg(&ws).args(args).env("TMPDIR", &temp).output().expect("strata")
    };
    let run = strata_in(&[
        "run",
        plan.to_str().expect("utf-8"),
        "--repo",
        repo.to_str().expect("utf-8"),
        "--time-scale",
        "0",
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    // The old place: $TMPDIR/strata-worktrees/<first 16 hex of blake3(repository top)>/<workgroup>/.
    let top = std::fs::canonicalize(&repo).expect("canonical");
    let key = blake3::hash(top.as_os_str().as_encoded_bytes()).to_hex();
    let old = temp.join("strata-worktrees").join(&key[..16]).join("done").join("w.1");
    git(&repo, &["worktree", "add", "--detach", old.to_str().expect("utf-8"), "main"]);
    let listed: Value = serde_json::from_slice(&strata_in(&["--json", "worktrees"]).stdout).expect("worktrees JSON");
    let rows = listed["worktrees"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(
        (rows[0]["workgroup_state"].as_str(), rows[0]["live"].as_bool(), rows[0]["path"].as_str()),
        (Some("completed"), Some(false), old.to_str())
    );
    let pruned: Value =
        serde_json::from_slice(&strata_in(&["--json", "worktrees", "prune"]).stdout).expect("prune JSON");
    assert_eq!(pruned["removed"].as_array().map(Vec::len), Some(1), "{pruned}");
    assert!(!old.exists());
    let registered = git(&repo, &["worktree", "list", "--porcelain"]);
    assert!(!registered.contains(old.to_str().expect("utf-8")), "git forgot it: {registered}");
}
