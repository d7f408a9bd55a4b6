//! The journal handle: open/create, appends through one group-committing writer thread, reads,
//! catch-up subscriptions and checkpoints.
//!
//! Write path, in order, for every batch the writer drains from its queue:
//!
//! 1. for each request: idempotency by event id (a full retry returns the original positions),
//!    then the expected version of every stream (a mismatch is a [`Conflict`]);
//! 2. assign gapless sequences and stream versions, encode records, chain hashes;
//! 3. pack the records into frames and write them plus the head in **one** sled transaction;
//! 4. make the batch durable once (`flush`, plus `fdatasync` in `power` mode);
//! 5. publish the new head to the in-memory index, then acknowledge every request of the batch.
//!
//! Readers see only what step 5 published, so nothing a crash could take back is ever served.
//! A storage failure in step 3 or 4 poisons the writer: every later append fails until the
//! journal is reopened and recovers from what is durable.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;

use tokio::sync::{mpsc, oneshot, watch};
use uuid::Uuid;

use crate::error::{Conflict, InputError, JournalError};
use crate::frame::{self, FrameBuilder};
use crate::hash::{Hash, event_hash};
use crate::index::Index;
use crate::limits::{
    BATCH_BYTES_MAX, BATCH_EVENTS_MAX, EVENTS_PER_APPEND_MAX, FRAME_BYTES_MAX, FRAME_EVENTS_MAX,
    INDEX_SNAPSHOT_EVENTS_MAX, QUEUE_REQUESTS_MAX, READ_EVENTS_MAX, STREAMS_PER_APPEND_MAX,
};
use crate::note::{Checkpoint, SignerKey, check_origin};
use crate::record::{self, Envelope, EventData, Record, validate_stream};
use crate::snapshot;
use crate::store::{Durability, JOURNAL_FORMAT, META_FORMAT, META_HEAD, META_ORIGIN, MemStore, SledStore, Store};

/// Stream that holds the journal's own checkpoint events.
pub const CHECKPOINT_STREAM: &str = "$journal";
/// Event type of a checkpoint event.
pub const CHECKPOINT_EVENT_TYPE: &str = "journal.checkpoint";
const INDEX_SNAPSHOT_VERSION: u32 = 1;

/// The signed note carried by a checkpoint event, if `rec` is one and carries a note.
pub fn checkpoint_note(rec: &Record<'_>) -> Option<String> {
    if rec.event_type != CHECKPOINT_EVENT_TYPE {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(rec.payload).ok()?;
    v.get("note")?.as_str().map(str::to_owned)
}

/// What the caller expects a stream's version (event count) to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectedVersion {
    /// No check.
    Any,
    /// The stream has exactly this many events (0: it does not exist yet).
    Exact(u64),
}

impl ExpectedVersion {
    /// The stream must not exist yet.
    pub const EMPTY: ExpectedVersion = ExpectedVersion::Exact(0);

    fn matches(self, actual: u64) -> bool {
        match self {
            ExpectedVersion::Any => true,
            ExpectedVersion::Exact(v) => v == actual,
        }
    }
}

impl std::fmt::Display for ExpectedVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExpectedVersion::Any => f.write_str("any version"),
            ExpectedVersion::Exact(v) => write!(f, "version {v}"),
        }
    }
}

/// Events for one stream within an (atomic, possibly multi-stream) append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamAppend {
    /// Stream id.
    pub stream: String,
    /// Expected version before this append.
    pub expected: ExpectedVersion,
    /// Events, in order.
    pub events: Vec<EventData>,
}

/// Where one appended event landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// Global sequence.
    pub seq: u64,
    /// Stream version.
    pub version: u64,
}

/// A successful append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appended {
    /// Positions of the events in request order (streams in order, events in order).
    pub positions: Vec<Position>,
    /// True when every event id was already stored: nothing new was appended and `positions`
    /// are the original ones.
    pub deduplicated: bool,
}

/// Result of an append: a fail-stop error, or an expected outcome (success or conflict).
pub type AppendResult = Result<Result<Appended, Conflict>, JournalError>;

/// The journal's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// Sequence of the last durable event (0 when empty).
    pub seq: u64,
    /// Its hash (zero when empty).
    pub hash: Hash,
    /// Merkle root over all durable events.
    pub root: Hash,
}

/// How to open a sled journal.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Durability level of acknowledgements.
    pub durability: Durability,
    /// sled page cache size in bytes (sled's default of 1 GiB is far more than a journal needs).
    pub cache_bytes: u64,
    /// Who is opening it, written to the lock file so a second opener is told who holds it.
    pub holder: String,
    /// How long to wait for each other holder of the journal to let go before the open fails
    /// with [`JournalError::Locked`] (trying again each time one lets go).
    pub lock_wait: std::time::Duration,
}

/// Most times an open tries a busy lock again after its holder let go.
const LOCK_TRIES_MAX: usize = 1_000;

/// The default of [`OpenOptions::lock_wait`].
pub const LOCK_WAIT_DEFAULT: std::time::Duration = std::time::Duration::from_secs(30);

/// How an open rebuilt the in-memory index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Head of the index snapshot the open started from (0: none was usable).
    pub index_snapshot_seq: u64,
    /// Events replayed from the frames after it.
    pub replayed_events: u64,
}

/// Group-commit counters since the journal was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Batches committed (each one sled transaction).
    pub batches: u64,
    /// Events appended.
    pub events: u64,
    /// Durability syncs (one per batch).
    pub syncs: u64,
    /// Append requests acknowledged (including retries and conflicts).
    pub requests: u64,
}

/// A signed checkpoint that was appended.
#[derive(Clone, Debug)]
pub struct SignedCheckpoint {
    /// What was signed.
    pub checkpoint: Checkpoint,
    /// The full signed note.
    pub note: String,
    /// Where the checkpoint event landed.
    pub position: Position,
}

/// When an append is acknowledged.
#[derive(Clone, Copy)]
enum Ack {
    /// Once durable (the store synced).
    Durable,
    /// Once written to the store, before the sync (asynchronous commit).
    Written,
}

enum Command {
    Append { streams: Vec<StreamAppend>, reply: oneshot::Sender<AppendResult>, ack: Ack },
    Checkpoint { key: Arc<SignerKey>, event: EventData, reply: oneshot::Sender<Result<SignedCheckpoint, JournalError>> },
    Shutdown { reply: oneshot::Sender<Result<(), JournalError>> },
}

struct Shared {
    index: RwLock<Index>,
    stats: Mutex<WriterStats>,
    head_mu: Mutex<u64>,
    head_cv: Condvar,
    head_watch: watch::Sender<u64>,
    closed: AtomicBool,
    poisoned: Mutex<Option<String>>,
}

impl Shared {
    fn index(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, seq: u64) {
        // Monotonic: with a shared store the writer and the follower both publish.
        let mut head = self.head_mu.lock().unwrap_or_else(PoisonError::into_inner);
        *head = (*head).max(seq);
        let seq = *head;
        drop(head);
        self.head_cv.notify_all();
        self.head_watch.send_if_modified(|h| {
            let changed = *h < seq;
            *h = (*h).max(seq);
            changed
        });
    }

    fn poison(&self, cause: String) {
        *self.poisoned.lock().unwrap_or_else(PoisonError::into_inner) = Some(cause);
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let seq = *self.head_mu.lock().unwrap_or_else(PoisonError::into_inner);
        self.head_cv.notify_all();
        self.head_watch.send_replace(seq);
    }
}

struct Inner {
    dir: Option<PathBuf>,
    recovery: Recovery,
    origin: String,
    store: Arc<dyn Store>,
    shared: Arc<Shared>,
    tx: Option<mpsc::Sender<Command>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    _lock: Option<File>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropping the sender ends the writer loop after it drains what is queued.
        self.tx.take();
        if let Some(h) = self.writer.lock().unwrap_or_else(PoisonError::into_inner).take() {
            let _ = h.join();
        }
    }
}

/// A handle to an open journal. Cheap to clone; the journal closes when the last handle (and
/// the last subscription) is dropped, or at [`Journal::close`].
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("location", &self.inner.store.location())
            .field("origin", &self.inner.origin)
            .finish()
    }
}

fn sled_dir(dir: &Path) -> PathBuf {
    dir.join("sled")
}

/// Directory of checkpoint notes inside a journal directory.
pub fn checkpoints_dir(dir: &Path) -> PathBuf {
    dir.join("checkpoints")
}

/// Waits at most `timeout` for the holder of the lock file `lock` to let go: a helper thread
/// blocks on the lock (the kernel wakes it on release) and lets go at once. True once it was
/// free; on a timeout the helper stays blocked until the holder lets go (or the process exits).
pub fn wait_for_unlock(lock: &Path, timeout: std::time::Duration) -> bool {
    let Ok(file) = File::open(lock) else { return true };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let got = file.lock().is_ok();
        drop(file); // released for the real opener before anyone is told
        let _ = tx.send(got);
    });
    rx.recv_timeout(timeout).is_ok()
}

fn take_lock(dir: &Path, holder: &str, wait: std::time::Duration) -> Result<File, JournalError> {
    let path = dir.join("LOCK");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| JournalError::io(&path, e))?;
    // A busy lock is waited for, up to `wait` for each holder, and tried again each time its
    // holder lets go (several processes may be waiting, and only one gets it each time), at
    // most LOCK_TRIES_MAX times. No clock is read: the waiting is the kernel's. (A lock can
    // also be held for a moment by a process that no longer wants it: a child forked by the
    // holder shares the lock's file until it executes its program.)
    let mut locked = Err(std::fs::TryLockError::WouldBlock);
    for _ in 0..LOCK_TRIES_MAX {
        locked = f.try_lock();
        match locked {
            Err(std::fs::TryLockError::WouldBlock) if !wait.is_zero() && wait_for_unlock(&path, wait) => {}
            _ => break,
        }
    }
    match locked {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let held_by = std::fs::read_to_string(&path).unwrap_or_default();
            let held_by = held_by.trim();
            return Err(JournalError::Locked {
                path: dir.to_owned(),
                holder: if held_by.is_empty() { "another process".to_owned() } else { held_by.to_owned() },
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(JournalError::io(&path, e)),
    }
    f.set_len(0).map_err(|e| JournalError::io(&path, e))?;
    f.write_all(holder.as_bytes()).map_err(|e| JournalError::io(&path, e))?;
    Ok(f)
}

/// Opens the sled store of `dir`, whose lock this process holds. sled's own lock on its data
/// file can still be held for a moment by the process that let go of the journal's lock (its
/// exit closes both files, not at once; a child it forked shares them until it executes its
/// program): that wait is bounded like the journal lock's, never reported as an I/O error.
fn open_sled(dir: &Path, options: &OpenOptions) -> Result<SledStore, JournalError> {
    let data = sled_dir(dir).join("db");
    let mut tries = 0;
    loop {
        match SledStore::open(&sled_dir(dir), options.durability, options.cache_bytes) {
            // sled's own message for a busy lock on its data file (sled 0.34 reports it as an
            // `Other` I/O error): wait for its holder, who no longer holds the journal's lock.
            Err(JournalError::Io { source, .. })
                if source.to_string().starts_with("could not acquire lock")
                    && tries < LOCK_TRIES_MAX
                    && !options.lock_wait.is_zero()
                    && wait_for_unlock(&data, options.lock_wait) =>
            {
                tries += 1;
            }
            other => return other,
        }
    }
}

/// Takes the journal's lock and opens its sled store, without reading the journal.
pub(crate) fn open_store_locked(dir: &Path, options: &OpenOptions) -> Result<(SledStore, File), JournalError> {
    if !sled_dir(dir).join("db").exists() {
        return Err(JournalError::NotAJournal { path: dir.to_owned() });
    }
    let lock = take_lock(dir, &options.holder, options.lock_wait)?;
    let data = sled_dir(dir).join("db");
    let had_data = std::fs::metadata(&data).map_err(|e| JournalError::io(&data, e))?.len() > 0;
    let store = open_sled(dir, options)?;
    if store.meta(META_FORMAT)?.is_none() {
        // sled opens a damaged data file as an empty database; an existing data file with no
        // journal marker is damage, not "no journal here".
        if had_data {
            return Err(JournalError::corrupt(dir, None, "the sled database holds no journal: its files are damaged"));
        }
        return Err(JournalError::NotAJournal { path: dir.to_owned() });
    }
    Ok((store, lock))
}

fn sync_dir(path: &Path) -> Result<(), JournalError> {
    File::open(path).and_then(|d| d.sync_all()).map_err(|e| JournalError::io(path, e))
}

impl Journal {
    /// Creates a new journal in `dir` (which may exist but must not hold a journal).
    pub fn create(dir: &Path, origin: &str, options: &OpenOptions) -> Result<Journal, JournalError> {
        check_origin(origin)?;
        std::fs::create_dir_all(checkpoints_dir(dir)).map_err(|e| JournalError::io(dir, e))?;
        let lock = take_lock(dir, &options.holder, options.lock_wait)?;
        let store = open_sled(dir, options)?;
        if store.meta(META_FORMAT)?.is_some() {
            return Err(JournalError::AlreadyExists { path: dir.to_owned() });
        }
        store.put_meta(META_ORIGIN, origin.as_bytes())?;
        store.put_meta(META_FORMAT, JOURNAL_FORMAT)?;
        if options.durability == Durability::Power {
            sync_dir(dir)?;
            sync_dir(&sled_dir(dir))?;
        }
        Journal::start(Some(dir.to_owned()), Arc::new(store), Some(lock))
    }

    /// Opens the journal in `dir`.
    pub fn open(dir: &Path, options: &OpenOptions) -> Result<Journal, JournalError> {
        let (store, lock) = open_store_locked(dir, options)?;
        let journal = Journal::start(Some(dir.to_owned()), Arc::new(store), Some(lock))?;
        // Appends another process deferred while it could not reach this journal. Not being
        // able to fold them now is no reason to refuse the open: they stay for the next one.
        let _ = journal.fold_pending();
        Ok(journal)
    }

    /// Appends the events other processes deferred into this journal's `pending/` directory
    /// ([`crate::pending`]); returns how many. A no-op for a journal without a directory.
    pub fn fold_pending(&self) -> Result<usize, JournalError> {
        match &self.inner.dir {
            Some(dir) => crate::pending::fold(self, dir),
            None => Ok(0),
        }
    }

    /// A journal over an in-memory store (tests, simulation).
    pub fn in_memory(origin: &str) -> Result<Journal, JournalError> {
        check_origin(origin)?;
        Journal::with_store(Arc::new(MemStore::new(origin)))
    }

    /// A journal over any store that already carries the format marker and an origin.
    pub fn with_store(store: Arc<dyn Store>) -> Result<Journal, JournalError> {
        Journal::start(None, store, None)
    }

    /// [`Journal::with_store`] for a shared store, with `dir` as this machine's journal
    /// directory (where deferred appends wait).
    pub(crate) fn with_store_at(store: Arc<dyn Store>, dir: &Path) -> Result<Journal, JournalError> {
        Journal::start(Some(dir.to_owned()), store, None)
    }

    fn start(dir: Option<PathBuf>, store: Arc<dyn Store>, lock: Option<File>) -> Result<Journal, JournalError> {
        let loc = store.location().to_owned();
        match store.meta(META_FORMAT)? {
            Some(f) if f == JOURNAL_FORMAT => {}
            Some(f) => {
                return Err(JournalError::corrupt(
                    &loc,
                    None,
                    format!("unknown journal format {:?}", String::from_utf8_lossy(&f)),
                ));
            }
            None => return Err(JournalError::NotAJournal { path: dir.clone().unwrap_or(loc) }),
        }
        let origin = store
            .meta(META_ORIGIN)?
            .and_then(|o| String::from_utf8(o).ok())
            .ok_or_else(|| JournalError::corrupt(&loc, None, "origin is missing"))?;
        let (index, snapshot_seq, since_snapshot) = load_index(store.as_ref())?;
        let head_seq = index.head_seq;
        let (head_watch, _) = watch::channel(head_seq);
        let shared = Arc::new(Shared {
            index: RwLock::new(index),
            stats: Mutex::new(WriterStats::default()),
            head_mu: Mutex::new(head_seq),
            head_cv: Condvar::new(),
            head_watch,
            closed: AtomicBool::new(false),
            poisoned: Mutex::new(None),
        });
        if let Some(order) = store.shared_order() {
            // Other processes may have appended while this one replayed: read the rest under the
            // ordering lock, where the stored head must be exactly where the events end.
            let held = order.lock_order();
            let checked = held.and_then(|held| check_shared_head(store.as_ref(), &shared, held));
            order.release_order();
            checked?;
            let (follow_store, follow_shared) = (store.clone(), shared.clone());
            std::thread::Builder::new()
                .name("strata-journal-follower".into())
                .spawn(move || run_follower(follow_store, follow_shared))
                .map_err(|e| JournalError::io(&loc, e))?;
        }
        let (tx, rx) = mpsc::channel(QUEUE_REQUESTS_MAX);
        let recovery = Recovery { index_snapshot_seq: snapshot_seq, replayed_events: since_snapshot };
        let (wake, woken) = std::sync::mpsc::channel();
        let (flush_store, flush_shared) = (store.clone(), shared.clone());
        let flusher = std::thread::Builder::new()
            .name("strata-journal-flusher".into())
            .spawn(move || run_flusher(flush_store, flush_shared, woken))
            .map_err(|e| JournalError::io(&loc, e))?;
        let writer = Writer {
            store: store.clone(),
            shared: shared.clone(),
            origin: origin.clone(),
            since_snapshot,
            snapshot_seq,
            flusher: Some((wake, flusher)),
            order_held: false,
        };
        let handle = std::thread::Builder::new()
            .name("strata-journal-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| JournalError::io(&loc, e))?;
        Ok(Journal {
            inner: Arc::new(Inner {
                dir,
                recovery,
                origin,
                store,
                shared,
                tx: Some(tx),
                writer: Mutex::new(Some(handle)),
                _lock: lock,
            }),
        })
    }

    /// How this open rebuilt the index.
    pub fn recovery(&self) -> Recovery {
        self.inner.recovery
    }

    /// Group-commit counters since open: `events / syncs` is the mean number of events made
    /// durable per sync.
    pub fn writer_stats(&self) -> WriterStats {
        *self.inner.shared.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The journal's origin (its unique log name, signed into checkpoints).
    pub fn origin(&self) -> &str {
        &self.inner.origin
    }

    /// The journal directory: a sled journal's own, or the one on this machine a shared journal
    /// was opened with ([`Journal::open_postgres_at`]), where deferred appends wait.
    pub fn dir(&self) -> Option<&Path> {
        self.inner.dir.as_deref()
    }

    /// The storage backend.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// For a journal shared with other processes (PostgreSQL): reads what they appended since
    /// this handle last looked, publishes it to readers and subscriptions, and returns the head.
    /// A no-op returning [`Journal::head`] for a journal this process owns alone.
    pub fn refresh(&self) -> Result<Head, JournalError> {
        if self.inner.store.shared_order().is_some() {
            catch_up(self.inner.store.as_ref(), &self.inner.shared)?;
        }
        Ok(self.head())
    }

    /// The durable head.
    pub fn head(&self) -> Head {
        let ix = self.inner.shared.index();
        Head { seq: ix.head_seq, hash: ix.head_hash, root: ix.frontier.root() }
    }

    /// Current version (event count) of `stream`.
    pub fn stream_version(&self, stream: &str) -> u64 {
        self.inner.shared.index().version(stream)
    }

    /// Number of streams.
    pub fn stream_count(&self) -> usize {
        self.inner.shared.index().stream_count()
    }

    fn sender(&self) -> Result<&mpsc::Sender<Command>, JournalError> {
        if let Some(cause) = self.inner.shared.poisoned.lock().unwrap_or_else(PoisonError::into_inner).clone() {
            return Err(JournalError::Poisoned { cause });
        }
        self.inner.tx.as_ref().ok_or(JournalError::Closed)
    }

    /// Appends `events` to `stream` if it is at `expected`.
    pub async fn append(&self, stream: &str, expected: ExpectedVersion, events: Vec<EventData>) -> AppendResult {
        self.append_multi(vec![StreamAppend { stream: stream.to_owned(), expected, events }]).await
    }

    /// Appends to several streams atomically: all or nothing.
    pub async fn append_multi(&self, streams: Vec<StreamAppend>) -> AppendResult {
        validate_request(&streams)?;
        let (reply, rx) = oneshot::channel();
        self.sender()?
            .send(Command::Append { streams, reply, ack: Ack::Durable })
            .await
            .map_err(|_| JournalError::Closed)?;
        rx.await.map_err(|_| JournalError::Closed)?
    }

    /// [`Journal::append_multi`] with asynchronous commit: acknowledged once the batch is
    /// sequenced and written to the store, before the store is made durable. The same group
    /// commit makes it durable a moment later, so a crash in between can lose it (never tear it:
    /// recovery keeps a prefix of the journal). For records whose loss costs little and whose
    /// wait would dominate the caller (a knowledge serve's usage record); every other append
    /// waits for durability.
    pub async fn append_multi_async_commit(&self, streams: Vec<StreamAppend>) -> AppendResult {
        validate_request(&streams)?;
        let (reply, rx) = oneshot::channel();
        self.sender()?
            .send(Command::Append { streams, reply, ack: Ack::Written })
            .await
            .map_err(|_| JournalError::Closed)?;
        rx.await.map_err(|_| JournalError::Closed)?
    }

    /// Blocking [`Journal::append`]; must not be called from inside an async runtime.
    pub fn append_blocking(&self, stream: &str, expected: ExpectedVersion, events: Vec<EventData>) -> AppendResult {
        self.append_multi_blocking(vec![StreamAppend { stream: stream.to_owned(), expected, events }])
    }

    /// Blocking [`Journal::append_multi`]; must not be called from inside an async runtime.
    pub fn append_multi_blocking(&self, streams: Vec<StreamAppend>) -> AppendResult {
        validate_request(&streams)?;
        let (reply, rx) = oneshot::channel();
        self.sender()?
            .blocking_send(Command::Append { streams, reply, ack: Ack::Durable })
            .map_err(|_| JournalError::Closed)?;
        rx.blocking_recv().map_err(|_| JournalError::Closed)?
    }

    /// Queues an append without waiting; the returned receiver yields its result. Requests are
    /// committed in the order they are queued (used by import to pipeline).
    pub(crate) fn append_queued_blocking(
        &self,
        streams: Vec<StreamAppend>,
    ) -> Result<oneshot::Receiver<AppendResult>, JournalError> {
        validate_request(&streams)?;
        let (reply, rx) = oneshot::channel();
        self.sender()?
            .blocking_send(Command::Append { streams, reply, ack: Ack::Durable })
            .map_err(|_| JournalError::Closed)?;
        Ok(rx)
    }

    /// Signs a checkpoint over the current head with `key`, appends it as a `journal.checkpoint`
    /// event (with the id and time in `event`; its type and payload are set here) and saves the
    /// note beside the journal ([`Journal::save_note`]). Blocking.
    pub fn checkpoint_blocking(
        &self,
        key: Arc<SignerKey>,
        id: Uuid,
        recorded_at_ns: i64,
    ) -> Result<SignedCheckpoint, JournalError> {
        let event = EventData {
            id,
            event_type: CHECKPOINT_EVENT_TYPE.to_owned(),
            schema_version: 1,
            recorded_at_ns,
            causation: None,
            correlation: None,
            payload: b"null".to_vec(),
        };
        let (reply, rx) = oneshot::channel();
        self.sender()?.blocking_send(Command::Checkpoint { key, event, reply }).map_err(|_| JournalError::Closed)?;
        let signed = rx.blocking_recv().map_err(|_| JournalError::Closed)??;
        self.save_note(signed.checkpoint.size, &signed.note)?;
        Ok(signed)
    }

    /// Keeps a signed checkpoint note beside the journal, where `journal verify` and bundles find
    /// it: a sled journal as `checkpoints/<size>.note`, a shared store in the store itself (every
    /// process sharing it sees it). A no-op for an in-memory journal.
    pub fn save_note(&self, size: u64, note: &str) -> Result<(), JournalError> {
        if let Some(order) = self.inner.store.shared_order() {
            return order.save_note(size, note);
        }
        if let Some(dir) = &self.inner.dir {
            let cdir = checkpoints_dir(dir);
            let path = cdir.join(format!("{size:020}.note"));
            let mut f = File::create(&path).map_err(|e| JournalError::io(&path, e))?;
            f.write_all(note.as_bytes()).and_then(|()| f.sync_all()).map_err(|e| JournalError::io(&path, e))?;
            sync_dir(&cdir)?;
        }
        Ok(())
    }

    /// The checkpoint notes kept beside the journal ([`Journal::save_note`]), as (where, text).
    pub fn saved_notes(&self) -> Result<Vec<(String, String)>, JournalError> {
        if let Some(order) = self.inner.store.shared_order() {
            return order.notes();
        }
        match &self.inner.dir {
            Some(dir) => crate::verify::read_notes(&checkpoints_dir(dir)),
            None => Ok(Vec::new()),
        }
    }

    /// Flushes, snapshots the index and stops the writer. Later appends fail with
    /// [`JournalError::Closed`]; reads keep working until the last handle is dropped.
    pub fn close_blocking(&self) -> Result<(), JournalError> {
        let Some(tx) = self.inner.tx.as_ref() else { return Ok(()) };
        let (reply, rx) = oneshot::channel();
        if tx.blocking_send(Command::Shutdown { reply }).is_err() {
            return Ok(());
        }
        rx.blocking_recv().unwrap_or(Ok(()))
    }

    /// Async [`Journal::close_blocking`].
    pub async fn close(&self) -> Result<(), JournalError> {
        let Some(tx) = self.inner.tx.as_ref() else { return Ok(()) };
        let (reply, rx) = oneshot::channel();
        if tx.send(Command::Shutdown { reply }).await.is_err() {
            return Ok(());
        }
        rx.await.unwrap_or(Ok(()))
    }

    /// Calls `f(record, hash)` for every durable event with sequence in `from..=to` (clamped to
    /// the head), in order, until `f` returns `Ok(false)`. Zero-copy: `record` borrows the frame.
    pub fn scan<E>(
        &self,
        from: u64,
        to: u64,
        mut f: impl FnMut(&Record<'_>, &Hash) -> Result<bool, E>,
    ) -> Result<Result<(), E>, JournalError> {
        let head = self.head().seq;
        let to = to.min(head);
        let from = from.max(1);
        if from > to {
            return Ok(Ok(()));
        }
        let loc = self.inner.store.location().to_owned();
        let mut user_err: Option<E> = None;
        let mut expected = from;
        self.inner.store.scan_frames(from, &mut |_, bytes| {
            for entry in
                frame::entries(bytes).map_err(|e| JournalError::corrupt(&loc, Some(expected), e.to_string()))?
            {
                let (hash, rec) = entry.map_err(|e| JournalError::corrupt(&loc, Some(expected), e.to_string()))?;
                let rec =
                    record::decode(rec).map_err(|e| JournalError::corrupt(&loc, Some(expected), e.to_string()))?;
                if rec.seq < expected {
                    continue;
                }
                if rec.seq != expected {
                    return Err(JournalError::corrupt(
                        &loc,
                        Some(expected),
                        format!("found sequence {} where {expected} belongs", rec.seq),
                    ));
                }
                if rec.seq > to {
                    return Ok(false);
                }
                match f(&rec, &hash) {
                    Ok(true) => {}
                    Ok(false) => return Ok(false),
                    Err(e) => {
                        user_err = Some(e);
                        return Ok(false);
                    }
                }
                if rec.seq == to {
                    return Ok(false);
                }
                expected += 1;
            }
            Ok(true)
        })?;
        Ok(match user_err {
            Some(e) => Err(e),
            None => Ok(()),
        })
    }

    /// Up to `limit` durable events from sequence `from` on.
    pub fn read_range(&self, from: u64, limit: usize) -> Result<Vec<Envelope>, JournalError> {
        let limit = limit.min(READ_EVENTS_MAX);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity(limit.min(1024));
        let to = from.max(1).saturating_add(limit as u64 - 1);
        let r: Result<(), std::convert::Infallible> = self.scan(from, to, |rec, hash| {
            out.push(rec.to_envelope(*hash));
            Ok(true)
        })?;
        let Ok(()) = r;
        Ok(out)
    }

    /// Up to `limit` events of `stream` from version `from_version` (1-based) on.
    pub fn read_stream(&self, stream: &str, from_version: u64, limit: usize) -> Result<Vec<Envelope>, JournalError> {
        validate_stream(stream)?;
        let limit = limit.min(READ_EVENTS_MAX);
        let seqs = self.inner.shared.index().stream_seqs(stream, from_version, limit);
        let mut out = Vec::with_capacity(seqs.len());
        for seq in seqs {
            out.push(self.get(seq)?.ok_or_else(|| {
                JournalError::corrupt(self.inner.store.location(), Some(seq), "indexed event is missing")
            })?);
        }
        Ok(out)
    }

    /// The durable event at `seq`.
    pub fn get(&self, seq: u64) -> Result<Option<Envelope>, JournalError> {
        if seq == 0 || seq > self.head().seq {
            return Ok(None);
        }
        find_record(self.inner.store.as_ref(), seq, |rec, hash| rec.to_envelope(*hash))
    }

    /// The hash of the durable event at `seq`.
    pub fn hash_at(&self, seq: u64) -> Result<Option<Hash>, JournalError> {
        if seq == 0 || seq > self.head().seq {
            return Ok(None);
        }
        find_record(self.inner.store.as_ref(), seq, |_, hash| *hash)
    }

    /// Every durable event hash, in order (for proofs).
    pub fn event_hashes(&self) -> Result<Vec<Hash>, JournalError> {
        let head = self.head().seq;
        let mut out = Vec::with_capacity(usize::try_from(head).unwrap_or(0));
        let r: Result<(), std::convert::Infallible> = self.scan(1, head, |_, h| {
            out.push(*h);
            Ok(true)
        })?;
        let Ok(()) = r;
        Ok(out)
    }

    /// A catch-up subscription delivering every durable event from `from` (1-based) on, then
    /// live events as they become durable, with no gap and no duplicate.
    pub fn subscribe(&self, from: u64) -> Subscription {
        Subscription {
            journal: self.clone(),
            next: from.max(1),
            buffer: std::collections::VecDeque::new(),
            watch: self.inner.shared.head_watch.subscribe(),
        }
    }

    /// [`Journal::wait_for_head`], giving up after `timeout`; the head either way.
    pub fn wait_for_head_timeout(&self, seq: u64, timeout: std::time::Duration) -> u64 {
        let shared = &self.inner.shared;
        let head = shared.head_mu.lock().unwrap_or_else(PoisonError::into_inner);
        let (head, _) = shared
            .head_cv
            .wait_timeout_while(head, timeout, |h| *h < seq && !shared.closed.load(Ordering::SeqCst))
            .unwrap_or_else(PoisonError::into_inner);
        *head
    }

    /// Blocks until the durable head reaches `seq` or the journal closes; returns the head.
    pub fn wait_for_head(&self, seq: u64) -> u64 {
        let shared = &self.inner.shared;
        let mut head = shared.head_mu.lock().unwrap_or_else(PoisonError::into_inner);
        while *head < seq && !shared.closed.load(Ordering::SeqCst) {
            head = shared.head_cv.wait(head).unwrap_or_else(PoisonError::into_inner);
        }
        *head
    }
}

fn find_record<R>(
    store: &dyn Store,
    seq: u64,
    f: impl FnOnce(&Record<'_>, &Hash) -> R,
) -> Result<Option<R>, JournalError> {
    let loc = store.location();
    let Some((_, bytes)) = store.frame_containing(seq)? else { return Ok(None) };
    for entry in frame::entries(bytes.as_ref()).map_err(|e| JournalError::corrupt(loc, Some(seq), e.to_string()))? {
        let (hash, rec) = entry.map_err(|e| JournalError::corrupt(loc, Some(seq), e.to_string()))?;
        let rec = record::decode(rec).map_err(|e| JournalError::corrupt(loc, Some(seq), e.to_string()))?;
        if rec.seq == seq {
            return Ok(Some(f(&rec, &hash)));
        }
    }
    Ok(None)
}

/// Checks a request against the limits before it is queued.
fn validate_request(streams: &[StreamAppend]) -> Result<(), InputError> {
    if streams.is_empty() {
        return Err(InputError::EmptyAppend);
    }
    if streams.len() > STREAMS_PER_APPEND_MAX {
        return Err(InputError::TooManyStreams { count: streams.len(), max: STREAMS_PER_APPEND_MAX });
    }
    let total: usize = streams.iter().map(|s| s.events.len()).sum();
    if total > EVENTS_PER_APPEND_MAX {
        return Err(InputError::TooManyEvents { count: total, max: EVENTS_PER_APPEND_MAX });
    }
    // Duplicate checks need sets only when there is more than one stream or event.
    let mut seen_streams = std::collections::HashSet::new();
    let mut seen_ids = std::collections::HashSet::new();
    let single = streams.len() == 1 && total == 1;
    for s in streams {
        validate_stream(&s.stream)?;
        if s.events.is_empty() {
            return Err(InputError::EmptyAppend);
        }
        if !single && !seen_streams.insert(s.stream.as_str()) {
            return Err(InputError::DuplicateStream(s.stream.clone()));
        }
        for e in &s.events {
            e.validate()?;
            if !single && !seen_ids.insert(e.id) {
                return Err(InputError::DuplicateEventId(e.id));
            }
        }
    }
    Ok(())
}

/// Loads the index snapshot and replays the frames after it, checking the tail as it goes.
/// Returns the index, the sequence of the snapshot it started from, and the events replayed.
fn load_index(store: &dyn Store) -> Result<(Index, u64, u64), JournalError> {
    let loc = store.location().to_owned();
    let hash_at = |seq: u64| find_record(store, seq, |_, h| *h);
    let mut index = Index::default();
    if let Some(sealed) = store.load_index_snapshot()?
        && let Ok((_, body)) = snapshot::unseal(&sealed, INDEX_SNAPSHOT_VERSION, &hash_at)?
    {
        let at = body.as_ptr() as usize - sealed.as_ptr() as usize;
        let body = at..at + body.len();
        if let Some(ix) = Index::from_snapshot(sealed, body) {
            index = ix;
        }
    }
    let snapshot_seq = index.head_seq;
    let from = index.head_seq + 1;
    let mut replayed = 0u64;
    store.scan_frames(from, &mut |first, bytes| {
        let mut expected_first = true;
        for entry in frame::entries(bytes).map_err(|e| JournalError::corrupt(&loc, Some(first), e.to_string()))? {
            let (stored, raw) =
                entry.map_err(|e| JournalError::corrupt(&loc, Some(index.head_seq + 1), e.to_string()))?;
            let rec = record::decode(raw)
                .map_err(|e| JournalError::corrupt(&loc, Some(index.head_seq + 1), e.to_string()))?;
            if expected_first && rec.seq != first {
                return Err(JournalError::corrupt(
                    &loc,
                    Some(first),
                    format!("frame key says {first} but its first record is {}", rec.seq),
                ));
            }
            expected_first = false;
            if rec.seq < from {
                continue;
            }
            replay_one(&mut index, &loc, stored, raw, &rec)?;
            replayed += 1;
        }
        Ok(true)
    })?;
    if store.shared_order().is_some() {
        // Others may append while this replays; the head is checked under the ordering lock.
        return Ok((index, snapshot_seq, replayed));
    }
    if let Some(head) = store.meta(META_HEAD)? {
        let (seq, hash) =
            decode_head(&head).ok_or_else(|| JournalError::corrupt(&loc, None, "head record is malformed"))?;
        if seq != index.head_seq || hash != index.head_hash {
            return Err(JournalError::corrupt(
                &loc,
                Some(seq.min(index.head_seq) + 1),
                format!("recorded head is sequence {seq} but the stored events end at {}", index.head_seq),
            ));
        }
    } else if index.head_seq != 0 {
        return Err(JournalError::corrupt(&loc, None, "events are stored but the head record is missing"));
    }
    Ok((index, snapshot_seq, replayed))
}

/// Checks one stored record against the index (contiguous sequence, its own hash, the chain,
/// its stream version, a new id) and adds it.
fn replay_one(index: &mut Index, loc: &Path, stored: Hash, raw: &[u8], rec: &Record<'_>) -> Result<(), JournalError> {
    let want = index.head_seq + 1;
    if rec.seq != want {
        return Err(JournalError::corrupt(loc, Some(want), format!("expected sequence {want}, found {}", rec.seq)));
    }
    if event_hash(raw) != stored {
        return Err(JournalError::corrupt(loc, Some(rec.seq), "record bytes do not match their stored hash"));
    }
    if rec.prev != index.head_hash {
        return Err(JournalError::corrupt(loc, Some(rec.seq), "prev hash does not match the previous event"));
    }
    if rec.version != index.version(rec.stream) + 1 {
        return Err(JournalError::corrupt(
            loc,
            Some(rec.seq),
            format!("stream {} jumps to version {}", rec.stream, rec.version),
        ));
    }
    if index.seq_of(rec.id.as_u128()).is_some() {
        return Err(JournalError::corrupt(loc, Some(rec.seq), format!("event id {} appears twice", rec.id)));
    }
    index.push(rec.seq, rec.id, rec.stream, rec.version, stored);
    Ok(())
}

/// Shared stores: reads what was committed after the index head (by any process), checks it
/// like an open does, adds it to the index and publishes it. Returns the new head sequence.
fn catch_up(store: &dyn Store, shared: &Shared) -> Result<u64, JournalError> {
    let loc = store.location().to_owned();
    loop {
        let from = shared.index().head_seq + 1;
        let mut got: Vec<(Hash, Vec<u8>)> = Vec::new();
        store.scan_frames(from, &mut |first, bytes| {
            for entry in frame::entries(bytes).map_err(|e| JournalError::corrupt(&loc, Some(first), e.to_string()))? {
                let (stored, raw) = entry.map_err(|e| JournalError::corrupt(&loc, Some(first), e.to_string()))?;
                got.push((stored, raw.to_vec()));
            }
            Ok(got.len() < crate::shared::CATCH_UP_EVENTS_MAX)
        })?;
        let full = got.len() >= crate::shared::CATCH_UP_EVENTS_MAX;
        let head = {
            let mut ix = shared.index.write().unwrap_or_else(PoisonError::into_inner);
            for (stored, raw) in &got {
                let rec = record::decode(raw)
                    .map_err(|e| JournalError::corrupt(&loc, Some(ix.head_seq + 1), e.to_string()))?;
                // The writer (or an earlier pass) may have added it meanwhile.
                if rec.seq <= ix.head_seq {
                    continue;
                }
                replay_one(&mut ix, &loc, *stored, raw, &rec)?;
            }
            ix.head_seq
        };
        shared.publish(head);
        if !full {
            return Ok(head);
        }
    }
}

/// Under the ordering lock (`held` is the stored head it found): catches up and checks that
/// the stored events end exactly at the stored head. When the index already ends there (nobody
/// else committed since), there is nothing to read.
fn check_shared_head(store: &dyn Store, shared: &Shared, held: (u64, Hash)) -> Result<(), JournalError> {
    {
        let ix = shared.index();
        if (ix.head_seq, ix.head_hash) == held {
            return Ok(());
        }
    }
    catch_up(store, shared)?;
    let ix = shared.index();
    if (ix.head_seq, ix.head_hash) != held {
        return Err(JournalError::corrupt(
            store.location(),
            Some(held.0.min(ix.head_seq) + 1),
            format!("recorded head is sequence {} but the stored events end at {}", held.0, ix.head_seq),
        ));
    }
    Ok(())
}

/// Follows the appends of other processes to a shared store until the journal closes: woken
/// by the store (or after [`crate::shared::FOLLOW_POLL`]), it reads by sequence. Damage poisons
/// the journal; a lost connection is retried after a pause.
fn run_follower(store: Arc<dyn Store>, shared: Arc<Shared>) {
    let Some(order) = store.shared_order() else { return };
    while !shared.closed.load(Ordering::SeqCst) {
        match order.wait_for_appends(crate::shared::FOLLOW_POLL) {
            Err(_) => {
                let head = shared.head_mu.lock().unwrap_or_else(PoisonError::into_inner);
                let _ = shared.head_cv.wait_timeout(head, crate::shared::FOLLOW_POLL);
                continue;
            }
            // This process's own commit (or one it has read already): nothing new to read.
            Ok(Some(announced)) if announced <= shared.index().head_seq => continue,
            Ok(_) => {}
        }
        if shared.closed.load(Ordering::SeqCst) {
            return;
        }
        if let Err(e @ JournalError::Corrupt { .. }) = catch_up(store.as_ref(), &shared) {
            shared.poison(e.to_string());
            return;
        }
    }
}

/// Fails every request of a group with `e`: a backend error (the server was unreachable or the
/// outcome of the commit is unknown) is given to each as it is and leaves the journal usable;
/// anything else poisons it.
fn fail_group(shared: &Shared, group: Vec<(Vec<StreamAppend>, Sink)>, e: JournalError) {
    if let JournalError::Postgres(pg) = &e {
        for (_, sink) in group {
            sink.fail(JournalError::Postgres(pg.clone()));
        }
        return;
    }
    let cause = e.to_string();
    shared.poison(cause.clone());
    let mut first = Some(e);
    for (_, sink) in group {
        sink.fail(first.take().unwrap_or_else(|| JournalError::Poisoned { cause: cause.clone() }));
    }
}

pub(crate) fn encode_head(seq: u64, hash: &Hash) -> Vec<u8> {
    let mut v = seq.to_be_bytes().to_vec();
    v.extend_from_slice(&hash.0);
    v
}

/// Decodes the meta head value: `seq (u64 BE) || hash`.
pub(crate) fn decode_head(v: &[u8]) -> Option<(u64, Hash)> {
    if v.len() != 40 {
        return None;
    }
    let seq = u64::from_be_bytes(v[..8].try_into().ok()?);
    let mut h = [0u8; 32];
    h.copy_from_slice(&v[8..]);
    Some((seq, Hash(h)))
}

/// One event of the batch being committed.
struct Pending {
    seq: u64,
    id: Uuid,
    stream: Arc<str>,
    version: u64,
    hash: Hash,
}

enum Outcome {
    /// Appended: positions are known; the reply waits for durability.
    Appended(Vec<Position>),
    /// Every id was already stored (possibly earlier in this batch).
    Retry(Vec<Position>),
    Conflict(Conflict),
    Rejected(JournalError),
}

/// Where a request's result goes.
enum Sink {
    Append(oneshot::Sender<AppendResult>),
    /// An asynchronous-commit append: `None` once acknowledged, before the sync.
    Written(Option<oneshot::Sender<AppendResult>>),
    Checkpoint(oneshot::Sender<Result<SignedCheckpoint, JournalError>>, Box<SignedCheckpoint>),
}

impl Sink {
    fn fail(self, e: JournalError) {
        match self {
            Sink::Append(r) | Sink::Written(Some(r)) => {
                let _ = r.send(Err(e));
            }
            Sink::Written(None) => {}
            Sink::Checkpoint(r, _) => {
                let _ = r.send(Err(e));
            }
        }
    }
}

/// Most times the writer yields the CPU to let recently acknowledged appenders queue their next
/// request before it commits a batch smaller than the previous one.
const STRAGGLER_YIELDS_MAX: u32 = 4;

/// What the batch being committed has sequenced so far; decisions consult it before the
/// published index, so later requests in a batch see earlier ones.
#[derive(Default)]
struct Overlay<'a> {
    head_seq: u64,
    head_hash: Hash,
    /// Stream → version after this batch's events.
    versions: HashMap<Arc<str>, u64>,
    /// Event id → (position, stream, the event as sent).
    ids: HashMap<u128, (Position, Arc<str>, &'a EventData)>,
}

/// The single writer. Group commit without pipelining: while one batch is being made durable,
/// new requests queue up and form the next batch. (A pipelined variant, committing the next
/// batch while the previous one syncs, was measured and rejected: with appenders that each wait
/// for their acknowledgement it halves the batch size and doubles the per-batch costs.)
struct Writer {
    store: Arc<dyn Store>,
    shared: Arc<Shared>,
    origin: String,
    since_snapshot: u64,
    /// Head of the last index snapshot written or loaded.
    snapshot_seq: u64,
    /// Wakes the flusher thread, which syncs batches of asynchronous-commit appends so that
    /// the writer does not wait for them.
    flusher: Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>,
    /// A shared store's ordering lock is held for the batch about to be committed.
    order_held: bool,
}

/// Adds an append request to the batch being gathered; returns the batch's new (events, bytes).
fn add_to_group(
    group: &mut Vec<(Vec<StreamAppend>, Sink)>,
    (events, bytes): (usize, usize),
    streams: Vec<StreamAppend>,
    reply: oneshot::Sender<AppendResult>,
    ack: Ack,
) -> (usize, usize) {
    let events = events + streams.iter().map(|s| s.events.len()).sum::<usize>();
    let bytes = bytes + streams.iter().flat_map(|s| &s.events).map(|e| e.payload.len() + 128).sum::<usize>();
    let sink = match ack {
        Ack::Durable => Sink::Append(reply),
        Ack::Written => Sink::Written(Some(reply)),
    };
    group.push((streams, sink));
    (events, bytes)
}

/// Syncs the store whenever woken, until its channel closes; a failure poisons the journal.
fn run_flusher(store: Arc<dyn Store>, shared: Arc<Shared>, wake: std::sync::mpsc::Receiver<()>) {
    while wake.recv().is_ok() {
        while wake.try_recv().is_ok() {}
        if let Err(e) = store.sync() {
            *shared.poisoned.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
        }
    }
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        let mut group: Vec<(Vec<StreamAppend>, Sink)> = Vec::new();
        let mut shutdown_reply = None;
        let mut last_batch_requests = 0usize;
        // A command taken off the queue after the batch was closed, handled first next time.
        let mut carried: Option<Command> = None;
        'outer: while let Some(first) = carried.take().or_else(|| rx.blocking_recv()) {
            let mut next = Some(first);
            let (mut events, mut bytes) = (0usize, 0usize);
            while let Some(cmd) = next.take() {
                match cmd {
                    Command::Append { streams, reply, ack } => {
                        (events, bytes) = add_to_group(&mut group, (events, bytes), streams, reply, ack);
                    }
                    Command::Checkpoint { key, event, reply } => {
                        self.commit(std::mem::take(&mut group));
                        self.checkpoint(&key, event, reply);
                    }
                    Command::Shutdown { reply } => {
                        shutdown_reply = Some(reply);
                        break 'outer;
                    }
                }
                if events < BATCH_EVENTS_MAX.saturating_sub(crate::limits::EVENTS_PER_APPEND_MAX)
                    && bytes < BATCH_BYTES_MAX / 2
                {
                    next = rx.try_recv().ok();
                    // Appenders acknowledged by the previous batch are usually about to send
                    // their next request: give them the CPU a few times before committing a
                    // batch smaller than the last one (no clock is read; this only yields).
                    let mut yields = 0;
                    while next.is_none() && group.len() < last_batch_requests && yields < STRAGGLER_YIELDS_MAX {
                        std::thread::yield_now();
                        yields += 1;
                        next = rx.try_recv().ok();
                    }
                }
            }
            if !group.is_empty() && self.store.shared_order().is_some() {
                // A shared store: take the ordering lock first, then add what queued while
                // waiting for it. With several processes contending for the lock, the wait
                // fills this batch instead of leaving the appenders behind it for the next.
                match self.take_order() {
                    Ok(()) => {
                        self.order_held = true;
                        while events < BATCH_EVENTS_MAX.saturating_sub(crate::limits::EVENTS_PER_APPEND_MAX)
                            && bytes < BATCH_BYTES_MAX / 2
                        {
                            match rx.try_recv() {
                                Ok(Command::Append { streams, reply, ack }) => {
                                    (events, bytes) = add_to_group(&mut group, (events, bytes), streams, reply, ack);
                                }
                                Ok(other) => {
                                    carried = Some(other);
                                    break;
                                }
                                Err(_) => break,
                            }
                        }
                    }
                    Err(e) => {
                        fail_group(&self.shared, std::mem::take(&mut group), e);
                        continue;
                    }
                }
            }
            last_batch_requests = group.len();
            self.commit(std::mem::take(&mut group));
        }
        self.commit(std::mem::take(&mut group));
        // Asynchronously committed appends are made durable before the journal closes.
        if let Some((wake, flusher)) = self.flusher.take() {
            drop(wake);
            let _ = flusher.join();
        }
        let synced = if self.poisoned().is_none() { self.store.sync() } else { Ok(()) };
        let result = synced.and_then(|()| self.snapshot_index());
        self.shared.close();
        if let Some(reply) = shutdown_reply {
            let _ = reply.send(result);
        }
    }

    fn poisoned(&self) -> Option<String> {
        self.shared.poisoned.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Shared stores: takes the ordering lock and catches up, so that this batch is decided
    /// against everything any process committed. A no-op for a store this process owns.
    fn take_order(&self) -> Result<(), JournalError> {
        let Some(order) = self.store.shared_order() else { return Ok(()) };
        let checked = order.lock_order().and_then(|held| check_shared_head(self.store.as_ref(), &self.shared, held));
        if checked.is_err() {
            order.release_order();
        }
        checked
    }

    fn release_order(&self) {
        if let Some(order) = self.store.shared_order() {
            order.release_order();
        }
    }

    /// Writes the index snapshot unless the last one is already at the head. Holds the index
    /// write lock while compacting and serialising (readers wait; this happens every
    /// `INDEX_SNAPSHOT_EVENTS_MAX` events and at close).
    fn snapshot_index(&mut self) -> Result<(), JournalError> {
        if self.poisoned().is_some() {
            return Ok(());
        }
        let mut ix = self.shared.index.write().unwrap_or_else(PoisonError::into_inner);
        if ix.head_seq == self.snapshot_seq {
            return Ok(());
        }
        let body = ix
            .compact_and_encode()
            .map_err(|e| JournalError::corrupt(self.store.location(), None, format!("index snapshot failed: {e}")))?;
        let (seq, hash) = (ix.head_seq, ix.head_hash);
        drop(ix);
        let sealed = snapshot::seal(INDEX_SNAPSHOT_VERSION, seq, &hash, &body);
        drop(body);
        self.store.save_index_snapshot(&sealed)?;
        self.snapshot_seq = seq;
        self.since_snapshot = 0;
        Ok(())
    }

    /// Signs a checkpoint over the current head and commits it as the next event.
    fn checkpoint(
        &mut self,
        key: &SignerKey,
        mut event: EventData,
        reply: oneshot::Sender<Result<SignedCheckpoint, JournalError>>,
    ) {
        if let Err(e) = self.take_order() {
            let _ = reply.send(Err(e));
            return;
        }
        let (size, root) = {
            let ix = self.shared.index();
            (ix.head_seq, ix.frontier.root())
        };
        let checkpoint = Checkpoint { origin: self.origin.clone(), size, root };
        let note = match key.sign_note(&checkpoint.body()) {
            Ok(n) => n,
            Err(e) => {
                self.release_order();
                let _ = reply.send(Err(e.into()));
                return;
            }
        };
        let payload =
            serde_json::json!({ "origin": checkpoint.origin, "size": size, "root": root.to_hex(), "note": note });
        event.payload = payload.to_string().into_bytes();
        let streams = vec![StreamAppend {
            stream: CHECKPOINT_STREAM.to_owned(),
            expected: ExpectedVersion::Any,
            events: vec![event],
        }];
        if let Err(e) = validate_request(&streams) {
            self.release_order();
            let _ = reply.send(Err(e.into()));
            return;
        }
        let signed = Box::new(SignedCheckpoint { checkpoint, note, position: Position { seq: size + 1, version: 0 } });
        self.commit(vec![(streams, Sink::Checkpoint(reply, signed))]);
    }

    /// Sequences one group of requests, writes it in one sled transaction, makes it durable
    /// once, publishes it, then acknowledges every request in it.
    fn commit(&mut self, mut group: Vec<(Vec<StreamAppend>, Sink)>) {
        if group.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.order_held);
        if let Some(cause) = self.poisoned() {
            if held {
                self.release_order();
            }
            for (_, sink) in group {
                sink.fail(JournalError::Poisoned { cause: cause.clone() });
            }
            return;
        }
        if !held && let Err(e) = self.take_order() {
            fail_group(&self.shared, group, e);
            return;
        }
        let mut overlay = Overlay::default();
        let mut pending: Vec<Pending> = Vec::new();
        let mut frames: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut frame = FrameBuilder::new();
        let mut frame_first = 0u64;
        let mut outcomes: Vec<Outcome> = Vec::with_capacity(group.len());
        {
            let ix = self.shared.index();
            overlay.head_seq = ix.head_seq;
            overlay.head_hash = ix.head_hash;
            for (streams, _) in &group {
                // Idempotency first: a retry usually carries an expected version that no longer
                // matches, and must still get its original positions back.
                match self.classify_retry(&ix, &overlay, streams) {
                    Ok(Some(positions)) => {
                        outcomes.push(Outcome::Retry(positions));
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        outcomes.push(Outcome::Rejected(e));
                        continue;
                    }
                }
                let version_of =
                    |o: &Overlay, stream: &str| o.versions.get(stream).copied().unwrap_or_else(|| ix.version(stream));
                let conflict = streams.iter().find_map(|s| {
                    let actual = version_of(&overlay, &s.stream);
                    (!s.expected.matches(actual)).then(|| Conflict {
                        stream: s.stream.clone(),
                        expected: s.expected,
                        actual,
                    })
                });
                if let Some(c) = conflict {
                    outcomes.push(Outcome::Conflict(c));
                    continue;
                }
                let mut positions = Vec::with_capacity(streams.iter().map(|s| s.events.len()).sum());
                for s in streams {
                    let mut version = version_of(&overlay, &s.stream);
                    let name: Arc<str> = match overlay.versions.get_key_value(s.stream.as_str()) {
                        Some((k, _)) => k.clone(),
                        None => Arc::from(s.stream.as_str()),
                    };
                    for e in &s.events {
                        version += 1;
                        let seq = overlay.head_seq + 1;
                        let rec = e.placed(&s.stream, seq, version, overlay.head_hash);
                        let len = rec.encoded_len();
                        if !frame.is_empty()
                            && (frame.byte_len() + len + 36 > FRAME_BYTES_MAX || frame.len() >= FRAME_EVENTS_MAX)
                        {
                            frames.push((frame_first, std::mem::take(&mut frame).finish()));
                        }
                        if frame.is_empty() {
                            frame_first = seq;
                        }
                        let hash = frame.push_record(&rec);
                        let pos = Position { seq, version };
                        overlay.ids.insert(e.id.as_u128(), (pos, name.clone(), e));
                        overlay.head_seq = seq;
                        overlay.head_hash = hash;
                        pending.push(Pending { seq, id: e.id, stream: name.clone(), version, hash });
                        positions.push(pos);
                    }
                    overlay.versions.insert(name, version);
                }
                outcomes.push(Outcome::Appended(positions));
            }
        }
        if !frame.is_empty() {
            frames.push((frame_first, frame.finish()));
        }
        if !pending.is_empty() {
            let written = self.store.commit(&frames, &[(META_HEAD, encode_head(overlay.head_seq, &overlay.head_hash))]);
            if written.is_ok() {
                // Asynchronous commit: acknowledged now, made durable by the sync below.
                for ((_, sink), outcome) in group.iter_mut().zip(&outcomes) {
                    if let (Sink::Written(reply @ Some(_)), Outcome::Appended(p) | Outcome::Retry(p)) = (sink, outcome)
                        && let Some(r) = reply.take()
                    {
                        let deduplicated = matches!(outcome, Outcome::Retry(_));
                        let _ = r.send(Ok(Ok(Appended { positions: p.clone(), deduplicated })));
                    }
                }
            }
            // A batch of asynchronous-commit appends only is synced by the flusher thread; any
            // durable append in the batch syncs here, which covers everything before it too.
            let async_only = group.iter().all(|(_, sink)| matches!(sink, Sink::Written(_)));
            let durable = written.and_then(|()| match (&self.flusher, async_only) {
                (Some((wake, _)), true) => {
                    let _ = wake.send(());
                    Ok(())
                }
                _ => self.store.sync(),
            });
            if let Err(e) = durable {
                if let JournalError::Postgres(_) = e {
                    // Nothing was published; the next batch reads what the server holds.
                    fail_group(&self.shared, group, e);
                    return;
                }
                let cause = e.to_string();
                *self.shared.poisoned.lock().unwrap_or_else(PoisonError::into_inner) = Some(cause.clone());
                let mut first = Some(e);
                for (_, sink) in group {
                    sink.fail(first.take().unwrap_or_else(|| JournalError::Poisoned { cause: cause.clone() }));
                }
                return;
            }
            let mut ix = self.shared.index.write().unwrap_or_else(PoisonError::into_inner);
            for p in &pending {
                // With a shared store the follower may have read this batch back already.
                if p.seq > ix.head_seq {
                    ix.push(p.seq, p.id, &p.stream, p.version, p.hash);
                }
            }
            let head = ix.head_seq;
            drop(ix);
            self.shared.publish(head);
            self.since_snapshot += pending.len() as u64;
        } else {
            self.release_order();
        }
        {
            let mut stats = self.shared.stats.lock().unwrap_or_else(PoisonError::into_inner);
            if !pending.is_empty() {
                stats.batches += 1;
                stats.syncs += 1;
                stats.events += pending.len() as u64;
            }
            stats.requests += group.len() as u64;
        }
        for ((_, sink), outcome) in group.into_iter().zip(outcomes) {
            match (sink, outcome) {
                (Sink::Written(None), _) => {}
                (Sink::Append(r) | Sink::Written(Some(r)), outcome) => {
                    let _ = r.send(match outcome {
                        Outcome::Appended(positions) => Ok(Ok(Appended { positions, deduplicated: false })),
                        Outcome::Retry(positions) => Ok(Ok(Appended { positions, deduplicated: true })),
                        Outcome::Conflict(c) => Ok(Err(c)),
                        Outcome::Rejected(e) => Err(e),
                    });
                }
                (Sink::Checkpoint(r, mut signed), Outcome::Appended(p)) => {
                    signed.position = p[0];
                    let _ = r.send(Ok(*signed));
                }
                (Sink::Checkpoint(r, _), _) => {
                    // A fresh id on an `Any` stream cannot conflict or repeat; if it did, say so.
                    let _ = r.send(Err(JournalError::corrupt(
                        self.store.location(),
                        None,
                        "the checkpoint event was not appended",
                    )));
                }
            }
        }
        if self.since_snapshot >= INDEX_SNAPSHOT_EVENTS_MAX {
            // A failed snapshot only costs a longer replay at the next open.
            let _ = self.snapshot_index();
        }
    }

    /// `Some(original positions)` when every event id of the request is already stored (in the
    /// journal, or earlier in this batch) under the same stream with the same type and payload;
    /// `None` when none is; an error for a partial or inconsistent match.
    fn classify_retry(
        &self,
        ix: &Index,
        overlay: &Overlay,
        streams: &[StreamAppend],
    ) -> Result<Option<Vec<Position>>, JournalError> {
        let known = |id: Uuid| overlay.ids.contains_key(&id.as_u128()) || ix.seq_of(id.as_u128()).is_some();
        let total: usize = streams.iter().map(|s| s.events.len()).sum();
        let found = streams.iter().flat_map(|s| &s.events).filter(|e| known(e.id)).count();
        if found == 0 {
            return Ok(None);
        }
        if found != total {
            let first = streams.iter().flat_map(|s| &s.events).map(|e| e.id).find(|id| known(*id)).unwrap_or_default();
            return Err(InputError::IdempotencyMismatch {
                event_id: first,
                detail: format!("but {} of the {total} events in this append are new", total - found),
            }
            .into());
        }
        let mismatch = |id: Uuid, seq: u64, stream: &str| -> JournalError {
            InputError::IdempotencyMismatch {
                event_id: id,
                detail: format!("at sequence {seq} in stream {stream:?} with a different stream, type or payload"),
            }
            .into()
        };
        let mut positions = Vec::with_capacity(total);
        for s in streams {
            for e in &s.events {
                let key = e.id.as_u128();
                if let Some((pos, stream, original)) = overlay.ids.get(&key) {
                    if **stream != *s.stream || original.event_type != e.event_type || original.payload != e.payload {
                        return Err(mismatch(e.id, pos.seq, stream));
                    }
                    positions.push(*pos);
                    continue;
                }
                let Some(seq) = ix.seq_of(key) else {
                    return Err(JournalError::corrupt(self.store.location(), None, "an id vanished from the index"));
                };
                let stored = find_record(self.store.as_ref(), seq, |rec, _| {
                    (
                        rec.stream == s.stream && rec.event_type == e.event_type && rec.payload == e.payload.as_slice(),
                        rec.version,
                        rec.stream.to_owned(),
                    )
                })?;
                match stored {
                    Some((true, version, _)) => positions.push(Position { seq, version }),
                    Some((false, _, stored_stream)) => return Err(mismatch(e.id, seq, &stored_stream)),
                    None => {
                        return Err(JournalError::corrupt(
                            self.store.location(),
                            Some(seq),
                            "indexed event is missing",
                        ));
                    }
                }
            }
        }
        Ok(Some(positions))
    }
}

/// A catch-up subscription: see [`Journal::subscribe`].
pub struct Subscription {
    journal: Journal,
    next: u64,
    buffer: std::collections::VecDeque<Envelope>,
    watch: watch::Receiver<u64>,
}

const SUBSCRIPTION_PAGE_EVENTS: usize = 1024;

impl Subscription {
    /// Sequence of the next event this subscription will deliver.
    pub fn position(&self) -> u64 {
        self.next
    }

    fn fill(&mut self) -> Result<(), JournalError> {
        if self.buffer.is_empty() && self.next <= self.journal.head().seq {
            let page = self.journal.read_range(self.next, SUBSCRIPTION_PAGE_EVENTS)?;
            self.buffer.extend(page);
        }
        Ok(())
    }

    fn pop(&mut self) -> Option<Envelope> {
        let e = self.buffer.pop_front()?;
        debug_assert_eq!(e.seq, self.next);
        self.next = e.seq + 1;
        Some(e)
    }

    /// The next event if one is durable now, without waiting.
    pub fn try_next(&mut self) -> Result<Option<Envelope>, JournalError> {
        self.fill()?;
        Ok(self.pop())
    }

    /// The next event, waiting for it; `None` once the journal is closed and drained.
    pub async fn next(&mut self) -> Result<Option<Envelope>, JournalError> {
        loop {
            self.watch.borrow_and_update();
            if let Some(e) = self.try_next()? {
                return Ok(Some(e));
            }
            if self.journal.inner.shared.closed.load(Ordering::SeqCst) {
                return Ok(None);
            }
            if self.watch.changed().await.is_err() {
                return Ok(None);
            }
        }
    }

    /// Blocking [`Subscription::next`].
    pub fn next_blocking(&mut self) -> Result<Option<Envelope>, JournalError> {
        loop {
            if let Some(e) = self.try_next()? {
                return Ok(Some(e));
            }
            if self.journal.inner.shared.closed.load(Ordering::SeqCst) {
                return Ok(None);
            }
            self.journal.wait_for_head(self.next);
        }
    }
}
