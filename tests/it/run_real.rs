//! A whole `strata run` with real workers: two Claude Code workers and one Codex worker, the
//! real CLIs from npm pointed at the fake model server on 127.0.0.1. Their write-guard hooks and
//! their `strata mcp` reach the journal the run holds through the socket it serves; every file
//! they wrote is answered for by `strata audit file`. Each run's journal round-trips through
//! export and import.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use strata_adapters::coordinator::git::worktree_path;
use strata_tests::fake_model::{FakeModel, Turn};
use strata_tests::real_cli::{self, CLAUDE_VAR, CODEX_VAR, Scratch};
use strata_tests::{git, run_setting, strata_bin, strata_ok};

const PLAN: &str = r#"
workgroup = "real"
parallel = 1
pipeline = "light"
retries = 0

[[task]]
id = "api"
role = "backend-builder"
provider = "claude"
objective = "Write the API handler."
owns = ["src/api.rs"]

[[task]]
id = "db"
role = "backend-builder"
provider = "claude"
objective = "Write the storage layer."
owns = ["src/db.rs"]
after = ["api"]

[[task]]
id = "cli"
role = "backend-builder"
provider = "codex"
objective = "Write the command line."
owns = ["src/cli.rs"]
after = ["db"]
"#;

#[test]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
fn a_run_with_two_claude_workers_and_one_codex_worker_completes_and_every_write_is_audited() {
    let claude = real_cli::cli_path(CLAUDE_VAR).unwrap_or_else(|e| panic!("{e}"));
    let codex = real_cli::cli_path(CODEX_VAR).unwrap_or_else(|e| panic!("{e}"));
    let scratch = Scratch::new().expect("scratch");
    let (ws, repo, plan) = run_setting(strata_bin!(), scratch.root(), &[("src/lib.rs", "// the crate\n")], PLAN);
    let top = std::fs::canonicalize(&ws).expect("the workspace");

    // One worker at a time, so the scripted turns meet their workers in order.
    let api = worktree_path(&top, "real", "api", 1).join("src/api.rs");
    let db = worktree_path(&top, "real", "db", 1).join("src/db.rs");
    let fake = FakeModel::start(vec![
        Turn::claude_write(&api.display().to_string(), "pub fn handler() {}\n"),
        Turn::text("The handler is written."),
        Turn::claude_write(&db.display().to_string(), "pub fn store() {}\n"),
        Turn::text("The storage layer is written."),
        Turn::codex_apply_patch("*** Begin Patch\n*** Add File: src/cli.rs\n+fn main() {}\n*** End Patch\n"),
        Turn::text("The command line is written."),
    ])
    .expect("fake model");

    let mut cmd = real_cli::strata_run(std::path::Path::new(strata_bin!()), &ws, &plan, &repo, &scratch, &fake);
    cmd.arg("--json");
    cmd.env("STRATA_CLAUDE", &claude)
        .env("STRATA_CLAUDE_MODEL", real_cli::CLAUDE_MODEL)
        .env("STRATA_CODEX", &codex)
        .env("STRATA_CODEX_MODEL", real_cli::CODEX_MODEL)
        .env("STRATA_CODEX_BASE_URL", format!("{}/v1", fake.base_url()));
    let out = real_cli::run_with_timeout(cmd, std::time::Duration::from_secs(300)).expect("strata run");
    let summary: Value =
        serde_json::from_str(out.stdout_lines.join("\n").trim()).unwrap_or_else(|e| panic!("{e}: {}", out.describe()));
    assert_eq!(summary["completed"], 3, "{}", out.describe());
    let providers: Vec<&str> =
        summary["tasks"].as_array().expect("tasks").iter().filter_map(|t| t["provider"].as_str()).collect();
    assert_eq!(providers, ["claude", "claude", "codex"]);

    for file in ["src/api.rs", "src/db.rs", "src/cli.rs"] {
        let audit: Value =
            serde_json::from_str(&strata_ok(strata_bin!(), &ws, &["audit", "file", file, "--json"])).expect("json");
        let writes = audit["writes"].as_array().expect("writes");
        assert!(writes.iter().any(|w| w["source"] == "diff" && !w["prompt"].is_null()), "{file}: {audit}");
        let shown = git(&repo, &["show", &format!("strata/real:{file}")]);
        assert!(!shown.is_empty(), "{file} is on the integration branch");
    }
    // The Claude writes went through the hook, which recorded them through the run's socket.
    for file in ["src/api.rs", "src/db.rs"] {
        let audit: Value =
            serde_json::from_str(&strata_ok(strata_bin!(), &ws, &["audit", "file", file, "--json"])).expect("json");
        assert!(audit["writes"].as_array().expect("writes").iter().any(|w| w["source"] == "guard"), "{file}: {audit}");
    }
    strata_ok(strata_bin!(), &ws, &["journal", "verify"]);
    strata_tests::assert_round_trips(strata_bin!(), &ws, "a run with real workers");
}

/// The journal head of the workspace `ws` (free: its run has ended or been killed) and its
/// workgroups, folded.
fn workgroups_at(ws: &Path) -> (u64, strata_engine::workgroup::state::Workgroups) {
    let j = strata_journal::Journal::open(
        &ws.join(".strata/journal"),
        &strata_tests::options(strata_journal::Durability::Process),
    )
    .expect("journal opens");
    let mut g = strata_engine::workgroup::state::Workgroups::default();
    strata_journal::projection::catch_up_one(&mut g, &j).expect("fold");
    let h = j.head().seq;
    j.close_blocking().expect("close");
    (h, g)
}

const STALL_PLAN: &str = r#"
workgroup = "orphan"
pipeline = "light"
retries = 0

[[task]]
id = "slow"
role = "backend-builder"
provider = "claude"
objective = "Write the slow part."
owns = ["src/slow.rs"]
"#;

#[test]
#[ignore = "needs the claude CLI from npm; CI runs it"]
fn a_claude_worker_left_running_by_a_sigkilled_run_is_released_by_resume_and_the_task_runs_again() {
    use strata_adapters::providers::worker_process::group_alive;
    use strata_engine::workgroup::state::Status;
    let claude = real_cli::cli_path(CLAUDE_VAR).unwrap_or_else(|e| panic!("{e}"));
    let scratch = Scratch::new().expect("scratch");
    let (ws, repo, plan) = run_setting(strata_bin!(), scratch.root(), &[("src/lib.rs", "// the crate\n")], STALL_PLAN);
    let fake = FakeModel::start(vec![Turn::stall()]).expect("fake model");
    let command = |args: &[&str]| {
        let mut cmd = Command::new(strata_bin!());
        cmd.arg("--dir").arg(&ws).args(args).arg("--repo").arg(&repo);
        cmd.env_clear();
        for (k, v) in real_cli::base_env_vars(&scratch).into_iter().chain(real_cli::claude_env_vars(&fake)) {
            cmd.env(k, v);
        }
        cmd.env("STRATA_CLAUDE", &claude).env("STRATA_CLAUDE_MODEL", real_cli::CLAUDE_MODEL);
        cmd
    };
    let mut run = command(&["run", plan.to_str().expect("utf-8")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("strata run starts");
    assert!(fake.wait_for_stall(std::time::Duration::from_secs(120)), "the worker reached the model");
    run.kill().expect("SIGKILL the coordinator");
    let _ = run.wait();

    let load = || workgroups_at(&ws).1;
    let groups = load();
    let task = groups.get("orphan").and_then(|g| g.tasks.get("slow")).expect("task").clone();
    assert_eq!(task.status, Status::Running);
    let pid = task.pid.expect("the real worker's pid is recorded") as u32;
    assert!(group_alive(pid), "the worker outlived its coordinator");

    fake.clear_turns();
    let file =
        worktree_path(&std::fs::canonicalize(&ws).expect("the workspace"), "orphan", "slow", 2).join("src/slow.rs");
    fake.push(Turn::claude_write(&file.display().to_string(), "pub fn slow() {}\n"));
    fake.push(Turn::text("Written."));
    let mut resume = command(&["run", "--resume", "orphan"]);
    resume.stdin(std::process::Stdio::null());
    let out = real_cli::run_with_timeout(resume, std::time::Duration::from_secs(300)).expect("resume");
    fake.release_stalled();
    assert!(!group_alive(pid), "resume released the orphaned worker: {}", out.describe());
    assert!(out.stderr.contains("released the claude worker"), "{}", out.describe());
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    let t = load().get("orphan").and_then(|g| g.tasks.get("slow")).expect("task").clone();
    assert_eq!((t.status, t.attempts), (Status::Completed, 2));
    strata_tests::assert_round_trips(strata_bin!(), &ws, "a resumed run with a real worker");
}

const PLAN_WITHOUT_PROVIDER: &str = r#"
workgroup = "kept"
pipeline = "light"
retries = 0

[[task]]
id = "slow"
role = "backend-builder"
objective = "Write the slow part."
owns = ["src/slow.rs"]
"#;

/// The issue's case: `run --provider claude`, SIGKILL, then a bare `run --resume WG` from the
/// workspace (which is not the repository). The resumed run keeps the provider and the
/// repository it was started with: a different `--provider` is refused with the head unmoved,
/// the task runs again on Claude, and nothing simulated lands on the branch.
#[test]
#[ignore = "needs the claude CLI from npm; CI runs it"]
fn resume_after_sigkill_keeps_the_provider_and_repository_the_run_started_with() {
    use strata_engine::workgroup::state::Status;
    let claude = real_cli::cli_path(CLAUDE_VAR).unwrap_or_else(|e| panic!("{e}"));
    let scratch = Scratch::new().expect("scratch");
    let (ws, repo, plan) =
        run_setting(strata_bin!(), scratch.root(), &[("src/lib.rs", "// the crate\n")], PLAN_WITHOUT_PROVIDER);
    assert_ne!(ws, repo, "the workspace is apart from the repository");
    let fake = FakeModel::start(vec![Turn::stall()]).expect("fake model");
    let command = |args: &[&str]| {
        let mut cmd = Command::new(strata_bin!());
        cmd.arg("--dir").arg(&ws).args(args);
        cmd.env_clear();
        for (k, v) in real_cli::base_env_vars(&scratch).into_iter().chain(real_cli::claude_env_vars(&fake)) {
            cmd.env(k, v);
        }
        cmd.env("STRATA_CLAUDE", &claude).env("STRATA_CLAUDE_MODEL", real_cli::CLAUDE_MODEL);
        cmd
    };
    let repo_arg = repo.to_str().expect("utf-8");
    let mut run = command(&["run", plan.to_str().expect("utf-8"), "--provider", "claude", "--repo", repo_arg])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("strata run starts");
    assert!(fake.wait_for_stall(std::time::Duration::from_secs(120)), "the worker reached the model");
    run.kill().expect("SIGKILL the coordinator");
    let _ = run.wait();
    let head = || workgroups_at(&ws);
    let (before, groups) = head();
    let g = groups.get("kept").expect("workgroup");
    assert_eq!(g.started.provider.as_deref(), Some("claude"));
    assert!(g.started.repo.is_some() && g.started.base.is_some(), "{:?}", g.started);

    let refused = command(&["run", "--resume", "kept", "--provider", "sim"]).output().expect("runs");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("STRATA-E2010"), "{stderr}");
    assert_eq!(head().0, before, "a refused resume appends nothing");

    fake.clear_turns();
    let top = std::fs::canonicalize(&ws).expect("the workspace");
    let file = worktree_path(&top, "kept", "slow", 2).join("src/slow.rs");
    fake.push(Turn::claude_write(&file.display().to_string(), "pub fn slow() {}\n"));
    fake.push(Turn::text("Written."));
    let mut resume = command(&["run", "--resume", "kept"]);
    resume.stdin(std::process::Stdio::null());
    let out = real_cli::run_with_timeout(resume, std::time::Duration::from_secs(300)).expect("resume");
    fake.release_stalled();
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    let (_, groups) = head();
    let t = groups.get("kept").and_then(|g| g.tasks.get("slow")).expect("task").clone();
    assert_eq!((t.status, t.attempts), (Status::Completed, 2));
    assert_eq!(t.dispatch.as_ref().map(|(_, d)| d.provider.as_str()), Some("claude"));
    let shown = git(&repo, &["show", "strata/kept:src/slow.rs"]);
    assert_eq!(shown, "pub fn slow() {}\n");
    let log = git(&repo, &["log", "-p", "strata/kept"]);
    assert!(!log.contains("[simulated]"), "nothing simulated on the branch: {log}");
}

const WRITER_PLAN: &str = r#"
workgroup = "stopped"
pipeline = "light"
retries = 0

[[task]]
id = "api"
role = "backend-builder"
objective = "Write the api."
owns = ["src/api.rs"]
"#;

/// A running worker that `parent` started, if there is one: its command line holds `marker`
/// (`stream-json` for a Claude turn, `exec` for a Codex one; a version probe holds neither).
/// Other tests run workers from the same programs.
fn worker_running(marker: &str, parent: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        // The parent is the second field after the command name in parentheses.
        let ppid: u32 = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
        let mut args = cmdline.split(|b| *b == 0);
        (ppid == parent && args.any(|a| a == marker.as_bytes())).then_some(pid)
    })
}

/// Whether process `parent` no longer holds the pipe that is worker `worker`'s stdin: the prompt
/// was written to it in full and the write end closed.
fn prompt_handed_over(worker: u32, parent: u32) -> bool {
    // A worker whose stdin is no longer a pipe has read it and let go of it.
    let stdin = match std::fs::read_link(format!("/proc/{worker}/fd/0")) {
        Ok(l) if l.to_string_lossy().starts_with("pipe:") => l,
        _ => return true,
    };
    let Ok(fds) = std::fs::read_dir(format!("/proc/{parent}/fd")) else { return false };
    !fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == stdin))
}

/// Must-hold (c): `strata run` (the coordinator serving its workers' hooks) SIGSTOPped for
/// longer than the hook's deadline while a real worker writes outside the repository. The hook
/// denies on its own within its deadline, the outside file never appears, and after SIGCONT the
/// run finishes with the denial in the journal and in `audit file`, `audit run` and `audit
/// session`, and no violation (nothing escaped).
#[test]
#[ignore = "needs the claude CLI from npm; CI runs it"]
fn a_stopped_coordinator_lets_no_claude_write_escape() {
    stopped_coordinator_lets_no_write_escape("claude");
}

#[test]
#[ignore = "needs the codex CLI from npm; CI runs it"]
fn a_stopped_coordinator_lets_no_codex_write_escape() {
    stopped_coordinator_lets_no_write_escape("codex");
}

fn stopped_coordinator_lets_no_write_escape(runtime: &str) {
    let scratch = Scratch::new().expect("scratch");
    let (ws, repo, plan) = run_setting(strata_bin!(), scratch.root(), &[("src/lib.rs", "// the crate\n")], WRITER_PLAN);
    let outside = scratch.root().join("outside").join("escape.txt");
    std::fs::create_dir_all(outside.parent().expect("parent")).expect("outside");
    let write = if runtime == "claude" {
        Turn::claude_write(&outside.display().to_string(), "must not land\n")
    } else {
        Turn::codex_apply_patch(&format!(
            "*** Begin Patch\n*** Add File: {}\n+must not land\n*** End Patch\n",
            outside.display()
        ))
    };
    let fake = FakeModel::start(vec![write, Turn::text("Refused, so done.")]).expect("fake model");
    let mut cmd = Command::new(strata_bin!());
    cmd.arg("--dir").arg(&ws).args(["run", plan.to_str().expect("utf-8"), "--provider", runtime, "--json", "--repo"]);
    cmd.arg(&repo).env_clear();
    for (k, v) in real_cli::base_env_vars(&scratch).into_iter().chain(real_cli::claude_env_vars(&fake)) {
        cmd.env(k, v);
    }
    let marker = if runtime == "claude" {
        let claude = real_cli::cli_path(CLAUDE_VAR).unwrap_or_else(|e| panic!("{e}"));
        cmd.env("STRATA_CLAUDE", &claude).env("STRATA_CLAUDE_MODEL", real_cli::CLAUDE_MODEL);
        "stream-json"
    } else {
        let codex = real_cli::cli_path(CODEX_VAR).unwrap_or_else(|e| panic!("{e}"));
        cmd.env("STRATA_CODEX", &codex)
            .env("STRATA_CODEX_MODEL", real_cli::CODEX_MODEL)
            .env("STRATA_CODEX_BASE_URL", format!("{}/v1", fake.base_url()));
        "exec"
    };
    cmd.env("STRATA_HOOK_DEADLINE_MS", "2000")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let run = cmd.spawn().expect("strata run starts");
    let signal = |sig: &str| {
        let ok = Command::new("kill").arg(format!("-{sig}")).arg(run.id().to_string()).status().expect("kill");
        assert!(ok.success(), "kill -{sig}");
    };
    // Stop the coordinator as soon as its worker runs and has its whole prompt (the runner, in
    // the coordinator's process, writes it to the worker's stdin and then closes it; stopped
    // halfway, the worker would wait for the rest): the worker's hook then finds nobody to
    // answer it.
    let mut seen = false;
    for _ in 0..12_000 {
        if worker_running(marker, run.id()).is_some_and(|w| prompt_handed_over(w, run.id())) {
            seen = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(seen, "the coordinator started its Claude worker");
    signal("STOP");
    let mut answered = false;
    for _ in 0..12_000 {
        if fake.model_requests().iter().any(|r| !r.tool_results().is_empty()) {
            answered = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    signal("CONT");
    assert!(answered, "the worker got the hook's answer while the coordinator was stopped");
    let told: Vec<_> = fake.model_requests().iter().flat_map(|r| r.tool_results()).collect();
    assert!(told.iter().any(|t| t.text.contains("STRATA-E2001")), "{told:?}");
    assert!(!outside.exists(), "the write outside the repository did not land");
    let out = run.wait_with_output().expect("the run ends");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).expect("summary JSON");
    assert_eq!(summary["violations"], 0, "nothing escaped: {summary}");
    let audit: Value = serde_json::from_str(&strata_ok(
        strata_bin!(),
        &ws,
        &["audit", "file", &outside.display().to_string(), "--json"],
    ))
    .expect("json");
    let denied = audit["denied"].as_array().expect("denied");
    assert_eq!(denied.len(), 1, "{audit}");
    assert_eq!(denied[0]["task"], "api", "{audit}");
    // The run's and the session's audits show it too.
    let run: Value =
        serde_json::from_str(&strata_ok(strata_bin!(), &ws, &["audit", "run", "stopped", "--json"])).expect("json");
    let in_run = run["denied"].as_array().expect("denied");
    assert_eq!(in_run.len(), 1, "{run}");
    assert_eq!(in_run[0]["path"], outside.display().to_string(), "{run}");
    let session = run["sessions"][0]["session"].as_str().expect("the task's session").to_owned();
    let by_session: Value =
        serde_json::from_str(&strata_ok(strata_bin!(), &ws, &["audit", "session", &session, "--json"])).expect("json");
    assert_eq!(by_session["tasks"][0]["denied"].as_array().map(Vec::len), Some(1), "{by_session}");
    let text = strata_ok(strata_bin!(), &ws, &["audit", "run", "stopped"]);
    assert!(text.contains("1 write refused by the write guard"), "{text}");
    assert!(!outside.exists());
}

/// What a Claude worker's `Write` outside the repository leads to, when the user's own Claude
/// Code settings let edits reach that directory (`additionalDirectories`) and try to turn every
/// hook off (`disableAllHooks`), and the worker's hooks run `program` (the real strata unless a
/// test puts a broken one in its place).
struct Bypass {
    outside: PathBuf,
    ws: PathBuf,
    repo: PathBuf,
    out: real_cli::Finished,
    _scratch: Scratch,
}

fn write_outside_with_hooks_off(program: Option<&str>) -> Bypass {
    let claude = real_cli::cli_path(CLAUDE_VAR).unwrap_or_else(|e| panic!("{e}"));
    let scratch = Scratch::new().expect("scratch");
    let (ws, repo, plan) = run_setting(strata_bin!(), scratch.root(), &[("src/lib.rs", "// the crate\n")], WRITER_PLAN);
    let outside_dir = scratch.root().join("outside");
    std::fs::create_dir_all(&outside_dir).expect("outside");
    let outside_dir = std::fs::canonicalize(&outside_dir).expect("canonical");
    let outside = outside_dir.join("escape.txt");
    let user_settings = serde_json::json!({
        "disableAllHooks": true,
        "permissions": {"additionalDirectories": [outside_dir.display().to_string()]},
    });
    let settings_dir = scratch.home.join(".claude");
    std::fs::create_dir_all(&settings_dir).expect("settings dir");
    std::fs::write(settings_dir.join("settings.json"), user_settings.to_string()).expect("user settings");
    let fake = FakeModel::start(vec![
        Turn::claude_write(&outside.display().to_string(), "written outside\n"),
        Turn::text("Done."),
    ])
    .expect("fake model");
    let mut cmd = Command::new(strata_bin!());
    cmd.arg("--dir").arg(&ws).args(["run", plan.to_str().expect("utf-8"), "--provider", "claude", "--json"]);
    cmd.args(["--on-violation", "stop", "--repo"]).arg(&repo).env_clear();
    for (k, v) in real_cli::base_env_vars(&scratch).into_iter().chain(real_cli::claude_env_vars(&fake)) {
        cmd.env(k, v);
    }
    cmd.env("STRATA_CLAUDE", &claude).env("STRATA_CLAUDE_MODEL", real_cli::CLAUDE_MODEL);
    if let Some(p) = program {
        cmd.env("STRATA_PROGRAM", p);
    }
    let out = real_cli::run_with_timeout(cmd, std::time::Duration::from_secs(300)).expect("strata run");
    Bypass { outside, ws, repo, out, _scratch: scratch }
}

/// A user's `disableAllHooks` does not turn the guard off: the settings strata gives its worker
/// outrank it, the write is denied and recorded, and nothing lands.
#[test]
#[ignore = "needs the claude CLI from npm; CI runs it"]
fn a_users_disable_all_hooks_does_not_turn_the_guard_off() {
    let b = write_outside_with_hooks_off(None);
    assert!(!b.outside.exists(), "the guard still ran: {}", b.out.describe());
    let audit: Value = serde_json::from_str(&strata_ok(
        strata_bin!(),
        &b.ws,
        &["audit", "file", &b.outside.display().to_string(), "--json"],
    ))
    .expect("json");
    assert_eq!(audit["denied"].as_array().map(Vec::len), Some(1), "{audit}");
    let summary: Value = serde_json::from_str(b.out.stdout_lines.join("\n").trim())
        .unwrap_or_else(|e| panic!("{e}: {}", b.out.describe()));
    assert_eq!(summary["violations"], 0, "{summary}");
}

/// A write the hook let through still counts. The worker's hooks run a broken strata that
/// allows everything (`STRATA_PROGRAM` pointing at a script that exits 0 for `hook`), so a real
/// worker's `Write` outside the repository lands. The post-turn check reads that write from the
/// worker's stream, finds it outside the worktree and denied by nobody, and the run records a
/// violation naming the path and stops non-zero under `--on-violation stop`: the journal says
/// what the disk shows.
#[test]
#[ignore = "needs the claude CLI from npm; CI runs it"]
fn a_write_the_hook_let_through_is_a_violation_and_stops_the_run() {
    let scripts = tempfile::tempdir().expect("scripts");
    let broken = scripts.path().join("strata-allows-all");
    let real = strata_bin!();
    std::fs::write(
        &broken,
        format!("#!/bin/sh\nif [ \"$1\" = hook ]; then cat >/dev/null; exit 0; fi\nexec '{real}' \"$@\"\n"),
    )
    .expect("script");
    std::fs::set_permissions(&broken, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let b = write_outside_with_hooks_off(Some(broken.to_str().expect("utf-8")));
    assert!(b.outside.exists(), "the write landed past the broken guard: {}", b.out.describe());
    assert_ne!(
        b.out.status.and_then(|s| s.code()),
        Some(0),
        "a violation under stop fails the run: {}",
        b.out.describe()
    );
    let summary: Value = serde_json::from_str(b.out.stdout_lines.join("\n").trim())
        .unwrap_or_else(|e| panic!("{e}: {}", b.out.describe()));
    assert_eq!(summary["violations"], 1, "{summary}");
    assert_eq!(summary["completed"], 0, "{summary}");

    // The journal names the path on disk, for the task that wrote it.
    let (_, groups) = workgroups_at(&b.ws);
    let task = groups.get("stopped").and_then(|g| g.tasks.get("api")).expect("the task");
    let paths: Vec<&String> = task.violations.iter().flat_map(|v| v.paths.iter()).collect();
    assert_eq!(paths, [&b.outside.display().to_string()], "{:?}", task.violations);
    assert!(task.failed.is_some(), "the task failed: {:?}", task.status);
    // Nothing of the task reached the integration branch.
    assert!(git(&b.repo, &["ls-tree", "-r", "--name-only", "strata/stopped"]).lines().all(|f| f != "src/api.rs"));
    strata_ok(strata_bin!(), &b.ws, &["journal", "verify"]);
}
