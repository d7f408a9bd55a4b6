//! An in-memory journal backend with crash semantics, for driving the real journal in a
//! simulation.
//!
//! Every write (frames and meta, projection snapshots, the index snapshot) is *pending* until
//! the next `sync`, which makes everything before it durable. A crash keeps the durable writes
//! and a prefix of the pending ones, in order (a disk may have written some of them), and may
//! tear the next one: the store's log checks each write with a blake3 checksum on recovery, as
//! sled's log does, so a torn write is discarded whole and counted. A sync can be made to fail
//! once (an injected flush failure). A crash also ends the journal that was running: every call
//! it makes afterwards fails, as a dead process writes nothing.
//!
//! One test-only defect can be switched on ([`Defects::sync_lies`]): `sync` reports success
//! without making anything durable. The simulation's invariants must catch it.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use rand::Rng as _;
use rand_chacha::ChaCha8Rng;
use rkyv::util::AlignedVec;
use strata_journal::store::{FrameVisitor, SnapshotEntries};
use strata_journal::{JournalError, MemStore, Store};

/// Deliberate defects, for showing that the invariants catch them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Defects {
    /// `sync` succeeds without making pending writes durable.
    pub sync_lies: bool,
    /// Claims are routed without the ledger's active writers (`ownership-storm`).
    pub ownership_check_off: bool,
    /// A warm session whose capsule went stale is resumed without reconciling it
    /// (`coordinator-faults`).
    pub stale_resume: bool,
    /// A failed attempt is retried at once, without the plan's backoff (`coordinator-faults`).
    pub no_backoff: bool,
}

#[derive(Clone, Debug)]
enum Op {
    Commit(Vec<(u64, Vec<u8>)>, Vec<(String, Vec<u8>)>),
    PutSnapshot(Vec<u8>, Vec<u8>),
    DeleteSnapshot(Vec<u8>),
    SaveIndex(Vec<u8>),
}

/// One write as the store's log holds it, with its checksum.
#[derive(Clone, Debug)]
struct Logged {
    op: Op,
    checksum: blake3::Hash,
}

impl Logged {
    fn new(op: Op) -> Logged {
        let checksum = blake3::hash(format!("{op:?}").as_bytes());
        Logged { op, checksum }
    }

    /// Whether the write reached the disk whole.
    fn intact(&self) -> bool {
        blake3::hash(format!("{:?}", self.op).as_bytes()) == self.checksum
    }
}

/// What a crash did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Crashed {
    /// Pending writes lost.
    pub dropped: usize,
    /// Pending writes that reached the disk anyway.
    pub kept: usize,
    /// A write torn in the middle and discarded by recovery.
    pub torn: bool,
}

struct State {
    origin: String,
    durable: Vec<Logged>,
    pending: Vec<Logged>,
    /// What reads see: durable and pending writes applied.
    visible: MemStore,
    /// Incremented by each crash; a handle of an older epoch is a dead process's.
    epoch: u64,
    fail_next_sync: bool,
    defects: Defects,
    torn_discarded: u64,
}

/// The simulated disk. [`CrashStore::handle`] gives the `Store` a journal opens.
#[derive(Clone)]
pub struct CrashStore {
    state: Arc<Mutex<State>>,
}

impl CrashStore {
    /// An empty journal disk for `origin`, with `defects`.
    pub fn new(origin: &str, defects: Defects) -> CrashStore {
        let state = State {
            origin: origin.to_owned(),
            durable: Vec::new(),
            pending: Vec::new(),
            visible: MemStore::new(origin),
            epoch: 0,
            fail_next_sync: false,
            defects,
            torn_discarded: 0,
        };
        CrashStore { state: Arc::new(Mutex::new(state)) }
    }

    /// A fresh disk with `defects` and the journal opened on it.
    pub fn open(defects: Defects) -> Result<(CrashStore, strata_journal::Journal), JournalError> {
        let disk = CrashStore::new("simulation", defects);
        let journal = strata_journal::Journal::with_store(disk.handle())?;
        Ok((disk, journal))
    }

    /// Power is lost ([`CrashStore::crash`]) and the journal opens again on what survived.
    pub fn crash_and_reopen(&self, rng: &mut ChaCha8Rng) -> (Crashed, Result<strata_journal::Journal, JournalError>) {
        let crashed = self.crash(rng);
        (crashed, strata_journal::Journal::with_store(self.handle()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A store for one run of the journal (until the next crash).
    pub fn handle(&self) -> Arc<dyn Store> {
        let epoch = self.lock().epoch;
        Arc::new(Handle { disk: self.clone(), epoch })
    }

    /// The next `sync` fails (once).
    pub fn fail_next_sync(&self) {
        self.lock().fail_next_sync = true;
    }

    /// Pending writes.
    pub fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    /// Torn writes recovery discarded so far.
    pub fn torn_discarded(&self) -> u64 {
        self.lock().torn_discarded
    }

    /// Power is lost: the running journal's handle dies; the durable writes survive with a
    /// prefix of the pending ones (drawn from `rng`), the next may be torn (then discarded).
    pub fn crash(&self, rng: &mut ChaCha8Rng) -> Crashed {
        let mut st = self.lock();
        st.epoch += 1;
        st.fail_next_sync = false;
        let pending = std::mem::take(&mut st.pending);
        let kept = if pending.is_empty() { 0 } else { rng.random_range(0..=pending.len()) };
        let mut torn = false;
        let mut survivors: Vec<Logged> = pending[..kept].to_vec();
        if kept < pending.len() && rng.random_bool(0.5) {
            // The next write reached the disk in part: its bytes no longer match its checksum.
            let mut half = pending[kept].clone();
            if let Op::Commit(frames, _) = &mut half.op
                && let Some((_, bytes)) = frames.last_mut()
            {
                let cut = bytes.len() / 2;
                bytes.truncate(cut);
            } else {
                half.checksum = blake3::hash(b"torn");
            }
            survivors.push(half);
            torn = true;
        }
        // Recovery: the log's writes in order, a torn one discarded whole.
        for w in survivors {
            if w.intact() {
                st.durable.push(w);
            } else {
                st.torn_discarded += 1;
            }
        }
        let visible = MemStore::new(&st.origin);
        for w in &st.durable {
            apply(&visible, &w.op);
        }
        st.visible = visible;
        Crashed { dropped: pending.len() - kept, kept, torn }
    }
}

fn apply(store: &MemStore, op: &Op) {
    // MemStore's writes cannot fail.
    let _ = match op {
        Op::Commit(frames, meta) => {
            let meta: Vec<(&str, Vec<u8>)> = meta.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
            store.commit(frames, &meta)
        }
        Op::PutSnapshot(k, v) => store.put_snapshot(k, v),
        Op::DeleteSnapshot(k) => store.delete_snapshot(k),
        Op::SaveIndex(b) => store.save_index_snapshot(b),
    };
}

struct Handle {
    disk: CrashStore,
    epoch: u64,
}

fn dead() -> JournalError {
    JournalError::Io {
        path: Path::new("<simulated disk>").to_path_buf(),
        source: std::io::Error::other("the process crashed; its handle writes nothing"),
    }
}

impl Handle {
    /// The disk's state, if this handle's process is still alive.
    fn live(&self) -> Result<std::sync::MutexGuard<'_, State>, JournalError> {
        let st = self.disk.lock();
        if st.epoch == self.epoch { Ok(st) } else { Err(dead()) }
    }

    fn write(&self, op: Op) -> Result<(), JournalError> {
        let mut st = self.live()?;
        apply(&st.visible, &op);
        st.pending.push(Logged::new(op));
        Ok(())
    }
}

impl Store for Handle {
    fn commit(&self, frames: &[(u64, Vec<u8>)], meta: &[(&str, Vec<u8>)]) -> Result<(), JournalError> {
        let meta = meta.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
        self.write(Op::Commit(frames.to_vec(), meta))
    }

    fn sync(&self) -> Result<(), JournalError> {
        let mut st = self.live()?;
        if std::mem::take(&mut st.fail_next_sync) {
            return Err(JournalError::Io {
                path: Path::new("<simulated disk>").to_path_buf(),
                source: std::io::Error::other("injected flush failure"),
            });
        }
        if !st.defects.sync_lies {
            let pending = std::mem::take(&mut st.pending);
            st.durable.extend(pending);
        }
        Ok(())
    }

    fn scan_frames(&self, seq: u64, f: &mut FrameVisitor<'_>) -> Result<(), JournalError> {
        let visible = self.live()?.visible.clone();
        visible.scan_frames(seq, f)
    }

    fn frame_containing(&self, seq: u64) -> Result<Option<(u64, strata_journal::store::FrameBytes)>, JournalError> {
        self.live()?.visible.frame_containing(seq)
    }

    fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, JournalError> {
        self.live()?.visible.meta(name)
    }

    fn put_snapshot(&self, key: &[u8], value: &[u8]) -> Result<(), JournalError> {
        self.write(Op::PutSnapshot(key.to_vec(), value.to_vec()))
    }

    fn snapshots(&self, prefix: &[u8]) -> Result<SnapshotEntries, JournalError> {
        self.live()?.visible.snapshots(prefix)
    }

    fn delete_snapshot(&self, key: &[u8]) -> Result<(), JournalError> {
        self.write(Op::DeleteSnapshot(key.to_vec()))
    }

    fn save_index_snapshot(&self, sealed: &[u8]) -> Result<(), JournalError> {
        self.write(Op::SaveIndex(sealed.to_vec()))
    }

    fn load_index_snapshot(&self) -> Result<Option<AlignedVec<16>>, JournalError> {
        self.live()?.visible.load_index_snapshot()
    }

    fn location(&self) -> &Path {
        Path::new("<simulated disk>")
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng as _;

    use super::*;

    fn frame(seq: u64) -> Vec<(u64, Vec<u8>)> {
        vec![(seq, vec![seq as u8; 32])]
    }

    #[test]
    fn synced_writes_survive_a_crash_unsynced_ones_may_not_and_a_dead_handle_writes_nothing() {
        let disk = CrashStore::new("t", Defects::default());
        let h = disk.handle();
        h.commit(&frame(1), &[]).expect("commit");
        h.sync().expect("sync");
        h.commit(&frame(2), &[]).expect("commit");
        assert_eq!(disk.pending(), 1);
        // Power loss with every pending write dropped (a seed whose draw keeps none).
        let mut kept_none = None;
        for seed in 0..64 {
            let probe = CrashStore::new("t", Defects::default());
            let ph = probe.handle();
            ph.commit(&frame(1), &[]).expect("commit");
            if probe.crash(&mut ChaCha8Rng::seed_from_u64(seed)).kept == 0 {
                kept_none = Some(seed);
                break;
            }
        }
        let crashed = disk.crash(&mut ChaCha8Rng::seed_from_u64(kept_none.expect("a seed keeps nothing")));
        assert_eq!((crashed.kept, crashed.dropped), (0, 1));
        let after = disk.handle();
        assert!(after.frame_containing(1).expect("read").is_some(), "the synced frame survived");
        assert!(after.frame_containing(2).expect("read").is_none_or(|(first, _)| first != 2));
        assert!(h.commit(&frame(3), &[]).is_err(), "the crashed process's handle is dead");
        // An injected flush failure fails one sync.
        disk.fail_next_sync();
        assert!(after.sync().is_err());
        assert!(after.sync().is_ok());
    }

    #[test]
    fn a_torn_write_is_discarded_whole_by_recovery() {
        let mut torn = 0;
        for seed in 0..64 {
            let disk = CrashStore::new("t", Defects::default());
            let h = disk.handle();
            h.commit(&frame(1), &[]).expect("commit");
            let c = disk.crash(&mut ChaCha8Rng::seed_from_u64(seed));
            if c.torn {
                torn += 1;
                assert_eq!(disk.torn_discarded(), 1);
                assert!(disk.handle().frame_containing(1).expect("read").is_none(), "no half frame is visible");
            }
        }
        assert!(torn > 0, "some seed tears the write");
    }
}
