//! One turn of a CLI worker (`claude -p`, `codex exec`) as a child process, shared by the Claude
//! and Codex providers: the child runs in its own process group (so the hooks, MCP servers and
//! shell commands it starts can be ended with it), the prompt goes in on stdin, every stdout line
//! is fed to the provider's lenient stream reader as it arrives, and the turn is over only when
//! the child has exited **and** its whole process group is gone (an MCP server still closing the
//! journal would otherwise hold it after `wait` returned).
//!
//! A turn is driven by one tokio task; everyone else watches its progress (session id seen, turn
//! ended) through a `watch` channel, so `wait`, `interrupt` and `release` can run concurrently.
//! Signals: SIGINT to the child ends the turn and keeps the session (both CLIs); SIGTERM, then
//! SIGKILL, to the group ends everything. Nothing here blocks without a bound: a turn that runs
//! past its limit is killed, leftovers of the group are escalated to SIGKILL, and a stdout pipe
//! held by something outside the group is given up on.
//!
//! Process groups are read from `/proc` (Linux), zombies excluded: an orphaned child reparented
//! to an init that does not reap would otherwise look alive for ever.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata_engine::telemetry::events::Counters;
use strata_engine::workgroup::caps::{Caps, Reached, Spend, reached};
use strata_engine::workgroup::provider::{Brief, Capabilities, ProviderError, Worker};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::sync::watch;

/// Longest stdout line read; longer lines are skipped (counted by the reader as nothing).
pub const LINE_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Stderr kept from a turn (its last bytes), for failure summaries.
pub const STDERR_TAIL_BYTES_MAX: usize = 16 * 1024;
/// How often a finished child's process group is checked for leftovers, ms.
pub const GROUP_POLL_MS: u64 = 25;

/// A provider's stream reader, as the turn task drives it.
pub(crate) trait StreamReader: Default + Send + Sync + 'static {
    /// Reads one stdout line.
    fn feed(&mut self, line: &str);
    /// The session (thread) id, once the stream named it.
    fn session(&self) -> Option<&str>;
    /// What the turn spent so far, as the stream shows it (wall time is the turn task's).
    fn spend(&self) -> Spend;
    /// The stream shows the provider refusing the credentials while the CLI goes on retrying:
    /// the turn is stopped as at a cap.
    fn credentials_refused(&self) -> bool {
        false
    }
}

impl StreamReader for super::claude::StreamRun {
    fn feed(&mut self, line: &str) {
        super::claude::StreamRun::feed(self, line);
    }
    fn session(&self) -> Option<&str> {
        self.session_id.as_deref()
    }
    fn spend(&self) -> Spend {
        super::claude::StreamRun::spend(self)
    }
    fn credentials_refused(&self) -> bool {
        super::claude::StreamRun::credentials_refused(self)
    }
}

impl StreamReader for super::codex::JsonlRun {
    fn feed(&mut self, line: &str) {
        super::codex::JsonlRun::feed(self, line);
    }
    fn session(&self) -> Option<&str> {
        self.thread_id.as_deref()
    }
    fn spend(&self) -> Spend {
        super::codex::JsonlRun::spend(self)
    }
}

/// Bounds of one turn.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// The whole turn, start to exit; past it the group is killed.
    pub turn_ms_max: u64,
    /// After the child exited: how long its group may take to go by itself before SIGTERM, and
    /// again before SIGKILL.
    pub exit_grace_ms: u64,
    /// The attempt's caps: at the first one the live spend reaches, SIGINT to the child, then
    /// SIGTERM and SIGKILL to its group after `exit_grace_ms` each.
    pub caps: Caps,
    /// The session's tokens before this turn, taken off what a stream reporting the session's
    /// running totals shows (a resumed Codex thread), so caps apply to this turn alone.
    pub before: Spend,
}

/// How a turn's process ended.
#[derive(Debug)]
pub(crate) struct Ended<R> {
    /// What the stream said.
    pub run: R,
    /// Exit code (`None` when killed by a signal, or when waiting failed).
    pub exit_code: Option<i32>,
    /// The signal that killed the child, if one did.
    pub signal: Option<i32>,
    /// The turn ran past `turn_ms_max` and was killed.
    pub timed_out: bool,
    /// The last bytes of stderr.
    pub stderr_tail: String,
    /// Start to end of the turn (the group gone), ms.
    pub wall_ms: u64,
    /// The cap the turn was interrupted at, with what it had spent then.
    pub capped: Option<(Reached, Spend)>,
    /// The turn was interrupted because the stream showed the credentials refused again and
    /// again ([`StreamReader::credentials_refused`]).
    pub refused: bool,
}

/// What watchers see of a turn.
#[derive(Debug)]
pub(crate) struct Progress<R> {
    /// The session id, as soon as the stream named it.
    pub session: Option<String>,
    /// The child exited and was reaped: its pid may be reused, so it is never signalled again
    /// (its group only while a member is alive, which keeps the group id from being reused).
    pub exited: bool,
    /// Set once, when the turn is over.
    pub ended: Option<Arc<Ended<R>>>,
}

/// A running (or finished) turn.
#[derive(Debug)]
pub(crate) struct Turn<R> {
    /// The child's pid, which is also its process group id.
    pub pid: u32,
    progress: watch::Receiver<Progress<R>>,
}

/// Why a turn's progress could not be watched.
#[derive(Debug)]
pub(crate) enum Watch<R> {
    /// The turn ended before the stream named a session.
    EndedFirst(Arc<Ended<R>>),
    /// Nothing happened within the time given.
    TimedOut,
    /// The turn task went away without a report (it panicked).
    Lost,
}

impl<R: StreamReader> Turn<R> {
    /// Starts `cmd` in its own process group with `stdin` written to it (then closed), stdout and
    /// stderr piped, and a task driving it to the end.
    pub fn start(mut cmd: tokio::process::Command, stdin: Vec<u8>, limits: Limits) -> std::io::Result<Turn<R>> {
        cmd.process_group(0).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(false);
        // strata ends a turn with SIGINT, so a worker must not inherit SIGINT ignored: a shell
        // ignores SIGINT and SIGQUIT for the background jobs of a script (`strata run … &`), and
        // a worker started from there (or a wrapper script around its CLI) would keep running
        // until the SIGTERM after the grace.
        #[allow(unsafe_code)]
        // SAFETY: only `signal`, which is async-signal-safe, runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGQUIT, libc::SIG_DFL);
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let Some(pid) = child.id() else {
            return Err(std::io::Error::other("the child exited before its pid could be read"));
        };
        let (tx, rx) = watch::channel(Progress { session: None, exited: false, ended: None });
        tokio::spawn(async move {
            let began = Instant::now();
            if let Some(mut w) = child.stdin.take() {
                tokio::spawn(async move {
                    // A CLI that stops reading early closes the pipe: that is its business.
                    let _ = w.write_all(&stdin).await;
                    let _ = w.shutdown().await;
                });
            }
            let tail = Arc::new(Mutex::new(Vec::<u8>::new()));
            if let Some(err) = child.stderr.take() {
                tokio::spawn(keep_tail(err, Arc::clone(&tail)));
            }
            let ended = drive::<R>(&mut child, pid, &tx, limits, began).await;
            let stderr_tail = {
                let t = tail.lock().unwrap_or_else(|p| p.into_inner());
                String::from_utf8_lossy(&t).into_owned()
            };
            let ended = Ended { stderr_tail, wall_ms: began.elapsed().as_millis() as u64, ..ended };
            tx.send_modify(|p| p.ended = Some(Arc::new(ended)));
        });
        Ok(Turn { pid, progress: rx })
    }

    /// The session id once the stream names it, within `within`.
    pub async fn session(&self, within: Duration) -> Result<String, Watch<R>> {
        let mut rx = self.progress.clone();
        let seen = tokio::time::timeout(within, rx.wait_for(|p| p.session.is_some() || p.ended.is_some())).await;
        match seen {
            Err(_) => Err(Watch::TimedOut),
            Ok(Err(_)) => Err(Watch::Lost),
            Ok(Ok(p)) => match (&p.session, &p.ended) {
                (Some(s), _) => Ok(s.clone()),
                (None, Some(e)) => Err(Watch::EndedFirst(Arc::clone(e))),
                (None, None) => Err(Watch::Lost),
            },
        }
    }

    /// The turn's end (waits for it).
    pub async fn ended(&self) -> Result<Arc<Ended<R>>, Watch<R>> {
        let mut rx = self.progress.clone();
        match rx.wait_for(|p| p.ended.is_some()).await {
            Ok(p) => p.ended.clone().ok_or(Watch::Lost),
            Err(_) => Err(Watch::Lost),
        }
    }

    /// Whether the turn is over.
    pub fn has_ended(&self) -> bool {
        self.progress.borrow().ended.is_some()
    }

    /// SIGINT to the child (not its group): the CLI ends its turn and keeps the session. A CLI
    /// that exited already is left alone.
    pub fn interrupt(&self) -> std::io::Result<()> {
        if self.progress.borrow().exited {
            return Ok(());
        }
        signal(self.pid, false, libc::SIGINT)
    }

    /// SIGTERM to the whole group, SIGKILL after `grace`, and waits for the turn to end.
    pub async fn terminate(&self, grace: Duration) -> Result<Arc<Ended<R>>, Watch<R>> {
        if !self.has_ended() {
            // ESRCH: everything is gone already; the turn task reports the end. After the CLI
            // exited, the turn task escalates on its leftovers itself; this only hurries it.
            if !self.progress.borrow().exited || group_alive(self.pid) {
                let _ = signal(self.pid, true, libc::SIGTERM);
            }
            if tokio::time::timeout(grace, self.ended()).await.is_err() && group_alive(self.pid) {
                let _ = signal(self.pid, true, libc::SIGKILL);
            }
        }
        self.ended().await
    }
}

/// Reads the child's stdout into the reader until the turn is over: the child exited, its group
/// is gone (escalated if it lingers), and stdout reached its end (or was given up on).
async fn drive<R: StreamReader>(
    child: &mut tokio::process::Child,
    pid: u32,
    tx: &watch::Sender<Progress<R>>,
    limits: Limits,
    began: Instant,
) -> Ended<R> {
    let mut run = R::default();
    let mut out = child.stdout.take().map(BufReader::new);
    let mut line = Vec::new();
    let mut status: Option<Option<std::process::ExitStatus>> = None;
    let mut exited_at: Option<Instant> = None;
    let mut timed_out = false;
    let mut escalated = 0u8;
    let deadline = tokio::time::Instant::from_std(began) + Duration::from_millis(limits.turn_ms_max);
    let grace = Duration::from_millis(limits.exit_grace_ms);
    let mut tick = tokio::time::interval(Duration::from_millis(GROUP_POLL_MS));
    // A cap reached or the credentials refused: when the turn was told to stop, and the
    // escalation so far (0 SIGINT sent, 1 SIGTERM, 2 SIGKILL).
    let mut capped: Option<(Reached, Spend)> = None;
    let mut refused = false;
    let mut stop_at: Option<Instant> = None;
    let mut cap_step = 0u8;
    let wall_cap = limits.caps.wall_ms.map(|ms| tokio::time::Instant::from_std(began) + Duration::from_millis(ms));
    loop {
        if capped.is_none() && !limits.caps.is_empty() {
            let live = run.spend();
            let less = |a: Option<u64>, b: Option<u64>| a.map(|a| a.saturating_sub(b.unwrap_or(0)));
            let spend = Spend {
                wall_ms: began.elapsed().as_millis() as u64,
                input_tokens: less(live.input_tokens, limits.before.input_tokens),
                output_tokens: less(live.output_tokens, limits.before.output_tokens),
                ..live
            };
            if let Some(r) = reached(&limits.caps, &spend) {
                capped = Some((r, spend));
            }
        }
        refused = refused || (capped.is_none() && run.credentials_refused());
        if stop_at.is_none() && (capped.is_some() || refused) {
            stop_at = Some(Instant::now());
            if status.is_none() {
                let _ = signal(pid, false, libc::SIGINT);
            }
        }
        if let (Some(at), None) = (stop_at, status) {
            // Told to stop and still running: SIGTERM, then SIGKILL, to the group.
            if cap_step == 0 && at.elapsed() > grace {
                cap_step = 1;
                let _ = signal(pid, true, libc::SIGTERM);
            } else if cap_step == 1 && at.elapsed() > grace * 2 {
                cap_step = 2;
                let _ = signal(pid, true, libc::SIGKILL);
            }
        }
        if let Some(exited) = exited_at
            && !group_alive(pid)
            && (out.is_none() || exited.elapsed() > grace * 3)
        {
            // Done; or stdout is held by something outside the group: give up on it.
            break;
        }
        tokio::select! {
            read = read_line(out.as_mut(), &mut line), if out.is_some() => match read {
                Some(Ok(())) => {
                    if let Ok(text) = std::str::from_utf8(&line) {
                        run.feed(text);
                    } else {
                        run.feed(&String::from_utf8_lossy(&line));
                    }
                    if let Some(s) = run.session()
                        && tx.borrow().session.as_deref() != Some(s)
                    {
                        let s = s.to_owned();
                        tx.send_modify(|p| p.session = Some(s));
                    }
                }
                Some(Err(_)) => {} // an over-long line: skipped
                None => out = None,
            },
            s = child.wait(), if status.is_none() => {
                status = Some(s.ok());
                exited_at = Some(Instant::now());
                tx.send_modify(|p| p.exited = true);
            }
            _ = tokio::time::sleep_until(deadline), if !timed_out => {
                timed_out = true;
                if status.is_none() || group_alive(pid) {
                    let _ = signal(pid, true, libc::SIGKILL);
                }
            }
            _ = tokio::time::sleep_until(wall_cap.unwrap_or(deadline)), if wall_cap.is_some() && capped.is_none() => {
                // The wall-time cap: checked at the top of the loop.
            }
            _ = tick.tick(), if exited_at.is_some() || stop_at.is_some() => {
                // Before the exit this only wakes the stop's escalation at the top of the loop.
                let Some(since) = exited_at.map(|e| e.elapsed()) else { continue };
                if group_alive(pid) {
                    if escalated == 0 && since > grace {
                        escalated = 1;
                        let _ = signal(pid, true, libc::SIGTERM);
                    } else if escalated == 1 && since > grace * 2 {
                        escalated = 2;
                        let _ = signal(pid, true, libc::SIGKILL);
                    } else if escalated == 2 && since > grace * 4 {
                        // Unkillable (uninterruptible sleep): report rather than hang.
                        break;
                    }
                }
            }
        }
    }
    use std::os::unix::process::ExitStatusExt as _;
    let status = status.flatten();
    Ended {
        run,
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        timed_out,
        stderr_tail: String::new(),
        wall_ms: 0,
        capped,
        refused,
    }
}

/// One line into `buf` (without its newline): `Some(Ok)` a line, `Some(Err)` an over-long line
/// (skipped), `None` the end of the stream.
async fn read_line<T: tokio::io::AsyncRead + Unpin>(
    r: Option<&mut BufReader<T>>,
    buf: &mut Vec<u8>,
) -> Option<Result<(), ()>> {
    let r = r?;
    buf.clear();
    let mut too_long = false;
    loop {
        let available = match r.fill_buf().await {
            Ok(b) => b,
            Err(_) => return None,
        };
        if available.is_empty() {
            return if buf.is_empty() && !too_long { None } else { Some(if too_long { Err(()) } else { Ok(()) }) };
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !too_long {
            if buf.len() + chunk.len() > LINE_BYTES_MAX {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        let used = done.unwrap_or(available.len());
        r.consume(used);
        if done.is_some() {
            return Some(if too_long { Err(()) } else { Ok(()) });
        }
    }
}

/// Keeps the last [`STDERR_TAIL_BYTES_MAX`] bytes of `err` in `tail`.
async fn keep_tail<T: tokio::io::AsyncRead + Unpin>(err: T, tail: Arc<Mutex<Vec<u8>>>) {
    keep_last(err, &tail, STDERR_TAIL_BYTES_MAX).await;
}

/// Reads `from` to its end into `into`, keeping its last `max` bytes (a worker's stderr, a
/// check's output).
pub(crate) async fn keep_last<T: tokio::io::AsyncRead + Unpin>(mut from: T, into: &Mutex<Vec<u8>>, max: usize) {
    let mut buf = vec![0u8; 8192];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut t = into.lock().unwrap_or_else(|p| p.into_inner());
        t.extend_from_slice(&buf[..n]);
        if t.len() > max {
            let cut = t.len() - max;
            t.drain(..cut);
        }
    }
}

/// Sends `sig` to process `pid`, or to its process group when `group`. Refuses pid 0 and 1 (0
/// would be this process's own group; 1 is init).
pub(crate) fn signal(pid: u32, group: bool, sig: i32) -> std::io::Result<()> {
    let pid = i32::try_from(pid).ok().filter(|p| *p > 1).ok_or_else(|| std::io::Error::other("no such worker pid"))?;
    kill(if group { -pid } else { pid }, sig)
}

#[allow(unsafe_code)]
fn kill(pid: i32, sig: i32) -> std::io::Result<()> {
    // SAFETY: kill(2) takes two integers and reads or writes no memory of this process; `pid`
    // was checked by the caller never to name process 0 or group 0 (this process's own).
    let rc = unsafe { libc::kill(pid, sig) };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// Ends a worker a stopped coordinator left running: when process group `pgid` is alive and its
/// leader's command line names `program`, SIGTERM to the group, then SIGKILL after
/// `grace`. Returns whether a worker was released (false when none runs there, or the process
/// is another program's: a pid reused since is never signalled).
pub fn release_orphan(pgid: u32, program: &str, grace: Duration) -> bool {
    if !group_alive(pgid) {
        return false;
    }
    let cmdline = std::fs::read(format!("/proc/{pgid}/cmdline")).unwrap_or_default();
    if !String::from_utf8_lossy(&cmdline).contains(program) {
        return false;
    }
    let _ = signal(pgid, true, libc::SIGTERM);
    let deadline = std::time::Instant::now() + grace;
    while group_alive(pgid) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if group_alive(pgid) {
        let _ = signal(pgid, true, libc::SIGKILL);
    }
    true
}

/// Whether any live (non-zombie) process is in process group `pgid`, from `/proc`.
pub fn group_alive(pgid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { return false };
        stat_of(&Path::new("/proc").join(pid).join("stat"))
            .is_some_and(|(state, pgrp)| pgrp == pgid && state != 'Z' && state != 'X')
    })
}

/// (state, process group) from a `/proc/<pid>/stat` (the command name may hold spaces and
/// parentheses: fields are read after its last `)`).
fn stat_of(path: &Path) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(path).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// `now - before` per counter: unknown when either is unknown or the counter went back.
pub(crate) fn delta(now: &Counters, before: &Counters) -> Counters {
    let d = |a: Option<u64>, b: Option<u64>| a?.checked_sub(b?);
    Counters {
        input_tokens: d(now.input_tokens, before.input_tokens),
        cache_creation_tokens: d(now.cache_creation_tokens, before.cache_creation_tokens),
        cache_read_tokens: d(now.cache_read_tokens, before.cache_read_tokens),
        output_tokens: d(now.output_tokens, before.output_tokens),
        cost_micros: d(now.cost_micros, before.cost_micros),
        wall_ms: d(now.wall_ms, before.wall_ms),
    }
}

/// Whether any counter known in both `now` and `before` went back.
pub(crate) fn went_back(now: &Counters, before: &Counters) -> bool {
    now.named().iter().zip(before.named()).any(|((_, a), (_, b))| matches!((a, b), (Some(a), Some(b)) if *a < b))
}

/// `s` cut to at most `max` bytes at a character boundary, keeping the end (`…` marks a cut).
pub(crate) fn tail_of(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

/// `s` cut to at most `max` bytes at a character boundary, keeping the start.
pub(crate) fn head_of(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// `s` quoted for a POSIX shell (hook commands are run through one).
pub(crate) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r#"'\''"#))
}

/// A private directory (mode 0700) for one worker under `parent`, named by a fresh UUIDv7.
pub(crate) fn private_dir(parent: &Path) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::create_dir_all(parent)?;
    let dir = parent.join(uuid::Uuid::now_v7().to_string());
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// Writes `bytes` to a new file `path` with mode 0600.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Sessions whose last cumulative usage a provider remembers (the oldest-named is dropped past
/// it: its next turn's usage is then unknown, never wrong).
pub const SESSIONS_REMEMBERED_MAX: usize = 65_536;
/// Workers a provider runs at once.
pub const WORKERS_MAX: usize = 4_096;

/// One started worker.
#[derive(Debug)]
pub(crate) struct Entry<R> {
    /// Its turn.
    pub turn: Turn<R>,
    /// Its private directory (settings, MCP config, `CODEX_HOME`), removed on release.
    pub dir: std::path::PathBuf,
    /// The session's cumulative usage before this turn (zero for a new session; the parent's
    /// for a fork), when known.
    pub baseline: Option<Counters>,
    /// The session the turn was started in, when it was meant to keep its id (a new session
    /// with a chosen id, a resume); a stream naming another id voids the baseline (older CLIs
    /// minted a new id on resume).
    pub expected_session: Option<String>,
    /// `interrupt` was called.
    pub interrupted: std::sync::atomic::AtomicBool,
    /// The attempt's caps.
    pub caps: Caps,
}

impl<R> Entry<R> {
    /// The baseline, if it applies to the session the stream named.
    pub fn baseline_for(&self, session: &str) -> Option<Counters> {
        match &self.expected_session {
            Some(expected) if expected != session => None,
            _ => self.baseline,
        }
    }
}

/// The workers of one provider and the last cumulative usage of each session it ran.
#[derive(Debug)]
pub(crate) struct Workers<R> {
    provider: &'static str,
    running: Mutex<std::collections::BTreeMap<u64, Arc<Entry<R>>>>,
    totals: Mutex<std::collections::BTreeMap<String, Counters>>,
}

impl<R: StreamReader> Workers<R> {
    /// An empty set for `provider`.
    pub fn new(provider: &'static str) -> Workers<R> {
        Workers { provider, running: Mutex::default(), totals: Mutex::default() }
    }

    /// Registers a started turn; refused past [`WORKERS_MAX`].
    pub fn insert(&self, entry: Entry<R>) -> Result<Arc<Entry<R>>, ProviderError> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if running.len() >= WORKERS_MAX {
            return Err(ProviderError::Unavailable {
                provider: self.provider,
                detail: format!("{WORKERS_MAX} workers are running already; release some first"),
            });
        }
        let entry = Arc::new(entry);
        running.insert(u64::from(entry.turn.pid), Arc::clone(&entry));
        Ok(entry)
    }

    /// The worker with `handle`.
    pub fn get(&self, handle: u64) -> Result<Arc<Entry<R>>, ProviderError> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.get(&handle).cloned().ok_or(ProviderError::NoWorker { provider: self.provider, handle })
    }

    /// Forgets the worker with `handle`.
    pub fn remove(&self, handle: u64) -> Option<Arc<Entry<R>>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&handle)
    }

    /// The last cumulative usage of `session`, if this provider saw one.
    pub fn last_cumulative(&self, session: &str) -> Option<Counters> {
        self.totals.lock().unwrap_or_else(|p| p.into_inner()).get(session).copied()
    }

    /// Records `session`'s cumulative usage after a turn.
    pub fn remember(&self, session: &str, cumulative: Counters) {
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        if totals.len() >= SESSIONS_REMEMBERED_MAX && !totals.contains_key(session) {
            let first = totals.keys().next().cloned();
            if let Some(k) = first {
                totals.remove(&k);
            }
        }
        totals.insert(session.to_owned(), cumulative);
    }

    /// Starts the worker described by `entry` and waits for its stream to name the session.
    /// On any failure the worker's group is ended and its directory removed.
    pub async fn started(&self, entry: Entry<R>, start_ms_max: u64) -> Result<Worker, ProviderError> {
        let dir = entry.dir.clone();
        let entry = match self.insert(entry) {
            Ok(e) => e,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let handle = u64::from(entry.turn.pid);
        match entry.turn.session(Duration::from_millis(start_ms_max)).await {
            Ok(session_id) => Ok(Worker { session_id, handle }),
            // Stopped by strata (a cap reached, the credentials refused) before its stream named
            // the session: a worker that started and was stopped, judged from its end like any
            // other. Its session is the one it was given to resume, or none (empty) for a new
            // one only its stream would have named (a Codex thread).
            Err(Watch::EndedFirst(e)) if e.capped.is_some() || e.refused => {
                let session_id = entry.expected_session.clone().unwrap_or_default();
                Ok(Worker { session_id, handle })
            }
            Err(w) => {
                let timed_out = matches!(w, Watch::TimedOut);
                let ended = match w {
                    Watch::EndedFirst(e) => Ok(e),
                    other => entry.turn.terminate(Duration::from_millis(GROUP_TERM_GRACE_MS)).await.map_err(|_| other),
                };
                self.remove(handle);
                let _ = std::fs::remove_dir_all(&dir);
                let detail = match (timed_out, ended) {
                    (true, _) => {
                        format!("the CLI named no session within {start_ms_max} ms; it was stopped")
                    }
                    (_, Ok(e)) => format!(
                        "the CLI ended before naming a session (exit {:?}, signal {:?}): {}",
                        e.exit_code,
                        e.signal,
                        tail_of(e.stderr_tail.trim(), 2048)
                    ),
                    (_, Err(_)) => "the worker's task ended without a report".to_owned(),
                };
                Err(ProviderError::Unavailable { provider: self.provider, detail })
            }
        }
    }

    /// Waits for the turn of `worker` to end.
    pub async fn ended(&self, worker: &Worker) -> Result<(Arc<Entry<R>>, Arc<Ended<R>>), ProviderError> {
        let entry = self.get(worker.handle)?;
        let ended = entry.turn.ended().await.map_err(|_| ProviderError::Unavailable {
            provider: self.provider,
            detail: format!("worker {}: its task ended without a report", worker.handle),
        })?;
        Ok((entry, ended))
    }

    /// SIGINT to the worker's CLI.
    pub fn interrupt(&self, worker: &Worker) -> Result<(), ProviderError> {
        let entry = self.get(worker.handle)?;
        entry.interrupted.store(true, std::sync::atomic::Ordering::SeqCst);
        entry.turn.interrupt().map_err(|e| ProviderError::Unavailable {
            provider: self.provider,
            detail: format!("worker {}: SIGINT: {e}", worker.handle),
        })
    }

    /// Ends the worker's group (SIGTERM, then SIGKILL), waits for its turn to end, forgets it
    /// and removes its private directory.
    pub async fn release(&self, worker: &Worker) -> Result<(), ProviderError> {
        let entry = self.get(worker.handle)?;
        let ended = entry.turn.terminate(Duration::from_millis(GROUP_TERM_GRACE_MS)).await;
        self.remove(worker.handle);
        let removed = std::fs::remove_dir_all(&entry.dir);
        if ended.is_err() {
            return Err(ProviderError::Unavailable {
                provider: self.provider,
                detail: format!("worker {}: its task ended without a report", worker.handle),
            });
        }
        match removed {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(ProviderError::Unavailable {
                provider: self.provider,
                detail: format!("worker {}: removing {}: {e}", worker.handle, entry.dir.display()),
            }),
            _ => Ok(()),
        }
    }
}

/// Between SIGTERM and SIGKILL on release, ms.
pub const GROUP_TERM_GRACE_MS: u64 = 5_000;

/// The MCP server name strata's Knowledge API is attached under (tools `mcp__strata__*`), for
/// `strata run`'s workers and for a person's own sessions (`strata init --claude`/`--codex`)
/// alike, as the skill names it.
pub const KNOWLEDGE_SERVER: &str = "strata";
/// The runtime's timeout for the write-guard hook, seconds, set explicitly in every worker's
/// hook settings: a hook that times out fails open in both CLIs, so it is well above strata's
/// own deadline (`strata hook … --deadline-ms`, at most 45 s), and the runtime never decides
/// first.
pub const HOOK_TIMEOUT_S: u64 = 60;

/// What both CLI providers can do headless (their `capabilities` say why): resume and fork are
/// native and SIGINT ends a turn keeping the session; `local` is the coordinator's own context,
/// a fork always carries the whole history (no bounded `recent` window), a turn takes its
/// prompt once (no follow-up into a running worker), and teams are not driven by the caller.
pub const CLI_CAPABILITIES: Capabilities = Capabilities {
    local: false,
    resume: true,
    fork: true,
    recent: false,
    team: false,
    followup: false,
    interrupt: true,
};

/// Where a worker's `strata mcp` serves the Knowledge API from.
///
/// Mind the journal's single owner: both `strata mcp` and the write-guard hook go through the
/// workspace's socket when its owner serves one (`strata serve`, or `strata run` while its
/// workers run, with `brief.journal` the workspace root). Without one, `strata mcp` opens the
/// journal for the whole turn and the hook, finding it held, waits its 5 s and denies (it fails
/// closed): used outside a run, attach the Knowledge API to another journal or keep it `Off`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Knowledge {
    /// The workspace whose journal is `brief.journal` (`<root>/.strata/journal`, or a workspace
    /// root itself); a brief whose journal is not a workspace's is refused.
    FromJournal,
    /// This workspace root.
    Workspace(PathBuf),
    /// No MCP server.
    Off,
}

impl Knowledge {
    /// The workspace root `strata mcp --dir` gets for `brief`, or `None` for no server.
    fn workspace(&self, provider: &'static str, brief: &Brief) -> Result<Option<PathBuf>, ProviderError> {
        match self {
            Knowledge::Off => Ok(None),
            Knowledge::Workspace(root) => Ok(Some(root.clone())),
            Knowledge::FromJournal => {
                let j = &brief.journal;
                if j.ends_with(".strata/journal") {
                    return Ok(j.parent().and_then(Path::parent).map(Path::to_path_buf));
                }
                if j.join(".strata").join("journal").is_dir() {
                    return Ok(Some(j.clone()));
                }
                Err(ProviderError::Unavailable {
                    provider,
                    detail: format!(
                        "the journal {} is not a strata workspace's, so no Knowledge API can be attached; \
                         configure knowledge as Workspace(root) or Off",
                        j.display()
                    ),
                })
            }
        }
    }
}

/// What a worker is wired to, resolved from its brief: the strata executable its hook and MCP
/// server run, its directory (canonical: the CLIs report resolved paths, and the hook places
/// them against this root), the journal (absolute) and the Knowledge API's workspace.
#[derive(Clone, Debug)]
pub(crate) struct Wiring {
    /// The `strata` executable.
    pub strata: PathBuf,
    /// The worker's directory, canonical.
    pub workdir: PathBuf,
    /// The journal the hook records its verdicts in.
    pub journal: PathBuf,
    /// The workspace `strata mcp` serves, if any.
    pub knowledge: Option<PathBuf>,
}

impl Wiring {
    /// Resolves `brief` for `provider`; `strata` is the configured executable (default: this
    /// process's own).
    pub fn resolve(
        provider: &'static str,
        strata: Option<&Path>,
        knowledge: &Knowledge,
        brief: &Brief,
    ) -> Result<Wiring, ProviderError> {
        let unavailable = |detail: String| ProviderError::Unavailable { provider, detail };
        let strata = match strata {
            Some(p) => p.to_path_buf(),
            None => std::env::current_exe().map_err(|e| {
                unavailable(format!(
                    "cannot find strata's own executable for the hook and MCP server ({e}); name it in STRATA_PROGRAM"
                ))
            })?,
        };
        let workdir = std::fs::canonicalize(&brief.workdir)
            .map_err(|e| unavailable(format!("the worker's directory {}: {e}", brief.workdir.display())))?;
        let journal = std::path::absolute(&brief.journal)
            .map_err(|e| unavailable(format!("the journal path {}: {e}", brief.journal.display())))?;
        let knowledge = if brief.knowledge { knowledge.workspace(provider, brief)? } else { None };
        Ok(Wiring { strata, workdir, journal, knowledge })
    }

    /// The shell command of the PreToolUse write guard for `runtime` (`claude`, `codex`), run as
    /// `lineage`, answering within `deadline_ms` (both CLIs run hook commands through a shell:
    /// every argument is quoted). Any exit but 0 becomes 2, so a strata executable that is
    /// missing (127) or dies by a signal blocks the call instead of letting it through.
    pub fn hook_command(&self, runtime: &str, lineage: &str, deadline_ms: u64) -> String {
        [
            shell_quote(&self.strata.display().to_string()),
            format!("hook {runtime} pre-tool-use --journal"),
            shell_quote(&self.journal.display().to_string()),
            "--lineage".to_owned(),
            shell_quote(lineage),
            "--root".to_owned(),
            shell_quote(&self.workdir.display().to_string()),
            format!("--deadline-ms {deadline_ms} || exit 2"),
        ]
        .join(" ")
    }

    /// The arguments of `strata mcp` for the Knowledge API, if one is attached.
    pub fn mcp_args(&self) -> Option<Vec<String>> {
        let ws = self.knowledge.as_ref()?;
        Some(vec!["--dir".to_owned(), ws.display().to_string(), "mcp".to_owned()])
    }
}
