//! A strata workspace on disk: a directory holding `.strata/` (config and journal).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use strata_engine::ports::{Clock, Ids};
use strata_journal::{EventData, ExpectedVersion, Journal, JournalError, OpenOptions};

use crate::config::{CONFIG_BYTES_MAX, Config};
use crate::system::{SystemClock, V7Ids};

/// Paths of one workspace.
#[derive(Clone, Debug)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// The workspace rooted at `root` (which holds, or will hold, `.strata/`).
    pub fn at(root: &Path) -> Workspace {
        Workspace { root: root.to_owned() }
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
        let c = self.config()?;
        Ok(OpenOptions {
            durability: c.durability,
            cache_bytes: c.cache_mib * 1024 * 1024,
            holder: holder(command),
            lock_wait: c.lock_wait(std::env::var("STRATA_LOCK_WAIT_MS").ok().as_deref())?,
        })
    }

    /// Opens the journal for `command` (named in the lock file). On a thread where the daemon
    /// runs a client's command, this is the daemon's own handle.
    pub fn open_journal(&self, command: &str) -> anyhow::Result<Journal> {
        if let Some(j) = SERVED.with(|s| s.borrow().clone()) {
            return Ok(j);
        }
        if let Some(pg) = self.config()?.backend.pg_options(command)? {
            // This machine's journal directory keeps what hooks deferred while the database was
            // unreachable; opening folds it in.
            return match Journal::open_postgres_at(&pg, &self.journal_dir()) {
                Ok(j) => Ok(j),
                Err(JournalError::NotAJournal { path }) => anyhow::bail!(
                    "[STRATA-E0204] no strata journal in {}: run `strata init --backend postgres --url …` once for that database",
                    path.display()
                ),
                Err(e) => Err(e.into()),
            };
        }
        let dir = self.journal_dir();
        match Journal::open(&dir, &self.options(command)?) {
            Ok(j) => Ok(j),
            Err(JournalError::NotAJournal { .. }) => {
                anyhow::bail!(
                    "[STRATA-E0204] no strata workspace at {}: run `strata init` there, or pass --dir",
                    self.root.display()
                )
            }
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
        let options = OpenOptions {
            durability: config.durability,
            cache_bytes: config.cache_mib * 1024 * 1024,
            holder: holder("init"),
            lock_wait: config.lock_wait(std::env::var("STRATA_LOCK_WAIT_MS").ok().as_deref())?,
        };
        Ok(Journal::create(&self.journal_dir(), origin, &options)?)
    }
}

thread_local! {
    static SERVED: std::cell::RefCell<Option<Journal>> = const { std::cell::RefCell::new(None) };
    static BASE: std::cell::RefCell<Option<PathBuf>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` as a command the daemon serves for a client: [`Workspace::open_journal`] returns
/// `journal` (the daemon's), [`finish`] leaves it open, and relative paths resolve against the
/// client's working directory `cwd`.
pub fn serving<R>(journal: &Journal, cwd: &Path, f: impl FnOnce() -> R) -> R {
    SERVED.with(|s| *s.borrow_mut() = Some(journal.clone()));
    BASE.with(|b| *b.borrow_mut() = Some(cwd.to_owned()));
    let r = f();
    SERVED.with(|s| *s.borrow_mut() = None);
    BASE.with(|b| *b.borrow_mut() = None);
    r
}

/// The daemon's journal, when this thread runs a command for a daemon client.
pub fn served_journal() -> Option<Journal> {
    SERVED.with(|s| s.borrow().clone())
}

/// Closes a journal a command opened (flushing it), unless the daemon owns it.
pub fn finish(journal: &Journal) -> anyhow::Result<()> {
    if SERVED.with(|s| s.borrow().is_some()) {
        return Ok(());
    }
    Ok(journal.close_blocking()?)
}

/// Resolves a path argument: relative paths against the client's working directory when the
/// daemon runs the command, else against this process's.
pub fn resolve(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_owned();
    }
    match BASE.with(|b| b.borrow().clone()) {
        Some(base) => base.join(path),
        None => path.to_owned(),
    }
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
