//! Storage backends behind the journal: where frames, meta values and snapshots live.
//!
//! The journal logic (sequencing, chaining, indexing, verification) is the same for every
//! backend; a backend only stores bytes atomically and makes them durable. Two exist:
//!
//! * [`SledStore`], the embedded default. Frames and meta values share the `journal` tree so one
//!   single-tree sled transaction writes a whole group-commit batch; projection snapshots live in
//!   the `snapshots` tree, outside the tamper-evident content.
//! * [`MemStore`], in memory, for tests and simulation.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rkyv::util::AlignedVec;

use crate::body::Segment;

use crate::error::JournalError;
use crate::frame::{FRAME_PREFIX, frame_key, frame_key_seq};
use crate::hash::Hash;

/// What an acknowledged append survives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// sled `flush()` (`sync_file_range` on Linux): survives a crash of the process; not a power
    /// loss or a kernel crash with a volatile disk cache.
    Process,
    /// `flush()` plus `fdatasync` of sled's data file and any new blob files: survives power loss
    /// on hardware that honours cache flushes.
    Power,
}

impl Durability {
    /// `process` or `power`.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Process => "process",
            Durability::Power => "power",
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "process" => Ok(Durability::Process),
            "power" => Ok(Durability::Power),
            other => Err(format!("durability must be \"process\" or \"power\", not {other:?}")),
        }
    }
}

/// Bytes of one stored frame.
#[derive(Clone, Debug)]
pub enum FrameBytes {
    /// Zero-copy from sled.
    Sled(sled::IVec),
    /// From memory.
    Mem(Arc<[u8]>),
}

impl AsRef<[u8]> for FrameBytes {
    fn as_ref(&self) -> &[u8] {
        match self {
            FrameBytes::Sled(v) => v,
            FrameBytes::Mem(v) => v,
        }
    }
}

/// Meta keys are `m` + name in the journal tree.
pub(crate) const META_PREFIX: u8 = b'm';
pub(crate) const META_FORMAT: &str = "format";
pub(crate) const META_ORIGIN: &str = "origin";
pub(crate) const META_HEAD: &str = "head";
pub(crate) const JOURNAL_FORMAT: &[u8] = b"strata-journal/1";

/// Visitor of stored frames: `(first sequence, frame bytes)`; returns `Ok(false)` to stop.
pub type FrameVisitor<'a> = dyn FnMut(u64, &[u8]) -> Result<bool, JournalError> + 'a;

/// Stored snapshots as `(key, value)` pairs.
pub type SnapshotEntries = Vec<(Vec<u8>, Vec<u8>)>;

/// A storage backend. Only the writer calls [`Store::commit`]; reads may come from any thread.
pub trait Store: Send + Sync + 'static {
    /// Writes `frames` (first sequence, encoded frame) and `meta` (name, value) atomically.
    fn commit(&self, frames: &[(u64, Vec<u8>)], meta: &[(&str, Vec<u8>)]) -> Result<(), JournalError>;
    /// Makes everything committed so far durable at the store's level.
    fn sync(&self) -> Result<(), JournalError>;
    /// Calls `f(first_seq, frame)` for the frame containing `seq` (if any) and every later frame,
    /// in order, until `f` returns `Ok(false)`.
    fn scan_frames(&self, seq: u64, f: &mut FrameVisitor<'_>) -> Result<(), JournalError>;
    /// The frame containing `seq`, if stored.
    fn frame_containing(&self, seq: u64) -> Result<Option<(u64, FrameBytes)>, JournalError>;
    /// A meta value.
    fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, JournalError>;
    /// Writes snapshot `key`.
    fn put_snapshot(&self, key: &[u8], value: &[u8]) -> Result<(), JournalError>;
    /// Snapshots whose key starts with `prefix`, in key order.
    fn snapshots(&self, prefix: &[u8]) -> Result<SnapshotEntries, JournalError>;
    /// Deletes snapshot `key`.
    fn delete_snapshot(&self, key: &[u8]) -> Result<(), JournalError>;
    /// Deletes several snapshot entries; a backend should do it without reading their values.
    fn delete_snapshots(&self, keys: &[Vec<u8>]) -> Result<(), JournalError> {
        keys.iter().try_for_each(|k| self.delete_snapshot(k))
    }
    /// Keys of the snapshot entries whose key starts with `prefix`, in key order; a backend
    /// should list them without reading their values.
    fn snapshot_keys(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, JournalError> {
        Ok(self.snapshots(prefix)?.into_iter().map(|(k, _)| k).collect())
    }
    /// The snapshot entry `key`, if stored.
    fn snapshot(&self, key: &[u8]) -> Result<Option<Vec<u8>>, JournalError> {
        Ok(self.snapshots(key)?.into_iter().find(|(k, _)| k == key).map(|(_, v)| v))
    }
    /// Stores snapshot chunks, each named by the blake3 hash of its bytes (see
    /// [`crate::snapshot`]). By default they are snapshot entries under [`CHUNK_PREFIX`].
    fn put_chunks(&self, chunks: &[([u8; 32], &[u8])]) -> Result<(), JournalError> {
        chunks.iter().try_for_each(|(h, bytes)| self.put_snapshot(&chunk_key(h), bytes))
    }
    /// The chunk named `hash`, if stored (its bytes are checked by the reader, not here).
    fn chunk(&self, hash: &[u8; 32]) -> Result<Option<Vec<u8>>, JournalError> {
        self.snapshot(&chunk_key(hash))
    }
    /// The chunk named `hash` when it is stored and exactly `len` bytes long, as a body segment.
    /// Its bytes are checked by the reader, not here. A backend that can hand the bytes over
    /// without copying them should.
    fn chunk_segment(&self, hash: &[u8; 32], len: usize) -> Result<Option<Segment>, JournalError> {
        Ok(self.chunk(hash)?.filter(|b| b.len() == len).map(Segment::Bytes))
    }
    /// Names of every stored chunk.
    fn chunk_hashes(&self) -> Result<Vec<[u8; 32]>, JournalError> {
        Ok(self.snapshot_keys(CHUNK_PREFIX)?.iter().filter_map(|k| k[CHUNK_PREFIX.len()..].try_into().ok()).collect())
    }
    /// Deletes chunks.
    fn delete_chunks(&self, hashes: &[[u8; 32]]) -> Result<(), JournalError> {
        self.delete_snapshots(&hashes.iter().map(chunk_key).collect::<Vec<_>>())
    }
    /// Replaces the journal index snapshot (sealed bytes).
    fn save_index_snapshot(&self, sealed: &[u8]) -> Result<(), JournalError>;
    /// The journal index snapshot, in 16-aligned memory so rkyv can validate it in place.
    fn load_index_snapshot(&self) -> Result<Option<AlignedVec<16>>, JournalError>;
    /// The directory backing the store (for messages), or a label.
    fn location(&self) -> &Path;
    /// The ordering lock of a store other processes append to as well (a database server);
    /// `None` for a store this process owns alone.
    fn shared_order(&self) -> Option<&dyn crate::shared::SharedOrder> {
        None
    }
}

/// Prefix of the snapshot entries that hold chunks where a backend keeps them with the other
/// snapshot entries; no projection name starts with a zero byte.
pub const CHUNK_PREFIX: &[u8] = b"\0chunk\0";

fn chunk_key(hash: &[u8; 32]) -> Vec<u8> {
    let mut k = CHUNK_PREFIX.to_vec();
    k.extend_from_slice(hash);
    k
}

/// A chunk's file, opened without following a link or waiting on a FIFO put in its place, with
/// its length; `None` when there is none or it is not a regular file (as good as missing: the
/// snapshot is discarded and rebuilt).
fn open_chunk(path: &Path) -> Result<Option<(std::fs::File, u64)>, JournalError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
        Err(e) => return Err(JournalError::io(path, e)),
    };
    let meta = file.metadata().map_err(|e| JournalError::io(path, e))?;
    Ok(meta.is_file().then_some((file, meta.len())))
}

/// Removes what is at `path` in the chunk directory, a directory with all it holds; a failure
/// leaves it to the next collection.
fn remove_entry(path: &Path) {
    let _ = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        _ => std::fs::remove_file(path),
    };
}

fn meta_key(name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + name.len());
    k.push(META_PREFIX);
    k.extend_from_slice(name.as_bytes());
    k
}

/// Largest index snapshot file read (about 40 bytes per event: 100M events).
pub const INDEX_SNAPSHOT_BYTES_MAX: u64 = 4 * 1024 * 1024 * 1024;

/// The sled backend.
pub struct SledStore {
    dir: PathBuf,
    index_path: PathBuf,
    chunk_dir: PathBuf,
    db: sled::Db,
    journal: sled::Tree,
    snapshots: sled::Tree,
    durability: Durability,
    data_file: Option<File>,
    synced_blobs: Mutex<BTreeSet<std::ffi::OsString>>,
}

impl SledStore {
    /// Opens (or creates) sled in `dir`. sled can panic on a damaged directory; the panic is
    /// caught and reported as [`JournalError::Corrupt`].
    pub fn open(dir: &Path, durability: Durability, cache_bytes: u64) -> Result<SledStore, JournalError> {
        let config = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .flush_every_ms(None)
            .mode(sled::Mode::HighThroughput);
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| config.open()));
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(sled::Error::Io(e))) => return Err(JournalError::io(dir, e)),
            Ok(Err(e)) => return Err(JournalError::corrupt(dir, None, format!("sled cannot open it: {e}"))),
            Err(_) => return Err(JournalError::corrupt(dir, None, "sled panicked while recovering the directory")),
        };
        let journal = db.open_tree("journal").map_err(|e| JournalError::storage(dir, e))?;
        let snapshots = db.open_tree("snapshots").map_err(|e| JournalError::storage(dir, e))?;
        let data_file = match durability {
            Durability::Process => None,
            Durability::Power => {
                let p = dir.join("db");
                Some(File::open(&p).map_err(|e| JournalError::io(&p, e))?)
            }
        };
        Ok(SledStore {
            dir: dir.to_owned(),
            index_path: dir.parent().unwrap_or(dir).join("index.snapshot"),
            chunk_dir: dir.parent().unwrap_or(dir).join("snapshot-chunks"),
            db,
            journal,
            snapshots,
            durability,
            data_file,
            synced_blobs: Mutex::new(BTreeSet::new()),
        })
    }

    /// Writes a meta value outside a batch and flushes (used at creation).
    pub(crate) fn put_meta(&self, name: &str, value: &[u8]) -> Result<(), JournalError> {
        self.journal.insert(meta_key(name), value).map_err(|e| JournalError::storage(&self.dir, e))?;
        self.sync()
    }

    /// The underlying tree of frames and meta values, for tooling and tamper tests.
    pub fn journal_tree(&self) -> &sled::Tree {
        &self.journal
    }

    fn sync_new_blobs(&self) -> Result<(), JournalError> {
        let blobs = self.dir.join("blobs");
        let entries = match std::fs::read_dir(&blobs) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(JournalError::io(&blobs, e)),
        };
        let mut synced = self.synced_blobs.lock().unwrap_or_else(PoisonError::into_inner);
        let mut present = BTreeSet::new();
        let mut any_new = false;
        for entry in entries {
            let entry = entry.map_err(|e| JournalError::io(&blobs, e))?;
            let name = entry.file_name();
            if !synced.contains(&name) {
                let p = entry.path();
                match File::open(&p) {
                    Ok(f) => f.sync_data().map_err(|e| JournalError::io(&p, e))?,
                    // sled may garbage-collect a blob between the listing and the open.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(JournalError::io(&p, e)),
                }
                any_new = true;
            }
            present.insert(name);
        }
        if any_new {
            File::open(&blobs).and_then(|d| d.sync_all()).map_err(|e| JournalError::io(&blobs, e))?;
        }
        *synced = present;
        Ok(())
    }
}

impl Store for SledStore {
    fn commit(&self, frames: &[(u64, Vec<u8>)], meta: &[(&str, Vec<u8>)]) -> Result<(), JournalError> {
        let mut batch = sled::Batch::default();
        for (seq, bytes) in frames {
            batch.insert(&frame_key(*seq), bytes.as_slice());
        }
        for (name, value) in meta {
            batch.insert(meta_key(name), value.as_slice());
        }
        // One single-tree transaction: sled makes it atomic, also across a crash. The writer is
        // the only one writing this tree, so the closure never conflicts and runs once.
        self.journal
            .transaction(|tx| {
                tx.apply_batch(&batch)?;
                Ok::<(), sled::transaction::ConflictableTransactionError<()>>(())
            })
            .map_err(|e| match e {
                sled::transaction::TransactionError::Storage(e) => JournalError::storage(&self.dir, e),
                sled::transaction::TransactionError::Abort(()) => {
                    JournalError::corrupt(&self.dir, None, "sled aborted a journal transaction that has no abort path")
                }
            })
    }

    fn sync(&self) -> Result<(), JournalError> {
        self.db.flush().map_err(|e| JournalError::storage(&self.dir, e))?;
        if self.durability == Durability::Power {
            if let Some(f) = &self.data_file {
                f.sync_data().map_err(|e| JournalError::io(&self.dir.join("db"), e))?;
            }
            self.sync_new_blobs()?;
        }
        Ok(())
    }

    fn scan_frames(&self, seq: u64, f: &mut FrameVisitor<'_>) -> Result<(), JournalError> {
        let start = match self.frame_containing(seq)? {
            Some((first, _)) => first,
            None => seq,
        };
        let end = [FRAME_PREFIX + 1];
        for item in self.journal.range(frame_key(start).to_vec()..end.to_vec()) {
            let (k, v) = item.map_err(|e| JournalError::storage(&self.dir, e))?;
            let Some(first) = frame_key_seq(&k) else { continue };
            if !f(first, &v)? {
                break;
            }
        }
        Ok(())
    }

    fn frame_containing(&self, seq: u64) -> Result<Option<(u64, FrameBytes)>, JournalError> {
        let key = frame_key(seq);
        let lower = [FRAME_PREFIX];
        match self.journal.range(lower.to_vec()..=key.to_vec()).next_back() {
            Some(Ok((k, v))) => Ok(frame_key_seq(&k).map(|s| (s, FrameBytes::Sled(v)))),
            Some(Err(e)) => Err(JournalError::storage(&self.dir, e)),
            None => Ok(None),
        }
    }

    fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, JournalError> {
        Ok(self.journal.get(meta_key(name)).map_err(|e| JournalError::storage(&self.dir, e))?.map(|v| v.to_vec()))
    }

    fn put_snapshot(&self, key: &[u8], value: &[u8]) -> Result<(), JournalError> {
        self.snapshots.insert(key, value).map_err(|e| JournalError::storage(&self.dir, e))?;
        self.db.flush().map_err(|e| JournalError::storage(&self.dir, e))?;
        Ok(())
    }

    fn snapshots(&self, prefix: &[u8]) -> Result<SnapshotEntries, JournalError> {
        self.snapshots
            .scan_prefix(prefix)
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).map_err(|e| JournalError::storage(&self.dir, e)))
            .collect()
    }

    fn delete_snapshot(&self, key: &[u8]) -> Result<(), JournalError> {
        self.delete_snapshots(&[key.to_vec()])
    }

    fn delete_snapshots(&self, keys: &[Vec<u8>]) -> Result<(), JournalError> {
        if keys.is_empty() {
            return Ok(());
        }
        // A batch removal, unlike `Tree::remove`, does not hand back (so does not read) the old
        // values.
        let mut batch = sled::Batch::default();
        for k in keys {
            batch.remove(k.as_slice());
        }
        self.snapshots.apply_batch(batch).map_err(|e| JournalError::storage(&self.dir, e))
    }

    fn snapshot_keys(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, JournalError> {
        self.snapshots
            .scan_prefix(prefix)
            .keys()
            .map(|r| r.map(|k| k.to_vec()).map_err(|e| JournalError::storage(&self.dir, e)))
            .collect()
    }

    fn snapshot(&self, key: &[u8]) -> Result<Option<Vec<u8>>, JournalError> {
        Ok(self.snapshots.get(key).map_err(|e| JournalError::storage(&self.dir, e))?.map(|v| v.to_vec()))
    }

    // Chunks are files, one per chunk, beside sled: deleting one frees its disk at once, where a
    // sled value would wait for sled to rewrite its segment (and large sled leaves are rewritten
    // whole, as blob files, on every change). A chunk is derived data checked against its name
    // on every read, so a torn write is a missing chunk, not a trusted one: no fsync.
    fn put_chunks(&self, chunks: &[([u8; 32], &[u8])]) -> Result<(), JournalError> {
        if chunks.is_empty() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.chunk_dir).map_err(|e| JournalError::io(&self.chunk_dir, e))?;
        for (h, bytes) in chunks {
            let path = self.chunk_dir.join(Hash(*h).to_hex());
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, bytes).map_err(|e| JournalError::io(&tmp, e))?;
            std::fs::rename(&tmp, &path).map_err(|e| JournalError::io(&path, e))?;
        }
        Ok(())
    }

    fn chunk(&self, hash: &[u8; 32]) -> Result<Option<Vec<u8>>, JournalError> {
        let path = self.chunk_dir.join(Hash(*hash).to_hex());
        let Some((file, len)) = open_chunk(&path)? else { return Ok(None) };
        // No cut makes a chunk longer than the largest: a longer file is not one strata wrote.
        if len > crate::snapshot::CHUNK_BYTES_MAX as u64 {
            return Ok(None);
        }
        let mut bytes = Vec::with_capacity(len as usize);
        std::io::Read::read_to_end(&mut std::io::Read::take(file, len), &mut bytes)
            .map_err(|e| JournalError::io(&path, e))?;
        Ok(Some(bytes))
    }

    fn chunk_segment(&self, hash: &[u8; 32], len: usize) -> Result<Option<Segment>, JournalError> {
        let path = self.chunk_dir.join(Hash(*hash).to_hex());
        let Some((file, stored)) = open_chunk(&path)? else { return Ok(None) };
        if stored != len as u64 {
            return Ok(None);
        }
        if len == 0 {
            return Ok(Some(Segment::Bytes(Vec::new())));
        }
        #[allow(unsafe_code)]
        // SAFETY: a mapping is undefined behaviour only if the file changes under it. A chunk
        // file is written under a temporary name and renamed into place, never written again,
        // and removed by unlinking, which leaves a mapping intact; `open_chunk` took only a
        // regular file (never a device or FIFO) of the length the manifest lists, and nothing
        // built from a chunk is used before every byte of it has been checked against the chunk's
        // hash (`snapshot::Pending`). Only a process that truncates a chunk file in place while it
        // is mapped could make a read of it fail (SIGBUS); nothing in strata does.
        // The length is given, so the mapping asks the file system nothing more (one `statx`
        // fewer per chunk: about 1,900 at 116k artifacts).
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(&file) }.map_err(|e| JournalError::io(&path, e))?;
        Ok(Some(Segment::Mapped(std::sync::Arc::new(map))))
    }

    fn chunk_hashes(&self) -> Result<Vec<[u8; 32]>, JournalError> {
        let entries = match std::fs::read_dir(&self.chunk_dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(JournalError::io(&self.chunk_dir, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| JournalError::io(&self.chunk_dir, e))?;
            // Anything that is not a chunk's name (a `.tmp` left by a crash) is removed, and so is
            // anything under a chunk's name that no save writes (a link, a FIFO, a directory, a
            // file longer than any chunk): a load counts it as missing, and listing it as held
            // would keep the next save from writing the chunk in its place.
            let name = entry.file_name();
            let chunk =
                entry.metadata().is_ok_and(|m| m.is_file() && m.len() <= crate::snapshot::CHUNK_BYTES_MAX as u64);
            match name.to_str().and_then(Hash::from_hex) {
                Some(h) if chunk => out.push(h.0),
                _ => remove_entry(&entry.path()),
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    fn delete_chunks(&self, hashes: &[[u8; 32]]) -> Result<(), JournalError> {
        for h in hashes {
            let path = self.chunk_dir.join(Hash(*h).to_hex());
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => remove_entry(&path),
                _ => match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(JournalError::io(&path, e)),
                },
            }
        }
        Ok(())
    }

    fn save_index_snapshot(&self, sealed: &[u8]) -> Result<(), JournalError> {
        // Write beside, sync, rename over: a crash leaves the old snapshot or the new one.
        let tmp = self.index_path.with_extension("snapshot.tmp");
        let mut f = File::create(&tmp).map_err(|e| JournalError::io(&tmp, e))?;
        std::io::Write::write_all(&mut f, sealed).and_then(|()| f.sync_all()).map_err(|e| JournalError::io(&tmp, e))?;
        std::fs::rename(&tmp, &self.index_path).map_err(|e| JournalError::io(&self.index_path, e))?;
        if let Some(parent) = self.index_path.parent() {
            File::open(parent).and_then(|d| d.sync_all()).map_err(|e| JournalError::io(parent, e))?;
        }
        Ok(())
    }

    fn load_index_snapshot(&self) -> Result<Option<AlignedVec<16>>, JournalError> {
        let mut f = match File::open(&self.index_path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(JournalError::io(&self.index_path, e)),
        };
        let len = f.metadata().map_err(|e| JournalError::io(&self.index_path, e))?.len();
        if len > INDEX_SNAPSHOT_BYTES_MAX {
            return Ok(None);
        }
        let mut buf = AlignedVec::<16>::with_capacity(usize::try_from(len).unwrap_or(0));
        buf.extend_from_reader(&mut f).map_err(|e| JournalError::io(&self.index_path, e))?;
        Ok(Some(buf))
    }

    fn location(&self) -> &Path {
        &self.dir
    }
}

#[derive(Default)]
struct MemState {
    index_snapshot: Option<Vec<u8>>,
    frames: BTreeMap<u64, Arc<[u8]>>,
    meta: BTreeMap<String, Vec<u8>>,
    snapshots: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// In-memory backend. Everything committed is immediately "durable".
#[derive(Default, Clone)]
pub struct MemStore {
    state: Arc<Mutex<MemState>>,
}

impl MemStore {
    /// An empty store that already carries the journal format marker and `origin`.
    pub fn new(origin: &str) -> MemStore {
        let s = MemStore::default();
        {
            let mut st = s.lock();
            st.meta.insert(META_FORMAT.to_owned(), JOURNAL_FORMAT.to_vec());
            st.meta.insert(META_ORIGIN.to_owned(), origin.as_bytes().to_vec());
        }
        s
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Store for MemStore {
    fn commit(&self, frames: &[(u64, Vec<u8>)], meta: &[(&str, Vec<u8>)]) -> Result<(), JournalError> {
        let mut st = self.lock();
        for (seq, bytes) in frames {
            st.frames.insert(*seq, Arc::from(bytes.as_slice()));
        }
        for (name, value) in meta {
            st.meta.insert((*name).to_owned(), value.clone());
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), JournalError> {
        Ok(())
    }

    fn scan_frames(&self, seq: u64, f: &mut FrameVisitor<'_>) -> Result<(), JournalError> {
        let start = self.lock().frames.range(..=seq).next_back().map(|(k, _)| *k).unwrap_or(seq);
        let mut next = start;
        loop {
            // Copy one frame at a time so `f` runs without the lock held.
            let item = self.lock().frames.range(next..).next().map(|(k, v)| (*k, v.clone()));
            let Some((first, bytes)) = item else { return Ok(()) };
            if !f(first, &bytes)? {
                return Ok(());
            }
            next = first + 1;
        }
    }

    fn frame_containing(&self, seq: u64) -> Result<Option<(u64, FrameBytes)>, JournalError> {
        Ok(self.lock().frames.range(..=seq).next_back().map(|(k, v)| (*k, FrameBytes::Mem(v.clone()))))
    }

    fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, JournalError> {
        Ok(self.lock().meta.get(name).cloned())
    }

    fn put_snapshot(&self, key: &[u8], value: &[u8]) -> Result<(), JournalError> {
        self.lock().snapshots.insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn snapshots(&self, prefix: &[u8]) -> Result<SnapshotEntries, JournalError> {
        Ok(self
            .lock()
            .snapshots
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn delete_snapshot(&self, key: &[u8]) -> Result<(), JournalError> {
        self.lock().snapshots.remove(key);
        Ok(())
    }

    fn save_index_snapshot(&self, sealed: &[u8]) -> Result<(), JournalError> {
        self.lock().index_snapshot = Some(sealed.to_vec());
        Ok(())
    }

    fn load_index_snapshot(&self) -> Result<Option<AlignedVec<16>>, JournalError> {
        Ok(self.lock().index_snapshot.as_ref().map(|b| {
            let mut v = AlignedVec::<16>::with_capacity(b.len());
            v.extend_from_slice(b);
            v
        }))
    }

    fn location(&self) -> &Path {
        Path::new("<memory>")
    }
}
