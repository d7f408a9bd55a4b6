//! A scripted fake model server on 127.0.0.1, so the real `claude` and `codex` CLIs can be driven
//! end to end with no network: it speaks the Anthropic Messages API (`POST /v1/messages`,
//! streaming SSE or one JSON message) for `claude` with `ANTHROPIC_BASE_URL`, and the OpenAI
//! Responses API (`POST /v1/responses`, streaming SSE) for `codex` through a custom
//! `model_providers.mock` entry with `wire_api = "responses"`.
//!
//! A test scripts a queue of [`Turn`]s. Every model request takes the turn at the head of the
//! queue (a turn answers [`Turn::times`] requests, or every request from then on when
//! [`Turn::sticky`]); a turn is text, tool calls, or an HTTP error, with the usage numbers the
//! server reports. A tool call is followed by the CLI's next request carrying the tool result:
//! that request simply takes the next turn. Every request is recorded (method, path, headers,
//! body, which turn answered it) so tests can assert on what the CLI sent.
//!
//! Plain `std::net` and one thread per connection: the CLIs open a handful of connections, and a
//! test needs no async runtime to script them. Every response carries a `Content-Length` (the
//! whole SSE body is rendered up front), so connections can be kept alive.
//!
//! Quirks handled (claude 2.1.332, codex-cli 0.171.0; see the reference's §8):
//!
//! * claude sends `HEAD /api/hello` at startup unless `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`
//!   is set; it is answered `200` with no body, and it is not a model request.
//! * claude posts to `/v1/messages?beta=true`: routing ignores the query string.
//! * claude retries a `400` up to 6 requests in all (with different `anthropic-beta` subsets), and
//!   a `429`/`5xx` 10 times with exponential backoff (0.6 s doubling: minutes in all; each retry
//!   is a `system/api_retry` line; `CLAUDE_CODE_MAX_RETRIES=0` turns that off). An error meant to
//!   fail the run must answer every retry ([`Turn::sticky`], or [`Turn::times`] ≥ the number of
//!   requests), or the retry takes the next turn and succeeds.
//! * How codex words an HTTP error in `turn.failed` depends on the status and `error.code`
//!   (seen on 0.171.0, with the provider's retries off): a 400 shows just `error.message` only
//!   for codes it knows (`invalid_prompt`, `model_not_found`), and the whole JSON body for any
//!   other code, string or null; a 401/404 shows `unexpected status 401 Unauthorized: <message>,
//!   url: <url>`; a 429 `exceeded retry limit, last status: 429 Too Many Requests`; a 500 a fixed
//!   "We’re currently experiencing high demand, …" without the body. [`Turn::error`]'s `kind` is
//!   sent as both `error.type` and `error.code` (always a string).
//! * The Anthropic `message_start` event carries the input and cache counts and `output_tokens`
//!   of at most 1, `message_delta` the final counts; claude's `assistant` lines repeat the
//!   `message_start` usage, and only `result.usage` has the final output tokens.
//! * codex's request has no `instructions`; the base prompt is `role: "developer"` input items.
//!   Tool calls for the `gpt-5.5` slug: `exec_command` is a `function_call` with `{cmd}`,
//!   `apply_patch` is a freeform `custom_tool_call` with the raw patch as `input`, and an MCP
//!   tool is a `function_call` with `namespace: "mcp__<server>"` and the bare tool name (the flat
//!   `mcp__server__tool` name is refused by codex as an unsupported call).
//! * A turn can stall ([`Turn::stall`]): the request is held unanswered until
//!   [`FakeModel::release_stalled`] or the server is dropped, then the connection is closed with
//!   no response, so a CLI can be interrupted or released mid-turn ([`FakeModel::wait_for_stall`]
//!   tells when a request is being held).
//! * Requests whose body the server does not understand, or unknown endpoints, get a JSON `404`
//!   or `400` at once, never a hang; a model request with no scripted turn left is answered with a
//!   short text (and counted in [`FakeModel::unscripted`]) so a miscounted script shows up as an
//!   assertion, not as a CLI stuck in retries.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use serde_json::{Value, json};

/// Largest request head (request line and headers) accepted, bytes.
pub const REQUEST_HEAD_BYTES_MAX: usize = 64 * 1024;
/// Largest request body accepted, bytes (a long session's whole history is resent every turn).
pub const REQUEST_BODY_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Idle time after which a kept-alive connection is dropped, seconds.
pub const CONNECTION_IDLE_S_MAX: u64 = 300;
/// Connections served at once; more are refused (closed) rather than queued without bound.
pub const CONNECTIONS_MAX: usize = 64;
/// Requests recorded; later ones are still answered, and only counted ([`FakeModel::unrecorded`]).
pub const REQUESTS_RECORDED_MAX: usize = 10_000;

/// Token counts the server reports for one model response.
///
/// Mapped one to one onto each protocol's fields, so a test states exactly what the CLI reads:
///
/// | field | Anthropic `usage` | Responses `usage` |
/// |---|---|---|
/// | `input_tokens` | `input_tokens` (uncached) | `input_tokens` (total, cached included) |
/// | `cache_creation_input_tokens` | `cache_creation_input_tokens` | `input_tokens_details.cache_write_tokens` |
/// | `cache_read_input_tokens` | `cache_read_input_tokens` | `input_tokens_details.cached_tokens` |
/// | `output_tokens` | `output_tokens` | `output_tokens` (reasoning included) |
/// | `reasoning_output_tokens` | — | `output_tokens_details.reasoning_tokens` |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens (see the table for each protocol's meaning).
    pub input_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// The reasoning part of the output (Responses only).
    pub reasoning_output_tokens: u64,
}

impl Usage {
    /// Input and output only.
    pub fn io(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage { input_tokens, output_tokens, ..Usage::default() }
    }
}

/// One block of a scripted answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    /// Assistant text.
    Text(String),
    /// A tool call with JSON input: an Anthropic `tool_use`, or a Responses `function_call` whose
    /// `arguments` is the input serialised (with `namespace` when given: codex's MCP tools).
    Tool {
        /// Tool name.
        name: String,
        /// Tool input.
        input: Value,
        /// Responses `namespace` (`mcp__<server>` for a codex MCP tool); ignored for Anthropic.
        namespace: Option<String>,
    },
    /// A freeform tool call with raw text input: a Responses `custom_tool_call` (codex's
    /// `apply_patch`). For Anthropic it becomes a `tool_use` with input `{"input": text}`.
    Custom {
        /// Tool name.
        name: String,
        /// Raw input.
        input: String,
    },
}

/// What a turn answers.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// A model response made of these blocks.
    Answer(Vec<Block>),
    /// No answer: the request is held until the stall is released, then the connection closes.
    Stall,
    /// An HTTP error with an API error body.
    Error {
        /// HTTP status.
        status: u16,
        /// Error type (`invalid_request_error`, `api_error`, …), also used as the Responses
        /// `error.code`.
        kind: String,
        /// Error message.
        message: String,
    },
}

/// How many requests a turn answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Times {
    /// This many, then the next turn.
    N(u32),
    /// Every request from now on.
    Always,
}

/// One scripted model turn.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    /// The answer.
    pub reply: Reply,
    /// Usage reported with an answer (errors report none).
    pub usage: Usage,
    /// Requests this turn answers.
    pub times: Times,
}

impl Turn {
    /// An answer made of `blocks`.
    pub fn answer(blocks: Vec<Block>) -> Turn {
        Turn { reply: Reply::Answer(blocks), usage: Usage::io(10, 5), times: Times::N(1) }
    }

    /// A plain text answer.
    pub fn text(text: &str) -> Turn {
        Turn::answer(vec![Block::Text(text.to_owned())])
    }

    /// A tool call with JSON input (Anthropic `tool_use`, Responses `function_call`).
    pub fn tool(name: &str, input: Value) -> Turn {
        Turn::answer(vec![Block::Tool { name: name.to_owned(), input, namespace: None }])
    }

    /// Claude's `Write` tool.
    pub fn claude_write(file_path: &str, content: &str) -> Turn {
        Turn::tool("Write", json!({"file_path": file_path, "content": content}))
    }

    /// A Claude MCP tool call, `mcp__<server>__<tool>` (claude needs `--allowedTools
    /// mcp__<server>` in `-p` mode for it to run).
    pub fn claude_mcp(server: &str, tool: &str, input: Value) -> Turn {
        Turn::tool(&format!("mcp__{server}__{tool}"), input)
    }

    /// Codex's `apply_patch`, a freeform `custom_tool_call` whose input is the patch envelope
    /// (`*** Begin Patch` … `*** End Patch`, paths relative to the working directory).
    pub fn codex_apply_patch(patch: &str) -> Turn {
        Turn::answer(vec![Block::Custom { name: "apply_patch".to_owned(), input: patch.to_owned() }])
    }

    /// Codex's shell tool for the `gpt-5.5` slug: `exec_command` with `{cmd}` (unified exec).
    pub fn codex_exec_command(cmd: &str) -> Turn {
        Turn::tool("exec_command", json!({"cmd": cmd}))
    }

    /// A codex MCP tool call: `function_call` with `namespace: "mcp__<server>"`, bare tool name.
    pub fn codex_mcp(server: &str, tool: &str, arguments: Value) -> Turn {
        Turn::answer(vec![Block::Tool {
            name: tool.to_owned(),
            input: arguments,
            namespace: Some(format!("mcp__{server}")),
        }])
    }

    /// An HTTP error: `status` with an API error body of `kind` and `message`.
    pub fn error(status: u16, kind: &str, message: &str) -> Turn {
        Turn {
            reply: Reply::Error { status, kind: kind.to_owned(), message: message.to_owned() },
            usage: Usage::default(),
            times: Times::N(1),
        }
    }

    /// A request held unanswered (see the module docs); the connection is closed without a
    /// response when [`FakeModel::release_stalled`] is called or the server is dropped.
    pub fn stall() -> Turn {
        Turn { reply: Reply::Stall, usage: Usage::default(), times: Times::N(1) }
    }

    /// The same turn with this usage.
    pub fn with_usage(mut self, usage: Usage) -> Turn {
        self.usage = usage;
        self
    }

    /// The same turn answering `n` requests (at least one).
    pub fn times(mut self, n: u32) -> Turn {
        self.times = Times::N(n.max(1));
        self
    }

    /// The same turn answering every request from now on.
    pub fn sticky(mut self) -> Turn {
        self.times = Times::Always;
        self
    }
}

/// Which API a request was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// Anthropic Messages (`/v1/messages`).
    Messages,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
    /// Anything else (probes, unknown endpoints).
    Other,
}

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Request {
    /// Method.
    pub method: String,
    /// Request target, query string included.
    pub target: String,
    /// Headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Vec<u8>,
    /// The API it was routed to.
    pub api: Api,
    /// Index (in push order) of the scripted turn that answered it; `None` for non-model
    /// requests and for model requests with no turn left.
    pub turn: Option<usize>,
}

impl Request {
    /// The path, without the query string.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    /// The first header of that (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON, if it is.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A model request (Messages or Responses).
    pub fn is_model_call(&self) -> bool {
        self.api != Api::Other
    }

    /// The tool results this request sends back, in order: from Anthropic `tool_result` blocks
    /// in user messages and from Responses `function_call_output` / `custom_tool_call_output`
    /// input items.
    pub fn tool_results(&self) -> Vec<ToolResult> {
        self.json().map(|v| tool_results(&v)).unwrap_or_default()
    }
}

/// A tool result a CLI sent back to the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolResult {
    /// The tool call it answers (`tool_use_id` / `call_id`).
    pub call_id: String,
    /// Its text (text parts joined; other shapes as JSON).
    pub text: String,
    /// Anthropic `is_error` (Responses has no such flag: `false`).
    pub is_error: bool,
}

/// The tool results in a Messages or Responses request body.
pub fn tool_results(body: &Value) -> Vec<ToolResult> {
    let mut out = Vec::new();
    for m in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
        for b in m.get("content").and_then(Value::as_array).into_iter().flatten() {
            if b["type"] == "tool_result" {
                out.push(ToolResult {
                    call_id: b["tool_use_id"].as_str().unwrap_or_default().to_owned(),
                    text: content_text(&b["content"]),
                    is_error: b["is_error"].as_bool().unwrap_or(false),
                });
            }
        }
    }
    for item in body.get("input").and_then(Value::as_array).into_iter().flatten() {
        if item["type"] == "function_call_output" || item["type"] == "custom_tool_call_output" {
            out.push(ToolResult {
                call_id: item["call_id"].as_str().unwrap_or_default().to_owned(),
                text: content_text(&item["output"]),
                is_error: false,
            });
        }
    }
    out
}

fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p.get("text").and_then(Value::as_str) {
                Some(t) => t.to_owned(),
                None => p.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(o) => match o.get("content").or_else(|| o.get("output")) {
            Some(inner) => content_text(inner),
            None => v.to_string(),
        },
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[derive(Default)]
struct State {
    /// Scripted turns not used up: (push index, turn, requests answered so far).
    queue: VecDeque<(usize, Turn, u32)>,
    pushed: usize,
    requests: Vec<Request>,
    unscripted: usize,
    unrecorded: usize,
    connections: usize,
    next_id: u64,
    /// Requests being held by a stall turn right now.
    stalled: usize,
    /// Bumped by [`FakeModel::release_stalled`]: a held request goes when it changes.
    stall_epoch: u64,
}

struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
    /// Signalled when a request starts or stops being held, and on release and stop.
    stalls: Condvar,
}

impl Shared {
    /// The state, even if a connection thread panicked while holding the lock (the data is
    /// plain bookkeeping; a poisoned lock must not hide the test's real failure).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running server; dropping it stops accepting connections.
pub struct FakeModel {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FakeModel {
    /// Starts a server on 127.0.0.1 (an ephemeral port) with `turns` queued.
    pub fn start(turns: Vec<Turn>) -> io::Result<FakeModel> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let state = State {
            pushed: turns.len(),
            queue: turns.into_iter().enumerate().map(|(i, t)| (i, t, 0)).collect(),
            ..State::default()
        };
        let shared =
            Arc::new(Shared { state: Mutex::new(state), stop: AtomicBool::new(false), stalls: Condvar::new() });
        let server_shared = Arc::clone(&shared);
        let acceptor = thread::Builder::new().name("fake-model-accept".to_owned()).spawn(move || {
            for stream in listener.incoming() {
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                {
                    let mut st = shared.lock();
                    if st.connections >= CONNECTIONS_MAX {
                        let _ = stream.shutdown(Shutdown::Both);
                        continue;
                    }
                    st.connections += 1;
                }
                let conn = Arc::clone(&shared);
                let spawned = thread::Builder::new().name("fake-model-conn".to_owned()).spawn(move || {
                    // An I/O error ends the connection; the client sees a reset, never a hang.
                    let _ = serve_connection(&conn, stream);
                    conn.lock().connections -= 1;
                });
                if spawned.is_err() {
                    // The thread never ran (its stream was dropped with it): give its slot back.
                    shared.lock().connections -= 1;
                }
            }
        })?;
        Ok(FakeModel { addr, shared: server_shared, acceptor: Some(acceptor) })
    }

    /// `http://127.0.0.1:<port>` (claude's `ANTHROPIC_BASE_URL`; codex's provider wants `/v1`
    /// appended).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Queues one more turn.
    pub fn push(&self, turn: Turn) {
        let mut st = self.shared.lock();
        let i = st.pushed;
        st.pushed += 1;
        st.queue.push_back((i, turn, 0));
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.lock().requests.clone()
    }

    /// The model requests (Messages or Responses) received so far.
    pub fn model_requests(&self) -> Vec<Request> {
        self.shared.lock().requests.iter().filter(|r| r.is_model_call()).cloned().collect()
    }

    /// Model requests that found no scripted turn left.
    pub fn unscripted(&self) -> usize {
        self.shared.lock().unscripted
    }

    /// Requests answered but not recorded (past [`REQUESTS_RECORDED_MAX`]).
    pub fn unrecorded(&self) -> usize {
        self.shared.lock().unrecorded
    }

    /// Scripted turns not used up yet (a sticky turn stays).
    pub fn turns_left(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Drops every queued turn.
    pub fn clear_turns(&self) {
        self.shared.lock().queue.clear();
    }

    /// Requests held by a stall turn right now.
    pub fn stalled(&self) -> usize {
        self.shared.lock().stalled
    }

    /// Waits until at least one request is being held by a stall turn; false if none is
    /// within `timeout` (a bound for a hung test, not a measurement).
    pub fn wait_for_stall(&self, timeout: Duration) -> bool {
        let st = self.shared.lock();
        let (st, _) =
            self.shared.stalls.wait_timeout_while(st, timeout, |st| st.stalled == 0).unwrap_or_else(|p| p.into_inner());
        st.stalled > 0
    }

    /// Lets every held request go: their connections close with no response.
    pub fn release_stalled(&self) {
        self.shared.lock().stall_epoch += 1;
        self.shared.stalls.notify_all();
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _held = self.shared.lock();
            self.shared.stalls.notify_all();
        }
        // Wake the acceptor so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

/// The scripted turn for the next model request, if any: (push index, turn).
fn take_turn(st: &mut State) -> Option<(usize, Turn)> {
    let (index, turn, used) = st.queue.front_mut()?;
    let picked = (*index, turn.clone());
    *used += 1;
    if let Times::N(n) = turn.times
        && *used >= n
    {
        st.queue.pop_front();
    }
    Some(picked)
}

struct Head {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

/// Reads one request head; `None` on a clean end of stream before any byte.
fn read_head(r: &mut BufReader<TcpStream>) -> io::Result<Option<Head>> {
    let mut lines = Vec::new();
    let mut total = 0usize;
    loop {
        let mut line = Vec::new();
        let n = r.by_ref().take((REQUEST_HEAD_BYTES_MAX - total + 1) as u64).read_until(b'\n', &mut line)?;
        if n == 0 {
            return if lines.is_empty() { Ok(None) } else { Err(invalid("connection closed inside a request head")) };
        }
        total += n;
        if total > REQUEST_HEAD_BYTES_MAX {
            return Err(invalid("request head too large"));
        }
        let text = String::from_utf8_lossy(&line).trim_end_matches(['\r', '\n']).to_owned();
        if text.is_empty() {
            if lines.is_empty() {
                continue; // stray CRLF between requests
            }
            break;
        }
        lines.push(text);
    }
    let mut parts = lines[0].split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(invalid("malformed request line"));
    };
    let headers = lines[1..]
        .iter()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Some(Head { method: method.to_owned(), target: target.to_owned(), headers }))
}

fn read_body(r: &mut BufReader<TcpStream>, head: &Head) -> io::Result<Vec<u8>> {
    let chunked = head.header("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        let mut body = Vec::new();
        loop {
            let mut size_line = String::new();
            r.by_ref().take(1024).read_line(&mut size_line)?;
            let size_hex = size_line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_hex, 16).map_err(|_| invalid("bad chunk size"))?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    let mut t = String::new();
                    if r.by_ref().take(8192).read_line(&mut t)? == 0 || t.trim().is_empty() {
                        break;
                    }
                }
                return Ok(body);
            }
            if body.len() + size > REQUEST_BODY_BYTES_MAX {
                return Err(invalid("request body too large"));
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..])?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf)?;
        }
    }
    let len = match head.header("content-length") {
        Some(v) => v.parse::<usize>().map_err(|_| invalid("bad content-length"))?,
        None => 0,
    };
    if len > REQUEST_BODY_BYTES_MAX {
        return Err(invalid("request body too large"));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(body)
}

/// A response to write.
struct Response {
    status: u16,
    content_type: &'static str,
    extra_headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

impl Response {
    fn json(status: u16, v: &Value) -> Response {
        Response {
            status,
            content_type: "application/json",
            extra_headers: Vec::new(),
            body: v.to_string().into_bytes(),
        }
    }
    fn sse(body: String) -> Response {
        Response { status: 200, content_type: "text/event-stream", extra_headers: Vec::new(), body: body.into_bytes() }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

fn serve_connection(shared: &Shared, stream: TcpStream) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(CONNECTION_IDLE_S_MAX)))?;
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let Some(head) = read_head(&mut reader)? else { return Ok(()) };
        if head.header("expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
            writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        let body = match read_body(&mut reader, &head) {
            Ok(b) => b,
            Err(e) => {
                let resp = Response::json(400, &json!({"error": {"message": e.to_string(), "code": "bad_request"}}));
                write_response(&mut writer, &head, &resp, true)?;
                return Ok(());
            }
        };
        let close = head.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let Some(resp) = answer(shared, head.method.clone(), head.target.clone(), head.headers.clone(), body) else {
            hold(shared);
            // No response: the client sees the connection close mid-request.
            let _ = writer.shutdown(Shutdown::Both);
            return Ok(());
        };
        write_response(&mut writer, &head, &resp, close)?;
        if close {
            return Ok(());
        }
    }
}

fn write_response(w: &mut TcpStream, head: &Head, resp: &Response, close: bool) -> io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: {}\r\ncontent-length: {}\r\ncache-control: no-cache\r\nconnection: {}\r\n",
        resp.status,
        reason(resp.status),
        resp.content_type,
        resp.body.len(),
        if close { "close" } else { "keep-alive" },
    );
    for (k, v) in &resp.extra_headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    w.write_all(out.as_bytes())?;
    if head.method != "HEAD" {
        w.write_all(&resp.body)?;
    }
    w.flush()
}

fn api_of(method: &str, path: &str) -> Api {
    match (method, path.trim_end_matches('/')) {
        ("POST", "/v1/messages") => Api::Messages,
        ("POST", "/v1/responses") => Api::Responses,
        _ => Api::Other,
    }
}

/// Holds a stalled request until [`FakeModel::release_stalled`], the server stops, or
/// [`CONNECTION_IDLE_S_MAX`] passes.
fn hold(shared: &Shared) {
    let mut st = shared.lock();
    let epoch = st.stall_epoch;
    st.stalled += 1;
    shared.stalls.notify_all();
    let (mut st, _) = shared
        .stalls
        .wait_timeout_while(st, Duration::from_secs(CONNECTION_IDLE_S_MAX), |st| {
            st.stall_epoch == epoch && !shared.stop.load(Ordering::SeqCst)
        })
        .unwrap_or_else(|p| p.into_inner());
    st.stalled -= 1;
    shared.stalls.notify_all();
}

/// Decides and records the answer to one request; `None` for a stall turn (held, then closed).
fn answer(
    shared: &Shared,
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> Option<Response> {
    let path = target.split('?').next().unwrap_or("").to_owned();
    let api = api_of(&method, &path);
    let mut st = shared.lock();
    let picked = if api == Api::Other { None } else { take_turn(&mut st) };
    if api != Api::Other && picked.is_none() {
        st.unscripted += 1;
    }
    st.next_id += 1;
    let id = st.next_id;
    if st.requests.len() < REQUESTS_RECORDED_MAX {
        st.requests.push(Request {
            method: method.clone(),
            target,
            headers,
            body: body.clone(),
            api,
            turn: picked.as_ref().map(|p| p.0),
        });
    } else {
        st.unrecorded += 1;
    }
    drop(st);

    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let turn = picked.map(|p| p.1).unwrap_or_else(|| Turn::text("(fake model: no scripted turn left)"));
    if turn.reply == Reply::Stall && api != Api::Other {
        return None;
    }
    Some(match api {
        Api::Messages => messages_response(&request, &turn, id),
        Api::Responses => responses_response(&request, &turn, id),
        Api::Other => other_response(&method, &path),
    })
}

/// Non-model endpoints: answered at once so nothing waits on them.
fn other_response(method: &str, path: &str) -> Response {
    match (method, path) {
        // claude's connectivity probe.
        ("HEAD" | "GET", "/api/hello") => Response::json(200, &json!({"ok": true})),
        ("POST", "/v1/messages/count_tokens") => Response::json(200, &json!({"input_tokens": 1})),
        _ => Response::json(
            404,
            &json!({"type": "error", "error": {"type": "not_found_error", "message": format!("fake model: no {method} {path}"), "code": "not_found"}}),
        ),
    }
}

fn sse_event(out: &mut String, event: &str, data: &Value) {
    out.push_str("event: ");
    out.push_str(event);
    out.push_str("\ndata: ");
    out.push_str(&data.to_string());
    out.push_str("\n\n");
}

/// The Anthropic Messages answer: SSE when the request asks to stream, else one message.
fn messages_response(request: &Value, turn: &Turn, id: u64) -> Response {
    let request_id = format!("req_fake_{id:04}");
    let blocks = match &turn.reply {
        Reply::Error { status, kind, message } => {
            let mut r = Response::json(
                *status,
                &json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}),
            );
            r.extra_headers.push(("request-id", request_id));
            return r;
        }
        Reply::Answer(blocks) => blocks.as_slice(),
        Reply::Stall => &[],
    };
    let model = request["model"].as_str().unwrap_or("claude-sonnet-4-5").to_owned();
    let msg_id = format!("msg_fake_{id:04}");
    let content: Vec<Value> = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| match b {
            Block::Text(t) => json!({"type": "text", "text": t}),
            Block::Tool { name, input, .. } => {
                json!({"type": "tool_use", "id": format!("toolu_fake_{id:04}_{i}"), "name": name, "input": input})
            }
            Block::Custom { name, input } => {
                json!({"type": "tool_use", "id": format!("toolu_fake_{id:04}_{i}"), "name": name, "input": {"input": input}})
            }
        })
        .collect();
    let stop_reason = if content.iter().any(|c| c["type"] == "tool_use") { "tool_use" } else { "end_turn" };
    let u = turn.usage;
    let usage = json!({
        "input_tokens": u.input_tokens,
        "cache_creation_input_tokens": u.cache_creation_input_tokens,
        "cache_read_input_tokens": u.cache_read_input_tokens,
        "output_tokens": u.output_tokens,
    });
    if request["stream"] != true {
        let mut r = Response::json(
            200,
            &json!({"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
                "stop_reason": stop_reason, "stop_sequence": null, "usage": usage}),
        );
        r.extra_headers.push(("request-id", request_id));
        return r;
    }
    let mut start_usage = usage.clone();
    start_usage["output_tokens"] = json!(u.output_tokens.min(1));
    let mut out = String::new();
    sse_event(
        &mut out,
        "message_start",
        &json!({"type": "message_start", "message": {"id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage}}),
    );
    for (i, c) in content.iter().enumerate() {
        if c["type"] == "tool_use" {
            let mut empty = c.clone();
            empty["input"] = json!({});
            sse_event(
                &mut out,
                "content_block_start",
                &json!({"type": "content_block_start", "index": i, "content_block": empty}),
            );
            sse_event(
                &mut out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": c["input"].to_string()}}),
            );
        } else {
            sse_event(
                &mut out,
                "content_block_start",
                &json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}),
            );
            sse_event(
                &mut out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": c["text"]}}),
            );
        }
        sse_event(&mut out, "content_block_stop", &json!({"type": "content_block_stop", "index": i}));
    }
    sse_event(
        &mut out,
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": usage}),
    );
    sse_event(&mut out, "message_stop", &json!({"type": "message_stop"}));
    let mut r = Response::sse(out);
    r.extra_headers.push(("request-id", request_id));
    r
}

/// The OpenAI Responses answer: SSE when the request asks to stream, else one response object.
fn responses_response(request: &Value, turn: &Turn, id: u64) -> Response {
    let blocks = match &turn.reply {
        Reply::Error { status, kind, message } => {
            // `code` is always a string (which codes codex unwraps is in the module docs).
            return Response::json(
                *status,
                &json!({"error": {"message": message, "type": kind, "param": null, "code": kind}}),
            );
        }
        Reply::Answer(blocks) => blocks.as_slice(),
        Reply::Stall => &[],
    };
    let model = request["model"].as_str().unwrap_or("gpt-5.5").to_owned();
    let resp_id = format!("resp_fake_{id:04}");
    let items: Vec<Value> = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| match b {
            Block::Text(t) => json!({"type": "message", "id": format!("msg_fake_{id:04}_{i}"), "role": "assistant",
                "status": "completed", "content": [{"type": "output_text", "text": t, "annotations": []}]}),
            Block::Tool { name, input, namespace } => {
                let mut item = json!({"type": "function_call", "id": format!("fc_fake_{id:04}_{i}"), "status": "completed",
                    "call_id": format!("call_fake_{id:04}_{i}"), "name": name, "arguments": input.to_string()});
                if let Some(ns) = namespace {
                    item["namespace"] = json!(ns);
                }
                item
            }
            Block::Custom { name, input } => json!({"type": "custom_tool_call", "id": format!("ctc_fake_{id:04}_{i}"),
                "status": "completed", "call_id": format!("call_fake_{id:04}_{i}"), "name": name, "input": input}),
        })
        .collect();
    let u = turn.usage;
    let usage = json!({
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cache_read_input_tokens, "cache_write_tokens": u.cache_creation_input_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_output_tokens},
        "total_tokens": u.input_tokens + u.output_tokens,
    });
    let completed = json!({"id": resp_id, "object": "response", "created_at": 1_795_000_000, "status": "completed",
        "model": model, "output": items, "usage": usage});
    if request["stream"] != true {
        return Response::json(200, &completed);
    }
    let mut out = String::new();
    let mut created = completed.clone();
    created["status"] = json!("in_progress");
    created["output"] = json!([]);
    created["usage"] = Value::Null;
    sse_event(
        &mut out,
        "response.created",
        &json!({"type": "response.created", "sequence_number": 0, "response": created}),
    );
    let mut seq = 1;
    for (i, item) in items.iter().enumerate() {
        sse_event(
            &mut out,
            "response.output_item.added",
            &json!({"type": "response.output_item.added", "sequence_number": seq, "output_index": i, "item": item}),
        );
        seq += 1;
        if item["type"] == "message" {
            let text = &item["content"][0]["text"];
            sse_event(
                &mut out,
                "response.output_text.delta",
                &json!({"type": "response.output_text.delta", "sequence_number": seq, "item_id": item["id"],
                    "output_index": i, "content_index": 0, "delta": text}),
            );
            seq += 1;
        }
        sse_event(
            &mut out,
            "response.output_item.done",
            &json!({"type": "response.output_item.done", "sequence_number": seq, "output_index": i, "item": item}),
        );
        seq += 1;
    }
    sse_event(
        &mut out,
        "response.completed",
        &json!({"type": "response.completed", "sequence_number": seq, "response": completed}),
    );
    Response::sse(out)
}
