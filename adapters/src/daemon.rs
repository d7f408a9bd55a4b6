//! `strata serve`: one process owns the workspace's journal and serves everyone else over a
//! Unix socket in `.strata/` (mode 0600, peers of another user refused): the CLI (commands run
//! in the daemon with its journal handle, their output sent back), hooks (which are CLI
//! commands) and `strata mcp` (the MCP byte stream, proxied). Optionally MCP over streamable
//! HTTP on a loopback address, behind a bearer token kept in `.strata/http-token` (mode 0600).
//! Graph queries (`graph impact`, `graph validate`) read one spec graph the daemon keeps in
//! memory, loaded on the first and brought to the head by folding the tail before each.
//!
//! Wire format on the socket: the client's first line is a JSON request
//! (`{"op":"cli","argv":[…],"cwd":"…","dir":"…"}`, `{"op":"mcp"}` or `{"op":"ping"}`). A `cli`
//! request gets one JSON line back (`{"code":…,"stdout":"…","stderr":"…"}`); after `mcp` the
//! connection carries newline-delimited JSON-RPC, as on stdio.
//!
//! SIGTERM (or SIGINT): stop accepting, let running commands and appends finish and answer,
//! refuse new writes, close (flush) the journal, remove the socket, exit 0.

use std::io::{BufRead as _, Write as _};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

use crate::app::workspace::Workspace;
use crate::harness::Harness;
use crate::mcp::{KnowledgeServer, serve_connection};

/// Longest request line a client may send (a CLI argv with many paths, or a hook's 1 MiB of
/// stdin JSON-escaped, fits).
pub const REQUEST_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// Most stdin a client sends along, bytes.
pub const STDIN_BYTES_MAX: u64 = 1024 * 1024;

/// How long shutdown waits for running commands and appends before closing anyway.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// `.strata/daemon.sock`.
pub fn socket_path(ws: &Workspace) -> PathBuf {
    ws.strata_dir().join("daemon.sock")
}

/// `.strata/http-token`.
pub fn token_path(ws: &Workspace) -> PathBuf {
    ws.strata_dir().join("http-token")
}

/// `.strata/serve.json`: what the running daemon serves (written once it is ready).
pub fn info_path(ws: &Workspace) -> PathBuf {
    ws.strata_dir().join("serve.json")
}

/// A request on the socket.
#[derive(Debug, Deserialize, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// Run a CLI command.
    Cli {
        /// The arguments, program name first.
        argv: Vec<String>,
        /// The client's working directory (relative paths resolve against it).
        cwd: PathBuf,
        /// The workspace the client means (must be the daemon's).
        dir: PathBuf,
        /// The client's standard input, for the commands that read one (hooks).
        #[serde(default)]
        stdin: Option<String>,
    },
    /// Speak MCP on the rest of the connection.
    Mcp,
    /// Is anyone there?
    Ping,
}

/// The answer to a `cli` request.
#[derive(Debug, Deserialize, Serialize)]
pub struct CliReply {
    /// Exit code.
    pub code: u8,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// What `.strata/serve.json` holds.
#[derive(Debug, Deserialize, Serialize)]
pub struct ServeInfo {
    /// The daemon's process id.
    pub pid: u32,
    /// The workspace root.
    pub workspace: PathBuf,
    /// The Unix socket.
    pub socket: PathBuf,
    /// MCP over streamable HTTP, when enabled (`http://127.0.0.1:PORT/mcp`).
    pub http_url: Option<String>,
    /// The file holding the HTTP bearer token, when HTTP is enabled.
    pub token_file: Option<PathBuf>,
}

/// Connects to the workspace's daemon, if one answers on its socket.
pub fn connect(ws: &Workspace) -> Option<std::os::unix::net::UnixStream> {
    let path = socket_path(ws);
    if !path.exists() {
        return None;
    }
    std::os::unix::net::UnixStream::connect(&path).ok()
}

/// Runs a CLI command in the daemon and relays its output; returns its exit code.
pub fn forward_cli(
    stream: std::os::unix::net::UnixStream,
    argv: Vec<String>,
    dir: &Path,
    stdin: Option<String>,
) -> anyhow::Result<u8> {
    let reply = exchange(stream, argv, dir, stdin, None)?;
    out!(crate::output::Out::process(), "{}", reply.stdout);
    err!(crate::output::Out::process(), "{}", reply.stderr);
    Ok(reply.code)
}

/// Sends one CLI request to the daemon and reads its reply, each within `within` when given (a
/// stopped daemon accepts connections but never answers).
pub fn exchange(
    stream: std::os::unix::net::UnixStream,
    argv: Vec<String>,
    dir: &Path,
    stdin: Option<String>,
    within: Option<Duration>,
) -> anyhow::Result<CliReply> {
    let within = within.map(|d| d.max(Duration::from_millis(1)));
    stream.set_read_timeout(within).context("setting the socket's read timeout")?;
    stream.set_write_timeout(within).context("setting the socket's write timeout")?;
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    let request = Request::Cli { argv, cwd, dir: dir.to_owned(), stdin };
    let mut w = &stream;
    serde_json::to_writer(&mut w, &request)?;
    w.write_all(b"\n")?;
    w.flush()?;
    let mut line = String::new();
    std::io::BufReader::new(&stream).read_line(&mut line).context("reading the daemon's answer")?;
    if line.is_empty() {
        anyhow::bail!(
            "[STRATA-E1102] the daemon closed the connection without answering (it may be shutting down); run the command again"
        );
    }
    serde_json::from_str(&line).context("the daemon's answer is not a CLI reply")
}

/// `strata mcp` when a daemon runs: relays stdin and stdout to its socket.
pub async fn proxy_mcp(stream: std::os::unix::net::UnixStream) -> anyhow::Result<()> {
    stream.set_nonblocking(true)?;
    let stream = tokio::net::UnixStream::from_std(stream)?;
    let (mut from_daemon, mut to_daemon) = stream.into_split();
    to_daemon.write_all(b"{\"op\":\"mcp\"}\n").await?;
    let up = async {
        let mut stdin = tokio::io::stdin();
        let r = tokio::io::copy(&mut stdin, &mut to_daemon).await;
        let _ = to_daemon.shutdown().await;
        r
    };
    let down = async {
        let mut stdout = tokio::io::stdout();
        let r = tokio::io::copy(&mut from_daemon, &mut stdout).await;
        let _ = stdout.flush().await;
        r
    };
    // The session ends when the daemon closes its side (after our EOF, or at its shutdown).
    tokio::pin!(up);
    tokio::select! {
        r = down => { r.context("relaying the daemon's MCP replies")?; }
        r = &mut up => {
            r.context("relaying MCP requests to the daemon")?;
            // stdin closed: wait (briefly) for the replies still on their way.
            let mut stdout = tokio::io::stdout();
            let _ = tokio::time::timeout(Duration::from_secs(30), tokio::io::copy(&mut from_daemon, &mut stdout)).await;
            let _ = stdout.flush().await;
        }
    }
    Ok(())
}

/// Options of `strata serve`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Also serve MCP over streamable HTTP here (loopback only).
    pub http: Option<SocketAddr>,
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn serve(ws: &Workspace, options: &ServeOptions, json: bool) -> anyhow::Result<ExitCode> {
    if let Some(addr) = options.http
        && !addr.ip().is_loopback()
    {
        anyhow::bail!(
            "[STRATA-E1101] --http {addr}: the HTTP transport listens on loopback only; use 127.0.0.1:PORT or [::1]:PORT"
        );
    }
    let journal = ws.open_journal("serve")?;
    // What a command that died after its append left for its reactions is recorded now.
    let caught = crate::app::react::catch_up(&journal);
    if let Err(e) = &caught {
        errln!(ws, "warning: {e}");
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = rt.block_on(run(ws, options, journal.clone(), json));
    // Whatever happened, the journal is closed (flushed) before the process ends.
    let closed = journal.close_blocking();
    for p in [socket_path(ws), info_path(ws)] {
        let _ = std::fs::remove_file(p);
    }
    result?;
    closed?;
    Ok(ExitCode::SUCCESS)
}

async fn run(
    ws: &Workspace,
    options: &ServeOptions,
    journal: strata_journal::Journal,
    json: bool,
) -> anyhow::Result<()> {
    let harness = Harness::new(journal.clone())?;
    let root = std::fs::canonicalize(ws.root()).with_context(|| format!("cannot resolve {}", ws.root().display()))?;
    let listener = bind_private(ws)?;
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;

    let (http_url, token_file, http_task) = match options.http {
        Some(addr) => {
            let token = load_or_create_token(ws)?;
            let (url, task) = http::start(addr, token, harness.clone()).await?;
            (Some(url), Some(token_path(ws)), Some(task))
        }
        None => (None, None, None),
    };
    let info = ServeInfo {
        pid: std::process::id(),
        workspace: root.clone(),
        socket: socket_path(ws),
        http_url: http_url.clone(),
        token_file,
    };
    crate::cli::write_private_file(&info_path(ws), serde_json::to_string_pretty(&info)?.as_bytes())?;
    if json {
        outln!(ws, "{}", serde_json::to_string(&info)?);
    } else {
        outln!(ws, "strata serve: {} on {}", root.display(), info.socket.display());
        if let Some(url) = &http_url {
            outln!(ws, "MCP over HTTP at {url} (bearer token in {})", token_path(ws).display());
        }
    }

    let commands = Arc::new(crate::inflight::InFlight::default());
    // Graph queries (`graph impact`, `graph validate`) read this graph, loaded once and kept at
    // the head, instead of loading the graph for every command.
    let graph = crate::app::kb::SharedGraph::default();
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(s) => s,
                    Err(e) => { errln!(ws, "strata serve: accept failed: {e}"); continue; }
                };
                let ctx = Conn { harness: harness.clone(), journal: journal.clone(), root: root.clone(), commands: commands.clone(), graph: Some(graph.clone()) };
                connections.spawn(async move {
                    if let Err(e) = ctx.handle(stream).await {
                        errln!(crate::output::Out::process(), "strata serve: connection: {e:#}");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }

    // Shutdown: no new connections; running commands and appends finish and answer.
    drop(listener);
    let _ = std::fs::remove_file(socket_path(ws));
    errln!(ws, "strata serve: shutting down");
    let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
    harness.stop_writes();
    let drained = async {
        // Appends can no longer start; a command still running may start more, so look again.
        while harness.in_flight().count() > 0 || commands.count() > 0 {
            harness.in_flight().idle().await;
            commands.idle().await;
        }
    };
    let _ = tokio::time::timeout_at(deadline, drained).await;
    if let Some(task) = http_task {
        task.stop().await;
    }
    // Give answers already computed a moment to reach their clients, then end the sessions.
    let _ =
        tokio::time::timeout(Duration::from_millis(200), async { while connections.join_next().await.is_some() {} })
            .await;
    connections.shutdown().await;
    journal.close().await?;
    errln!(ws, "strata serve: journal closed at sequence {}", journal.head().seq);
    Ok(())
}

/// Serves the CLI (hooks included) and MCP over the workspace's socket with `journal`, owned by
/// the caller, until `stop` fires: how `strata run` lets its workers' hooks and `strata mcp`
/// reach the journal it holds. Running commands finish (up to [`DRAIN_TIMEOUT`]); the journal
/// stays open.
pub async fn listen(
    ws: Workspace,
    journal: strata_journal::Journal,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    let harness = Harness::new(journal.clone())?;
    let root = std::fs::canonicalize(ws.root()).with_context(|| format!("cannot resolve {}", ws.root().display()))?;
    let listener = bind_private(&ws)?;
    let commands = Arc::new(crate::inflight::InFlight::default());
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let ctx = Conn { harness: harness.clone(), journal: journal.clone(), root: root.clone(), commands: commands.clone(), graph: None };
                connections.spawn(async move {
                    if let Err(e) = ctx.handle(stream).await {
                        errln!(crate::output::Out::process(), "strata run: worker connection: {e:#}");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let _ = std::fs::remove_file(socket_path(&ws));
    harness.stop_writes();
    let drained = async {
        while harness.in_flight().count() > 0 || commands.count() > 0 {
            harness.in_flight().idle().await;
            commands.idle().await;
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, drained).await;
    connections.shutdown().await;
    Ok(())
}

/// Binds the socket where no other user can reach it: in a fresh 0700 directory, chmod 0600,
/// then renamed into `.strata/` (so there is no moment when it is open to others).
fn bind_private(ws: &Workspace) -> anyhow::Result<tokio::net::UnixListener> {
    let final_path = socket_path(ws);
    if final_path.as_os_str().len() > 100 {
        anyhow::bail!(
            "[STRATA-E1103] socket path {} is longer than Unix sockets allow (about 100 bytes); run the workspace from a shorter directory",
            final_path.display()
        );
    }
    let staging = ws.strata_dir().join(format!("daemon-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .with_context(|| format!("cannot create {}", staging.display()))?;
    let staged = staging.join("s");
    let listener =
        tokio::net::UnixListener::bind(&staged).with_context(|| format!("cannot bind {}", staged.display()))?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
    // A socket left by a daemon that was killed: the journal lock (taken above) proves no
    // daemon runs now, so it is stale.
    let _ = std::fs::remove_file(&final_path);
    std::fs::rename(&staged, &final_path)
        .with_context(|| format!("cannot move the socket to {}", final_path.display()))?;
    let _ = std::fs::remove_dir(&staging);
    Ok(listener)
}

use std::os::unix::fs::DirBuilderExt as _;

fn load_or_create_token(ws: &Workspace) -> anyhow::Result<String> {
    let path = token_path(ws);
    match std::fs::metadata(&path) {
        Ok(meta) => {
            if meta.permissions().mode() & 0o077 != 0 {
                anyhow::bail!(
                    "[STRATA-E1104] {} is readable by other users (mode {:o}); run `chmod 600 {}` or delete it for a new token",
                    path.display(),
                    meta.permissions().mode() & 0o777,
                    path.display()
                );
            }
            if meta.len() > 1024 {
                anyhow::bail!("[STRATA-E1104] {} is {} bytes; a token is one short line", path.display(), meta.len());
            }
            let token = crate::files::read_text_bounded(&path, 1024, "the HTTP token file")?.trim().to_owned();
            if token.len() < 32 {
                anyhow::bail!(
                    "[STRATA-E1104] the token in {} is shorter than 32 characters; delete the file for a new one",
                    path.display()
                );
            }
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let seed = crate::system::random_seed()?;
            let token: String = seed.iter().map(|b| format!("{b:02x}")).collect();
            crate::cli::write_private_file(&path, format!("{token}\n").as_bytes())?;
            Ok(token)
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

struct Conn {
    harness: Arc<Harness>,
    journal: strata_journal::Journal,
    root: PathBuf,
    commands: Arc<crate::inflight::InFlight>,
    /// The graph kept in memory for graph queries (`strata serve`; not `strata run`'s socket).
    graph: Option<crate::app::kb::SharedGraph>,
}

impl Conn {
    async fn handle(self, stream: tokio::net::UnixStream) -> anyhow::Result<()> {
        if let Ok(cred) = stream.peer_cred() {
            // The socket's mode already keeps other users out; this is the second lock.
            if cred.uid() != current_uid()? {
                anyhow::bail!("refused a connection from uid {}", cred.uid());
            }
        }
        let (read, mut write) = stream.into_split();
        let mut reader = tokio::io::BufReader::new(read);
        let mut line = Vec::new();
        (&mut reader).take(REQUEST_BYTES_MAX).read_until(b'\n', &mut line).await?;
        if line.is_empty() {
            return Ok(());
        }
        let request: Request = match serde_json::from_slice(&line) {
            Ok(r) => r,
            Err(e) => {
                let reply = CliReply {
                    code: 2,
                    stdout: String::new(),
                    stderr: format!(
                        "error: [STRATA-E1105] the daemon's socket takes a JSON request line ({{\"op\":\"cli\"|\"mcp\"|\"ping\"}}, at most {REQUEST_BYTES_MAX} bytes): {e}\n"
                    ),
                };
                write.write_all(format!("{}\n", serde_json::to_string(&reply)?).as_bytes()).await?;
                return Ok(());
            }
        };
        match request {
            Request::Ping => {
                write.write_all(b"{\"ok\":true}\n").await?;
            }
            Request::Mcp => {
                serve_connection(KnowledgeServer::new(self.harness.clone()), reader, write).await?;
            }
            Request::Cli { argv, cwd, dir, stdin } => {
                let reply = self.cli(argv, cwd, dir, stdin).await;
                write.write_all(format!("{}\n", serde_json::to_string(&reply)?).as_bytes()).await?;
                write.flush().await?;
            }
        }
        Ok(())
    }

    async fn cli(&self, argv: Vec<String>, cwd: PathBuf, dir: PathBuf, stdin: Option<String>) -> CliReply {
        let same = std::fs::canonicalize(&dir).map(|d| d == self.root).unwrap_or(false);
        if !same {
            return CliReply {
                code: 1,
                stdout: String::new(),
                stderr: format!(
                    "error: [STRATA-E1106] this daemon serves {}, not {}; pass --dir {} or start `strata serve` in that workspace\n",
                    self.root.display(),
                    dir.display(),
                    self.root.display()
                ),
            };
        }
        let counted = self.commands.enter();
        let journal = self.journal.clone();
        let root = self.root.clone();
        let graph = self.graph.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A plain thread: commands block on the journal and may run their own small runtime.
        let spawned = std::thread::Builder::new().name("strata-cli".into()).spawn(move || {
            let out = crate::output::Out::capture();
            let ws = crate::app::workspace::Workspace::served(
                &root,
                &journal,
                &cwd,
                stdin.map(String::into_bytes),
                out.clone(),
            );
            let ws = match graph {
                Some(g) => ws.with_graph(g),
                None => ws,
            };
            let code = crate::cli::run_served(argv, ws);
            let captured = out.take();
            drop(counted);
            let _ = tx.send(CliReply {
                code,
                stdout: String::from_utf8_lossy(&captured.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&captured.stderr).into_owned(),
            });
        });
        if let Err(e) = spawned {
            return CliReply { code: 1, stdout: String::new(), stderr: format!("error: cannot start a thread: {e}\n") };
        }
        rx.await.unwrap_or(CliReply {
            code: 1,
            stdout: String::new(),
            stderr: "error: the command panicked in the daemon; see the daemon's stderr\n".to_owned(),
        })
    }
}

fn current_uid() -> anyhow::Result<u32> {
    use std::os::unix::fs::MetadataExt as _;
    // The owner of /proc/self is this process's uid; no unsafe call needed.
    Ok(std::fs::metadata("/proc/self").context("cannot read /proc/self")?.uid())
}

/// MCP over streamable HTTP (stateless, JSON responses) behind a bearer token.
mod http {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use axum::extract::Request;
    use axum::http::{StatusCode, header};
    use axum::middleware::{self, Next};
    use axum::response::{IntoResponse as _, Response};
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

    use crate::harness::Harness;
    use crate::mcp::KnowledgeServer;

    /// A running HTTP server.
    pub struct Running {
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Running {
        /// Stops accepting and ends the server.
        pub async fn stop(self) {
            let _ = self.stop.send(());
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), self.task).await;
        }
    }

    fn same(a: &[u8], b: &[u8]) -> bool {
        // Constant time in the token's length: no early exit on the first differing byte.
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }

    async fn bearer(token: Arc<str>, req: Request, next: Next) -> Response {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match given {
            Some(t) if same(t.as_bytes(), token.as_bytes()) => next.run(req).await,
            Some(_) => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer error=\"invalid_token\"")],
                "[STRATA-E1107] wrong bearer token; use the one in .strata/http-token\n",
            )
                .into_response(),
            None => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "[STRATA-E1107] missing bearer token; send `Authorization: Bearer <token from .strata/http-token>`\n",
            )
                .into_response(),
        }
    }

    /// Binds `addr` and serves; returns the MCP endpoint URL.
    pub async fn start(addr: SocketAddr, token: String, harness: Arc<Harness>) -> anyhow::Result<(String, Running)> {
        let config = StreamableHttpServerConfig::default().with_legacy_session_mode(false).with_json_response(true);
        let cancel = config.cancellation_token.clone();
        let service = StreamableHttpService::new(
            move || Ok(KnowledgeServer::new(harness.clone())),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let token: Arc<str> = token.into();
        let app = axum::Router::new()
            .nest_service("/mcp", service)
            .layer(middleware::from_fn(move |req: Request, next: Next| bearer(token.clone(), req, next)));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("[STRATA-E1101] cannot listen on {addr}: {e}; pick another port"))?;
        let bound = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
                cancel.cancel();
            };
            if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
                errln!(crate::output::Out::process(), "strata serve: HTTP server failed: {e}");
            }
        });
        Ok((format!("http://{bound}/mcp"), Running { stop, task }))
    }
}
