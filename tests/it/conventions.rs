//! The CLI conventions every command keeps (issue 25), checked over every command the CLI
//! defines rather than a sample: with `--json` a failure is one JSON object on stdout (`code`,
//! `message`, `input`, `rule`, `hint`) with the text form's exit code; the workspace is found
//! upward from the current directory unless `--dir`/`STRATA_DIR` names it; nothing is coloured
//! without a terminal; plus `workgroups`, logging, completions, the man page, `--version`,
//! `--http localhost:PORT` and the top-level help's examples.

use std::path::Path;
use std::process::{Command, Output};

use clap::{CommandFactory as _, Parser as _};
use serde_json::Value;
use strata_adapters::cli::Cli;
use strata_tests::strata_bin;

/// Runs the binary in `cwd` with `args`, without `STRATA_DIR`, `NO_COLOR` or `RUST_LOG` from
/// the test's environment (each case sets what it needs in `env`).
fn run_in(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(strata_bin!());
    c.current_dir(cwd).args(args).env_remove("STRATA_DIR").env_remove("NO_COLOR").env_remove("RUST_LOG");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("strata runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The one JSON error object on stdout: every key present, `code` and `message` strings, the
/// other three strings or null; nothing else on stdout.
fn error_object(out: &Output, what: &str) -> Value {
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{what}: one line on stdout, got {stdout:?} (stderr {:?})", text(&out.stderr));
    let v: Value = serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {stdout}"));
    let o = v.as_object().unwrap_or_else(|| panic!("{what}: not an object: {v}"));
    let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "hint", "input", "message", "rule"], "{what}: {v}");
    let code = o["code"].as_str().unwrap_or_else(|| panic!("{what}: code is not a string: {v}"));
    assert!(code.len() == 12 && code.starts_with("STRATA-E"), "{what}: {code}");
    assert!(o["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {v}");
    for k in ["input", "rule", "hint"] {
        assert!(o[k].is_string() || o[k].is_null(), "{what}: {k} is neither a string nor null: {v}");
    }
    v
}

/// Every command path the CLI defines, down to the leaves (`journal verify`, `rollout status`…).
fn leaf_commands() -> Vec<Vec<String>> {
    fn walk(cmd: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let subs: Vec<&clap::Command> = cmd.get_subcommands().filter(|s| s.get_name() != "help").collect();
        if subs.is_empty() && !prefix.is_empty() {
            out.push(prefix.to_vec());
        }
        for s in subs {
            let mut p = prefix.to_vec();
            p.push(s.get_name().to_owned());
            walk(s, &p, out);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), &[], &mut out);
    out
}

#[test]
fn every_command_reports_a_usage_error_under_json_as_one_object_with_exit_2() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let leaves = leaf_commands();
    assert!(leaves.len() > 50, "the walk finds every command: {leaves:?}");
    let mut checked = 0;
    for path in &leaves {
        // A hook answers its runtime in the runtime's own protocol (a denial), never in ours.
        if path[0] == "hook" {
            continue;
        }
        let mut args: Vec<&str> = vec!["--json"];
        args.extend(path.iter().map(String::as_str));
        args.push("--no-such-option");
        let out = run_in(tmp.path(), &args, &[]);
        let what = path.join(" ");
        assert_eq!(out.status.code(), Some(2), "{what}: usage errors exit 2; stderr {}", text(&out.stderr));
        let v = error_object(&out, &what);
        assert_eq!(v["code"], "STRATA-E2450", "{what}: {v}");
        assert_eq!(v["input"], "--no-such-option", "{what}: {v}");
        checked += 1;
    }
    assert!(checked > 50, "{checked}");
    // Without --json, clap's text as before, on stderr.
    let out = run_in(tmp.path(), &["graph", "--no-such-option"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty() && text(&out.stderr).contains("--no-such-option"));
}

/// Commands that need a workspace and succeed on a fresh one: the table the discovery, the
/// missing-workspace error and the colour checks run over.
const WORKSPACE_COMMANDS: &[&[&str]] = &[
    &["replay"],
    &["journal", "verify"],
    &["journal", "log"],
    &["graph", "validate"],
    &["graph", "suspects"],
    &["graph", "entities"],
    &["summary", "check"],
    &["summary", "show"],
    &["profile", "list"],
    &["knowledge", "list"],
    &["knowledge", "insights"],
    &["telemetry", "report"],
    &["workgroups"],
    &["claim"],
    &["rollout", "status"],
    &["audit", "file", "docs/a.md"],
];

#[test]
fn every_workspace_command_finds_the_workspace_upward_and_dir_or_strata_dir_overrides_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = tmp.path().join("repo");
    let deep = ws.join("src/a/b");
    std::fs::create_dir_all(&deep).expect("dirs");
    let init = run_in(&ws, &["init", "--durability", "process"], &[]);
    assert!(init.status.success(), "{}", text(&init.stderr));
    let elsewhere = tmp.path().join("empty");
    std::fs::create_dir_all(&elsewhere).expect("empty dir");
    for cmd in WORKSPACE_COMMANDS {
        let what = cmd.join(" ");
        let mut args = vec!["--json"];
        args.extend_from_slice(cmd);
        // From three directories down: the workspace above is found.
        let out = run_in(&deep, &args, &[]);
        assert!(out.status.success(), "{what} from a subdirectory: {} {}", text(&out.stdout), text(&out.stderr));
        let doc: Value = serde_json::from_str(text(&out.stdout).trim()).expect("one JSON document");
        assert!(!doc.is_null(), "{what}");
        // STRATA_DIR names another directory: no search, so no workspace; one JSON error.
        // (`rollout` makes a journal where `--journal` points, as `ce --journal` does.)
        if cmd[0] == "rollout" {
            let own = tmp.path().join("rollouts");
            let out = run_in(&deep, &args, &[("STRATA_DIR", own.to_str().expect("utf-8"))]);
            assert!(out.status.success(), "{}", text(&out.stderr));
            assert!(own.read_dir().is_ok_and(|mut d| d.next().is_some()), "its journal went where STRATA_DIR says");
            continue;
        }
        let out = run_in(&deep, &args, &[("STRATA_DIR", elsewhere.to_str().expect("utf-8"))]);
        assert_eq!(out.status.code(), Some(1), "{what} with STRATA_DIR: {}", text(&out.stdout));
        let v = error_object(&out, &what);
        assert_eq!(v["code"], "STRATA-E0204", "{what}: {v}");
        assert_eq!(v["input"].as_str(), elsewhere.to_str(), "{what}: the input is the directory: {v}");
        assert!(v["hint"].as_str().is_some_and(|h| h.contains("strata init")), "{what}: {v}");
        // --dir wins over STRATA_DIR.
        let mut with_dir = vec!["--dir", ws.to_str().expect("utf-8")];
        with_dir.extend_from_slice(&args);
        let out = run_in(&elsewhere, &with_dir, &[("STRATA_DIR", elsewhere.to_str().expect("utf-8"))]);
        assert!(out.status.success(), "{what} with --dir: {}", text(&out.stderr));
    }
    // `init` works where it is run, not in the workspace above.
    let out = run_in(&deep, &["init", "--durability", "process"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(deep.join(".strata/journal").is_dir(), "a new workspace in the subdirectory");
}

#[test]
fn a_failing_run_is_coloured_only_on_request_and_workgroups_lists_it() {
    // Seed 8 makes one simulated writer of the example write a file it does not own: that task
    // fails and the review after it is held.
    let tmp = tempfile::tempdir().expect("tempdir");
    let at = tmp.path().join("ex");
    let out = run_in(
        tmp.path(),
        &["run", "--example", "--at", at.to_str().expect("utf-8"), "--time-scale", "0", "--seed", "8"],
        &[("STRATA_GIT_AUTHOR", "Ada Example <ada@example.org>")],
    );
    assert_eq!(out.status.code(), Some(3), "a failed task is exit 3: {}", text(&out.stderr));
    let esc = |o: &Output| o.stdout.contains(&0x1b) || o.stderr.contains(&0x1b);
    assert!(!esc(&out), "no colour without a terminal:\n{}", text(&out.stdout));
    let repo = at.join("repo");

    // Listed from inside the example's repository (the workspace is found above it).
    let out = run_in(&repo, &["workgroups", "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_str(text(&out.stdout).trim()).expect("json");
    let groups = v["workgroups"].as_array().expect("workgroups");
    assert_eq!(groups.len(), 1, "{v}");
    let g = &groups[0];
    assert_eq!(g["state"], "failed", "{g}");
    assert_eq!((g["failed"].as_u64(), g["held"].as_u64()), (Some(1), Some(1)), "{g}");
    assert_eq!(g["tasks"].as_u64(), Some(7), "{g}");
    assert_eq!(
        g["tasks"].as_u64().unwrap_or(0),
        ["completed", "failed", "held", "open"].iter().map(|k| g[k].as_u64().unwrap_or(0)).sum::<u64>(),
        "the counts add up: {g}"
    );
    let name = g["workgroup"].as_str().expect("name").to_owned();
    assert_eq!(g["branch"].as_str(), Some(format!("strata/{name}").as_str()), "{g}");
    // Each integrated commit is by the configured author and leads back to the journal.
    let branch = format!("strata/{name}");
    let log =
        strata_tests::git(&repo, &["log", "--format=%an <%ae>|%(trailers:only,unfold)%x00", "--no-merges", &branch]);
    let ours: Vec<&str> = log.split('\0').filter(|c| c.contains("Strata-Task:")).collect();
    assert!(!ours.is_empty(), "the branch holds strata's commits: {log}");
    for c in &ours {
        let c = c.trim();
        assert!(c.starts_with("Ada Example <ada@example.org>|"), "{c}");
        for key in ["Strata-Workgroup: ", "Strata-Task: ", "Strata-Attempt: ", "Strata-Prompt: ", "Strata-Journal: "] {
            assert!(c.contains(key), "{key} missing from {c}");
        }
        assert!(c.contains(&format!("Strata-Workgroup: {name}")), "{c}");
    }
    assert!(g["last_seq"].as_u64().is_some_and(|s| s > 1) && g["last_at"].is_string(), "{g}");

    // Text, from every command over this workspace: no escape codes into a pipe.
    let mut commands: Vec<Vec<&str>> = WORKSPACE_COMMANDS.iter().map(|c| c.to_vec()).collect();
    commands.push(vec!["audit", "run", &name]);
    for cmd in &commands {
        let out = run_in(&repo, cmd, &[]);
        assert!(!esc(&out), "{cmd:?} coloured into a pipe:\n{}", text(&out.stdout));
    }
    let out = run_in(&repo, &["workgroups"], &[]);
    let listed = text(&out.stdout);
    assert!(listed.contains(&name) && listed.contains("failed") && listed.contains("1 workgroup\n"), "{listed}");
    assert!(!esc(&out), "{listed}");
    // Asked for: the failed row in red (the word stays), the held task's row in yellow.
    let out = run_in(&repo, &["--color", "always", "workgroups"], &[("NO_COLOR", "1")]);
    let coloured = text(&out.stdout);
    assert!(coloured.contains("\x1b[31m") && coloured.contains("failed"), "{coloured:?}");
    let out = run_in(&repo, &["--color", "always", "audit", "run", &name], &[]);
    let audit = text(&out.stdout);
    assert!(audit.contains("\x1b[31m") && audit.contains("\x1b[33m"), "red failed and yellow held rows: {audit:?}");
    let out = run_in(&repo, &["--color", "never", "audit", "run", &name], &[]);
    assert!(!esc(&out));
}

#[test]
fn logs_go_to_stderr_by_flag_or_rust_log_and_stay_off_stdout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    assert!(run_in(tmp.path(), &["init", "--durability", "process"], &[]).status.success());
    let quiet = run_in(tmp.path(), &["workgroups", "--json"], &[]);
    assert!(quiet.stderr.is_empty(), "nothing logged by default: {}", text(&quiet.stderr));
    let verbose = run_in(tmp.path(), &["-v", "workgroups", "--json"], &[]);
    assert!(text(&verbose.stderr).contains("INFO") && text(&verbose.stderr).contains("workspace"));
    assert_eq!(verbose.stdout, quiet.stdout, "logs never reach stdout");
    let debug = run_in(tmp.path(), &["workgroups", "--json"], &[("RUST_LOG", "debug")]);
    assert!(text(&debug.stderr).contains("DEBUG"), "{}", text(&debug.stderr));
    let q = run_in(tmp.path(), &["-q", "workgroups", "--json"], &[("RUST_LOG", "")]);
    assert!(q.stderr.is_empty());
}

#[test]
fn version_completions_man_page_http_localhost_and_the_help_examples() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let v = run_in(tmp.path(), &["--version"], &[]);
    let v = text(&v.stdout);
    assert!(v.starts_with("strata 0.") && v.contains("(commit "), "{v}");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run_in(tmp.path(), &["completions", shell], &[]);
        assert!(out.status.success() && text(&out.stdout).contains("workgroups"), "{shell}");
    }
    let man = run_in(tmp.path(), &["man"], &[]);
    let page = text(&man.stdout);
    assert!(page.contains(".TH strata 1") && page.contains("workgroups"), "{}", &page[..page.len().min(300)]);
    let out_dir = tmp.path().join("man");
    std::fs::create_dir_all(&out_dir).expect("man dir");
    let out = run_in(tmp.path(), &["man", "--out", out_dir.to_str().expect("utf-8"), "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out_dir.join("strata.1").is_file() && out_dir.join("strata-journal-verify.1").is_file());
    let missing = tmp.path().join("no-such-dir");
    let out = run_in(tmp.path(), &["--json", "man", "--out", missing.to_str().expect("utf-8")], &[]);
    assert_eq!(error_object(&out, "man --out missing")["code"], "STRATA-E2452");

    // `--http localhost:PORT` is 127.0.0.1:PORT; a name other than localhost is refused.
    let parsed = Cli::try_parse_from(["strata", "serve", "--http", "localhost:7411"]).expect("localhost parses");
    assert!(format!("{parsed:?}").contains("127.0.0.1:7411"), "{parsed:?}");
    assert!(Cli::try_parse_from(["strata", "serve", "--http", "example.org:7411"]).is_err());

    // Every example the top-level help gives is a command the CLI accepts, and the help says
    // what strata is for.
    let help = text(&run_in(tmp.path(), &["--help"], &[]).stdout);
    assert!(help.starts_with("strata runs AI coding agents"), "{help}");
    let examples: Vec<&str> = strata_adapters::cli::EXAMPLES
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("strata "))
        .map(|l| l.split("  ").next().unwrap_or_default().trim())
        .collect();
    assert!(examples.len() >= 10, "{examples:?}");
    for e in examples {
        let argv: Vec<&str> = std::iter::once("strata").chain(e.split_whitespace()).collect();
        assert!(Cli::try_parse_from(&argv).is_ok(), "the help's example `strata {e}` does not parse");
        assert!(help.contains(e), "{e}");
    }
}

/// Runs the binary with `args` and `stdin`, as [`run_in`] does.
fn run_with_stdin(cwd: &Path, args: &[&str], stdin: &[u8]) -> Output {
    use std::io::Write as _;
    let mut c = Command::new(strata_bin!());
    c.current_dir(cwd).args(args).env_remove("STRATA_DIR").env_remove("NO_COLOR").env_remove("RUST_LOG");
    c.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("strata runs");
    child.stdin.take().expect("stdin").write_all(stdin).expect("write stdin");
    child.wait_with_output().expect("strata ends")
}

/// The hook's answer: exit code and the deny reason (the rest of a decision is its own).
fn hook_answer(out: &Output) -> (Option<i32>, Option<String>) {
    let reason = serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v["hookSpecificOutput"]["permissionDecisionReason"].as_str().map(str::to_owned));
    (out.status.code(), reason)
}

#[test]
fn one_flag_names_the_workspace_everywhere_and_journal_stays_its_alias() {
    // Every command that has a `--journal`: each must take `--dir` for the same thing.
    let mut with_journal: Vec<String> = Vec::new();
    for path in leaf_commands() {
        let mut cmd = Cli::command();
        for name in &path {
            cmd = cmd.find_subcommand(name).expect("the walk's command").clone();
        }
        let parent_has = path.first().is_some_and(|p| {
            Cli::command()
                .find_subcommand(p)
                .is_some_and(|c| c.get_arguments().any(|a| a.get_long() == Some("journal")))
        });
        if parent_has || cmd.get_arguments().any(|a| a.get_long() == Some("journal")) {
            with_journal.push(path.join(" "));
        }
    }
    let families: std::collections::BTreeSet<&str> =
        with_journal.iter().map(|p| if p.starts_with("rollout") { "rollout" } else { p.as_str() }).collect();
    assert_eq!(
        families.into_iter().collect::<Vec<_>>(),
        ["ce", "eval promote", "hook claude pre-tool-use", "hook codex pre-tool-use", "rollout"],
        "each of these is checked below; a new --journal needs a row: {with_journal:?}"
    );

    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for ws in [&a, &b] {
        std::fs::create_dir_all(ws).expect("mkdir");
        assert!(run_in(ws, &["init", "--durability", "process"], &[]).status.success());
    }
    let root = "/work/worker-1";
    let claim = serde_json::json!({"lineage_id": "L1", "input": {"owned_files": ["src/api"], "is_writer": true}});
    // ce: a decision against the ledger, recorded where --journal or --dir says.
    for (flag, ws) in [("--journal", &a), ("--dir", &b)] {
        let out = run_with_stdin(
            tmp.path(),
            &["ce", "route", flag, ws.to_str().expect("utf-8")],
            claim.to_string().as_bytes(),
        );
        assert!(out.status.success(), "ce route {flag}: {}", text(&out.stdout));
    }
    let ledger = |ws: &Path| {
        let out = run_in(tmp.path(), &["--dir", ws.to_str().expect("utf-8"), "--json", "journal", "log"], &[]);
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        v.as_array()
            .expect("events")
            .iter()
            .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    assert!(!ledger(&a).is_empty());
    assert_eq!(ledger(&a), ledger(&b), "the same decision recorded through either flag");
    // hook: the same answers through either flag (the workers' hook commands pass --journal).
    for (path, want) in [(format!("{root}/src/api/x.rs"), 0), (format!("{root}/src/web/y.rs"), 2)] {
        let input = serde_json::json!({"session_id": "s-1", "cwd": root, "hook_event_name": "PreToolUse",
            "tool_name": "Write", "tool_input": {"file_path": path, "content": "x\n"}, "tool_use_id": "toolu_1"});
        let mut answers = Vec::new();
        for (flag, ws) in [("--journal", &a), ("--dir", &b)] {
            let args = [
                "hook",
                "claude",
                "pre-tool-use",
                flag,
                ws.to_str().expect("utf-8"),
                "--lineage",
                "L1",
                "--root",
                root,
            ];
            answers.push(hook_answer(&run_with_stdin(tmp.path(), &args, input.to_string().as_bytes())));
        }
        // `--dir` before the subcommand works too.
        let args =
            ["--dir", b.to_str().expect("utf-8"), "hook", "claude", "pre-tool-use", "--lineage", "L1", "--root", root];
        answers.push(hook_answer(&run_with_stdin(tmp.path(), &args, input.to_string().as_bytes())));
        assert_eq!(answers[0].0, Some(want), "{path}: {answers:?}");
        assert!(answers.iter().all(|x| *x == answers[0]), "{path}: {answers:?}");
    }
    // rollout: --dir (the default) and --journal read the same rollouts.
    let status = |args: &[&str]| text(&run_in(tmp.path(), args, &[]).stdout);
    let a_s = a.to_str().expect("utf-8");
    assert_eq!(
        status(&["--json", "rollout", "--journal", a_s, "status"]),
        status(&["--json", "--dir", a_s, "rollout", "status"])
    );
    // eval promote: --dir names the journal it records in, as --journal does (an evaluation
    // to be recorded needs 10,000 resamples); with neither it is a trial run that may use fewer.
    let pairs = tmp.path().join("pairs.json");
    std::fs::write(&pairs, "{}").expect("pairs");
    let promote = |before: &[&str], after: &[&str]| {
        let mut args = vec!["--json"];
        args.extend_from_slice(before);
        args.extend(["eval", "promote", "--pairs", pairs.to_str().expect("utf-8"), "--candidate-version", "v2"]);
        args.extend(["--runtime-digest", "sha256:00", "--resamples", "100"]);
        args.extend_from_slice(after);
        text(&run_in(tmp.path(), &args, &[]).stdout)
    };
    let by_dir = promote(&["--dir", a_s], &[]);
    assert!(by_dir.contains("STRATA-E1407") && by_dir.contains("recorded in a journal"), "{by_dir}");
    assert_eq!(by_dir, promote(&[], &["--journal", a_s]), "the same refusal through either flag");
    assert!(!promote(&[], &[]).contains("recorded in a journal"), "without either: a trial run");
}
