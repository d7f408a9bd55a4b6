//! Shared helpers for strata's integration and end-to-end tests.
//!
//! The tests drive real parts: sled on disk, the real `strata` binary (built from this package as
//! `strata-e2e`, the same `cli::main`), real child processes killed with SIGKILL.

pub mod daemon;
pub mod eval;
pub mod fake_model;
pub mod real_cli;

use std::path::Path;
use std::process::{Command, Output};

use strata_journal::{Durability, EventData, Journal, OpenOptions};
use uuid::Uuid;

/// Path of the `strata` binary under test. A macro because cargo defines the variable only when
/// compiling integration tests, not this library.
#[macro_export]
macro_rules! strata_bin {
    () => {
        env!("CARGO_BIN_EXE_strata-e2e")
    };
}

/// Runs `<bin> --dir <dir> <args>` and returns its output.
pub fn strata(bin: &str, dir: &Path, args: &[&str]) -> Output {
    Command::new(bin).arg("--dir").arg(dir).args(args).output().expect("strata binary runs")
}

/// Runs strata and asserts success, returning stdout.
pub fn strata_ok(bin: &str, dir: &Path, args: &[&str]) -> String {
    let out = strata(bin, dir, args);
    assert!(
        out.status.success(),
        "strata {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs `<bin> --dir <ws> --json <args>`, asserts success and parses its output.
pub fn strata_json(bin: &str, ws: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&strata_ok(bin, ws, &all)).expect("JSON output")
}

/// The journal head's sequence of the workspace at `ws`.
pub fn head_seq(bin: &str, ws: &Path) -> u64 {
    strata_json(bin, ws, &["journal", "log", "--limit", "1"])[0]["seq"].as_u64().expect("a sequence")
}

/// Every event of the workspace `ws`'s journal, as (stream, type, payload), read directly
/// (no strata process may hold the journal).
pub fn journal_events(ws: &Path) -> Vec<(String, String, serde_json::Value)> {
    let j = strata_journal::Journal::open(&ws.join(".strata/journal"), &options(strata_journal::Durability::Process))
        .expect("journal");
    let out = j
        .read_range(1, j.head().seq as usize + 1)
        .expect("read")
        .into_iter()
        .map(|e| (e.stream.clone(), e.event_type.clone(), serde_json::from_slice(&e.payload).expect("payload")))
        .collect();
    j.close_blocking().expect("close");
    out
}

/// A workspace `dir/ws` with the seed-scale knowledge base written to `ws/kb` and taken in:
/// (workspace, its files).
pub fn seed_workspace(bin: &str, dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).expect("workspace directory");
    strata_ok(bin, &ws, &["init", "--durability", "process"]);
    let kb = ws.join("kb");
    strata_ok(bin, &ws, &["fixture", "--out", kb.to_str().expect("utf-8")]);
    strata_ok(bin, &ws, &["intake", kb.to_str().expect("utf-8")]);
    (ws, kb)
}

/// Options for opening a test journal.
pub fn options(durability: Durability) -> OpenOptions {
    OpenOptions {
        durability,
        cache_bytes: 16 * 1024 * 1024,
        holder: format!("strata-tests (pid {})", std::process::id()),
        lock_wait: std::time::Duration::from_secs(1),
    }
}

/// An event with a given id, type and payload, recorded at a fixed instant.
pub fn event(id: Uuid, event_type: &str, payload: &serde_json::Value) -> EventData {
    EventData {
        id,
        event_type: event_type.to_owned(),
        schema_version: 1,
        recorded_at_ns: 1_795_000_000_000_000_000,
        causation: None,
        correlation: None,
        payload: serde_json::to_vec(payload).expect("json"),
    }
}

/// A fresh sled journal in `dir` (its journal directory).
pub fn create_journal(dir: &Path, durability: Durability) -> Journal {
    Journal::create(dir, "strata.test/journal", &options(durability)).expect("create journal")
}

/// The seed-scale knowledge base taken in to an in-memory journal: the journal, the graph at its
/// head, and the fixture it came from.
pub fn seed_kb(seed: u64) -> (Journal, strata_engine::kb::graph::Graph, strata_engine::kb::fixture::Fixture) {
    use strata_engine::kb::fixture::{FixtureSpec, generate};
    let fx = generate(&FixtureSpec::seed_scale(seed));
    let (j, g) = fx.in_memory("strata.test/context").expect("the fixture takes in");
    (j, g, fx)
}

/// Folds every event after the graph's position into it.
pub fn apply_tail(j: &Journal, g: &mut strata_engine::kb::graph::Graph) {
    let from = g.seq() + 1;
    j.scan(from, u64::MAX, |rec, _| g.apply_record(rec).map(|()| true)).expect("scan").expect("fold");
}

/// Runs `<bin> <args>` with `stdin` written to its standard input; returns its output.
pub fn strata_with_stdin(bin: &str, args: &[&str], stdin: &[u8]) -> Output {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("strata binary runs");
    if let Some(mut input) = child.stdin.take() {
        // A process that exits before reading everything closes the pipe; that is its answer.
        let _ = input.write_all(stdin);
    }
    child.wait_with_output().expect("strata binary finishes")
}

/// Runs `<bin> --dir <dir> <args>` with `stdin`, asserts success and returns stdout.
pub fn strata_ok_with_stdin(bin: &str, dir: &Path, args: &[&str], stdin: &str) -> String {
    let dir = dir.display().to_string();
    let mut all = vec!["--dir", dir.as_str()];
    all.extend_from_slice(args);
    let out = strata_with_stdin(bin, &all, stdin.as_bytes());
    assert!(out.status.success(), "strata {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs `git -C repo args…` and returns its stdout; panics with git's stderr on failure.
pub fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(repo).args(args).output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A run's setting under `root`: a git repository `repo/` holding `files`, a workspace `ws/`
/// initialised with process durability by `bin`, and `plan.toml` holding `plan`; the three paths.
pub fn run_setting(
    bin: &str,
    root: &Path,
    files: &[(&str, &str)],
    plan: &str,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let (ws, repo, plan_path) = (root.join("ws"), root.join("repo"), root.join("plan.toml"));
    init_repo(&repo, files);
    std::fs::create_dir_all(&ws).expect("workspace directory");
    strata_ok(bin, &ws, &["init", "--durability", "process"]);
    std::fs::write(&plan_path, plan).expect("plan file");
    (ws, repo, plan_path)
}

/// A git repository at `dir` holding `files` (path, text) in one first commit on `main`.
pub fn init_repo(dir: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().expect("a file has a parent")).expect("repository directory");
        std::fs::write(&p, text).expect("repository file");
    }
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "-m", "first"]);
}

/// Imports `export` (a `journal export --jsonl` file's bytes) into a new workspace with the real
/// binary, exports that again and requires the two exports to be byte-identical and the copy to
/// verify. Returns the number of events.
pub fn assert_export_round_trips(bin: &str, export: &[u8], what: &str) -> u64 {
    let tmp = tempfile::tempdir().expect("tempdir");
    let first = tmp.path().join("first.jsonl");
    std::fs::write(&first, export).expect("write export");
    let copy = tmp.path().join("copy");
    let out = strata(bin, &copy, &["journal", "import", first.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{what}: its export does not import: {}", String::from_utf8_lossy(&out.stderr));
    let second = tmp.path().join("second.jsonl");
    strata_ok(bin, &copy, &["journal", "export", "--jsonl", "--out", second.to_str().expect("utf-8")]);
    let again = std::fs::read(&second).expect("read export");
    if again != export {
        let (a, b) = (String::from_utf8_lossy(export), String::from_utf8_lossy(&again));
        let at = a.lines().zip(b.lines()).position(|(x, y)| x != y);
        panic!(
            "{what}: export → import → export differs (at line {at:?}):\n{}\n{}",
            at.and_then(|i| a.lines().nth(i)).unwrap_or(""),
            at.and_then(|i| b.lines().nth(i)).unwrap_or("")
        );
    }
    strata_ok(bin, &copy, &["journal", "verify"]);
    let events = export.iter().filter(|b| **b == b'\n').count().saturating_sub(2) as u64;
    assert!(events > 0, "{what}: the export holds no events");
    events
}

/// [`assert_export_round_trips`] for the journal of the workspace at `ws`.
pub fn assert_round_trips(bin: &str, ws: &Path, what: &str) -> u64 {
    let export = strata_ok(bin, ws, &["journal", "export", "--jsonl"]);
    assert_export_round_trips(bin, export.as_bytes(), what)
}
