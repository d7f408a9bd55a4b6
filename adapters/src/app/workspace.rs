//! A strata workspace as one command sees it: a directory holding `.strata/` (config and
//! journal) and, when the daemon runs the command for a client, the daemon's journal handle, the
//! client's working directory and the stdin it sent; and where the command's output goes (the
//! process's streams, or buffers sent back to that client). Commands get it as an argument;
//! nothing about the caller lives in thread-local or global state.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use strata_engine::ports::{Clock, Ids};
use strata_journal::{EventData, ExpectedVersion, Journal, JournalError, OpenOptions};

use crate::config::{CONFIG_BYTES_MAX, Config};
use crate::system::{SystemClock, V7Ids};

/// One workspace, and who runs the command on it.
#[derive(Clone)]
pub struct Workspace {
    root: PathBuf,
    served: Option<Served>,
    out: crate::output::Out,
}

/// What the daemon hands a command it runs for a client.
#[derive(Clone)]
struct Served {
    journal: Journal,
    cwd: PathBuf,
    stdin: Option<Vec<u8>>,
    /// The daemon's graph, kept between queries.
    graph: Option<super::kb::SharedGraph>,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspace")
            .field("root", &self.root)
            .field("served_for", &self.served.as_ref().map(|s| &s.cwd))
            .finish()
    }
}

impl crate::output::Printer for Workspace {
    fn sink(&self) -> &crate::output::Out {
        &self.out
    }
}

impl Workspace {
    /// The workspace rooted at `root` (which holds, or will hold, `.strata/`), for a command
    /// this process runs for itself.
    pub fn at(root: &Path) -> Workspace {
        Workspace { root: root.to_owned(), served: None, out: crate::output::Out::process() }
    }

    /// The workspace at `root` for a command the daemon runs for a client: [`Self::open_journal`]
    /// returns the daemon's `journal`, [`Self::finish`] leaves it open, [`Self::stdin_bytes`]
    /// reads what the client sent, the client's working directory is `cwd`, and what the
    /// command prints goes to `out` (buffers the daemon sends back).
    pub fn served(
        root: &Path,
        journal: &Journal,
        cwd: &Path,
        stdin: Option<Vec<u8>>,
        out: crate::output::Out,
    ) -> Workspace {
        let served = Served { journal: journal.clone(), cwd: cwd.to_owned(), stdin, graph: None };
        Workspace { root: root.to_owned(), served: Some(served), out }
    }

    /// Where this command's output goes.
    pub fn out(&self) -> &crate::output::Out {
        &self.out
    }

    /// This served workspace with the daemon's in-memory graph, which graph queries then read
    /// instead of loading the graph themselves.
    pub fn with_graph(mut self, graph: super::kb::SharedGraph) -> Workspace {
        if let Some(s) = self.served.as_mut() {
            s.graph = Some(graph);
        }
        self
    }

    /// Runs `query` on the spec graph at `journal`'s head: the daemon's in-memory graph when it
    /// serves this command, else one loaded now.
    pub fn with_graph_at_head<T>(
        &self,
        journal: &Journal,
        query: impl FnOnce(&strata_engine::kb::graph::Graph) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        match &self.served {
            Some(Served { graph: Some(shared), .. }) => shared.with(journal, query)?,
            Some(_) => query(&super::kb::load_graph(journal)?),
            None => {
                let g = super::kb::load_graph(journal)?;
                let answer = query(&g);
                // This process runs one command and ends: freeing a large graph (116k nodes,
                // an eighth of such a query's time) would only delay the exit.
                std::mem::forget(g);
                answer
            }
        }
    }

    /// Closes a journal a query opened, as [`Self::finish`] does, and leaves its store for the
    /// process's exit to release: this process runs one command and ends, and sled's drop ends
    /// with an fsync of its data file (16 ms of a `graph impact` at 116k artifacts) that makes
    /// nothing durable a query wrote. What the close writes (the journal's index snapshot) is
    /// synced by the close itself.
    pub fn finish_query(&self, journal: Journal) -> anyhow::Result<()> {
        if self.served.is_some() {
            return Ok(());
        }
        journal.close_blocking()?;
        std::mem::forget(journal);
        Ok(())
    }

    /// The daemon's journal, when the daemon runs this command for a client.
    pub fn served_journal(&self) -> Option<&Journal> {
        self.served.as_ref().map(|s| &s.journal)
    }

    /// Where relative paths of this command resolve: the client's working directory when the
    /// daemon runs it, else this process's (`None`).
    pub fn cwd(&self) -> Option<&Path> {
        self.served.as_ref().map(|s| s.cwd.as_path())
    }

    /// Resolves a path argument against [`Self::cwd`].
    pub fn resolve(&self, path: &Path) -> PathBuf {
        match self.cwd() {
            Some(base) if path.is_relative() => base.join(path),
            _ => path.to_owned(),
        }
    }

    /// Standard input, at most `max + 1` bytes (so a caller can tell it was over `max`): what
    /// the client sent when the daemon runs this command, else the process's.
    pub fn stdin_bytes(&self, max: u64) -> std::io::Result<Vec<u8>> {
        match &self.served {
            Some(s) => {
                let given = s.stdin.as_deref().unwrap_or_default();
                let keep = usize::try_from(max).map_or(given.len(), |m| given.len().min(m.saturating_add(1)));
                Ok(given[..keep].to_vec())
            }
            None => crate::output::stdin_bytes(max),
        }
    }

    /// Closes a journal this command opened (flushing it); the daemon's own stays open.
    pub fn finish(&self, journal: &Journal) -> anyhow::Result<()> {
        if self.served.is_some() {
            return Ok(());
        }
        Ok(journal.close_blocking()?)
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `.strata/`.
    pub fn strata_dir(&self) -> PathBuf {
        self.root.join(".strata")
    }

    /// `.strata/journal/`.
    pub fn journal_dir(&self) -> PathBuf {
        self.strata_dir().join("journal")
    }

    /// `.strata/config.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.strata_dir().join("config.toml")
    }

    /// Reads the config (defaults if the file does not exist).
    pub fn config(&self) -> anyhow::Result<Config> {
        let p = self.config_path();
        // Only a config that is not there at all (not even as a dangling link) means defaults.
        if std::fs::symlink_metadata(&p).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            return Ok(Config::default());
        }
        let text = crate::files::read_text_bounded(&p, CONFIG_BYTES_MAX, "the config file")?;
        Config::parse(&text, &p.display().to_string())
    }

    fn options(&self, command: &str) -> anyhow::Result<OpenOptions> {
        options_from(&self.config()?, command, None)
    }

    /// Opens the journal for `command` (named in the lock file). When the daemon runs the
    /// command for a client, this is the daemon's own handle.
    pub fn open_journal(&self, command: &str) -> anyhow::Result<Journal> {
        if let Some(j) = self.served_journal() {
            return Ok(j.clone());
        }
        match open_at(&self.root, &Open { command, create: false, wait: None }) {
            Ok(j) => Ok(j),
            Err(OpenError::Journal(JournalError::NotAJournal { path }))
                if matches!(self.config()?.backend, crate::config::Backend::Postgres { .. }) =>
            {
                anyhow::bail!(
                    "[STRATA-E0204] no strata journal in {}: run `strata init --backend postgres --url …` once for that database",
                    path.display()
                )
            }
            Err(OpenError::Journal(JournalError::NotAJournal { .. })) => {
                Err(crate::diagnostic::no_workspace(&self.root).into())
            }
            Err(OpenError::Config(e)) => Err(e),
            Err(e) => Err(e.into()),
        }
    }

    /// Options for opening this workspace's journal (for verification without opening it).
    pub fn open_options(&self, command: &str) -> anyhow::Result<OpenOptions> {
        self.options(command)
    }

    /// For a PostgreSQL backend: creates `.strata/` and its config (unless present), creates or
    /// upgrades the schema, and creates the journal named `origin` there, or attaches to the one
    /// another workspace created (then `false`: nothing new was created).
    pub fn create_or_attach_postgres(&self, origin: &str, config: &Config) -> anyhow::Result<(Journal, bool)> {
        let Some(pg) = config.backend.pg_options("init")? else {
            return Ok((self.create(origin, config)?, true));
        };
        std::fs::create_dir_all(self.strata_dir())
            .with_context(|| format!("cannot create {}", self.strata_dir().display()))?;
        if !self.config_path().exists() {
            std::fs::write(self.config_path(), config.render())
                .with_context(|| format!("cannot write {}", self.config_path().display()))?;
        }
        match Journal::create_postgres(&pg, origin) {
            Ok(j) => Ok((j, true)),
            Err(JournalError::AlreadyExists { .. }) => {
                Ok((Journal::open_postgres_at(&pg, &self.journal_dir())?, false))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Creates `.strata/`, its config (unless present) and a new journal named `origin`.
    pub fn create(&self, origin: &str, config: &Config) -> anyhow::Result<Journal> {
        if self.journal_dir().join("sled").exists() {
            anyhow::bail!(
                "[STRATA-E0205] {} already holds a strata journal; use it, or pick another --dir",
                self.root.display()
            );
        }
        std::fs::create_dir_all(self.strata_dir())
            .with_context(|| format!("cannot create {}", self.strata_dir().display()))?;
        if !self.config_path().exists() {
            std::fs::write(self.config_path(), config.render())
                .with_context(|| format!("cannot write {}", self.config_path().display()))?;
        }
        Ok(Journal::create(&self.journal_dir(), origin, &options_from(config, "init", None)?)?)
    }
}

/// How a command opens the journal a path names.
#[derive(Clone, Copy, Debug)]
pub struct Open<'a> {
    /// The command, named in the lock file.
    pub command: &'a str,
    /// Create a journal in a missing or empty directory (`strata ce --journal`).
    pub create: bool,
    /// How long to wait for another process to let go of a sled journal (default: the
    /// config's `lock_wait_ms`, or `STRATA_LOCK_WAIT_MS`).
    pub wait: Option<Duration>,
}

/// Why a journal could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The workspace's config cannot be read or is invalid.
    #[error("{0:#}")]
    Config(anyhow::Error),
    /// The journal could not be opened or created.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The directory for a new journal could not be created.
    #[error("cannot create {path}: {source}")]
    Create {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Pause before looking again at a journal another process is still creating (its lock file may
/// not exist yet, so there is nothing to wait on).
const CREATE_RETRY: Duration = Duration::from_millis(10);

/// The one way a journal is opened. `dir` is a workspace root (its config says the backend,
/// durability and cache; a PostgreSQL journal keeps this machine's journal directory for
/// deferred appends) or a bare journal directory (the defaults). A sled journal another process
/// holds is waited for; with `create`, a missing or empty directory gets a new journal (and one
/// another process is creating at that moment is waited for and opened).
pub fn open_at(dir: &Path, how: &Open<'_>) -> Result<Journal, OpenError> {
    let ws = Workspace::at(dir);
    let in_workspace = is_workspace(dir);
    let config = if in_workspace { ws.config().map_err(OpenError::Config)? } else { Config::default() };
    if let Some(pg) = config.backend.pg_options(how.command).map_err(OpenError::Config)? {
        return Ok(Journal::open_postgres_at(&pg, &ws.journal_dir())?);
    }
    let dir = if in_workspace { ws.journal_dir() } else { dir.to_owned() };
    let options = options_from(&config, how.command, how.wait).map_err(OpenError::Config)?;
    let deadline = Instant::now() + options.lock_wait;
    loop {
        match Journal::open(&dir, &options) {
            Ok(j) => return Ok(j),
            Err(JournalError::NotAJournal { .. }) if how.create && is_missing_or_empty(&dir) => {
                std::fs::create_dir_all(&dir).map_err(|source| OpenError::Create { path: dir.clone(), source })?;
                match Journal::create(&dir, how.command, &options) {
                    Ok(j) => return Ok(j),
                    // Another process created it first: open theirs.
                    Err(_) if Instant::now() < deadline => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            // Another process is creating it right now: wait for it to let go, then open it.
            Err(e @ JournalError::NotAJournal { .. }) if how.create && Instant::now() < deadline => {
                if !strata_journal::wait_for_unlock(
                    &dir.join("LOCK"),
                    deadline.saturating_duration_since(Instant::now()),
                ) {
                    return Err(e.into());
                }
                std::thread::sleep(CREATE_RETRY);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether `dir` is a workspace root (it holds a config or a sled journal in `.strata/`).
fn is_workspace(dir: &Path) -> bool {
    let ws = Workspace::at(dir);
    ws.config_path().is_file() || ws.journal_dir().join("sled").exists()
}

/// Whether `dir` names no journal yet: not a workspace, and a missing or empty directory (where
/// [`open_at`] with `create` would make one).
pub fn names_no_journal(dir: &Path) -> bool {
    !is_workspace(dir) && is_missing_or_empty(dir)
}

/// Whether `dir` is missing or empty (a place a new journal may be created).
fn is_missing_or_empty(dir: &Path) -> bool {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

fn options_from(config: &Config, command: &str, wait: Option<Duration>) -> anyhow::Result<OpenOptions> {
    let lock_wait = match wait {
        Some(w) => w,
        None => config.lock_wait(std::env::var("STRATA_LOCK_WAIT_MS").ok().as_deref())?,
    };
    Ok(OpenOptions {
        durability: config.durability,
        cache_bytes: config.cache_mib * 1024 * 1024,
        holder: holder(command),
        lock_wait,
    })
}

/// What a lock file says about the process holding a journal.
pub fn holder(command: &str) -> String {
    format!("`strata {command}` (pid {})", std::process::id())
}

/// Builds an event with a fresh id and the current time.
pub fn new_event(event_type: &str, payload: &serde_json::Value) -> anyhow::Result<EventData> {
    Ok(EventData {
        id: V7Ids.next_id(),
        event_type: event_type.to_owned(),
        schema_version: 1,
        recorded_at_ns: SystemClock.now_ns(),
        causation: None,
        correlation: None,
        payload: serde_json::to_vec(payload)?,
    })
}

/// Appends the `workspace.initialized` event of a new journal.
pub fn record_initialized(journal: &Journal, config: &Config) -> anyhow::Result<()> {
    let payload = serde_json::json!({
        "origin": journal.origin(),
        "strata_version": env!("CARGO_PKG_VERSION"),
        "durability": config.durability.as_str(),
    });
    let ev = new_event(strata_engine::catalogue::WORKSPACE_INITIALIZED, &payload)?;
    journal.append_blocking("workspace", ExpectedVersion::EMPTY, vec![ev])?.map_err(anyhow::Error::from)?;
    Ok(())
}
