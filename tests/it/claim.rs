//! A person's own Claude Code or Codex session as a first-class worker: `strata claim` and
//! `strata release` grant and return ownership in the ledger `strata run` uses, directly, through
//! `strata serve` and through `strata mcp` (which serves the workspace's socket while it holds
//! the journal); the write guard run without `--lineage` knows the session by the hook input's
//! `session_id`; `strata init --claude` / `--codex` write (or print) the project configuration,
//! merged into the user's files; and, with the real CLIs against the fake model server, a
//! `claude -p` in a repository configured that way is guarded and served.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strata_tests::daemon::Daemon;
use strata_tests::{head_seq, journal_events, strata, strata_json, strata_ok, strata_with_stdin};

const BIN: &str = strata_tests::strata_bin!();

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = tmp.path().canonicalize().expect("canonical").join("repo");
    std::fs::create_dir_all(ws.join("src")).expect("dirs");
    strata_ok(BIN, &ws, &["init", "--durability", "process"]);
    (tmp, ws)
}

fn stderr(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The write guard as a Claude Code session `session` would run it from `.claude/settings.json`
/// (no `--lineage`), writing `file`.
fn guard(ws: &Path, session: &str, file: &Path) -> Output {
    let input = json!({"session_id": session, "cwd": ws, "hook_event_name": "PreToolUse", "tool_name": "Write",
        "tool_input": {"file_path": file, "content": "x\n"}});
    let journal = ws.display().to_string();
    strata_with_stdin(BIN, &["hook", "claude", "pre-tool-use", "--journal", &journal], input.to_string().as_bytes())
}

/// `strata mcp` on `ws`, its stdin held open, once it serves the workspace's socket.
fn mcp(ws: &Path) -> Child {
    let child = Command::new(BIN)
        .arg("--dir")
        .arg(ws)
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("strata mcp starts");
    let started = Instant::now();
    while !ws.join(".strata/daemon.sock").exists() {
        assert!(started.elapsed() < Duration::from_secs(60), "strata mcp never served the workspace socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn stop(mut child: Child) {
    drop(child.stdin.take());
    let _ = child.wait();
}

/// Two sessions, one file: the second claim is refused with the holder named and nothing
/// recorded; a release frees it; the guard allows each session inside its own claim only.
fn claims_hold(ws: &Path) {
    let a = strata_json(BIN, ws, &["claim", "src/lib.rs", "docs", "--for", "A"]);
    assert_eq!(a["lineage"], "session/A");
    assert_eq!(a["owned"], json!(["docs", "src/lib.rs"]));
    let head = head_seq(BIN, ws);
    let refused = strata(BIN, ws, &["claim", "src/lib.rs", "--for", "B"]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let text = stderr(&refused);
    assert!(text.contains("STRATA-E2600") && text.contains("session/A owns src/lib.rs"), "{text}");
    assert_eq!(head_seq(BIN, ws), head, "a refused claim records nothing");

    assert_eq!(guard(ws, "A", &ws.join("src/lib.rs")).status.code(), Some(0), "inside A's claim");
    let outside = guard(ws, "A", &ws.join("src/main.rs"));
    assert_eq!(outside.status.code(), Some(2), "outside A's claim");
    assert!(stderr(&outside).contains("write outside owned files: src/main.rs"), "{}", stderr(&outside));
    let b = guard(ws, "B", &ws.join("src/lib.rs"));
    assert_eq!(b.status.code(), Some(2));
    assert!(stderr(&b).contains("interactive session B owns no files"), "{}", stderr(&b));

    let released = strata_json(BIN, ws, &["release", "src/lib.rs"]);
    assert_eq!(released["returned"], json!([{"lineage": "session/A", "released": ["src/lib.rs"], "kept": ["docs"]}]));
    strata_json(BIN, ws, &["claim", "src/lib.rs", "--for", "B"]);
    assert_eq!(guard(ws, "B", &ws.join("src/lib.rs")).status.code(), Some(0), "B's now");
    assert_eq!(guard(ws, "A", &ws.join("src/lib.rs")).status.code(), Some(2), "A's no more");
    // Paths claimed for every interactive session are writable by any of them.
    strata_json(BIN, ws, &["claim", "notes", "--interactive"]);
    assert_eq!(guard(ws, "C", &ws.join("notes/today.md")).status.code(), Some(0));
    let listed = strata_json(BIN, ws, &["claim"]);
    let owners: Vec<&str> =
        listed["owners"].as_array().unwrap().iter().map(|o| o["lineage"].as_str().unwrap()).collect();
    assert_eq!(owners, ["interactive", "session/A", "session/B"]);
    strata_json(BIN, ws, &["release", "--for", "A"]);
    strata_json(BIN, ws, &["release", "--for", "B"]);
    strata_json(BIN, ws, &["release", "--interactive"]);
    assert_eq!(strata_json(BIN, ws, &["claim"])["owners"], json!([]));
}

/// The ledger events the claims above recorded, in order.
fn assert_recorded(ws: &Path) {
    let ledger: Vec<(String, Value)> = journal_events(ws)
        .into_iter()
        .filter(|(s, t, _)| s == "ce/ledger" && t.starts_with("ce.ownership"))
        .map(|(_, t, p)| (t, p))
        .collect();
    let seen: Vec<(&str, &str)> =
        ledger.iter().map(|(t, p)| (t.as_str(), p["lineage_id"].as_str().unwrap_or_default())).collect();
    assert_eq!(
        seen,
        [
            ("ce.ownership-claimed", "session/A"),
            ("ce.ownership-claimed", "session/A"),
            ("ce.ownership-claimed", "session/B"),
            ("ce.ownership-claimed", "interactive"),
            ("ce.ownership-released", "session/A"),
            ("ce.ownership-released", "session/B"),
            ("ce.ownership-released", "interactive"),
        ]
    );
    assert_eq!(ledger[1].1["paths"], json!(["docs"]), "a partial release keeps the rest");
    let guards: Vec<(String, String)> = journal_events(ws)
        .into_iter()
        .filter(|(s, _, _)| s.starts_with("guard/session/"))
        .map(|(s, t, _)| (s, t))
        .collect();
    assert_eq!(guards.len(), 6, "every guard decision is recorded: {guards:?}");
    assert!(guards.contains(&("guard/session/A".to_owned(), "guard.write-denied".to_owned())));
}

#[test]
fn two_sessions_cannot_claim_one_file_and_a_release_frees_it_without_a_daemon() {
    let (_tmp, ws) = workspace();
    claims_hold(&ws);
    assert_recorded(&ws);
}

#[test]
fn claims_and_the_guard_go_through_strata_serve_when_it_runs() {
    let (_tmp, ws) = workspace();
    let daemon = Daemon::start(BIN, &ws, &[]);
    claims_hold(&ws);
    let (status, err) = daemon.stop();
    assert!(status.success(), "{err}");
    assert_recorded(&ws);
}

#[test]
fn claims_and_the_guard_go_through_strata_mcp_while_it_holds_the_journal() {
    let (_tmp, ws) = workspace();
    let server = mcp(&ws);
    claims_hold(&ws);
    stop(server);
    assert_recorded(&ws);
}

#[test]
fn a_session_cannot_claim_a_workgroup_worker_s_files_nor_release_them() {
    let (_tmp, ws) = workspace();
    // A worker's claim as `strata run` records it, through the wire's ledger operations.
    let route = json!({"lineage_id": "wg/WG-1/T1", "input": {"owned_files": ["src"], "role": "builder"}});
    let journal = ws.display().to_string();
    let out = strata_with_stdin(BIN, &["ce", "route", "--journal", &journal], route.to_string().as_bytes());
    assert!(out.status.success(), "{}", stderr(&out));
    let head = head_seq(BIN, &ws);
    let claimed = strata(BIN, &ws, &["claim", "src/lib.rs"]);
    assert!(
        stderr(&claimed).contains("STRATA-E2600") && stderr(&claimed).contains("wg/WG-1/T1"),
        "{}",
        stderr(&claimed)
    );
    let released = strata(BIN, &ws, &["release", "src/lib.rs"]);
    assert!(stderr(&released).contains("STRATA-E2604"), "{}", stderr(&released));
    let outside = strata(BIN, &ws, &["claim", "../elsewhere"]);
    assert!(stderr(&outside).contains("STRATA-E2601"), "{}", stderr(&outside));
    let nothing = strata(BIN, &ws, &["release"]);
    assert!(stderr(&nothing).contains("STRATA-E2605"), "{}", stderr(&nothing));
    assert_eq!(head_seq(BIN, &ws), head, "refusals record nothing");
    // A hook call naming neither a lineage nor a session is denied and recorded.
    let input =
        json!({"cwd": ws, "tool_name": "Write", "tool_input": {"file_path": ws.join("src/lib.rs"), "content": ""}});
    let anon = strata_with_stdin(
        BIN,
        &["hook", "claude", "pre-tool-use", "--journal", &journal],
        input.to_string().as_bytes(),
    );
    assert_eq!(anon.status.code(), Some(2));
    assert!(stderr(&anon).contains("STRATA-E2608"), "{}", stderr(&anon));
}

/// A worker's ownership granted with `strata ce route --journal WS` while a daemon holds the
/// journal: the request goes to that daemon and is recorded there (it used to wait for the lock
/// and answer JOURNAL_UNAVAILABLE), a session's claim on the same files is refused there, and a
/// `ce release` through it frees them.
fn ce_through_the_holder(ws: &Path) {
    let journal = ws.display().to_string();
    let route = json!({"lineage_id": "wg/WG-2/T1", "input": {"owned_files": ["src"], "role": "builder"}});
    let out = strata_with_stdin(BIN, &["ce", "route", "--journal", &journal], route.to_string().as_bytes());
    let line: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    assert_eq!(line["ok"], true, "{line} {}", stderr(&out));
    let claimed = strata(BIN, ws, &["claim", "src/lib.rs"]);
    assert!(
        stderr(&claimed).contains("STRATA-E2600") && stderr(&claimed).contains("wg/WG-2/T1"),
        "{}",
        stderr(&claimed)
    );
    // The workspace's journal directory names the same journal.
    let dir = ws.join(".strata/journal").display().to_string();
    let release = json!({"lineage_id": "wg/WG-2/T1", "paths": ["src"]});
    let out = strata_with_stdin(BIN, &["ce", "release", "--journal", &dir], release.to_string().as_bytes());
    let line: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    assert_eq!(line["ok"], true, "{line} {}", stderr(&out));
    assert!(strata(BIN, ws, &["claim", "src/lib.rs"]).status.success(), "released, the session may claim it");
}

fn assert_granted_and_released(ws: &Path) {
    let events = journal_events(ws);
    let of = |ty: &str| events.iter().filter(|(_, t, v)| t == ty && v.to_string().contains("wg/WG-2/T1")).count();
    assert!(of("ce.ownership-claimed") >= 1 && of("ce.ownership-released") >= 1, "{events:?}");
}

#[test]
fn ce_route_and_release_go_through_strata_serve_and_strata_mcp_while_they_hold_the_journal() {
    let (_tmp, ws) = workspace();
    let daemon = Daemon::start(BIN, &ws, &[]);
    ce_through_the_holder(&ws);
    let (status, err) = daemon.stop();
    assert!(status.success(), "{err}");
    assert_granted_and_released(&ws);
    let (_tmp, ws) = workspace();
    let server = mcp(&ws);
    ce_through_the_holder(&ws);
    stop(server);
    assert_granted_and_released(&ws);
}

// ---- strata init --claude / --codex

fn init_json(ws: &Path, args: &[&str]) -> Value {
    let mut all = vec!["init"];
    all.extend_from_slice(args);
    strata_json(BIN, ws, &all)
}

fn file<'a>(out: &'a Value, path: &str) -> &'a Value {
    out["files"].as_array().unwrap().iter().find(|f| f["path"] == path).unwrap_or_else(|| panic!("{path} in {out}"))
}

#[test]
fn init_claude_print_shows_the_hook_the_mcp_server_and_the_skill_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let out = init_json(&repo, &["--claude", "--print"]);
    assert_eq!(out["written"], false);
    let settings: Value =
        serde_json::from_str(file(&out, ".claude/settings.json")["contents"].as_str().unwrap()).unwrap();
    let group = &settings["hooks"]["PreToolUse"][0];
    assert_eq!(group["matcher"], "Write|Edit|MultiEdit|NotebookEdit");
    assert_eq!(
        group["hooks"][0],
        json!({"type": "command", "command": "strata hook claude pre-tool-use --journal \"$CLAUDE_PROJECT_DIR\" || exit 2", "timeout": 60})
    );
    assert_eq!(settings["permissions"]["allow"], json!(["mcp__strata"]));
    assert_eq!(settings["enabledMcpjsonServers"], json!(["strata"]));
    let mcp: Value = serde_json::from_str(file(&out, ".mcp.json")["contents"].as_str().unwrap()).unwrap();
    assert_eq!(mcp, json!({"mcpServers": {"strata": {"type": "stdio", "command": "strata", "args": ["mcp"]}}}));
    file(&out, ".claude/skills/strata/SKILL.md");
    file(&out, ".claude/skills/strata/assets/compat.md");
    assert_eq!(std::fs::read_dir(&repo).unwrap().count(), 0, "--print writes nothing, not even .strata/");

    let codex = init_json(&repo, &["--codex", "--print"]);
    let config: toml::Table = file(&codex, ".codex/config.toml")["contents"].as_str().unwrap().parse().unwrap();
    assert_eq!(config["mcp_servers"]["strata"]["command"].as_str(), Some("strata"));
    assert_eq!(config["mcp_servers"]["strata"]["default_tools_approval_mode"].as_str(), Some("approve"));
    let hooks: Value = serde_json::from_str(file(&codex, ".codex/hooks.json")["contents"].as_str().unwrap()).unwrap();
    assert_eq!(hooks["hooks"]["PreToolUse"][0]["matcher"], "apply_patch");
    assert_eq!(hooks["hooks"]["PreToolUse"][0]["hooks"][0]["command"], "strata hook codex pre-tool-use || exit 2");
    assert_eq!(hooks["hooks"]["PreToolUse"][0]["hooks"][0]["timeout"], 60);
    file(&codex, ".agents/skills/strata/references/schemas.md");
    let human = strata_ok(BIN, &repo, &["init", "--claude", "--print"]);
    assert!(human.contains("# .claude/settings.json") && human.contains("nothing written"), "{human}");
    assert_eq!(std::fs::read_dir(&repo).unwrap().count(), 0);
}

#[test]
fn init_claude_and_codex_merge_into_the_user_s_files_keep_their_keys_and_refuse_broken_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join(".claude")).unwrap();
    std::fs::create_dir_all(repo.join(".codex")).unwrap();
    let user_settings = json!({"model": "claude-sonnet-4-5", "permissions": {"allow": ["Bash(ls)"], "deny": ["Read(.env)"]},
        "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./audit.sh"}]}],
                  "Stop": [{"hooks": [{"type": "command", "command": "./stop.sh"}]}]}});
    std::fs::write(repo.join(".claude/settings.json"), user_settings.to_string()).unwrap();
    std::fs::write(repo.join(".mcp.json"), json!({"mcpServers": {"docs": {"command": "docs-mcp"}}}).to_string())
        .unwrap();
    let user_toml =
        "# my codex settings\nmodel = \"gpt-5.5\"\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\" # keep me\n";
    std::fs::write(repo.join(".codex/config.toml"), user_toml).unwrap();

    let out = init_json(&repo, &["--claude", "--codex"]);
    assert_eq!((out["written"].clone(), out["workspace_created"].clone()), (json!(true), json!(true)));
    assert!(repo.join(".strata/journal").is_dir(), "init --claude makes the workspace when there is none");
    let settings: Value =
        serde_json::from_str(&std::fs::read_to_string(repo.join(".claude/settings.json")).unwrap()).unwrap();
    assert_eq!(settings["model"], "claude-sonnet-4-5");
    assert_eq!(settings["permissions"]["allow"], json!(["Bash(ls)", "mcp__strata"]));
    assert_eq!(settings["permissions"]["deny"], json!(["Read(.env)"]));
    assert_eq!(settings["hooks"]["Stop"], user_settings["hooks"]["Stop"]);
    let pre = settings["hooks"]["PreToolUse"].as_array().unwrap();
    assert_eq!(pre.len(), 2);
    assert_eq!(pre[0], user_settings["hooks"]["PreToolUse"][0], "the user's hook stays first");
    assert!(pre[1]["hooks"][0]["command"].as_str().unwrap().starts_with("strata hook claude pre-tool-use"));
    let mcp: Value = serde_json::from_str(&std::fs::read_to_string(repo.join(".mcp.json")).unwrap()).unwrap();
    assert_eq!(mcp["mcpServers"]["docs"], json!({"command": "docs-mcp"}));
    assert_eq!(mcp["mcpServers"]["strata"]["args"], json!(["mcp"]));
    let toml_now = std::fs::read_to_string(repo.join(".codex/config.toml")).unwrap();
    assert!(toml_now.starts_with(user_toml), "comments and layout kept:\n{toml_now}");
    assert!(toml_now.contains("[mcp_servers.strata]"), "{toml_now}");

    // Again: nothing changes (no second guard, no duplicate permission).
    let again = init_json(&repo, &["--claude", "--codex"]);
    assert!(again["files"].as_array().unwrap().iter().all(|f| f["changed"] == false), "{again}");
    assert_eq!(again["workspace_created"], false);

    // The installed skill carries everything it names.
    for skill in [repo.join(".claude/skills/strata"), repo.join(".agents/skills/strata")] {
        let mut named = 0;
        for entry in walk(&skill) {
            let text = std::fs::read_to_string(&entry).unwrap();
            for part in
                text.split('`').skip(1).step_by(2).chain(text.split("](").skip(1).map(|p| p.split(')').next().unwrap()))
            {
                // A path names a file of the skill (from its root, or from the naming file's
                // own directory, as `assets/compat.md` names `schemas/…`), or of nothing else.
                let local = ["assets/", "references/", "schemas/", "docs/"].iter().any(|p| part.starts_with(p));
                if local && !part.contains(' ') {
                    named += 1;
                    let part = part.trim_end_matches('/');
                    let here = entry.parent().unwrap().join(part);
                    assert!(
                        skill.join(part).exists() || here.exists(),
                        "{} names {part}, not installed with the skill",
                        entry.display()
                    );
                }
            }
        }
        assert!(named >= 10, "{named} paths named");
    }

    // A file that is not JSON or TOML is refused and left as it was; nothing else is written.
    std::fs::write(repo.join(".claude/settings.json"), "{\"model\": ").unwrap();
    std::fs::remove_file(repo.join(".mcp.json")).unwrap();
    let broken = strata(BIN, &repo, &["--json", "init", "--claude"]);
    assert_eq!(broken.status.code(), Some(1));
    let failure: Value = serde_json::from_slice(&broken.stdout).unwrap();
    assert_eq!(failure["code"], "STRATA-E2610", "{failure}");
    assert_eq!(std::fs::read_to_string(repo.join(".claude/settings.json")).unwrap(), "{\"model\": ");
    assert!(!repo.join(".mcp.json").exists(), "all or nothing");
    std::fs::write(repo.join(".codex/config.toml"), "model = \n").unwrap();
    let broken = strata(BIN, &repo, &["init", "--codex"]);
    assert!(stderr(&broken).contains("STRATA-E2610"), "{}", stderr(&broken));
    std::fs::write(repo.join(".claude/settings.json"), "{\"hooks\": []}").unwrap();
    let shape = strata(BIN, &repo, &["init", "--claude"]);
    assert!(
        stderr(&shape).contains("STRATA-E2611") && stderr(&shape).contains("`hooks` is an array"),
        "{}",
        stderr(&shape)
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
    out
}

// ---- the real claude CLI in a repository `strata init --claude` configured

/// A directory holding `strata` (this build), for a `PATH` the configuration's `strata` resolves on.
fn strata_on_path(root: &Path) -> String {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(BIN, bin.join("strata")).unwrap();
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default())
}

#[test]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
fn an_interactive_claude_session_in_a_repository_set_up_by_init_claude_is_guarded_and_served() {
    use strata_tests::fake_model::{FakeModel, Turn};
    use strata_tests::real_cli::{self, CLAUDE_VAR, ClaudeRun, ClaudeSession, Scratch};
    let claude = real_cli::cli_path(CLAUDE_VAR).unwrap_or_else(|e| panic!("{e}"));
    let s = Scratch::new().expect("scratch");
    let repo = s.work.clone();
    std::fs::create_dir_all(repo.join("src")).unwrap();
    strata_ok(BIN, &repo, &["init", "--durability", "process", "--claude"]);
    strata_ok(BIN, &repo, &["knowledge", "declare", "--concern", "auth", "--project", "p1"]);
    let session = "0b6c7f4e-5a43-4a0e-9a51-7d1c2f3e4b5a";
    strata_ok(BIN, &repo, &["claim", "src/allowed.txt", "--for", session]);
    let (inside, outside) = (repo.join("src/allowed.txt"), repo.join("src/other.txt"));
    let fake = FakeModel::start(vec![
        Turn::claude_write(&outside.display().to_string(), "outside\n"),
        Turn::claude_write(&inside.display().to_string(), "inside\n"),
        Turn::claude_mcp("strata", "get_knowledge", json!({"concerns": ["auth"], "project": "p1"})),
        Turn::text("done"),
    ])
    .expect("fake server");
    // A person's session: no --settings, no --mcp-config; the project's files decide.
    let mut run = ClaudeRun::new("work on src").session(ClaudeSession::NewWithId(session.to_owned()));
    run.env = vec![("PATH".to_owned(), strata_on_path(s.root()))];
    run.cwd = Some(repo.clone());
    // Headless, a person allows the MCP tools on the command line (`-p` refuses an MCP tool not
    // allowed there; the project's `permissions.allow` did not take effect under `-p` here).
    run.allowed_tools = vec!["mcp__strata".to_owned()];
    let f = real_cli::run_claude(&claude, &s, &fake, &run).expect("claude starts");
    assert!(!f.timed_out && f.claude_stream().succeeded(f.code()), "{}", f.describe());
    let init = f.json_lines().into_iter().find(|l| l["subtype"] == "init").expect("system/init");
    assert_eq!(init["session_id"], session);
    let servers = init["mcp_servers"].as_array().cloned().unwrap_or_default();
    assert!(servers.iter().any(|s| s["name"] == "strata" && s["status"] == "connected"), "{init}");

    assert!(!outside.exists(), "the write outside the claim was denied");
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "inside\n", "the write inside landed");
    // The last request carries the whole conversation's tool results.
    let results = fake.model_requests().last().expect("model requests").tool_results();
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results[0].text.contains("write outside owned files: src/other.txt"), "{results:?}");
    assert!(!results[2].is_error && results[2].text.contains("\"chunks\""), "get_knowledge served: {results:?}");

    let events = journal_events(&repo);
    let guard_stream = format!("guard/session/{session}");
    let decided: Vec<&str> = events.iter().filter(|(s, _, _)| *s == guard_stream).map(|(_, t, _)| t.as_str()).collect();
    assert_eq!(decided, ["guard.write-denied", "guard.write-allowed"], "both decisions recorded");
    assert!(events.iter().any(|(_, t, _)| t == "knowledge.served"), "the serve is recorded");
}

#[test]
#[ignore = "needs the claude and codex CLIs from npm; CI runs them"]
fn an_interactive_codex_session_in_a_repository_set_up_by_init_codex_is_guarded_and_served() {
    use strata_tests::fake_model::{FakeModel, Turn};
    use strata_tests::real_cli::{self, CODEX_VAR, CodexRun, Scratch};
    let codex = real_cli::cli_path(CODEX_VAR).unwrap_or_else(|e| panic!("{e}"));
    let s = Scratch::new().expect("scratch");
    let repo = s.work.clone();
    std::fs::create_dir_all(repo.join("src")).unwrap();
    strata_ok(BIN, &repo, &["init", "--durability", "process", "--codex"]);
    strata_ok(BIN, &repo, &["knowledge", "declare", "--concern", "auth", "--project", "p1"]);
    // Codex names its thread only once it starts: claim for every interactive session.
    strata_ok(BIN, &repo, &["claim", "src/allowed.txt", "--interactive"]);
    let fake = FakeModel::start(vec![
        Turn::codex_apply_patch("*** Begin Patch\n*** Add File: src/other.txt\n+outside\n*** End Patch\n"),
        Turn::codex_apply_patch("*** Begin Patch\n*** Add File: src/allowed.txt\n+inside\n*** End Patch\n"),
        Turn::codex_mcp("strata", "get_knowledge", json!({"concerns": ["auth"], "project": "p1"})),
        Turn::text("done"),
    ])
    .expect("fake server");
    // The person's own CODEX_HOME: the model provider, and this repository trusted (Codex reads a
    // project's `.codex/` only then); the project's files carry strata's hook and MCP server.
    let trust = format!("[projects.{}]\ntrust_level = \"trusted\"\n", Value::String(repo.display().to_string()));
    s.write_codex_config(&fake, &trust).expect("config.toml");
    let mut run = CodexRun::new("work on src");
    run.cwd = Some(repo.clone());
    run.bypass_hook_trust = true;
    run.env = vec![("PATH".to_owned(), strata_on_path(s.root()))];
    let f = real_cli::run_codex(&codex, &s, &run).expect("codex starts");
    assert!(!f.timed_out && f.codex_jsonl().succeeded(f.code()), "{}", f.describe());
    assert!(!repo.join("src/other.txt").exists(), "the patch outside the claim was denied");
    assert_eq!(std::fs::read_to_string(repo.join("src/allowed.txt")).unwrap(), "inside\n");
    let call = f
        .json_lines()
        .into_iter()
        .find(|l| l["type"] == "item.completed" && l["item"]["type"] == "mcp_tool_call")
        .expect("an mcp_tool_call item");
    assert_eq!(
        (call["item"]["server"].as_str(), call["item"]["status"].as_str()),
        (Some("strata"), Some("completed")),
        "{call}"
    );
    let events = journal_events(&repo);
    let decided: Vec<&str> =
        events.iter().filter(|(s, _, _)| s.starts_with("guard/session/")).map(|(_, t, _)| t.as_str()).collect();
    assert_eq!(decided, ["guard.write-denied", "guard.write-allowed"], "both decisions recorded");
    assert!(events.iter().any(|(_, t, _)| t == "knowledge.served"), "the serve is recorded");
}
