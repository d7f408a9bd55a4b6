//! Full verification: every check the journal's integrity rests on, recomputed from stored bytes.
//!
//! The same [`Verifier`] runs over a sled journal (frames) and over an export or audit bundle
//! (lines), so both are held to identical rules:
//!
//! * every record decodes, and its bytes hash to the hash stored beside it (else: altered);
//! * sequences run 1, 2, 3 … with no gap, repeat or reordering;
//! * every `prev` equals the previous record's hash (the chain);
//! * stream versions run 1, 2, 3 … per stream; event ids are unique; payloads are compact JSON;
//! * the recorded head matches the last record;
//! * every checkpoint (checkpoint events in the journal, notes saved beside it, notes the auditor
//!   brings) has this journal's origin, a size not beyond the end, a root equal to the Merkle root
//!   recomputed at that size, and, when trusted keys are given, a valid signature by one of them;
//! * when trusted keys are given, each of them signed at least one good checkpoint: a history no
//!   trusted key ever signed is not verified, however well it chains (a rewrite re-chained end to
//!   end with its checkpoints stripped chains perfectly).
//!
//! The report also says how far the checkpoints reach ([`Coverage`]): the newest good checkpoint
//! of each trusted key and how many events lie beyond it, unattested.
//!
//! Problems are collected (up to [`PROBLEMS_MAX`]) rather than stopping at the first, and the
//! report names the first bad sequence.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use crate::error::JournalError;
use crate::frame;
use crate::hash::{Hash, event_hash, leaf_hash};
use crate::journal::{CHECKPOINT_EVENT_TYPE, checkpoint_note, checkpoints_dir, decode_head};
use crate::merkle::Frontier;
use crate::note::{Checkpoint, SignedNote, VerifierKey};
use crate::record::{self, validate_payload};
use crate::store::{META_HEAD, META_ORIGIN, Store};

/// Most problems a report lists.
pub const PROBLEMS_MAX: usize = 100;

/// One thing found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Sequence the problem is at, when it has one.
    pub seq: Option<u64>,
    /// Stable kind name (`altered`, `gap`, `order`, `chain`, `stream-version`, `duplicate-id`,
    /// `payload`, `undecodable`, `frame-key`, `head`, `truncated`, `checkpoint-root`,
    /// `checkpoint-origin`, `checkpoint-signature`, `checkpoint-note`, `unsigned-by-key`,
    /// `unattested`, `damaged`).
    pub kind: &'static str,
    /// What exactly is wrong.
    pub detail: String,
}

/// What was found for one checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointReport {
    /// Where the checkpoint came from (`event 1234`, a file path, `bundle`).
    pub source: String,
    /// Its size.
    pub size: u64,
    /// Recomputed root matched (false when the journal is shorter than `size`).
    pub root_matches: bool,
    /// Trusted keys with a valid signature on it (empty when none were given).
    pub signed_by: Vec<String>,
}

/// How far good checkpoints reach, by one trusted key or (without keys) by any checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reach {
    /// The key as `name+keyid` (hex), or `None` for "any good checkpoint" without keys.
    pub key: Option<String>,
    /// Size of the newest good checkpoint (root and origin right, signed by the key when there
    /// is one); `None` when there is none.
    pub size: Option<u64>,
    /// Events after that size that no such checkpoint covers. The checkpoint events that carry
    /// its own notes are not counted: their content is the signed note.
    pub unattested: u64,
}

/// What the checkpoints attest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coverage {
    /// Whether signatures were checked (trusted keys were given).
    pub signatures_checked: bool,
    /// With keys: one entry per trusted key. Without: one entry, any good checkpoint.
    pub reach: Vec<Reach>,
    /// The newest size attested by any trusted key (by any good checkpoint without keys).
    pub size: Option<u64>,
    /// Events after [`Coverage::size`], counted as in [`Reach::unattested`].
    pub unattested: u64,
    /// The first of those events, when there is one.
    pub first_unattested: Option<u64>,
}

/// The outcome of a verification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyReport {
    /// The journal's origin.
    pub origin: String,
    /// Records examined.
    pub events: u64,
    /// Hash of the last record examined.
    pub head_hash: Hash,
    /// Merkle root over every record examined.
    pub root: Hash,
    /// Distinct streams.
    pub streams: usize,
    /// Checkpoints checked.
    pub checkpoints: Vec<CheckpointReport>,
    /// Whether signatures were checked against trusted keys.
    pub signatures_checked: bool,
    /// How far the checkpoints reach and what lies beyond them.
    pub coverage: Coverage,
    /// Problems, in the order found (at most [`PROBLEMS_MAX`]).
    pub problems: Vec<Problem>,
    /// More problems existed than were listed.
    pub problems_truncated: bool,
    /// Lowest sequence any problem points at.
    pub first_bad_seq: Option<u64>,
}

impl VerifyReport {
    /// True when nothing is wrong.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// A report on a journal that could not be read at all (`detail` says why).
    pub fn damaged(origin: &str, detail: String) -> VerifyReport {
        VerifyReport {
            origin: origin.to_owned(),
            events: 0,
            head_hash: Hash::ZERO,
            root: crate::merkle::root(&[]),
            streams: 0,
            checkpoints: Vec::new(),
            signatures_checked: false,
            coverage: Coverage {
                signatures_checked: false,
                reach: Vec::new(),
                size: None,
                unattested: 0,
                first_unattested: None,
            },
            problems: vec![Problem { seq: None, kind: "damaged", detail }],
            problems_truncated: false,
            first_bad_seq: None,
        }
    }

    /// Makes an unattested tail a problem: every event must lie within a good checkpoint (signed
    /// by a trusted key when keys were given), apart from the checkpoint events after it.
    pub fn require_attested(&mut self) {
        let c = &self.coverage;
        if c.unattested == 0 {
            return;
        }
        let from = c.first_unattested.unwrap_or(c.size.unwrap_or(0) + 1);
        let by = if c.signatures_checked { "a checkpoint signed by a trusted key" } else { "a checkpoint" };
        let detail = format!(
            "{} event(s) after sequence {}, from sequence {from} on, are not covered by {by}; sign a checkpoint over them (`strata journal checkpoint --key K`), or leave out --require-attested to accept an unattested tail",
            c.unattested,
            c.size.unwrap_or(0),
        );
        if self.problems.len() < PROBLEMS_MAX {
            self.problems.push(Problem { seq: Some(from), kind: "unattested", detail });
        } else {
            self.problems_truncated = true;
        }
        self.first_bad_seq = self.problems.iter().filter_map(|p| p.seq).min();
    }
}

struct PendingCheckpoint {
    source: String,
    note: String,
}

/// Incremental verifier: feed records in stored order, then [`Verifier::finish`].
pub struct Verifier {
    origin: String,
    keys: Vec<VerifierKey>,
    next_seq: u64,
    prev: Hash,
    last_hash: Hash,
    leaves: Vec<Hash>,
    versions: HashMap<String, u64>,
    ids: HashSet<u128>,
    checkpoints: Vec<PendingCheckpoint>,
    /// Sequences of the checkpoint events and the notes they carry.
    checkpoint_events: Vec<(u64, String)>,
    problems: Vec<Problem>,
    truncated: bool,
}

impl Verifier {
    /// A verifier for the journal named `origin`, trusting `keys` for signatures.
    pub fn new(origin: &str, keys: Vec<VerifierKey>) -> Verifier {
        Verifier {
            origin: origin.to_owned(),
            keys,
            next_seq: 1,
            prev: Hash::ZERO,
            last_hash: Hash::ZERO,
            leaves: Vec::new(),
            versions: HashMap::new(),
            ids: HashSet::new(),
            checkpoints: Vec::new(),
            checkpoint_events: Vec::new(),
            problems: Vec::new(),
            truncated: false,
        }
    }

    fn problem(&mut self, seq: Option<u64>, kind: &'static str, detail: String) {
        if self.problems.len() >= PROBLEMS_MAX {
            self.truncated = true;
            return;
        }
        self.problems.push(Problem { seq, kind, detail });
    }

    /// Adds a signed checkpoint note to check at the end. The same note from several places
    /// (an event and a saved file, say) is checked once, naming every source.
    pub fn add_checkpoint(&mut self, source: &str, note: &str) {
        match self.checkpoints.iter_mut().find(|c| c.note == note) {
            Some(c) => {
                c.source.push_str(", ");
                c.source.push_str(source);
            }
            None => self.checkpoints.push(PendingCheckpoint { source: source.to_owned(), note: note.to_owned() }),
        }
    }

    /// Records a frame key that does not match the first record in the frame.
    pub fn frame_key_mismatch(&mut self, key_seq: u64, first_record_seq: Option<u64>) {
        self.problem(
            Some(key_seq),
            "frame-key",
            format!(
                "frame stored under sequence {key_seq} starts with {}",
                first_record_seq.map_or("an undecodable record".to_owned(), |s| format!("sequence {s}"))
            ),
        );
    }

    /// Feeds one stored record. `stored_hash` is the hash stored beside it (frames) or claimed
    /// for it (exports); `None` when the source has none.
    pub fn record(&mut self, stored_hash: Option<Hash>, raw: &[u8]) {
        let computed = event_hash(raw);
        let rec = match record::decode(raw) {
            Ok(r) => r,
            Err(e) => {
                let at = self.next_seq;
                self.problem(Some(at), "undecodable", format!("record at position {at} does not decode: {e}"));
                // Assume it occupied the expected slot so later records are still checked.
                self.accept(at, stored_hash.unwrap_or(computed), computed);
                return;
            }
        };
        let want = self.next_seq;
        if rec.seq > want {
            let detail = if rec.seq == want + 1 {
                format!("expected sequence {want}, found {}: sequence {want} is missing or out of place", rec.seq)
            } else {
                format!(
                    "expected sequence {want}, found {}: sequences {want}..={} are missing or out of place",
                    rec.seq,
                    rec.seq - 1
                )
            };
            self.problem(Some(want), "gap", detail);
            self.next_seq = rec.seq;
        } else if rec.seq < want {
            self.problem(
                Some(want),
                "order",
                format!("expected sequence {want}, found {} again (records reordered or repeated)", rec.seq),
            );
        }
        if let Some(stored) = stored_hash
            && stored != computed
        {
            self.problem(
                Some(rec.seq),
                "altered",
                format!("record {} does not hash to its recorded hash (its bytes were changed)", rec.seq),
            );
        }
        let chain_hash = stored_hash.unwrap_or(computed);
        if rec.seq == want && rec.prev != self.prev {
            self.problem(
                Some(rec.seq),
                "chain",
                format!("record {}'s prev hash does not match record {}'s hash", rec.seq, rec.seq.saturating_sub(1)),
            );
        }
        let version = self.versions.get(rec.stream).copied().unwrap_or(0);
        if rec.version != version + 1 {
            self.problem(
                Some(rec.seq),
                "stream-version",
                format!("stream {} goes from version {version} to {}", rec.stream, rec.version),
            );
        }
        self.versions.insert(rec.stream.to_owned(), rec.version.max(version));
        if !self.ids.insert(rec.id.as_u128()) {
            self.problem(Some(rec.seq), "duplicate-id", format!("event id {} was already used", rec.id));
        }
        if let Err(e) = validate_payload(rec.payload) {
            self.problem(Some(rec.seq), "payload", e.to_string());
        }
        if rec.event_type == CHECKPOINT_EVENT_TYPE {
            match checkpoint_note(&rec) {
                Some(note) => {
                    self.add_checkpoint(&format!("event {}", rec.seq), &note);
                    self.checkpoint_events.push((rec.seq, note));
                }
                None => self.problem(
                    Some(rec.seq),
                    "checkpoint-note",
                    format!("checkpoint event {} carries no note", rec.seq),
                ),
            }
        }
        if rec.seq >= want {
            self.accept(rec.seq, chain_hash, computed);
        }
    }

    fn accept(&mut self, seq: u64, chain_hash: Hash, computed: Hash) {
        self.prev = chain_hash;
        self.last_hash = computed;
        self.leaves.push(leaf_hash(&computed));
        self.next_seq = seq + 1;
    }

    /// Number of records fed so far (positions in the tree).
    pub fn events(&self) -> u64 {
        self.leaves.len() as u64
    }

    /// How far the good checkpoints reach, per trusted key (or for any checkpoint without keys).
    fn coverage(&self, events: u64, good: &[(u64, String, Vec<String>)]) -> Coverage {
        // A checkpoint event whose note is good and signed as `counts` accepts carries signed
        // content: it is not an unattested event.
        let carried = |seq: u64, counts: &dyn Fn(&[String]) -> bool| {
            self.checkpoint_events
                .iter()
                .any(|(s, note)| *s == seq && good.iter().any(|(_, whole, by)| counts(by) && whole == note))
        };
        let tail = |size: Option<u64>, counts: &dyn Fn(&[String]) -> bool| {
            let from = size.unwrap_or(0) + 1;
            let carried_after =
                self.checkpoint_events.iter().filter(|(s, _)| *s >= from && carried(*s, counts)).count() as u64;
            let unattested = events.saturating_sub(from - 1).saturating_sub(carried_after);
            (unattested, (from..=events).find(|s| !carried(*s, counts)))
        };
        let reach_of = |key: Option<String>, counts: &dyn Fn(&[String]) -> bool| {
            let size = good.iter().filter(|(_, _, by)| counts(by)).map(|(s, _, _)| *s).max();
            let (unattested, first) = tail(size, counts);
            (Reach { key, size, unattested }, first)
        };
        let (all, first_unattested) = if self.keys.is_empty() {
            reach_of(None, &|_| true)
        } else {
            reach_of(None, &|by: &[String]| !by.is_empty())
        };
        let reach: Vec<Reach> = if self.keys.is_empty() {
            vec![all.clone()]
        } else {
            self.keys
                .iter()
                .map(|k| {
                    let name = k.name().to_owned();
                    let key = format!("{}+{:08x}", k.name(), k.id());
                    reach_of(Some(key), &move |by: &[String]| by.contains(&name)).0
                })
                .collect()
        };
        Coverage {
            signatures_checked: !self.keys.is_empty(),
            reach,
            size: all.size,
            unattested: all.unattested,
            first_unattested,
        }
    }

    /// Finishes: checks the recorded head (if any) and every checkpoint.
    pub fn finish(mut self, recorded_head: Option<(u64, Hash)>) -> VerifyReport {
        let events = self.leaves.len() as u64;
        if let Some((seq, hash)) = recorded_head
            && (seq != self.next_seq - 1 || hash != self.last_hash)
        {
            let first = seq.min(self.next_seq - 1) + 1;
            self.problem(
                Some(first),
                "head",
                format!("the recorded head is sequence {seq}, the stored records end at {}", self.next_seq - 1),
            );
        }
        // Parse every checkpoint, then compute all needed roots in one pass over the leaves.
        let mut parsed = Vec::new();
        for cp in std::mem::take(&mut self.checkpoints) {
            match SignedNote::parse(&cp.note).and_then(|n| Checkpoint::parse_body(&n.text).map(|c| (n, c))) {
                Ok((note, body)) => parsed.push((cp.source, note, body, cp.note)),
                Err(e) => self.problem(None, "checkpoint-note", format!("checkpoint from {}: {e}", cp.source)),
            }
        }
        let mut sizes: BTreeMap<u64, Hash> =
            parsed.iter().filter(|(_, _, c, _)| c.size <= events).map(|(_, _, c, _)| (c.size, Hash::ZERO)).collect();
        let mut f = Frontier::new();
        if let Some(r) = sizes.get_mut(&0) {
            *r = f.root();
        }
        for leaf in &self.leaves {
            f.push_leaf(*leaf);
            if let Some(r) = sizes.get_mut(&f.size()) {
                *r = f.root();
            }
        }
        let root = f.root();
        parsed.sort_by_key(|(_, _, c, _)| c.size);
        let mut reports = Vec::new();
        let mut last_good_size = 0u64;
        // Good checkpoints: (size, the whole note, trusted signers).
        let mut good_notes: Vec<(u64, String, Vec<String>)> = Vec::new();
        for (source, note, cp, raw) in parsed {
            if cp.origin != self.origin {
                self.problem(
                    None,
                    "checkpoint-origin",
                    format!(
                        "checkpoint from {source} is for origin {:?}, this journal is {:?}",
                        cp.origin, self.origin
                    ),
                );
            }
            let signed_by = note.verified_by(&self.keys);
            if !self.keys.is_empty() && signed_by.is_empty() {
                self.problem(
                    None,
                    "checkpoint-signature",
                    format!("checkpoint from {source} (size {}) has no valid signature by a trusted key", cp.size),
                );
            }
            let root_matches = match sizes.get(&cp.size) {
                None => {
                    self.problem(
                        Some(events + 1),
                        "truncated",
                        format!("checkpoint from {source} covers {} events but only {events} are stored: sequences {}..={} were removed", cp.size, events + 1, cp.size),
                    );
                    false
                }
                Some(r) if *r == cp.root => {
                    last_good_size = last_good_size.max(cp.size);
                    true
                }
                Some(_) => {
                    // A record-level problem inside the range already explains the mismatch and
                    // pinpoints it; otherwise the range's start is the best lower bound.
                    let precise = self
                        .problems
                        .iter()
                        .filter_map(|p| p.seq)
                        .filter(|s| *s > last_good_size && *s <= cp.size)
                        .min();
                    self.problem(
                        Some(precise.unwrap_or(last_good_size + 1)),
                        "checkpoint-root",
                        format!(
                            "checkpoint from {source} signed a different Merkle root for the first {} events: a record in {}..={} was changed since it was signed",
                            cp.size,
                            last_good_size + 1,
                            cp.size
                        ),
                    );
                    false
                }
            };
            let good = root_matches && cp.origin == self.origin;
            reports.push(CheckpointReport { source, size: cp.size, root_matches, signed_by: signed_by.clone() });
            if good {
                good_notes.push((cp.size, raw, signed_by));
            }
        }
        let coverage = self.coverage(events, &good_notes);
        for r in &coverage.reach {
            if let (Some(key), None) = (&r.key, r.size) {
                self.problem(
                    None,
                    "unsigned-by-key",
                    format!(
                        "no checkpoint here is signed by trusted key {key}: nothing in this history is attested by it (a history rewritten and re-chained with its checkpoints removed looks like this); check the key, or sign a checkpoint with it (`strata journal checkpoint --key`)"
                    ),
                );
            }
        }
        let first_bad_seq = self.problems.iter().filter_map(|p| p.seq).min();
        VerifyReport {
            origin: self.origin,
            events,
            head_hash: self.last_hash,
            root,
            streams: self.versions.len(),
            checkpoints: reports,
            signatures_checked: !self.keys.is_empty(),
            coverage,
            problems: self.problems,
            problems_truncated: self.truncated,
            first_bad_seq,
        }
    }
}

/// Verifies everything stored in `store`, plus the notes in `notes_dir` (if given), the notes a
/// shared store keeps, and the caller's `extra` notes (source, text).
pub fn verify_store(
    store: &dyn Store,
    notes_dir: Option<&Path>,
    keys: Vec<VerifierKey>,
    extra: &[(String, String)],
) -> Result<VerifyReport, JournalError> {
    let loc = store.location().to_owned();
    let origin = store.meta(META_ORIGIN)?.and_then(|o| String::from_utf8(o).ok()).unwrap_or_default();
    let mut v = Verifier::new(&origin, keys);
    store.scan_frames(1, &mut |key_seq, bytes| {
        match frame::entries(bytes) {
            Err(e) => v.problem(Some(key_seq), "undecodable", format!("frame {key_seq} does not decode: {e}")),
            Ok(entries) => {
                let mut first = true;
                for entry in entries {
                    match entry {
                        Ok((hash, raw)) => {
                            if first {
                                let s = record::decode(raw).ok().map(|r| r.seq);
                                if s != Some(key_seq) {
                                    v.frame_key_mismatch(key_seq, s);
                                }
                                first = false;
                            }
                            v.record(Some(hash), raw);
                        }
                        Err(e) => {
                            v.problem(
                                Some(v.next_seq),
                                "undecodable",
                                format!(
                                    "frame {key_seq} is damaged after {} records: {e}",
                                    v.next_seq.saturating_sub(key_seq)
                                ),
                            );
                            break;
                        }
                    }
                }
            }
        }
        Ok(true)
    })?;
    if let Some(dir) = notes_dir {
        for (source, note) in read_notes(dir)? {
            v.add_checkpoint(&source, &note);
        }
    }
    // A shared store keeps its notes itself.
    if let Some(order) = store.shared_order() {
        for (source, note) in order.notes()? {
            v.add_checkpoint(&source, &note);
        }
    }
    for (source, note) in extra {
        v.add_checkpoint(source, note);
    }
    let head = match store.meta(META_HEAD)? {
        Some(h) => match decode_head(&h) {
            Some(head) => Some(head),
            None => {
                v.problem(None, "head", format!("the head record in {} is malformed", loc.display()));
                None
            }
        },
        None => None,
    };
    Ok(v.finish(head))
}

/// Every `*.note` file in `dir`, as (path, text), in name order.
pub fn read_notes(dir: &Path) -> Result<Vec<(String, String)>, JournalError> {
    use std::io::Read as _;
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(JournalError::io(dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| JournalError::io(dir, e))?;
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "note") {
            // The listing's own type (links not followed): what is not a regular file, a FIFO
            // above all (opening it would wait for a writer), is never opened and counts as a bad
            // note, like one over the size limit; a note is read to one byte past that limit.
            let meta = entry.metadata().map_err(|e| JournalError::io(&p, e))?;
            if !meta.is_file() || meta.len() > crate::limits::NOTE_BYTES_MAX as u64 {
                out.push((p.display().to_string(), String::new()));
                continue;
            }
            let mut text = String::new();
            std::fs::File::open(&p)
                .and_then(|f| f.take(crate::limits::NOTE_BYTES_MAX as u64 + 1).read_to_string(&mut text))
                .map_err(|e| JournalError::io(&p, e))?;
            out.push((p.display().to_string(), text));
        }
    }
    out.sort();
    Ok(out)
}

/// Verifies the journal in `dir` without building its index (so it also works on a journal too
/// damaged to open). Stored data too damaged for even that is a finding of the report (kind
/// `damaged`), not an error: the report is what the damage error tells the user to look at.
pub fn verify_dir(
    dir: &Path,
    options: &crate::OpenOptions,
    keys: Vec<VerifierKey>,
    extra: &[(String, String)],
) -> Result<VerifyReport, JournalError> {
    let (store, _lock) = match crate::journal::open_store_locked(dir, options) {
        Ok(opened) => opened,
        Err(JournalError::Corrupt { path, seq, detail }) => {
            let at = seq.map(|s| format!(" at sequence {s}")).unwrap_or_default();
            return Ok(VerifyReport::damaged(
                "",
                format!(
                    "the journal at {} cannot be read{at}: {detail}; nothing in it can be verified: restore it from an export (`strata journal import` into a new workspace)",
                    path.display()
                ),
            ));
        }
        Err(e) => return Err(e),
    };
    verify_store(&store, Some(&checkpoints_dir(dir)), keys, extra)
}
