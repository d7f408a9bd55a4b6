//! Write guards with the real binary on a real sled journal: `strata hook claude|codex
//! pre-tool-use` lets a worker write inside what its lineage owns, denies everything else with
//! the runtime's JSON deny, the reason on stderr and exit 2, fails closed, and records every
//! decision in the journal. Under strata's own faults too: with the daemon stopped (SIGSTOP) or
//! killed (SIGKILL) while a hook waits, the hook denies within its deadline, and the denial it
//! could not record reaches the journal through `pending/` and shows in `audit file`; a write
//! through a symbolic link that leaves the worker's directory is denied; and no exit path of the
//! hook gives a code other than 0 or 2 (a static check of its source, and every bad invocation).

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use strata_engine::guard::{self, patch_targets};
use strata_journal::Journal;
use strata_tests::daemon::Daemon;
use strata_tests::{strata_bin, strata_ok};

const BIN: &str = strata_bin!();

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

/// A workspace whose journal says lineage `L1` owns `src/api` of the worker directory `work/`.
fn workspace_with_owner() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(tmp.path()).unwrap();
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    journal_with_owner(&ws);
    let work = ws.join("work");
    std::fs::create_dir_all(work.join("src/api")).unwrap();
    (tmp, ws, work)
}

fn hook_args(ws: &Path, work: &Path, deadline_ms: u64) -> Vec<String> {
    ["hook", "claude", "pre-tool-use", "--journal", &ws.display().to_string(), "--lineage", "L1"]
        .into_iter()
        .map(str::to_owned)
        .chain(["--root".to_owned(), work.display().to_string(), "--deadline-ms".to_owned(), deadline_ms.to_string()])
        .collect()
}

fn write_in(work: &Path, rel: &str) -> Value {
    let mut v = claude_write(&work.join(rel).display().to_string());
    v["cwd"] = json!(work.display().to_string());
    v
}

fn run_hook(ws: &Path, work: &Path, deadline_ms: u64, input: &Value) -> (Option<i32>, Option<String>, String) {
    let args = hook_args(ws, work, deadline_ms);
    answer(&with_stdin(&args.iter().map(String::as_str).collect::<Vec<_>>(), input.to_string().as_bytes()))
}

/// Waits (bounded) until process `pid` holds a socket: a hook connected to the daemon.
fn wait_for_socket(pid: u32) {
    for _ in 0..3_000 {
        let held = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy().starts_with("socket:")));
        if held {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the hook never connected to the daemon");
}

fn pending(ws: &Path) -> usize {
    std::fs::read_dir(ws.join(".strata/journal/pending"))
        .map_or(0, |d| d.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".json")).count())
}

#[test]
fn the_hook_denies_when_the_daemon_is_stopped_or_killed_and_the_audit_shows_it() {
    let (_tmp, ws, work) = workspace_with_owner();
    let d = Daemon::start(BIN, &ws, &[]);
    let inside = write_in(&work, "src/api/handler.rs");
    assert_eq!(run_hook(&ws, &work, 2_000, &inside).0, Some(0), "the daemon answers and allows");

    // (a) The daemon is stopped: the hook answers within its deadline, and denies.
    d.signal("STOP");
    let (code, reason, _) = run_hook(&ws, &work, 1_000, &inside);
    assert_eq!(code, Some(2));
    assert!(reason.unwrap().contains("STRATA-E2001"));
    assert_eq!(pending(&ws), 1, "the denial it could not record is kept beside the journal");

    // (b) The daemon is killed while a hook waits for it.
    let mut child = Command::new(BIN)
        .args(hook_args(&ws, &work, 30_000))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(write_in(&work, "src/api/other.rs").to_string().as_bytes()).unwrap();
    wait_for_socket(child.id());
    d.signal("KILL");
    let out = child.wait_with_output().unwrap();
    let (code, reason, _) = answer(&out);
    assert_eq!(code, Some(2), "a killed daemon is a denial, never exit 1");
    assert!(reason.unwrap().contains("STRATA-E2003"));
    assert_eq!(pending(&ws), 2);
    drop(d);

    // The next process to open the journal folds both denials in; the audit shows them.
    let shown: Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "audit", "file", "src/api/handler.rs"])).unwrap();
    assert_eq!(pending(&ws), 0);
    let denied = shown["denied"].as_array().unwrap();
    assert_eq!(denied.len(), 1, "{shown}");
    assert!(denied[0]["reason"].as_str().unwrap().contains("STRATA-E2001"));
    let shown: Value =
        serde_json::from_str(&strata_ok(BIN, &ws, &["--json", "audit", "file", "src/api/other.rs"])).unwrap();
    assert_eq!(shown["denied"].as_array().map(Vec::len), Some(1), "{shown}");
    let text = strata_ok(BIN, &ws, &["audit", "file", "src/api/other.rs"]);
    assert!(text.contains("denied writes of src/api/other.rs"), "{text}");
}

#[test]
fn a_write_through_a_link_that_leaves_the_worker_directory_is_denied() {
    let (_tmp, ws, work) = workspace_with_owner();
    let outside = ws.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, work.join("src/api/link")).unwrap();
    std::os::unix::fs::symlink(outside.join("new.rs"), work.join("src/api/dangling.rs")).unwrap();
    for rel in ["src/api/link/evil.rs", "src/api/dangling.rs"] {
        let (code, reason, _) = run_hook(&ws, &work, 5_000, &write_in(&work, rel));
        assert_eq!(code, Some(2), "{rel}");
        let reason = reason.unwrap();
        assert!(reason.contains("as the file system resolves it") && reason.contains("outside"), "{reason}");
    }
    // A link that stays inside what the lineage owns is fine.
    std::fs::create_dir(work.join("src/api/real")).unwrap();
    std::os::unix::fs::symlink(work.join("src/api/real"), work.join("src/api/alias")).unwrap();
    assert_eq!(run_hook(&ws, &work, 5_000, &write_in(&work, "src/api/alias/ok.rs")).0, Some(0));
}

#[test]
fn every_bad_invocation_of_the_hook_exits_2() {
    let (_tmp, ws, work) = workspace_with_owner();
    let good = hook_args(&ws, &work, 5_000);
    let input = write_in(&work, "src/api/handler.rs").to_string();
    let mut rootless = write_in(&work, "src/api/handler.rs");
    rootless["cwd"] = serde_json::json!("/");
    let rootless = rootless.to_string();
    let without = |flag: &str| {
        let mut a = good.clone();
        let i = a.iter().position(|x| x == flag).unwrap();
        a.drain(i..i + 2);
        a
    };
    let with = |extra: &[&str]| good.iter().cloned().chain(extra.iter().map(|s| (*s).to_owned())).collect::<Vec<_>>();
    let cases: Vec<(&str, Vec<String>, &[u8])> = vec![
        ("no --lineage", without("--lineage"), input.as_bytes()),
        // Without --journal the workspace is looked for above the input's cwd: none above `/`.
        ("no --journal and no workspace", without("--journal"), rootless.as_bytes()),
        ("an unknown flag", with(&["--frobnicate"]), input.as_bytes()),
        ("--help", with(&["--help"]), input.as_bytes()),
        ("a deadline out of range", with(&["--deadline-ms", "999999"]), input.as_bytes()),
        ("input that is not JSON", good.clone(), b"{"),
        ("empty input", good.clone(), b""),
        ("an unknown runtime's hook", vec!["hook".into(), "gemini".into(), "pre-tool-use".into()], input.as_bytes()),
    ];
    for (name, args, stdin) in cases {
        let out = with_stdin(&args.iter().map(String::as_str).collect::<Vec<_>>(), stdin);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(run_hook(&ws, &work, 5_000, &write_in(&work, "src/api/handler.rs")).0, Some(0));
}

/// Every exit code the hook's source can produce is made by its one `exit_code` function (0 or
/// 2), a panic exits 2, and the binary's entry sends hook invocations, parsed or not, there.
fn hook_exit_problems(hook: &str, cli: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let code_lines: Vec<&str> = hook.lines().map(|l| l.split("//").next().unwrap_or("")).collect();
    let in_exit_code = |i: usize| {
        code_lines[..=i].iter().rev().find(|l| l.contains("fn ")).is_some_and(|l| l.contains("fn exit_code("))
    };
    for (i, l) in code_lines.iter().enumerate() {
        if (l.contains("ExitCode::") || l.contains("ExitCode(")) && !in_exit_code(i) {
            problems.push(format!("hook.rs:{}: an exit code made outside exit_code: {}", i + 1, l.trim()));
        }
        if l.contains("process::exit(") && !l.contains("process::exit(i32::from(DENY))") {
            problems.push(format!("hook.rs:{}: process::exit with another code: {}", i + 1, l.trim()));
        }
        if l.contains("-> anyhow::Result<ExitCode>") || l.contains("-> Result<ExitCode") {
            problems.push(format!("hook.rs:{}: a fallible exit (an error would exit 1)", i + 1));
        }
    }
    if !hook.contains("const ALLOW: u8 = 0;") || !hook.contains("const DENY: u8 = 2;") {
        problems.push("hook.rs: ALLOW must be 0 and DENY 2".to_owned());
    }
    if !hook.contains("std::panic::set_hook") {
        problems.push("hook.rs: no panic hook (a panic would exit 101)".to_owned());
    }
    if !cli.contains("return hook::refuse_arguments(&e)") || !cli.contains("return hook::main(h, cli.dir);") {
        problems.push("cli/mod.rs: hook invocations do not go straight to the hook".to_owned());
    }
    problems
}

#[test]
fn no_exit_path_of_the_hook_gives_another_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("adapters/src/cli");
    let hook = std::fs::read_to_string(root.join("hook.rs")).unwrap();
    let cli = std::fs::read_to_string(root.join("mod.rs")).unwrap();
    let problems = hook_exit_problems(&hook, &cli);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check can fail: each planted defect is caught.
    for planted in [
        hook.replacen(
            "fn deny(o: &crate::output::Out, reason: &str) -> ExitCode {",
            "fn deny(o: &crate::output::Out, reason: &str) -> ExitCode {\n    return ExitCode::from(1);",
            1,
        ),
        hook.replacen("std::process::exit(i32::from(DENY))", "std::process::exit(1)", 1),
        hook.replacen("const DENY: u8 = 2;", "const DENY: u8 = 1;", 1),
        hook.replacen(
            "pub fn served(cmd: HookCommand, journal: &Journal, ws: &Workspace) -> ExitCode",
            "pub fn served(cmd: HookCommand, journal: &Journal, ws: &Workspace) -> anyhow::Result<ExitCode>",
            1,
        ),
        hook.replacen("std::panic::set_hook", "drop", 1),
    ] {
        assert_ne!(planted, hook, "the planted defect must change the source");
        assert!(!hook_exit_problems(&planted, &cli).is_empty(), "a planted defect went unseen");
    }
    assert!(!hook_exit_problems(&hook, &cli.replace("return hook::main(h, cli.dir);", "run(cli)")).is_empty());
}
