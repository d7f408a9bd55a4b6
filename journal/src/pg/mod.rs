//! The PostgreSQL backend: one journal shared by every process (on any machine) that names the
//! same database and schema.
//!
//! It is a [`Store`] like sled, so sequencing, chaining, Merkle checkpoints, verification,
//! export and import are the journal's own code, byte for byte the same as on sled. What the
//! server adds is the ordering lock of [`SharedOrder`]: the single `strata_head` row, locked
//! `FOR UPDATE` at the start of every commit transaction (READ COMMITTED) and released by its
//! COMMIT. Holding it, the writer of a process reads what other processes committed, decides
//! idempotency and expected versions, computes the blake3 chain and inserts; so the global
//! sequence is gapless and in commit order, and no reader can see n+1 before n. One transaction
//! carries a whole group-commit batch (all appends queued in this process while the previous one
//! committed), so twelve appenders in one process cost one commit, not twelve.
//!
//! Subscriptions read by sequence only; `LISTEN`/`NOTIFY` on a per-schema channel just wakes the
//! follower early (a notification lost while disconnected costs a poll interval, not an event).
//! The notification is sent after the commit, from a session of its own ([`announce`]), so the
//! instance-wide lock PostgreSQL takes for a committing `NOTIFY` is never taken while the
//! ordering lock is held.
//!
//! Faults: a lost connection fails the batch in flight with STRATA-E2302 (outcome unknown: retry
//! with the same ids) and the next batch reconnects; `lock_timeout`,
//! `idle_in_transaction_session_timeout`, `statement_timeout` and TCP keepalives bound how long
//! a stuck or partitioned client can hold the ordering lock.

mod announce;
pub mod conn;
pub mod error;
pub mod import;
pub mod schema;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rkyv::util::AlignedVec;
use uuid::Uuid;

pub use conn::{PgEnv, PgOptions, SCHEMA_DEFAULT, check_schema};
pub use error::PgError;
pub use import::import_new_postgres;
pub use schema::{Migrated, SCHEMA_VERSION};

use crate::error::JournalError;
use crate::frame;
use crate::hash::Hash;
use crate::journal::{Journal, decode_head, encode_head};
use crate::note::check_origin;
use crate::record;
use crate::shared::SharedOrder;
use crate::store::{
    FrameBytes, FrameVisitor, JOURNAL_FORMAT, META_FORMAT, META_HEAD, META_ORIGIN, SnapshotEntries, Store,
};
use conn::{Target, cause, connect, resolve};

/// Rows a scan asks for per query. They arrive as a stream (each is handed on as soon as it is
/// read), so the page bounds only what a scan that stops early leaves the session to skip.
const SCAN_PAGE_ROWS: i64 = 8192;
/// Idle reader sessions kept open.
const READER_SESSIONS_MAX: usize = 4;
/// Rows a scan reads per query on a thread that drives an async runtime, where a page is read
/// whole on another thread before it is handed on ([`off_runtime`]).
const BUFFERED_PAGE_ROWS: i64 = 1024;
/// Rows a long scan's reading thread hands to the visiting thread at once ([`PgStore::scan_piped`]).
const PIPE_BATCH_ROWS: usize = 1024;
/// Batches on their way between the two threads: with the one being filled and the one being
/// visited, a long scan holds at most this many plus two batches in memory.
const PIPE_BATCHES: usize = 4;

/// Single-record frames read by a long scan's reading thread, concatenated.
#[derive(Default)]
struct Batch {
    /// Each frame's sequence and where it ends in `bytes`.
    frames: Vec<(u64, usize)>,
    bytes: Vec<u8>,
}

/// The statements an append runs, prepared once per writer session.
struct WriterStatements {
    /// The batch's rows and the head they leave, in one statement (one round trip).
    insert_and_head: postgres::Statement,
    insert: postgres::Statement,
    head: postgres::Statement,
}

struct WriterSession {
    client: Option<postgres::Client>,
    /// Prepared on `client` (dropped with it).
    statements: Option<WriterStatements>,
    /// The ordering lock is held (a transaction is open) and this is the head it found.
    holding: Option<(u64, Hash)>,
}

/// A reader session and the page query it prepared.
struct Reader {
    client: postgres::Client,
    page: Option<postgres::Statement>,
}

/// Table names, qualified with the schema.
struct Tables {
    events: String,
    head: String,
    meta: String,
    snapshots: String,
    index_snapshot: String,
    checkpoints: String,
    channel: String,
}

/// A journal store in a PostgreSQL schema.
pub struct PgStore {
    options: PgOptions,
    target: Target,
    location: PathBuf,
    t: Tables,
    writer: Mutex<WriterSession>,
    readers: Mutex<Vec<Reader>>,
    listener: Mutex<Option<postgres::Client>>,
    announcer: announce::Announcer,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("target", &self.target.label).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn hash_of(bytes: &[u8]) -> Hash {
    let mut h = [0u8; 32];
    if bytes.len() == 32 {
        h.copy_from_slice(bytes);
    }
    Hash(h)
}

fn seq_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Runs `f`, which uses the blocking client, where it may block. That client drives its
/// connection with a runtime of its own, which cannot start on a thread that drives another
/// (`strata mcp`, `strata serve`, the tasks of `strata run`): there `f` runs on a scoped thread
/// of its own and this one waits for it.
fn off_runtime<R: Send>(
    location: &Path,
    f: impl FnOnce() -> Result<R, JournalError> + Send,
) -> Result<R, JournalError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| {
        let worker = std::thread::Builder::new()
            .name("strata-journal-pg".into())
            .spawn_scoped(s, f)
            .map_err(|e| JournalError::io(location, e))?;
        match worker.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

impl PgStore {
    /// Connects to the journal described by `options` (the schema must exist at this binary's
    /// version; [`PgStore::migrate`] creates or upgrades it).
    pub fn connect(options: &PgOptions) -> Result<PgStore, JournalError> {
        off_runtime(Path::new(&options.schema), || PgStore::connect_here(options))
    }

    fn connect_here(options: &PgOptions) -> Result<PgStore, JournalError> {
        check_schema(&options.schema)?;
        let target = resolve(options)?;
        let s = &options.schema;
        let mut client = connect(&target, options)?;
        let location = PathBuf::from(&target.label);
        if schema::check(&mut client, s, &target.label)?.is_none() {
            return Err(JournalError::NotAJournal { path: location });
        }
        Ok(PgStore {
            t: Tables {
                events: format!("{s}.strata_events"),
                head: format!("{s}.strata_head"),
                meta: format!("{s}.strata_meta"),
                snapshots: format!("{s}.strata_snapshots"),
                index_snapshot: format!("{s}.strata_index_snapshot"),
                checkpoints: format!("{s}.strata_checkpoints"),
                channel: format!("strata_{s}"),
            },
            announcer: announce::Announcer::new(target.clone(), options.clone(), format!("strata_{s}")),
            options: options.clone(),
            location,
            target,
            writer: Mutex::new(WriterSession { client: Some(client), statements: None, holding: None }),
            readers: Mutex::new(Vec::new()),
            listener: Mutex::new(None),
        })
    }

    /// Creates the schema, or upgrades it through every migration this binary knows; a no-op
    /// when it is current. Refuses a schema newer than this binary.
    pub fn migrate(options: &PgOptions) -> Result<Migrated, JournalError> {
        off_runtime(Path::new(&options.schema), || {
            check_schema(&options.schema)?;
            let target = resolve(options)?;
            let mut client = connect(&target, options)?;
            Ok(schema::migrate(&mut client, &options.schema, &target.label)?)
        })
    }

    /// `postgresql://user@host:port/database#schema`, for messages.
    pub fn label(&self) -> &str {
        &self.target.label
    }

    /// The label of the journal `options` name, without connecting.
    pub fn label_of(options: &PgOptions) -> String {
        resolve(options).map_or_else(|_| format!("{}#{}", options.url, options.schema), |t| t.label)
    }

    /// The value of a server setting in this store's sessions (`SHOW`-style text), e.g.
    /// `lock_timeout`.
    pub fn session_setting(&self, name: &str) -> Result<String, JournalError> {
        self.read("a settings read", |c| c.query_one("SELECT current_setting($1)", &[&name]).map(|r| r.get(0)))
    }

    /// The options this store was opened with.
    pub fn options(&self) -> &PgOptions {
        &self.options
    }

    fn stmt_err(&self, during: &'static str, e: &postgres::Error) -> JournalError {
        if e.as_db_error().is_some_and(|d| d.code() == &postgres::error::SqlState::LOCK_NOT_AVAILABLE) {
            let ms = u64::try_from(self.options.lock_timeout.as_millis()).unwrap_or(u64::MAX);
            return PgError::LockTimeout { target: self.target.label.clone(), ms }.into();
        }
        PgError::Statement { target: self.target.label.clone(), during, cause: cause(e) }.into()
    }

    /// A reader session from the pool, or a new one.
    fn reader(&self) -> Result<Reader, JournalError> {
        let pooled = lock(&self.readers).pop();
        match pooled {
            Some(r) if !r.client.is_closed() => Ok(r),
            _ => Ok(Reader { client: connect(&self.target, &self.options)?, page: None }),
        }
    }

    /// Puts a healthy reader session back in the pool.
    fn give_back(&self, reader: Reader) {
        let mut pool = lock(&self.readers);
        if pool.len() < READER_SESSIONS_MAX && !reader.client.is_closed() {
            pool.push(reader);
        }
    }

    /// Runs `f` on a reader session (opened on demand, kept for reuse when healthy).
    fn read<R: Send>(
        &self,
        during: &'static str,
        f: impl FnOnce(&mut postgres::Client) -> Result<R, postgres::Error> + Send,
    ) -> Result<R, JournalError> {
        off_runtime(&self.location, || {
            let mut reader = self.reader()?;
            match f(&mut reader.client) {
                Ok(r) => {
                    self.give_back(reader);
                    Ok(r)
                }
                Err(e) => Err(self.stmt_err(during, &e)),
            }
        })
    }

    /// [`PgStore::scan_page`] for a thread that drives an async runtime: at most
    /// [`BUFFERED_PAGE_ROWS`] rows read whole ([`off_runtime`]), then handed on here.
    fn scan_page_buffered(&self, from: u64, f: &mut FrameVisitor<'_>) -> Result<(i64, bool), JournalError> {
        let sql = format!("SELECT seq, hash, record FROM {} WHERE seq >= $1 ORDER BY seq LIMIT $2", self.t.events);
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        let rows = self.read("a read", |c| c.query(&sql, &[&from, &BUFFERED_PAGE_ROWS]))?;
        let mut frame = Vec::new();
        for (n, row) in rows.iter().enumerate() {
            let (seq, hash, rec): (i64, &[u8], &[u8]) = (row.get(0), row.get(1), row.get(2));
            frame.clear();
            frame::write_single(&mut frame, &hash_of(hash), rec);
            if !f(seq_of(seq), &frame)? {
                return Ok((i64::try_from(n + 1).unwrap_or(i64::MAX), true));
            }
        }
        Ok((i64::try_from(rows.len()).unwrap_or(i64::MAX), false))
    }

    /// Streams the rows `seq >= from` (at most one page) to `f` as single-record frames; returns
    /// the rows seen and whether `f` asked to stop.
    fn scan_page(&self, from: u64, f: &mut FrameVisitor<'_>) -> Result<(i64, bool), JournalError> {
        use postgres::fallible_iterator::FallibleIterator as _;
        let mut reader = self.reader()?;
        let page = match reader.page.take() {
            Some(p) => p,
            None => {
                let sql =
                    format!("SELECT seq, hash, record FROM {} WHERE seq >= $1 ORDER BY seq LIMIT $2", self.t.events);
                reader.client.prepare(&sql).map_err(|e| self.stmt_err("a read", &e))?
            }
        };
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        let params: [&(dyn postgres::types::ToSql + Sync); 2] = [&from, &SCAN_PAGE_ROWS];
        let (mut seen, mut stopped) = (0i64, false);
        let mut frame = Vec::new();
        {
            let mut rows = reader.client.query_raw(&page, params).map_err(|e| self.stmt_err("a read", &e))?;
            while let Some(row) = rows.next().map_err(|e| self.stmt_err("a read", &e))? {
                seen += 1;
                let (seq, hash, rec): (i64, &[u8], &[u8]) = (row.get(0), row.get(1), row.get(2));
                frame::write_single(&mut frame, &hash_of(hash), rec);
                if !f(seq_of(seq), &frame)? {
                    stopped = true;
                    break;
                }
            }
        }
        // A page left unread is skipped by the session itself before its next statement.
        reader.page = Some(page);
        self.give_back(reader);
        Ok((seen, stopped))
    }

    /// The rest of a long scan, from `from`: pages are read and framed on a thread of their own
    /// while this thread visits the batches it already read, so the reading (the server's
    /// sending, the client's parsing) overlaps with what the visitor does with each record
    /// (replaying projections, mostly). A visitor that stops, or fails, drops the channel; the
    /// reading thread stops at its next batch and its session skips the rest of its page.
    fn scan_piped(&self, from: u64, f: &mut FrameVisitor<'_>) -> Result<(), JournalError> {
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Batch, JournalError>>(PIPE_BATCHES);
            let reading = std::thread::Builder::new()
                .name("strata-journal-pg-scan".into())
                .spawn_scoped(s, move || self.read_pages(from, &tx))
                .map_err(|e| JournalError::io(&self.location, e))?;
            let visited = (|| {
                for batch in rx.iter() {
                    let batch = batch?;
                    let mut start = 0;
                    for &(seq, end) in &batch.frames {
                        if !f(seq, &batch.bytes[start..end])? {
                            return Ok(());
                        }
                        start = end;
                    }
                }
                Ok(())
            })();
            drop(rx);
            match reading.join() {
                Ok(()) => visited,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// The reading side of [`PgStore::scan_piped`]: pages from `from` to the end, sent in
    /// batches of [`PIPE_BATCH_ROWS`]; a read error is sent as the last message.
    fn read_pages(&self, from: u64, tx: &std::sync::mpsc::SyncSender<Result<Batch, JournalError>>) {
        let mut batch = Batch::default();
        let mut next = from;
        loop {
            let mut last = None;
            let mut gone = false;
            let mut push = |seq, frame: &[u8]| {
                last = Some(seq);
                batch.bytes.extend_from_slice(frame);
                batch.frames.push((seq, batch.bytes.len()));
                if batch.frames.len() >= PIPE_BATCH_ROWS && tx.send(Ok(std::mem::take(&mut batch))).is_err() {
                    gone = true;
                    return Ok(false);
                }
                Ok(true)
            };
            match self.scan_page(next, &mut push) {
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
                Ok(_) if gone => return,
                Ok((seen, _)) if seen < SCAN_PAGE_ROWS => break,
                Ok(_) => {}
            }
            match last {
                Some(l) => next = l + 1,
                None => break,
            }
        }
        if !batch.frames.is_empty() {
            let _ = tx.send(Ok(batch));
        }
    }

    /// Writes the format marker and origin of a new journal; `AlreadyExists` if one is there.
    fn put_identity(&self, origin: &str) -> Result<(), JournalError> {
        let sql = format!(
            "INSERT INTO {} (name, value) VALUES ($1, $2), ($3, $4) ON CONFLICT (name) DO NOTHING",
            self.t.meta
        );
        let inserted = self.read("journal creation", |c| {
            c.execute(&sql, &[&META_FORMAT, &JOURNAL_FORMAT, &META_ORIGIN, &origin.as_bytes()])
        })?;
        if inserted != 2 {
            return Err(JournalError::AlreadyExists { path: self.location.clone() });
        }
        Ok(())
    }

    /// The writer's session, reconnected if it was lost.
    fn writer_client<'a>(&self, w: &'a mut WriterSession) -> Result<&'a mut postgres::Client, JournalError> {
        if w.client.as_ref().is_none_or(postgres::Client::is_closed) {
            w.client = None;
            w.statements = None;
            w.holding = None;
            w.client = Some(connect(&self.target, &self.options)?);
        }
        w.client.as_mut().ok_or_else(|| JournalError::corrupt(&self.location, None, "writer session missing"))
    }

    /// The writer's session and its prepared append statements (prepared on first use).
    fn writer_statements<'a>(
        &self,
        w: &'a mut WriterSession,
    ) -> Result<(&'a mut postgres::Client, &'a WriterStatements), JournalError> {
        self.writer_client(w)?;
        let WriterSession { client: Some(client), statements, .. } = w else {
            return Err(JournalError::corrupt(&self.location, None, "writer session missing"));
        };
        if statements.is_none() {
            let insert = format!(
                "INSERT INTO {} (seq, event_id, stream, version, event_type, hash, record)
                 SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::bigint[], $5::text[], $6::bytea[], $7::bytea[])",
                self.t.events
            );
            let head = format!("UPDATE {} SET last_seq = $1, last_hash = $2 WHERE id = 1", self.t.head);
            // A data-modifying WITH runs exactly once, whether or not the outer statement reads it.
            let both = format!(
                "WITH rows AS ({insert}) UPDATE {} SET last_seq = $8, last_hash = $9 WHERE id = 1",
                self.t.head
            );
            let prepared = client.prepare(&both).and_then(|both| {
                let insert = client.prepare(&insert)?;
                Ok(WriterStatements { insert_and_head: both, insert, head: client.prepare(&head)? })
            });
            *statements = Some(prepared.map_err(|e| self.stmt_err("an append", &e))?);
        }
        match statements {
            Some(st) => Ok((client, st)),
            None => Err(JournalError::corrupt(&self.location, None, "writer statements missing")),
        }
    }

    /// Ends the writer's transaction after a failure (the session is dropped if it is broken).
    fn abandon(&self, w: &mut WriterSession) {
        w.holding = None;
        if let Some(c) = w.client.as_mut()
            && (c.is_closed() || c.batch_execute("ROLLBACK").is_err())
        {
            w.client = None;
            w.statements = None;
        }
    }

    fn commit_locked(
        &self,
        w: &mut WriterSession,
        frames: &[(u64, Vec<u8>)],
        meta: &[(&str, Vec<u8>)],
    ) -> Result<(), JournalError> {
        let Some((held_seq, _)) = w.holding else {
            return Err(JournalError::corrupt(&self.location, None, "a commit without the ordering lock"));
        };
        let loc = self.location.clone();
        let (mut seqs, mut ids, mut streams, mut versions, mut types, mut hashes, mut recs) =
            (Vec::new(), Vec::<Uuid>::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (_, bytes) in frames {
            for entry in frame::entries(bytes).map_err(|e| JournalError::corrupt(&loc, None, e.to_string()))? {
                let (hash, raw) = entry.map_err(|e| JournalError::corrupt(&loc, None, e.to_string()))?;
                let rec = record::decode(raw).map_err(|e| JournalError::corrupt(&loc, None, e.to_string()))?;
                seqs.push(i64::try_from(rec.seq).unwrap_or(i64::MAX));
                ids.push(rec.id);
                streams.push(rec.stream);
                versions.push(i64::try_from(rec.version).unwrap_or(i64::MAX));
                types.push(rec.event_type);
                hashes.push(hash.0.to_vec());
                recs.push(raw);
            }
        }
        if seqs.first().is_some_and(|&s| seq_of(s) != held_seq + 1) {
            return Err(JournalError::corrupt(&loc, Some(held_seq + 1), "a batch does not follow the stored head"));
        }
        let (client, st) = self.writer_statements(w)?;
        let mut announce = None;
        let mut head = None;
        for (_, value) in meta.iter().filter(|(name, _)| *name == META_HEAD) {
            let (seq, hash) =
                decode_head(value).ok_or_else(|| JournalError::corrupt(&loc, None, "head record is malformed"))?;
            announce = Some(seq);
            head = Some((i64::try_from(seq).unwrap_or(i64::MAX), hash.0.to_vec()));
        }
        let executed = match (seqs.is_empty(), &head) {
            (false, Some((seq, hash))) => client
                .execute(&st.insert_and_head, &[&seqs, &ids, &streams, &versions, &types, &hashes, &recs, seq, hash])
                .map(drop),
            (false, None) => {
                client.execute(&st.insert, &[&seqs, &ids, &streams, &versions, &types, &hashes, &recs]).map(drop)
            }
            (true, Some((seq, hash))) => client.execute(&st.head, &[seq, hash]).map(drop),
            (true, None) => Ok(()),
        };
        executed.map_err(|e| self.stmt_err("an append", &e))?;
        for (name, value) in meta.iter().filter(|(name, _)| *name != META_HEAD) {
            let sql = format!(
                "INSERT INTO {} (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                self.t.meta
            );
            client.execute(&sql, &[name, value]).map_err(|e| self.stmt_err("an append", &e))?;
        }
        client.batch_execute("COMMIT").map_err(|e| self.stmt_err("a commit", &e))?;
        w.holding = None;
        if let Some(seq) = announce {
            self.announcer.announce(seq);
        }
        Ok(())
    }
}

impl Store for PgStore {
    fn commit(&self, frames: &[(u64, Vec<u8>)], meta: &[(&str, Vec<u8>)]) -> Result<(), JournalError> {
        let mut w = lock(&self.writer);
        let r = self.commit_locked(&mut w, frames, meta);
        if r.is_err() {
            self.abandon(&mut w);
        }
        r
    }

    fn sync(&self) -> Result<(), JournalError> {
        // A COMMIT returns once the server made it durable (at its `synchronous_commit`).
        Ok(())
    }

    fn scan_frames(&self, seq: u64, f: &mut FrameVisitor<'_>) -> Result<(), JournalError> {
        // Every row is a frame of one record: the frame containing `seq` starts at `seq`.
        let mut next = seq.max(1);
        let buffered = tokio::runtime::Handle::try_current().is_ok();
        let page_rows = if buffered { BUFFERED_PAGE_ROWS } else { SCAN_PAGE_ROWS };
        loop {
            let mut last = None;
            let mut visit = |first, bytes: &[u8]| {
                last = Some(first);
                f(first, bytes)
            };
            let (seen, stopped) =
                if buffered { self.scan_page_buffered(next, &mut visit)? } else { self.scan_page(next, &mut visit)? };
            if stopped || seen < page_rows {
                return Ok(());
            }
            match last {
                Some(l) => next = l + 1,
                None => return Ok(()),
            }
            // A scan longer than a page (a replay, a verify, an export) reads the rest on a
            // thread of its own while this one visits; a short one never starts that thread.
            if !buffered {
                return self.scan_piped(next, f);
            }
        }
    }

    fn frame_containing(&self, seq: u64) -> Result<Option<(u64, FrameBytes)>, JournalError> {
        let sql = format!("SELECT seq, hash, record FROM {} WHERE seq = $1", self.t.events);
        let at = i64::try_from(seq).unwrap_or(i64::MAX);
        let row = self.read("a read", |c| c.query_opt(&sql, &[&at]))?;
        Ok(row.map(|r| {
            let (s, hash, rec): (i64, &[u8], &[u8]) = (r.get(0), r.get(1), r.get(2));
            let mut f = Vec::with_capacity(rec.len() + 41);
            frame::write_single(&mut f, &hash_of(hash), rec);
            (seq_of(s), FrameBytes::Mem(Arc::from(f)))
        }))
    }

    fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, JournalError> {
        if name == META_HEAD {
            let sql = format!("SELECT last_seq, last_hash FROM {} WHERE id = 1", self.t.head);
            let row = self.read("a read", |c| c.query_opt(&sql, &[]))?;
            return Ok(row.and_then(|r| {
                let (seq, hash): (i64, &[u8]) = (r.get(0), r.get(1));
                (seq > 0).then(|| encode_head(seq_of(seq), &hash_of(hash)))
            }));
        }
        let sql = format!("SELECT value FROM {} WHERE name = $1", self.t.meta);
        let row = self.read("a read", |c| c.query_opt(&sql, &[&name]))?;
        Ok(row.map(|r| r.get::<_, Vec<u8>>(0)))
    }

    fn put_snapshot(&self, key: &[u8], value: &[u8]) -> Result<(), JournalError> {
        let sql = format!(
            "INSERT INTO {} (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            self.t.snapshots
        );
        self.read("a snapshot write", |c| c.execute(&sql, &[&key, &value]))?;
        Ok(())
    }

    fn snapshots(&self, prefix: &[u8]) -> Result<SnapshotEntries, JournalError> {
        let sql = format!("SELECT key, value FROM {} WHERE substr(key, 1, $2) = $1 ORDER BY key", self.t.snapshots);
        let len = i32::try_from(prefix.len()).unwrap_or(i32::MAX);
        let rows = self.read("a snapshot read", |c| c.query(&sql, &[&prefix, &len]))?;
        Ok(rows.iter().map(|r| (r.get::<_, Vec<u8>>(0), r.get::<_, Vec<u8>>(1))).collect())
    }

    fn delete_snapshot(&self, key: &[u8]) -> Result<(), JournalError> {
        let sql = format!("DELETE FROM {} WHERE key = $1", self.t.snapshots);
        self.read("a snapshot delete", |c| c.execute(&sql, &[&key]))?;
        Ok(())
    }

    fn save_index_snapshot(&self, sealed: &[u8]) -> Result<(), JournalError> {
        let sql = format!(
            "INSERT INTO {} (id, sealed) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET sealed = EXCLUDED.sealed",
            self.t.index_snapshot
        );
        self.read("an index snapshot write", |c| c.execute(&sql, &[&sealed]))?;
        Ok(())
    }

    fn load_index_snapshot(&self) -> Result<Option<AlignedVec<16>>, JournalError> {
        let sql = format!("SELECT sealed FROM {} WHERE id = 1", self.t.index_snapshot);
        let row = self.read("an index snapshot read", |c| c.query_opt(&sql, &[]))?;
        Ok(row.map(|r| {
            let b: &[u8] = r.get(0);
            let mut v = AlignedVec::<16>::with_capacity(b.len());
            v.extend_from_slice(b);
            v
        }))
    }

    fn location(&self) -> &Path {
        &self.location
    }

    fn shared_order(&self) -> Option<&dyn SharedOrder> {
        Some(self)
    }
}

impl PgStore {
    /// [`SharedOrder::lock_order`] on this thread.
    fn lock_order_here(&self) -> Result<(u64, Hash), JournalError> {
        let mut w = lock(&self.writer);
        if let Some(head) = w.holding {
            return Ok(head);
        }
        let sql =
            format!("BEGIN; SELECT last_seq, encode(last_hash, 'hex') FROM {} WHERE id = 1 FOR UPDATE", self.t.head);
        let client = self.writer_client(&mut w)?;
        let got = client.simple_query(&sql).map_err(|e| self.stmt_err("taking the ordering lock", &e));
        let msgs = match got {
            Ok(m) => m,
            Err(e) => {
                self.abandon(&mut w);
                return Err(e);
            }
        };
        let head = msgs.iter().find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => {
                let seq = r.get(0)?.parse::<u64>().ok()?;
                let hash = Hash::from_hex(r.get(1)?)?;
                Some((seq, hash))
            }
            _ => None,
        });
        match head {
            Some(h) => {
                w.holding = Some(h);
                Ok(h)
            }
            None => {
                self.abandon(&mut w);
                Err(JournalError::corrupt(&self.location, None, "the head row is missing or malformed"))
            }
        }
    }
}

impl SharedOrder for PgStore {
    fn lock_order(&self) -> Result<(u64, Hash), JournalError> {
        off_runtime(&self.location, || self.lock_order_here())
    }

    fn release_order(&self) {
        let _ = off_runtime(&self.location, || {
            let mut w = lock(&self.writer);
            if w.holding.is_some() {
                self.abandon(&mut w);
            }
            Ok(())
        });
    }

    fn wait_for_appends(&self, timeout: Duration) -> Result<Option<u64>, JournalError> {
        let mut l = lock(&self.listener);
        if l.as_ref().is_none_or(postgres::Client::is_closed) {
            *l = None;
            let mut c = connect(&self.target, &self.options)?;
            c.batch_execute(&format!("LISTEN {}", self.t.channel)).map_err(|e| self.stmt_err("LISTEN", &e))?;
            *l = Some(c);
            // Anything committed before LISTEN took effect is found by the read that follows.
            return Ok(Some(u64::MAX));
        }
        let Some(c) = l.as_mut() else { return Ok(None) };
        use postgres::fallible_iterator::FallibleIterator as _;
        // Each notification carries the head its commit left (a missing or odd one: unknown).
        let announced = |n: &postgres::Notification| n.payload().parse::<u64>().unwrap_or(u64::MAX);
        let waited = {
            let mut n = c.notifications();
            let woke = n.timeout_iter(timeout).next().map(|got| got.as_ref().map(announced));
            // Drain what else arrived: one read covers them all.
            if let Ok(Some(mut highest)) = woke {
                let mut drain = n.iter();
                while let Ok(Some(more)) = drain.next() {
                    highest = highest.max(announced(&more));
                }
                Ok(Some(highest))
            } else {
                woke
            }
        };
        match waited {
            Ok(w) => Ok(w),
            Err(e) => {
                *l = None;
                Err(self.stmt_err("waiting for notifications", &e))
            }
        }
    }

    fn save_note(&self, size: u64, note: &str) -> Result<(), JournalError> {
        self.save_note_row(size, note)
    }

    fn notes(&self) -> Result<Vec<(String, String)>, JournalError> {
        self.note_rows()
    }
}

impl PgStore {
    fn save_note_row(&self, size: u64, note: &str) -> Result<(), JournalError> {
        let sql = format!(
            "INSERT INTO {} (note_hash, size, note) VALUES ($1, $2, $3) ON CONFLICT (note_hash) DO NOTHING",
            self.t.checkpoints
        );
        let hash = blake3::hash(note.as_bytes());
        let size = i64::try_from(size).unwrap_or(i64::MAX);
        self.read("saving a checkpoint note", |c| c.execute(&sql, &[&hash.as_bytes().as_slice(), &size, &note]))?;
        Ok(())
    }

    fn note_rows(&self) -> Result<Vec<(String, String)>, JournalError> {
        let sql = format!("SELECT size, note FROM {} ORDER BY size, note LIMIT $1", self.t.checkpoints);
        let rows = self.read("reading checkpoint notes", |c| c.query(&sql, &[&crate::shared::NOTES_MAX]))?;
        Ok(rows
            .iter()
            .map(|r| {
                let (size, note): (i64, String) = (r.get(0), r.get(1));
                (format!("{} checkpoint note at size {size}", self.t.checkpoints), note)
            })
            .collect())
    }
}

impl Journal {
    /// Creates (or upgrades) the schema and a new journal named `origin` in it.
    /// [`JournalError::AlreadyExists`] if that schema already holds a journal.
    pub fn create_postgres(options: &PgOptions, origin: &str) -> Result<Journal, JournalError> {
        check_origin(origin)?;
        PgStore::migrate(options)?;
        let store = PgStore::connect(options)?;
        store.put_identity(origin)?;
        Journal::with_store(Arc::new(store))
    }

    /// Opens the journal in the PostgreSQL schema `options` names.
    pub fn open_postgres(options: &PgOptions) -> Result<Journal, JournalError> {
        let store = PgStore::connect(options)?;
        Journal::with_store(Arc::new(store))
    }

    /// [`Journal::open_postgres`] for a workspace whose journal directory on this machine is
    /// `dir` ([`Journal::dir`]): the appends deferred into `dir/pending/` (a write guard's
    /// denials that could not reach the journal in time, [`crate::pending`]) are appended now,
    /// and by every [`Journal::fold_pending`].
    pub fn open_postgres_at(options: &PgOptions, dir: &Path) -> Result<Journal, JournalError> {
        let store = PgStore::connect(options)?;
        let journal = Journal::with_store_at(Arc::new(store), dir)?;
        // As for sled: not being able to fold them now is no reason to refuse the open.
        let _ = journal.fold_pending();
        Ok(journal)
    }
}
