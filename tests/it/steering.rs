//! `strata knowledge import` on real repositories on disk: AGENTS.md (nested, the nearest file
//! winning), CLAUDE.md, Cursor rules and Kiro steering become chunks with concerns from headings
//! or front matter and scopes from their paths; a re-import appends only what changed (nothing
//! when nothing did); refused input (an oversize file, too many files, a FIFO named AGENTS.md,
//! a symbolic link out of the repository) appends nothing and never blocks.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use strata_tests::{strata, strata_bin, strata_ok};

const BIN: &str = strata_bin!();

fn head(ws: &Path) -> u64 {
    let v: Value = serde_json::from_str(&strata_ok(BIN, ws, &["--json", "journal", "log"])).expect("json");
    v.as_array().and_then(|a| a.last()).map_or(0, |e| e["seq"].as_u64().expect("seq"))
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

/// A workspace that is also the repository, holding every kind of steering file.
fn repository(tmp: &Path) -> std::path::PathBuf {
    let ws = tmp.join("repo");
    std::fs::create_dir_all(&ws).expect("mkdir");
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    write(
        &ws,
        "AGENTS.md",
        "# Repository guide\n\nA billing service.\n\n## Testing\n\nRun `cargo test`.\n\n## Code style\n\nrustfmt, no unwrap.\n",
    );
    write(
        &ws,
        "services/billing/AGENTS.md",
        "## Testing\n\nRun `make test` here.\n\n## Money\n\nAmounts are integer cents.\n",
    );
    write(&ws, "CLAUDE.md", "## Commits\n\nOne change per commit.\n\n## Reviews\n\nAsk before merging.\n");
    write(
        &ws,
        ".cursor/rules/frontend.mdc",
        "---\ndescription: Frontend rules\nglobs: *.tsx\nalwaysApply: false\n---\nUse hooks, not classes.\n",
    );
    write(&ws, ".kiro/steering/security.md", "---\ninclusion: always\nconcerns: [security]\n---\nNever log tokens.\n");
    write(&ws, "node_modules/pkg/AGENTS.md", "## Testing\n\nnot ours\n");
    write(&ws, "README.md", "## Testing\n\nnot steering\n");
    ws
}

fn listed(ws: &Path) -> BTreeMap<String, Value> {
    let v: Value = serde_json::from_str(&strata_ok(BIN, ws, &["--json", "knowledge", "list"])).expect("json");
    v["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .map(|c| (c["slug"].as_str().expect("slug").to_owned(), c.clone()))
        .collect()
}

fn served(ws: &Path, concern: &str, project: Option<&str>) -> Vec<String> {
    let mut args = vec!["--json", "knowledge", "get", "--concern", concern];
    if let Some(p) = project {
        args.extend(["--project", p]);
    }
    let v: Value = serde_json::from_str(&strata_ok(BIN, ws, &args)).expect("json");
    let mut slugs: Vec<String> =
        v["chunks"].as_array().expect("chunks").iter().map(|c| c["slug"].as_str().expect("slug").to_owned()).collect();
    slugs.sort();
    slugs
}

#[test]
fn steering_files_become_chunks_and_the_nearest_file_wins() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = repository(tmp.path());
    let out: Value = serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "knowledge", "import"])).expect("json");
    assert_eq!(
        out["files"],
        serde_json::json!([
            ".cursor/rules/frontend.mdc",
            ".kiro/steering/security.md",
            "AGENTS.md",
            "CLAUDE.md",
            "services/billing/AGENTS.md"
        ]),
        "node_modules and README.md are not read: {out}"
    );
    let chunks = listed(&ws);
    let slugs: Vec<&str> = chunks.keys().map(String::as_str).collect();
    assert_eq!(
        slugs,
        [
            "agents-md-code-style",
            "agents-md-general",
            "agents-md-testing",
            "claude-md-commits",
            "claude-md-reviews",
            "cursor-rules-frontend-mdc-frontend",
            "kiro-steering-security-md-security",
            "services-billing-agents-md-money",
            "services-billing-agents-md-testing",
        ]
    );
    assert_eq!(out["created"].as_array().map(Vec::len), Some(9));
    let scope = |s: &str| chunks[s]["project_scope"].clone();
    assert_eq!(scope("agents-md-code-style"), serde_json::json!([]), "a root file is shared");
    assert_eq!(scope("services-billing-agents-md-money"), serde_json::json!(["services-billing"]));
    assert_eq!(scope("agents-md-testing"), serde_json::json!(["repo-root"]), "overridden below: no longer shared");
    assert_eq!(chunks["cursor-rules-frontend-mdc-frontend"]["title"], "Cursor rule: Frontend rules");
    assert_eq!(chunks["kiro-steering-security-md-security"]["concerns"], serde_json::json!(["security", "steering"]));

    // In services/billing its own testing section wins; at the root, the root's.
    assert_eq!(served(&ws, "testing", Some("services-billing")), ["services-billing-agents-md-testing"]);
    assert_eq!(served(&ws, "testing", Some("repo-root")), ["agents-md-testing"]);
    // Everything that applies to a project, through the concern every imported chunk has.
    let all = served(&ws, "steering", Some("services-billing"));
    assert!(
        all.contains(&"agents-md-code-style".to_owned())
            && all.contains(&"services-billing-agents-md-money".to_owned())
    );
    assert!(!all.contains(&"agents-md-testing".to_owned()), "{all:?}");
}

#[test]
fn a_reimport_appends_only_what_changed_and_nothing_when_nothing_did() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = repository(tmp.path());
    strata_ok(BIN, &ws, &["knowledge", "import"]);
    let before = head(&ws);
    let again: Value = serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "knowledge", "import"])).expect("json");
    assert_eq!(again["appended"], 0, "{again}");
    assert_eq!(again["unchanged"].as_array().map(Vec::len), Some(9));
    assert_eq!(head(&ws), before, "nothing appended when nothing changed");

    write(&ws, "CLAUDE.md", "## Commits\n\nOne change per commit, signed.\n\n## Reviews\n\nAsk before merging.\n");
    let changed: Value = serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "knowledge", "import"])).expect("json");
    assert_eq!(
        changed["updated"],
        serde_json::json!([{"slug": "claude-md-commits", "version": 2, "tokens": changed["updated"][0]["tokens"]}])
    );
    assert!(changed["created"].as_array().is_some_and(Vec::is_empty), "{changed}");
    assert_eq!(head(&ws), before + 1, "one event: the changed chunk's new version");
    assert_eq!(listed(&ws)["claude-md-reviews"]["version"], 1);
}

#[test]
fn a_deleted_steering_file_or_section_retires_its_chunks_and_is_never_served_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = repository(tmp.path());
    strata_ok(BIN, &ws, &["knowledge", "import"]);
    assert!(served(&ws, "steering", None).iter().any(|s| s == "kiro-steering-security-md-security"));
    std::fs::remove_file(ws.join(".kiro/steering/security.md")).expect("remove");
    write(&ws, "CLAUDE.md", "## Commits\n\nOne change per commit.\n\n## Style\n\nRun fmt.\n");
    let before = head(&ws);
    let out: Value = serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "knowledge", "import"])).expect("json");
    assert_eq!(out["retired"], serde_json::json!(["claude-md-reviews", "kiro-steering-security-md-security"]), "{out}");
    assert_eq!(out["created"][0]["slug"], "claude-md-style", "{out}");
    assert_eq!(head(&ws), before + 4, "the new concern, the new section, then one retirement each: {out}");
    let now = listed(&ws);
    assert!(now.get("claude-md-reviews").is_none_or(|c| c["retired"] == true), "{:?}", now.get("claude-md-reviews"));
    let served_now = served(&ws, "steering", None);
    assert!(
        !served_now.iter().any(|s| s == "kiro-steering-security-md-security" || s == "claude-md-reviews"),
        "{served_now:?}"
    );
    // Nothing more to retire: a second import appends nothing; the file back revives its chunk.
    let again: Value = serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "knowledge", "import"])).expect("json");
    assert_eq!((again["appended"].as_u64(), again["retired"].as_array().map(Vec::len)), (Some(0), Some(0)), "{again}");
    write(&ws, ".kiro/steering/security.md", "---\ninclusion: always\nconcerns: [security]\n---\nNever log tokens.\n");
    strata_ok(BIN, &ws, &["knowledge", "import"]);
    assert!(served(&ws, "steering", None).iter().any(|s| s == "kiro-steering-security-md-security"));
}

#[test]
fn refused_steering_appends_nothing_and_odd_files_never_block() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = repository(tmp.path());
    let before = head(&ws);
    let refused = |what: &str, code: &str| {
        let out = strata(BIN, &ws, &["knowledge", "import"]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
        assert!(stderr.contains(code), "{what}: {stderr}");
        assert_eq!(head(&ws), before, "{what}: nothing appended");
        stderr
    };

    // A FIFO named AGENTS.md: opening it for reading would wait for a writer forever.
    let fifo = ws.join("services/AGENTS.md");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
    assert!(made.success());
    let said = refused("a FIFO", "STRATA-E2651");
    assert!(said.contains("FIFO"), "{said}");
    std::fs::remove_file(&fifo).expect("rm");

    // A symbolic link out of the repository.
    let outside = tmp.path().join("elsewhere.md");
    std::fs::write(&outside, "## Secrets\n\nsecret\n").expect("write");
    std::fs::create_dir_all(ws.join("docs")).expect("mkdir");
    std::os::unix::fs::symlink(&outside, ws.join("docs/AGENTS.md")).expect("symlink");
    refused("a link out of the repository", "STRATA-E2652");
    std::fs::remove_file(ws.join("docs/AGENTS.md")).expect("rm");
    // A link inside the repository is read like the file it points at.
    std::os::unix::fs::symlink(ws.join("CLAUDE.md"), ws.join("docs/CLAUDE.md")).expect("symlink");
    let ok: Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "knowledge", "import", "--dry-run"])).expect("json");
    assert!(ok["files"].as_array().expect("files").iter().any(|f| f == "docs/CLAUDE.md"), "{ok}");
    assert_eq!(head(&ws), before, "a dry run appends nothing");
    std::fs::remove_file(ws.join("docs/CLAUDE.md")).expect("rm");

    // A section over the chunk limit, and a file over the file limit.
    write(&ws, "big/AGENTS.md", &format!("## Huge\n\n{}\n## Small\n\nok\n", "word ".repeat(14_000)));
    let said = refused("an oversize section", "STRATA-E2655");
    assert!(said.contains("1 problem"), "{said}");
    write(&ws, "big/AGENTS.md", &"x".repeat(300 * 1024));
    refused("an oversize file", "STRATA-E1902");
    std::fs::remove_dir_all(ws.join("big")).expect("rm");

    // More steering files than one import takes.
    for i in 0..520 {
        write(&ws, &format!("many/d{i}/AGENTS.md"), "## Rule\n\nx\n");
    }
    refused("too many files", "STRATA-E2654");
    std::fs::remove_dir_all(ws.join("many")).expect("rm");
    strata_ok(BIN, &ws, &["knowledge", "import"]);
    assert!(head(&ws) > before, "the repaired repository imports");
}
