//! Write guards with the real binary on a real sled journal: `strata hook claude|codex
//! pre-tool-use` lets a worker write inside what its lineage owns, denies everything else with
//! the runtime's JSON deny, the reason on stderr and exit 2, fails closed, and records every
//! decision in the journal.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use strata_engine::guard::{self, patch_targets};
use strata_journal::Journal;
use strata_tests::strata_bin;

const ROOT: &str = "/work/worker-1";

fn with_stdin(args: &[&str], stdin: &[u8]) -> Output {
    strata_tests::strata_with_stdin(strata_bin!(), args, stdin)
}

fn hook(runtime: &str, journal: &Path, lineage: &str, input: &Value) -> Output {
    let j = journal.display().to_string();
    let args = ["hook", runtime, "pre-tool-use", "--journal", &j, "--lineage", lineage, "--root", ROOT];
    with_stdin(&args, input.to_string().as_bytes())
}

/// Exit code, the deny reason from stdout (if any) and stderr.
fn answer(out: &Output) -> (Option<i32>, Option<String>, String) {
    let reason = serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v["hookSpecificOutput"]["permissionDecisionReason"].as_str().map(str::to_owned));
    (out.status.code(), reason, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn claude_write(path: &str) -> Value {
    json!({"session_id": "s-1", "cwd": ROOT, "hook_event_name": "PreToolUse", "tool_name": "Write",
        "tool_input": {"file_path": path, "content": "x\n"}, "tool_use_id": "toolu_1"})
}

fn codex_patch(patch: &str) -> Value {
    json!({"session_id": "c-1", "turn_id": "t-1", "cwd": ROOT, "hook_event_name": "PreToolUse",
        "tool_name": "apply_patch", "tool_input": {"command": patch}, "tool_use_id": "call_1"})
}

/// A journal where lineage `L1` owns `src/api`.
fn journal_with_owner(dir: &Path) {
    let j = dir.display().to_string();
    let claim = json!({"lineage_id": "L1", "input": {"owned_files": ["src/api"], "is_writer": true}});
    let out = with_stdin(&["ce", "route", "--journal", &j], claim.to_string().as_bytes());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn claude_writes_inside_ownership_go_through_and_others_are_denied_with_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let j = tmp.path().join("journal");
    journal_with_owner(&j);
    let ok = hook("claude", &j, "L1", &claude_write(&format!("{ROOT}/src/api/handler.rs")));
    assert_eq!(answer(&ok), (Some(0), None, String::new()));
    for (path, needle) in [
        (format!("{ROOT}/src/web/page.tsx"), "write outside owned files: src/web/page.tsx"),
        (format!("{ROOT}/src/apiary.rs"), "src/apiary.rs"),
        (format!("{ROOT}/src/api/../../etc/passwd"), "write outside owned files"),
        ("/home/dev/other/x.rs".to_owned(), "outside the worker's directory"),
    ] {
        let (code, reason, stderr) = answer(&hook("claude", &j, "L1", &claude_write(&path)));
        assert_eq!(code, Some(2), "{path}");
        let reason = reason.unwrap_or_default();
        assert!(reason.contains(needle), "{path}: {reason}");
        assert_eq!(stderr.trim(), reason, "the reason goes to stderr too");
    }
    // Edit and NotebookEdit are checked the same way; reads are not writes.
    let edit = json!({"cwd": ROOT, "tool_name": "Edit", "tool_input": {"file_path": format!("{ROOT}/README.md"), "old_string": "a", "new_string": "b"}});
    assert_eq!(answer(&hook("claude", &j, "L1", &edit)).0, Some(2));
    let nb = json!({"cwd": ROOT, "tool_name": "NotebookEdit", "tool_input": {"notebook_path": format!("{ROOT}/src/api/n.ipynb"), "new_source": "x"}});
    assert_eq!(answer(&hook("claude", &j, "L1", &nb)).0, Some(0));
    let read = json!({"cwd": ROOT, "tool_name": "Read", "tool_input": {"file_path": "/etc/passwd"}});
    assert_eq!(answer(&hook("claude", &j, "L1", &read)).0, Some(0));
}

#[test]
fn codex_patches_are_checked_line_by_line_relative_to_cwd() {
    let tmp = tempfile::tempdir().unwrap();
    let j = tmp.path().join("journal");
    journal_with_owner(&j);
    let add = "*** Begin Patch\n*** Add File: src/api/new.rs\n+fn x() {}\n*** End Patch\n";
    assert_eq!(answer(&hook("codex", &j, "L1", &codex_patch(add))).0, Some(0));
    let moved = "*** Begin Patch\n*** Update File: src/api/a.rs\n*** Move to: docs/a.md\n@@\n-x\n+y\n*** End Patch\n";
    let (code, reason, _) = answer(&hook("codex", &j, "L1", &codex_patch(moved)));
    assert_eq!(code, Some(2));
    assert!(reason.unwrap().contains("write outside owned files: docs/a.md"));
    let delete = "*** Begin Patch\n*** Delete File: Cargo.toml\n*** End Patch\n";
    assert_eq!(answer(&hook("codex", &j, "L1", &codex_patch(delete))).0, Some(2));
    let shell = json!({"cwd": ROOT, "tool_name": "Bash", "tool_input": {"command": "ls"}});
    assert_eq!(answer(&hook("codex", &j, "L1", &shell)).0, Some(0), "shell is left to the post-turn diff check");
    assert_eq!(
        patch_targets("*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** Add File: a\n*** End Patch"),
        vec!["a".to_owned(), "b".to_owned()]
    );
}

#[test]
fn the_guard_fails_closed_and_records_every_decision() {
    let tmp = tempfile::tempdir().unwrap();
    let j = tmp.path().join("journal");
    journal_with_owner(&j);
    let write = claude_write(&format!("{ROOT}/src/api/ok.rs"));
    let (code, reason, _) = answer(&hook("claude", &j, "L9", &write));
    assert_eq!(code, Some(2));
    assert!(reason.unwrap().contains("lineage L9 owns no files"));
    let args = ["hook", "claude", "pre-tool-use", "--journal", j.to_str().unwrap(), "--lineage", "L1", "--root", ROOT];
    let (code, reason, _) = answer(&with_stdin(&args, b"{not json"));
    assert_eq!(code, Some(2));
    assert!(reason.unwrap().starts_with("strata could not check this write (hook input is not JSON"));
    let missing = tmp.path().join("no-journal");
    let (code, reason, _) = answer(&hook("claude", &missing, "L1", &write));
    assert_eq!(code, Some(2), "no journal: denied, never allowed");
    assert!(reason.unwrap().contains("journal"));
    assert!(!missing.exists(), "the hook never creates a journal");
    // Allowed and denied decisions are all in the journal: the input that could not be read
    // was denied without the ownership map and deferred, then folded in by the next opener (the
    // refusal with no journal is not: there was nowhere to record it).
    assert_eq!(answer(&hook("claude", &j, "L1", &write)).0, Some(0));
    let journal = Journal::open(&j, &strata_tests::options(strata_journal::Durability::Process)).unwrap();
    let events = journal.read_range(1, 1_000).unwrap();
    let kinds: Vec<(&str, Value)> = events
        .iter()
        .filter(|e| e.event_type.starts_with("guard."))
        .map(|e| (e.event_type.as_str(), serde_json::from_slice(&e.payload).unwrap()))
        .collect();
    assert_eq!(kinds.iter().map(|k| k.0).collect::<Vec<_>>(), vec![guard::DENIED, guard::DENIED, guard::ALLOWED]);
    assert_eq!(kinds[0].1["lineage_id"], "L9");
    assert_eq!(kinds[1].1["lineage_id"], "L1");
    assert!(kinds[1].1["reason"].as_str().unwrap().contains("not JSON"));
    assert_eq!(kinds[2].1["paths"], json!(["src/api/ok.rs"]));
    assert!(events.iter().filter(|e| e.event_type.starts_with("guard.")).all(|e| e.stream.starts_with("guard/")));
}
