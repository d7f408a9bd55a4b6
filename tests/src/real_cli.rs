//! Running the real `claude` and `codex` CLIs (the npm packages `.ci/run` installs) against a
//! [`FakeModel`] on 127.0.0.1: where the binaries are, a throwaway `HOME` / `CODEX_HOME` and
//! working directory, the argv and environment each CLI needs headless, and a run with a timeout
//! that kills the child's whole process group, so a test never hangs on a stuck CLI.
//!
//! The environment is cleared and rebuilt for every run (only `PATH` is inherited), so nothing of
//! the developer's own setup (API keys, proxies, `~/.claude`, `~/.codex`) leaks in, and the CLIs
//! are told not to phone home: claude with `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` (no
//! `/api/hello` probe, no auto-update, telemetry or error reports) and the `DISABLE_*` switches it
//! implies; codex with a private `CODEX_HOME` whose `config.toml` points the model provider at the
//! fake server (codex ignores `OPENAI_BASE_URL`, and its built-in provider would try a WebSocket to
//! the real host first) and turns off analytics, feedback and the update check.
//!
//! Codex always gets its sandbox and working directory explicitly, on resume and fork too, as
//! exec-level flags placed **before** the subcommand (`codex exec resume` refuses `-s` / `-C`
//! after it, and reports disagree on whether a resumed turn inherits them).

use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use strata_adapters::providers::{claude::StreamRun, codex::JsonlRun};

use crate::fake_model::FakeModel;

/// Environment variable naming the `claude` binary (set by `.ci/run`).
pub const CLAUDE_VAR: &str = "STRATA_TEST_CLAUDE";
/// Environment variable naming the `codex` binary (set by `.ci/run`).
pub const CODEX_VAR: &str = "STRATA_TEST_CODEX";
/// The claude version these helpers were written against (`.ci/run` pins it).
pub const CLAUDE_VERSION: &str = "2.1.332";
/// The codex version these helpers were written against (`.ci/run` pins it).
pub const CODEX_VERSION: &str = "0.171.0";
/// Set (to anything) to print every run's argv, status, stdout and stderr to stderr; with
/// `--nocapture` that shows exactly what the CLIs printed.
pub const ECHO_VAR: &str = "STRATA_TEST_CLI_ECHO";
/// Default time a CLI run may take before its process group is killed, seconds. Generous: it
/// exists to end hangs, not to measure anything.
pub const RUN_S_MAX: u64 = 120;
/// Largest stdout or stderr kept from one run, bytes (the rest is drained and dropped).
pub const OUTPUT_BYTES_MAX: usize = 16 * 1024 * 1024;

/// The claude model pinned in tests: its client-side price table (3 / 15 / 3.75 / 0.30 USD per
/// Mtok) matches `total_cost_usd` exactly. Without `--model` claude would pick its own default.
pub const CLAUDE_MODEL: &str = "claude-sonnet-4-5";
/// The codex model slug: in codex's built-in catalog, so it gets `exec_command` and the freeform
/// `apply_patch` tool (an unknown slug gets a metadata warning and no `apply_patch` at all).
pub const CODEX_MODEL: &str = "gpt-5.5";

/// The binary named by `var`, which must exist.
pub fn cli_path(var: &str) -> Result<PathBuf, String> {
    let Some(v) = std::env::var_os(var) else {
        return Err(format!("{var} is not set: `bash .ci/run` installs the CLI and sets it"));
    };
    let p = PathBuf::from(v);
    if p.is_file() { Ok(p) } else { Err(format!("{var}={} is not a file", p.display())) }
}

/// A throwaway home for one test: `home/` (claude's `HOME`), `codex-home/` (`CODEX_HOME`) and
/// `work/` (the working directory), all under one temporary directory removed on drop.
pub struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
    /// `HOME` for both CLIs.
    pub home: PathBuf,
    /// `CODEX_HOME`.
    pub codex_home: PathBuf,
    /// The working directory the CLIs run in.
    pub work: PathBuf,
}

impl Scratch {
    /// Creates the directories (canonicalised: the CLIs report resolved paths).
    pub fn new() -> io::Result<Scratch> {
        let dir = tempfile::Builder::new().prefix("strata-real-cli-").tempdir()?;
        let root = dir.path().canonicalize()?;
        let (home, codex_home, work) = (root.join("home"), root.join("codex-home"), root.join("work"));
        for d in [&home, &codex_home, &work] {
            std::fs::create_dir_all(d)?;
        }
        Ok(Scratch { _dir: dir, root, home, codex_home, work })
    }

    /// The root of the scratch tree (canonical), for hook scripts and other test files.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Writes `CODEX_HOME/config.toml`: the `mock` provider at `fake` (Responses over plain HTTP
    /// SSE), [`CODEX_MODEL`], no update check, analytics or feedback, then `extra` (more TOML,
    /// e.g. `[[hooks.PreToolUse]]` tables or MCP servers) appended verbatim.
    pub fn write_codex_config(&self, fake: &FakeModel, extra: &str) -> io::Result<PathBuf> {
        let path = self.codex_home.join("config.toml");
        std::fs::write(&path, codex_config(&fake.base_url(), extra))?;
        Ok(path)
    }
}

/// The `config.toml` [`Scratch::write_codex_config`] writes, for a fake server at `base_url`.
pub fn codex_config(base_url: &str, extra: &str) -> String {
    format!(
        r#"# Written by strata-tests: codex against a fake model server on loopback.
model = "{CODEX_MODEL}"
model_provider = "mock"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[model_providers.mock]
name = "fake model (strata-tests)"
base_url = "{base_url}/v1"
wire_api = "responses"
# Fail on the first error: a retry would only take the next scripted turn (a test that wants one
# scripts it).
request_max_retries = 0
stream_max_retries = 0

{extra}
"#
    )
}

/// What a finished (or killed) CLI run left behind.
#[derive(Debug)]
pub struct Finished {
    /// Standard output, split into lines.
    pub stdout_lines: Vec<String>,
    /// Standard error.
    pub stderr: String,
    /// Exit status (`None` only if waiting for the child failed).
    pub status: Option<ExitStatus>,
    /// The run hit its timeout and its process group was killed.
    pub timed_out: bool,
    /// The argv that was run, for failure messages.
    pub argv: Vec<String>,
}

impl Finished {
    /// The exit code (`None` when killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    /// The stdout lines read by the strata Claude stream-json reader.
    pub fn claude_stream(&self) -> StreamRun {
        let mut r = StreamRun::default();
        for l in &self.stdout_lines {
            r.feed(l);
        }
        r
    }

    /// The stdout lines read by the strata Codex JSONL reader.
    pub fn codex_jsonl(&self) -> JsonlRun {
        let mut r = JsonlRun::default();
        for l in &self.stdout_lines {
            r.feed(l);
        }
        r
    }

    /// The stdout lines that parse as JSON objects.
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout_lines
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|v: &serde_json::Value| v.is_object())
            .collect()
    }

    /// Everything, for an assertion message.
    pub fn describe(&self) -> String {
        format!(
            "argv: {:?}\nstatus: {:?} (timed out: {})\nstdout:\n{}\nstderr:\n{}",
            self.argv,
            self.status,
            self.timed_out,
            self.stdout_lines.join("\n"),
            self.stderr
        )
    }
}

fn drain<R: Read + Send + 'static>(r: R, lines: bool, done: mpsc::Sender<()>) -> thread::JoinHandle<Vec<String>> {
    thread::spawn(move || {
        let mut out = Vec::new();
        let mut kept = 0usize;
        let mut reader = BufReader::new(r);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if kept + n > OUTPUT_BYTES_MAX {
                        continue;
                    }
                    kept += n;
                    let s = String::from_utf8_lossy(&buf);
                    out.push(if lines { s.trim_end_matches(['\r', '\n']).to_owned() } else { s.into_owned() });
                }
            }
        }
        let _ = done.send(());
        out
    })
}

/// Runs `cmd` with stdin from `/dev/null`, in its own process group, collecting stdout and
/// stderr; after `timeout` the whole group is killed (SIGKILL) and the run is marked timed out.
pub fn run_with_timeout(mut cmd: Command, timeout: Duration) -> io::Result<Finished> {
    use std::os::unix::process::CommandExt as _;
    let argv: Vec<String> =
        std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(|a| a.to_string_lossy().into_owned()).collect();
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = cmd.spawn()?;
    let pgid = child.id();
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().map(|s| drain(s, true, tx.clone()));
    let err = child.stderr.take().map(|s| drain(s, false, tx.clone()));
    drop(tx);
    // Both pipes reach end of file when the CLI (and anything it left holding them) has exited.
    let deadline = Instant::now() + timeout;
    let mut closed = 0;
    let mut timed_out = false;
    while closed < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(()) => closed += 1,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                kill_group(pgid);
                let _ = child.kill();
                break;
            }
        }
    }
    let status = child.wait().ok();
    if !timed_out {
        // Nothing the CLI started (hooks, MCP servers) outlives the run.
        kill_group(pgid);
    }
    let stdout_lines = out.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr = err.and_then(|h| h.join().ok()).unwrap_or_default().concat();
    let finished = Finished { stdout_lines, stderr, status, timed_out, argv };
    if std::env::var_os(ECHO_VAR).is_some() {
        eprintln!("---- {ECHO_VAR}\n{}", finished.describe());
    }
    Ok(finished)
}

/// SIGKILL to process group `pgid` (the workspace denies `unsafe`, so through `kill(1)`).
fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The environment both CLIs start from: nothing inherited but `PATH` (codex's npm launcher is a
/// Node script; hooks run through the shell), a private `HOME` with its XDG directories, a plain
/// terminal, and proxies bypassed for loopback.
fn base_env(cmd: &mut Command, scratch: &Scratch) {
    cmd.env_clear();
    cmd.envs(base_env_vars(scratch));
}

/// The variables [`base_env`] sets, for callers that build their own command (the providers
/// take them as configured environment).
pub fn base_env_vars(scratch: &Scratch) -> Vec<(String, String)> {
    let mut v = Vec::new();
    if let Some(path) = std::env::var_os("PATH") {
        v.push(("PATH".to_owned(), path.to_string_lossy().into_owned()));
    }
    let home = &scratch.home;
    let at = |p: PathBuf| p.display().to_string();
    v.extend(
        [
            ("HOME", at(home.clone())),
            ("XDG_CONFIG_HOME", at(home.join(".config"))),
            ("XDG_CACHE_HOME", at(home.join(".cache"))),
            ("XDG_DATA_HOME", at(home.join(".local/share"))),
            ("XDG_STATE_HOME", at(home.join(".local/state"))),
            ("TMPDIR", at(std::env::temp_dir())),
            ("LANG", "C.UTF-8".to_owned()),
            ("TERM", "dumb".to_owned()),
            ("NO_COLOR", "1".to_owned()),
            ("NO_PROXY", "127.0.0.1,localhost".to_owned()),
            ("no_proxy", "127.0.0.1,localhost".to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    v
}

/// The variables [`claude_command`] adds for `fake`: its base URL, a fake key, and no
/// nonessential traffic (no `/api/hello` probe, auto-update, telemetry or error reports).
pub fn claude_env_vars(fake: &FakeModel) -> Vec<(String, String)> {
    [
        ("ANTHROPIC_BASE_URL", fake.base_url()),
        ("ANTHROPIC_API_KEY", "sk-ant-fake-strata-tests".to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ("DISABLE_ERROR_REPORTING", "1".to_owned()),
        ("DISABLE_BUG_COMMAND", "1".to_owned()),
    ]
    .map(|(k, v)| (k.to_owned(), v))
    .into()
}

/// How a claude run relates to a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaudeSession {
    /// A new session with an id claude picks.
    New,
    /// A new session with this id (`--session-id`; refused if the id is in use).
    NewWithId(String),
    /// Continue this session (`--resume`; 2.1.332 keeps the id).
    Resume(String),
    /// A new session branched from this one (`--resume <id> --fork-session`).
    Fork(String),
}

/// One `claude -p` invocation.
#[derive(Clone, Debug)]
pub struct ClaudeRun {
    /// The prompt.
    pub prompt: String,
    /// Session handling.
    pub session: ClaudeSession,
    /// `--model`.
    pub model: String,
    /// `--permission-mode` (`acceptEdits` lets headless Write/Edit run inside the cwd and any
    /// `--add-dir`; writes elsewhere are refused by the permission system).
    pub permission_mode: String,
    /// `--settings` (a file path or inline JSON), e.g. per-worker hooks.
    pub settings: Option<String>,
    /// `--add-dir` entries.
    pub add_dirs: Vec<PathBuf>,
    /// `--allowedTools` entries (MCP tools need `mcp__<server>` in `-p` mode).
    pub allowed_tools: Vec<String>,
    /// `--mcp-config` (a file path or inline JSON `{"mcpServers": {…}}`), with
    /// `--strict-mcp-config` so no other MCP server is loaded.
    pub mcp_config: Option<String>,
    /// `CLAUDE_CODE_MAX_RETRIES`. Unset, claude retries a 429/5xx 10 times with exponential
    /// backoff (0.6 s doubling to ~40 s: minutes); `Some(0)` fails on the first such error. A
    /// 400 is retried regardless (6 requests in all, fewer beta headers each time).
    pub max_retries: Option<u32>,
    /// Further arguments, placed before the prompt.
    pub extra_args: Vec<String>,
    /// Further environment variables (visible to hooks too).
    pub env: Vec<(String, String)>,
    /// Working directory; the scratch `work/` when `None`.
    pub cwd: Option<PathBuf>,
    /// When the run is killed.
    pub timeout: Duration,
}

impl ClaudeRun {
    /// A new session answering `prompt`, with the defaults above.
    pub fn new(prompt: &str) -> ClaudeRun {
        ClaudeRun {
            prompt: prompt.to_owned(),
            session: ClaudeSession::New,
            model: CLAUDE_MODEL.to_owned(),
            permission_mode: "acceptEdits".to_owned(),
            settings: None,
            add_dirs: Vec::new(),
            allowed_tools: Vec::new(),
            mcp_config: None,
            max_retries: None,
            extra_args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            timeout: Duration::from_secs(RUN_S_MAX),
        }
    }

    /// The same run with this session handling.
    pub fn session(mut self, session: ClaudeSession) -> ClaudeRun {
        self.session = session;
        self
    }

    /// The same run with `--settings`.
    pub fn settings(mut self, settings: &str) -> ClaudeRun {
        self.settings = Some(settings.to_owned());
        self
    }

    /// The argv after the binary.
    pub fn args(&self) -> Vec<String> {
        let mut a: Vec<String> = ["-p", "--output-format", "stream-json", "--verbose", "--model", &self.model]
            .into_iter()
            .map(str::to_owned)
            .collect();
        a.extend(["--permission-mode".to_owned(), self.permission_mode.clone()]);
        match &self.session {
            ClaudeSession::New => {}
            ClaudeSession::NewWithId(id) => a.extend(["--session-id".to_owned(), id.clone()]),
            ClaudeSession::Resume(id) => a.extend(["--resume".to_owned(), id.clone()]),
            ClaudeSession::Fork(id) => a.extend(["--resume".to_owned(), id.clone(), "--fork-session".to_owned()]),
        }
        if let Some(s) = &self.settings {
            a.extend(["--settings".to_owned(), s.clone()]);
        }
        for d in &self.add_dirs {
            a.extend(["--add-dir".to_owned(), d.display().to_string()]);
        }
        if !self.allowed_tools.is_empty() {
            a.extend(["--allowedTools".to_owned(), self.allowed_tools.join(",")]);
        }
        if let Some(m) = &self.mcp_config {
            a.extend(["--mcp-config".to_owned(), m.clone(), "--strict-mcp-config".to_owned()]);
        }
        a.extend(self.extra_args.iter().cloned());
        // `--` keeps a prompt starting with `-` from being read as a flag.
        a.extend(["--".to_owned(), self.prompt.clone()]);
        a
    }
}

/// The `claude` command for `run` against `fake`, in `scratch`.
pub fn claude_command(bin: &Path, scratch: &Scratch, fake: &FakeModel, run: &ClaudeRun) -> Command {
    let mut cmd = Command::new(bin);
    base_env(&mut cmd, scratch);
    cmd.envs(claude_env_vars(fake));
    if let Some(n) = run.max_retries {
        cmd.env("CLAUDE_CODE_MAX_RETRIES", n.to_string());
    }
    for (k, v) in &run.env {
        cmd.env(k, v);
    }
    cmd.args(run.args()).current_dir(run.cwd.as_deref().unwrap_or(&scratch.work));
    cmd
}

/// Runs claude as `run` says, against `fake`, in `scratch`.
pub fn run_claude(bin: &Path, scratch: &Scratch, fake: &FakeModel, run: &ClaudeRun) -> io::Result<Finished> {
    run_with_timeout(claude_command(bin, scratch, fake, run), run.timeout)
}

/// How a codex run relates to a thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodexSession {
    /// A new thread.
    New,
    /// `codex exec … resume <id>` (same thread id).
    Resume(String),
    /// `codex exec … fork <id>` (a new thread id with the parent's history).
    Fork(String),
}

/// One `codex exec --json` invocation.
#[derive(Clone, Debug)]
pub struct CodexRun {
    /// The prompt.
    pub prompt: String,
    /// Thread handling.
    pub session: CodexSession,
    /// `-m`.
    pub model: String,
    /// `-s` (`read-only`, `workspace-write`, `danger-full-access`); always passed.
    pub sandbox: String,
    /// `-C`; the scratch `work/` when `None`. Always passed.
    pub cwd: Option<PathBuf>,
    /// `--dangerously-bypass-hook-trust`: run configured hooks without persisted trust (codex
    /// exec silently skips untrusted hooks otherwise).
    pub bypass_hook_trust: bool,
    /// Further exec-level arguments, placed before the subcommand.
    pub extra_args: Vec<String>,
    /// Further environment variables (visible to hooks too).
    pub env: Vec<(String, String)>,
    /// When the run is killed.
    pub timeout: Duration,
}

impl CodexRun {
    /// A new thread answering `prompt` in `workspace-write`.
    pub fn new(prompt: &str) -> CodexRun {
        CodexRun {
            prompt: prompt.to_owned(),
            session: CodexSession::New,
            model: CODEX_MODEL.to_owned(),
            sandbox: "workspace-write".to_owned(),
            cwd: None,
            bypass_hook_trust: false,
            extra_args: Vec::new(),
            env: Vec::new(),
            timeout: Duration::from_secs(RUN_S_MAX),
        }
    }

    /// The same run with this thread handling.
    pub fn session(mut self, session: CodexSession) -> CodexRun {
        self.session = session;
        self
    }

    /// The argv after the binary, for working directory `cwd`: every exec-level flag first, then
    /// `resume <id>` / `fork <id>`, then the prompt.
    pub fn args(&self, cwd: &Path) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "exec".to_owned(),
            "--json".to_owned(),
            "-m".to_owned(),
            self.model.clone(),
            "-s".to_owned(),
            self.sandbox.clone(),
            "-C".to_owned(),
            cwd.display().to_string(),
            "--skip-git-repo-check".to_owned(),
        ];
        if self.bypass_hook_trust {
            a.push("--dangerously-bypass-hook-trust".to_owned());
        }
        a.extend(self.extra_args.iter().cloned());
        match &self.session {
            CodexSession::New => {}
            CodexSession::Resume(id) => a.extend(["resume".to_owned(), id.clone()]),
            CodexSession::Fork(id) => a.extend(["fork".to_owned(), id.clone()]),
        }
        a.push(self.prompt.clone());
        a
    }
}

/// The `codex` command for `run`, in `scratch` (whose `config.toml` must point at the fake
/// server: [`Scratch::write_codex_config`]).
pub fn codex_command(bin: &Path, scratch: &Scratch, run: &CodexRun) -> Command {
    let cwd = run.cwd.clone().unwrap_or_else(|| scratch.work.clone());
    let mut cmd = Command::new(bin);
    base_env(&mut cmd, scratch);
    cmd.env("CODEX_HOME", &scratch.codex_home);
    for (k, v) in &run.env {
        cmd.env(k, v);
    }
    cmd.args(run.args(&cwd)).current_dir(&cwd);
    cmd
}

/// Runs codex as `run` says, in `scratch`.
pub fn run_codex(bin: &Path, scratch: &Scratch, run: &CodexRun) -> io::Result<Finished> {
    run_with_timeout(codex_command(bin, scratch, run), run.timeout)
}

/// Writes an executable shell script `name` into `dir` (hooks for the write-guard tests).
pub fn write_script(dir: &Path, name: &str, body: &str) -> io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}"))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

/// The variables that make strata's `provider` workers (`claude` or `codex`) the real CLIs
/// [`CLAUDE_VAR`] or [`CODEX_VAR`] names, on the pinned model, talking to `fake`: for a command
/// built by [`strata_run`] or with [`base_env_vars`] and [`claude_env_vars`].
pub fn worker_env_vars(provider: &str, fake: &FakeModel) -> Result<Vec<(String, String)>, String> {
    let at = |p: PathBuf| p.display().to_string();
    Ok(match provider {
        "claude" => vec![
            ("STRATA_CLAUDE".to_owned(), at(cli_path(CLAUDE_VAR)?)),
            ("STRATA_CLAUDE_MODEL".to_owned(), CLAUDE_MODEL.to_owned()),
        ],
        "codex" => vec![
            ("STRATA_CODEX".to_owned(), at(cli_path(CODEX_VAR)?)),
            ("STRATA_CODEX_MODEL".to_owned(), CODEX_MODEL.to_owned()),
            ("STRATA_CODEX_BASE_URL".to_owned(), format!("{}/v1", fake.base_url())),
        ],
        other => return Err(format!("provider {other:?}: the real CLIs are claude and codex")),
    })
}

/// `strata --dir WS run PLAN --repo REPO` with nothing of this process's environment but the
/// scratch's base variables and `fake`'s Claude Code ones: a real run's command, to which a test
/// adds the CLIs it runs.
pub fn strata_run(strata: &Path, ws: &Path, plan: &Path, repo: &Path, scratch: &Scratch, fake: &FakeModel) -> Command {
    let mut cmd = Command::new(strata);
    cmd.arg("--dir").arg(ws).arg("run").arg(plan).arg("--repo").arg(repo);
    cmd.env_clear();
    cmd.envs(base_env_vars(scratch).into_iter().chain(claude_env_vars(fake)));
    cmd
}
