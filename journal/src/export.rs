//! JSON-lines export and import, and offline audit bundles.
//!
//! An export is one JSON object per line:
//!
//! ```text
//! {"format":"strata-journal-export/1","kind":"export","origin":"…"}
//! {"seq":1,"id":"…","stream":"…","version":1,"type":"…","schema":1,"recorded_at":"…Z",
//!  "causation":null,"correlation":null,"payload":{…},"prev":"<hex>","hash":"<hex>"}
//! …
//! {"end":{"events":N,"head":"<hex>","root":"<hex>"}}
//! ```
//!
//! The payload is embedded byte for byte (it is compact JSON), and every other field maps to
//! exactly one record encoding, so an importer rebuilds the identical record bytes and hashes.
//! The `end` line makes a truncated file detectable. A bundle (`"kind":"bundle"`) adds
//! `{"checkpoint":"<signed note>"}`, `{"consistency":{"from":m,"to":n,"proof":[…]}}`,
//! `{"key":"<verifier key>"}` and `{"attestation":{"name":…,"value":…}}` lines before `end`.
//!
//! Import reads the file once, checks the whole of it (hashes, chain, sequences, stream versions,
//! ids, event types, the end line, and the checkpoints it carries against the events) and only
//! then builds the journal, from the checked bytes, in a temporary directory that is renamed
//! into place when complete ([`import_new`]): bad input creates nothing, and a killed import
//! leaves no journal or the whole one.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, Write};
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::value::RawValue;
use time::format_description::FormatItem;
use time::macros::format_description;
use uuid::Uuid;

use crate::error::JournalError;
use crate::hash::{Hash, leaf_hash};
use crate::journal::{CHECKPOINT_EVENT_TYPE, ExpectedVersion, Journal, StreamAppend, checkpoint_note};
use crate::limits::{EVENTS_PER_APPEND_MAX, IMPORT_LINE_BYTES_MAX};
use crate::merkle::{self, Frontier};
use crate::note::{Checkpoint, SignedNote, VerifierKey};
use crate::record::{EventData, Record, validate_event_type, validate_payload, validate_stream};
use crate::verify::{Verifier, VerifyReport};

const EXPORT_FORMAT: &str = "strata-journal-export/1";
const TIME_FORMAT: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:9]Z");

/// Renders ns since the epoch as RFC 3339 UTC with nine fractional digits.
pub fn format_time(ns: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns))
        .ok()
        .and_then(|t| t.format(TIME_FORMAT).ok())
        .unwrap_or_else(|| format!("@{ns}ns"))
}

/// Parses [`format_time`] output back to ns since the epoch.
pub fn parse_time(s: &str) -> Option<i64> {
    let t = time::PrimitiveDateTime::parse(s, TIME_FORMAT).ok()?.assume_utc();
    i64::try_from(t.unix_timestamp_nanos()).ok()
}

/// Problems with an export or bundle file. Nothing was appended when one is returned from the
/// checking pass.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// Reading failed.
    #[error("[STRATA-E0301] cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file ends before its `end` line.
    #[error(
        "[STRATA-E0302] {path} is truncated: it ends after line {line} without the closing \"end\" line; export it again"
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Last line read.
        line: u64,
    },
    /// A line is not what the format says.
    #[error("[STRATA-E0303] {path} line {line}: {detail}")]
    BadLine {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        detail: String,
    },
    /// An event type the importing program does not know.
    #[error(
        "[STRATA-E0304] {path} line {line}: event {seq} has unknown type {event_type:?} (schema {schema}); import it with a strata version that knows this type"
    )]
    UnknownEventType {
        /// The file.
        path: PathBuf,
        /// Line.
        line: u64,
        /// Sequence.
        seq: u64,
        /// The type.
        event_type: String,
        /// Its schema version.
        schema: u32,
    },
    /// The chain or a hash does not hold.
    #[error(
        "[STRATA-E0305] {path} line {line}: event {seq}: {detail}; the export was altered or damaged, nothing was imported"
    )]
    BrokenChain {
        /// The file.
        path: PathBuf,
        /// Line.
        line: u64,
        /// Sequence.
        seq: u64,
        /// What does not hold.
        detail: String,
    },
    /// The target journal is not empty.
    #[error("[STRATA-E0306] the target journal already holds {events} events; import only into a new, empty journal")]
    TargetNotEmpty {
        /// Events in the target.
        events: u64,
    },
    /// Something other than an empty directory is where the imported journal is to go.
    #[error(
        "[STRATA-E0306] {path} already exists and is not empty; import only into a new workspace (or move {path} away first)"
    )]
    TargetOccupied {
        /// Where the journal was to go.
        path: PathBuf,
    },
    /// The events do not match a signed checkpoint the export carries.
    #[error(
        "[STRATA-E0307] {path}: the events do not match the signed checkpoints the file carries ({detail}); the export was altered after it was signed: import an export of the original journal (nothing was imported)"
    )]
    CheckpointMismatch {
        /// The file.
        path: PathBuf,
        /// Every disagreement found (at most a few).
        detail: String,
    },
    /// Writing failed after the checks passed.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// The fields of any export or bundle line; which ones are present decides what the line is.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<'a> {
    // header
    format: Option<String>,
    kind: Option<String>,
    origin: Option<String>,
    // event
    seq: Option<u64>,
    id: Option<String>,
    stream: Option<String>,
    version: Option<u64>,
    #[serde(rename = "type")]
    event_type: Option<String>,
    schema: Option<u32>,
    recorded_at: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    causation: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    correlation: Option<Option<String>>,
    #[serde(borrow)]
    payload: Option<&'a RawValue>,
    prev: Option<String>,
    hash: Option<String>,
    // bundle extras
    checkpoint: Option<String>,
    consistency: Option<ConsistencyLine>,
    key: Option<String>,
    attestation: Option<Attestation>,
    // trailer
    end: Option<EndLine>,
}

fn nullable<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Ok(Some(Option::<String>::deserialize(d)?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsistencyLine {
    from: u64,
    to: u64,
    proof: Vec<String>,
}

/// A named value a bundle carries for the auditor (for example a projection state hash).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Attestation {
    /// What is attested.
    pub name: String,
    /// The value.
    pub value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EndLine {
    events: u64,
    head: String,
    root: String,
}

/// Writes one event line.
fn write_event(out: &mut dyn Write, rec: &Record<'_>, hash: &Hash) -> std::io::Result<()> {
    let opt = |u: Option<Uuid>| u.map_or("null".to_owned(), |u| format!("\"{u}\""));
    // Stream ids and types are restricted ASCII without quotes or backslashes: no escaping.
    write!(
        out,
        "{{\"seq\":{},\"id\":\"{}\",\"stream\":\"{}\",\"version\":{},\"type\":\"{}\",\"schema\":{},\"recorded_at\":\"{}\",\"causation\":{},\"correlation\":{},\"payload\":",
        rec.seq,
        rec.id,
        rec.stream,
        rec.version,
        rec.event_type,
        rec.schema_version,
        format_time(rec.recorded_at_ns),
        opt(rec.causation),
        opt(rec.correlation),
    )?;
    out.write_all(rec.payload)?;
    writeln!(out, ",\"prev\":\"{}\",\"hash\":\"{}\"}}", rec.prev, hash)
}

/// What an export wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportSummary {
    /// Events written.
    pub events: u64,
    /// Hash of the last event.
    pub head: Hash,
    /// Merkle root over all events.
    pub root: Hash,
}

fn export_io(e: std::io::Error) -> JournalError {
    JournalError::Io { path: PathBuf::from("<export output>"), source: e }
}

fn write_events(journal: &Journal, out: &mut dyn Write) -> Result<ExportSummary, JournalError> {
    let head = journal.head();
    let r = journal.scan(1, head.seq, |rec, hash| {
        write_event(out, rec, hash)?;
        Ok::<bool, std::io::Error>(true)
    })?;
    r.map_err(export_io)?;
    Ok(ExportSummary { events: head.seq, head: head.hash, root: head.root })
}

fn write_end(out: &mut dyn Write, s: &ExportSummary) -> Result<(), JournalError> {
    writeln!(out, "{{\"end\":{{\"events\":{},\"head\":\"{}\",\"root\":\"{}\"}}}}", s.events, s.head, s.root)
        .map_err(export_io)
}

fn write_header(out: &mut dyn Write, kind: &str, origin: &str) -> Result<(), JournalError> {
    let origin = serde_json::to_string(origin).map_err(|e| export_io(std::io::Error::other(e)))?;
    writeln!(out, "{{\"format\":\"{EXPORT_FORMAT}\",\"kind\":\"{kind}\",\"origin\":{origin}}}").map_err(export_io)
}

/// Writes the whole journal as JSON lines.
pub fn export_jsonl(journal: &Journal, out: &mut dyn Write) -> Result<ExportSummary, JournalError> {
    write_header(out, "export", journal.origin())?;
    let s = write_events(journal, out)?;
    write_end(out, &s)?;
    out.flush().map_err(export_io)?;
    Ok(s)
}

/// Writes an offline audit bundle: every event, every checkpoint note found in the journal,
/// consistency proofs between successive checkpoints, the given public keys and attestations.
pub fn export_bundle(
    journal: &Journal,
    out: &mut dyn Write,
    keys: &[VerifierKey],
    attestations: &[Attestation],
) -> Result<ExportSummary, JournalError> {
    write_header(out, "bundle", journal.origin())?;
    let s = write_events(journal, out)?;
    // Checkpoints come from the journal itself (checkpoint events) and from the notes directory.
    let mut notes: BTreeMap<(u64, String), ()> = BTreeMap::new();
    let r = journal.scan(1, s.events, |rec, _| {
        if let Some(note) = checkpoint_note(rec)
            && let Ok(cp) = SignedNote::parse(&note).and_then(|n| Checkpoint::parse_body(&n.text))
        {
            notes.insert((cp.size, note), ());
        }
        Ok::<bool, std::convert::Infallible>(true)
    })?;
    let Ok(()) = r;
    for (_, note) in journal.saved_notes()? {
        if let Ok(cp) = SignedNote::parse(&note).and_then(|n| Checkpoint::parse_body(&n.text)) {
            notes.insert((cp.size, note), ());
        }
    }
    let leaves: Vec<Hash> = journal.event_hashes()?.iter().map(leaf_hash).collect();
    let mut sizes: Vec<u64> = Vec::new();
    for (size, note) in notes.keys() {
        let line = serde_json::json!({ "checkpoint": note });
        writeln!(out, "{line}").map_err(export_io)?;
        if sizes.last() != Some(size) {
            sizes.push(*size);
        }
    }
    for pair in sizes.windows(2) {
        let (m, n) = (pair[0], pair[1]);
        if n > s.events {
            continue;
        }
        let (Ok(mu), Ok(nu)) = (usize::try_from(m), usize::try_from(n)) else { continue };
        if let Some(proof) = merkle::consistency_proof(mu, &leaves[..nu]) {
            let hexes: Vec<String> = proof.iter().map(Hash::to_hex).collect();
            let line = serde_json::json!({ "consistency": { "from": m, "to": n, "proof": hexes } });
            writeln!(out, "{line}").map_err(export_io)?;
        }
    }
    for k in keys {
        writeln!(out, "{}", serde_json::json!({ "key": k.to_text() })).map_err(export_io)?;
    }
    for a in attestations {
        writeln!(out, "{}", serde_json::json!({ "attestation": { "name": a.name, "value": a.value } }))
            .map_err(export_io)?;
    }
    write_end(out, &s)?;
    out.flush().map_err(export_io)?;
    Ok(s)
}

/// One event read back from an export.
struct ParsedEvent {
    data: EventData,
    stream: String,
    seq: u64,
    version: u64,
    prev: Hash,
    hash: Hash,
}

fn uuid_field(path: &std::path::Path, line: u64, field: &str, v: &str) -> Result<Uuid, ImportError> {
    let u = Uuid::parse_str(v).map_err(|_| bad(path, line, format!("field {field:?} is not a UUID: {v:?}")))?;
    if u.hyphenated().to_string() != v {
        return Err(bad(path, line, format!("field {field:?} must be a lower-case hyphenated UUID")));
    }
    Ok(u)
}

fn bad(path: &std::path::Path, line: u64, detail: impl Into<String>) -> ImportError {
    ImportError::BadLine { path: path.to_owned(), line, detail: detail.into() }
}

fn parse_event(path: &std::path::Path, line_no: u64, l: Line<'_>) -> Result<ParsedEvent, ImportError> {
    let need = |name: &str| bad(path, line_no, format!("event line lacks field {name:?}"));
    let seq = l.seq.ok_or_else(|| need("seq"))?;
    let id = uuid_field(path, line_no, "id", l.id.as_deref().ok_or_else(|| need("id"))?)?;
    let stream = l.stream.ok_or_else(|| need("stream"))?;
    validate_stream(&stream).map_err(|e| bad(path, line_no, e.to_string()))?;
    let version = l.version.ok_or_else(|| need("version"))?;
    let event_type = l.event_type.ok_or_else(|| need("type"))?;
    validate_event_type(&event_type).map_err(|e| bad(path, line_no, e.to_string()))?;
    let schema_version = l.schema.ok_or_else(|| need("schema"))?;
    let at = l.recorded_at.ok_or_else(|| need("recorded_at"))?;
    let recorded_at_ns = parse_time(&at).filter(|ns| format_time(*ns) == at).ok_or_else(|| {
        bad(path, line_no, format!("recorded_at {at:?} is not RFC 3339 UTC with nine fractional digits"))
    })?;
    let causation = match l.causation.ok_or_else(|| need("causation"))? {
        Some(c) => Some(uuid_field(path, line_no, "causation", &c)?),
        None => None,
    };
    let correlation = match l.correlation.ok_or_else(|| need("correlation"))? {
        Some(c) => Some(uuid_field(path, line_no, "correlation", &c)?),
        None => None,
    };
    let payload = l.payload.ok_or_else(|| need("payload"))?.get().as_bytes().to_vec();
    validate_payload(&payload).map_err(|e| bad(path, line_no, e.to_string()))?;
    let prev = l
        .prev
        .as_deref()
        .and_then(Hash::from_hex)
        .ok_or_else(|| bad(path, line_no, "field \"prev\" must be 64 hex digits"))?;
    let hash = l
        .hash
        .as_deref()
        .and_then(Hash::from_hex)
        .ok_or_else(|| bad(path, line_no, "field \"hash\" must be 64 hex digits"))?;
    Ok(ParsedEvent {
        data: EventData { id, event_type, schema_version, recorded_at_ns, causation, correlation, payload },
        stream,
        seq,
        version,
        prev,
        hash,
    })
}

impl ParsedEvent {
    fn record(&self) -> Record<'_> {
        Record {
            seq: self.seq,
            id: self.data.id,
            stream: &self.stream,
            version: self.version,
            event_type: &self.data.event_type,
            schema_version: self.data.schema_version,
            recorded_at_ns: self.data.recorded_at_ns,
            causation: self.data.causation,
            correlation: self.data.correlation,
            payload: &self.data.payload,
            prev: self.prev,
        }
    }
}

/// Reads lines with a length bound; calls `f(line_no, text)`.
fn for_each_line(
    path: &std::path::Path,
    reader: &mut dyn BufRead,
    mut f: impl FnMut(u64, &str) -> Result<bool, ImportError>,
) -> Result<u64, ImportError> {
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    loop {
        buf.clear();
        let n = std::io::Read::take(&mut *reader, IMPORT_LINE_BYTES_MAX as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| ImportError::Io { path: path.to_owned(), source: e })?;
        if n == 0 {
            return Ok(line_no);
        }
        line_no += 1;
        if buf.len() > IMPORT_LINE_BYTES_MAX {
            return Err(bad(path, line_no, format!("line is longer than {IMPORT_LINE_BYTES_MAX} bytes")));
        }
        if buf.last() != Some(&b'\n') {
            return Err(ImportError::Truncated { path: path.to_owned(), line: line_no });
        }
        buf.pop();
        let text = std::str::from_utf8(&buf).map_err(|_| bad(path, line_no, "line is not UTF-8"))?;
        if !f(line_no, text)? {
            return Ok(line_no);
        }
    }
}

/// What a checked export contains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportCheck {
    /// Origin from the header.
    pub origin: String,
    /// `export` or `bundle`.
    pub kind: String,
    /// Events.
    pub events: u64,
    /// Hash of the last event.
    pub head: Hash,
    /// Merkle root.
    pub root: Hash,
}

/// Checks an export completely without writing anything. `known(type, schema)` says whether
/// the importing program understands an event type.
pub fn check_export(
    path: &std::path::Path,
    reader: &mut dyn BufRead,
    known: &dyn Fn(&str, u32) -> bool,
) -> Result<ExportCheck, ImportError> {
    let mut header: Option<(String, String)> = None;
    let mut end: Option<EndLine> = None;
    let mut prev = Hash::ZERO;
    let mut next_seq = 1u64;
    let mut versions: HashMap<String, u64> = HashMap::new();
    let mut ids: HashSet<u128> = HashSet::new();
    let mut frontier = Frontier::new();
    // The checkpoints the export carries (in checkpoint events and bundle lines) are held to
    // verify's rules: origin, size within the events, the Merkle root at that size.
    let mut checkpoints: Option<Verifier> = None;
    let last_line = for_each_line(path, reader, |line_no, text| {
        if end.is_some() {
            return Err(bad(path, line_no, "text after the \"end\" line"));
        }
        let l: Line<'_> =
            serde_json::from_str(text).map_err(|e| bad(path, line_no, format!("not a valid export line: {e}")))?;
        if header.is_none() {
            let (Some(format), Some(kind), Some(origin)) = (l.format, l.kind, l.origin) else {
                return Err(bad(
                    path,
                    line_no,
                    "the first line must be the header with \"format\", \"kind\" and \"origin\"",
                ));
            };
            if format != EXPORT_FORMAT {
                return Err(bad(
                    path,
                    line_no,
                    format!("unsupported format {format:?}; this strata reads {EXPORT_FORMAT:?}"),
                ));
            }
            crate::note::check_origin(&origin).map_err(|e| bad(path, line_no, e.to_string()))?;
            checkpoints = Some(Verifier::new(&origin, Vec::new()));
            header = Some((kind, origin));
            return Ok(true);
        }
        if let Some(e) = l.end {
            end = Some(e);
            return Ok(true);
        }
        if let (Some(note), Some(v)) = (&l.checkpoint, checkpoints.as_mut()) {
            v.add_checkpoint(&format!("line {line_no}"), note);
            return Ok(true);
        }
        if l.consistency.is_some() || l.key.is_some() || l.attestation.is_some() {
            return Ok(true);
        }
        let ev = parse_event(path, line_no, l)?;
        if !(known(&ev.data.event_type, ev.data.schema_version) || ev.data.event_type == CHECKPOINT_EVENT_TYPE) {
            return Err(ImportError::UnknownEventType {
                path: path.to_owned(),
                line: line_no,
                seq: ev.seq,
                event_type: ev.data.event_type,
                schema: ev.data.schema_version,
            });
        }
        let broken =
            |detail: String| ImportError::BrokenChain { path: path.to_owned(), line: line_no, seq: ev.seq, detail };
        if ev.seq != next_seq {
            return Err(broken(format!("expected sequence {next_seq}")));
        }
        if ev.prev != prev {
            return Err(broken("prev does not match the hash of the event before it".into()));
        }
        let computed = ev.record().hash();
        if computed != ev.hash {
            return Err(broken("its fields do not hash to the recorded hash".into()));
        }
        let v = versions.entry(ev.stream.clone()).or_insert(0);
        if ev.version != *v + 1 {
            return Err(broken(format!("stream {} jumps from version {v} to {}", ev.stream, ev.version)));
        }
        *v += 1;
        if !ids.insert(ev.data.id.as_u128()) {
            return Err(broken(format!("event id {} is used twice", ev.data.id)));
        }
        if let Some(v) = checkpoints.as_mut() {
            v.record(Some(computed), &ev.record().encode());
        }
        frontier.push_event(&computed);
        prev = computed;
        next_seq += 1;
        Ok(true)
    })?;
    let Some((kind, origin)) = header else {
        return Err(ImportError::Truncated { path: path.to_owned(), line: last_line });
    };
    let Some(end) = end else {
        return Err(ImportError::Truncated { path: path.to_owned(), line: last_line });
    };
    let events = next_seq - 1;
    let root = frontier.root();
    if end.events != events || Hash::from_hex(&end.head) != Some(prev) || Hash::from_hex(&end.root) != Some(root) {
        return Err(bad(
            path,
            last_line,
            format!(
                "the \"end\" line says {} events with head {}, the file holds {events} with head {prev}",
                end.events, end.head
            ),
        ));
    }
    if let Some(v) = checkpoints {
        let report = v.finish(None);
        if !report.ok() {
            let shown: Vec<String> = report.problems.iter().take(3).map(|p| p.detail.clone()).collect();
            let more = report.problems.len().saturating_sub(shown.len());
            let mut detail = shown.join("; ");
            if more > 0 || report.problems_truncated {
                detail.push_str("; and more");
            }
            return Err(ImportError::CheckpointMismatch { path: path.to_owned(), detail });
        }
    }
    Ok(ExportCheck { origin, kind, events, head: prev, root })
}

/// An export checked completely, with the bytes it was checked from: loading reads those same
/// bytes, so a file that changes after it was read cannot slip anything past the checks.
pub struct CheckedExport<'a> {
    path: PathBuf,
    bytes: &'a [u8],
    check: ExportCheck,
}

impl CheckedExport<'_> {
    /// What the export holds.
    pub fn summary(&self) -> &ExportCheck {
        &self.check
    }
}

/// Checks an export held in memory (read once, whole, by the caller) completely.
pub fn check_bytes<'a>(
    path: &std::path::Path,
    bytes: &'a [u8],
    known: &dyn Fn(&str, u32) -> bool,
) -> Result<CheckedExport<'a>, ImportError> {
    let check = check_export(path, &mut &bytes[..], known)?;
    Ok(CheckedExport { path: path.to_owned(), bytes, check })
}

/// Loads a checked export into an empty journal of the same origin by appending every event again
/// through the normal write path; the writer assigns the same sequences, versions and chain, and
/// each resulting hash is compared with the exported one. The checkpoint notes the events carry
/// are saved beside the journal again ([`Journal::save_note`]).
pub fn load(journal: &Journal, checked: &CheckedExport<'_>) -> Result<(), ImportError> {
    let (path, check) = (checked.path.as_path(), &checked.check);
    let head = journal.head();
    if head.seq != 0 {
        return Err(ImportError::TargetNotEmpty { events: head.seq });
    }
    if check.origin != journal.origin() {
        return Err(bad(
            path,
            1,
            format!(
                "export origin {:?} differs from the target journal's origin {:?}; create the target with the export's origin",
                check.origin,
                journal.origin()
            ),
        ));
    }
    let mut reader = checked.bytes;
    let mut batch: Vec<StreamAppend> = Vec::new();
    let mut batch_events = 0usize;
    let mut expected: Vec<(u64, Hash)> = Vec::new();
    let mut waiting = Waiting::new();
    let mut header_seen = false;
    let flush = |batch: &mut Vec<StreamAppend>,
                 batch_events: &mut usize,
                 expected: &mut Vec<(u64, Hash)>,
                 waiting: &mut Waiting|
     -> Result<(), ImportError> {
        if batch.is_empty() {
            return Ok(());
        }
        let rx = journal.append_queued_blocking(std::mem::take(batch))?;
        waiting.push_back((rx, std::mem::take(expected)));
        *batch_events = 0;
        Ok(())
    };
    for_each_line(path, &mut reader, |line_no, text| {
        let l: Line<'_> = serde_json::from_str(text).map_err(|e| bad(path, line_no, e.to_string()))?;
        if !header_seen {
            header_seen = true;
            return Ok(true);
        }
        if l.end.is_some() {
            return Ok(false);
        }
        if l.checkpoint.is_some() || l.consistency.is_some() || l.key.is_some() || l.attestation.is_some() {
            return Ok(true);
        }
        let ev = parse_event(path, line_no, l)?;
        // Consecutive events of one stream share an entry; a stream seen earlier in the batch, or
        // a full batch, starts a new request so the global order is kept exactly.
        let same_as_last = batch.last().is_some_and(|s| s.stream == ev.stream);
        let seen_before = !same_as_last && batch.iter().any(|s| s.stream == ev.stream);
        if seen_before
            || batch_events >= EVENTS_PER_APPEND_MAX
            || (!same_as_last && batch.len() >= crate::limits::STREAMS_PER_APPEND_MAX)
        {
            flush(&mut batch, &mut batch_events, &mut expected, &mut waiting)?;
        }
        expected.push((ev.seq, ev.hash));
        match batch.last_mut() {
            Some(s) if s.stream == ev.stream => s.events.push(ev.data),
            _ => batch.push(StreamAppend {
                stream: ev.stream,
                expected: ExpectedVersion::Exact(ev.version - 1),
                events: vec![ev.data],
            }),
        }
        batch_events += 1;
        // Keep a bounded number of requests in flight.
        while waiting.len() > IMPORT_REQUESTS_IN_FLIGHT_MAX {
            settle(journal, path, &mut waiting)?;
        }
        Ok(true)
    })?;
    flush(&mut batch, &mut batch_events, &mut expected, &mut waiting)?;
    while !waiting.is_empty() {
        settle(journal, path, &mut waiting)?;
    }
    let head = journal.head();
    if head.seq != check.events || head.hash != check.head || head.root != check.root {
        return Err(
            JournalError::corrupt(path, Some(head.seq), "imported journal does not end at the exported head").into()
        );
    }
    let r = journal.scan(1, head.seq, |rec, _| {
        if let Some(note) = checkpoint_note(rec)
            && let Ok(cp) = SignedNote::parse(&note).and_then(|n| Checkpoint::parse_body(&n.text))
        {
            journal.save_note(cp.size, &note)?;
        }
        Ok::<bool, JournalError>(true)
    })?;
    r?;
    Ok(())
}

/// Most append requests an import keeps in flight.
const IMPORT_REQUESTS_IN_FLIGHT_MAX: usize = 64;

/// The name of the temporary directory an import into `target` builds its journal in. Nothing
/// opens it as a journal (journals are opened by their own name), and the next import into the
/// same target removes any left behind by an import that was killed.
fn import_temp_prefix(target: &std::path::Path) -> String {
    let name = target.file_name().map_or_else(|| "journal".into(), |n| n.to_string_lossy().into_owned());
    format!("{name}.importing-")
}

/// Imports a checked export as a new journal at `target`, all at once or not at all: the journal
/// is built in a temporary directory beside `target`, every file synced, then renamed into place
/// (an atomic step of the file system), and the parent directory synced. Killed at any moment,
/// an import leaves either no journal at `target` or the whole one; what a killed import left
/// beside it is removed by the next import. `target` must not exist, or be an empty directory.
pub fn import_new(
    checked: &CheckedExport<'_>,
    target: &std::path::Path,
    options: &crate::OpenOptions,
) -> Result<(), ImportError> {
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| JournalError::io(&parent, e))?;
    let prefix = import_temp_prefix(target);
    // One import at a time per target: holding this lock is what makes every temporary directory
    // found while holding it a leftover of a dead import.
    let lock = take_import_lock(&parent, target)?;
    remove_leftovers(&parent, &prefix)?;
    refuse_occupied(target)?;
    let temp = parent.join(format!("{prefix}{}", std::process::id()));
    let built = build(checked, &temp, options).and_then(|()| {
        sync_tree(&temp)?;
        std::fs::rename(&temp, target).map_err(|e| match e.kind() {
            std::io::ErrorKind::DirectoryNotEmpty | std::io::ErrorKind::AlreadyExists => {
                ImportError::TargetOccupied { path: target.to_owned() }
            }
            _ => ImportError::Journal(JournalError::io(target, e)),
        })?;
        sync_dir(&parent)
    });
    if built.is_err() {
        let _ = std::fs::remove_dir_all(&temp);
    }
    drop(lock);
    built
}

fn build(checked: &CheckedExport<'_>, temp: &std::path::Path, options: &crate::OpenOptions) -> Result<(), ImportError> {
    let journal = Journal::create(temp, &checked.check.origin, options)?;
    let loaded = load(&journal, checked);
    let closed = journal.close_blocking();
    drop(journal);
    loaded?;
    Ok(closed?)
}

/// Takes the import lock of a target: an exclusive lock on its parent directory itself (so no
/// lock file is created), one import at a time.
fn take_import_lock(parent: &std::path::Path, target: &std::path::Path) -> Result<std::fs::File, ImportError> {
    let f = std::fs::File::open(parent).map_err(|e| JournalError::io(parent, e))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(JournalError::Locked { path: target.to_owned(), holder: "another import".to_owned() }.into())
        }
        Err(std::fs::TryLockError::Error(e)) => Err(JournalError::io(parent, e).into()),
    }
}

fn refuse_occupied(target: &std::path::Path) -> Result<(), ImportError> {
    match std::fs::read_dir(target) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(ImportError::TargetOccupied { path: target.to_owned() });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(JournalError::io(target, e).into()),
    }
}

fn remove_leftovers(parent: &std::path::Path, prefix: &str) -> Result<(), ImportError> {
    let entries = std::fs::read_dir(parent).map_err(|e| JournalError::io(parent, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| JournalError::io(parent, e))?;
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else { continue };
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let p = entry.path();
        std::fs::remove_dir_all(&p).map_err(|e| JournalError::io(&p, e))?;
    }
    Ok(())
}

/// Syncs every file and directory under `dir`, then `dir` itself.
fn sync_tree(dir: &std::path::Path) -> Result<(), ImportError> {
    let entries = std::fs::read_dir(dir).map_err(|e| JournalError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| JournalError::io(dir, e))?;
        let p = entry.path();
        let t = entry.file_type().map_err(|e| JournalError::io(&p, e))?;
        if t.is_dir() {
            sync_tree(&p)?;
        } else if t.is_file() {
            std::fs::File::open(&p).and_then(|f| f.sync_all()).map_err(|e| JournalError::io(&p, e))?;
        }
    }
    sync_dir(dir)
}

fn sync_dir(dir: &std::path::Path) -> Result<(), ImportError> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| JournalError::io(dir, e).into())
}

type Waiting = std::collections::VecDeque<(tokio::sync::oneshot::Receiver<crate::AppendResult>, Vec<(u64, Hash)>)>;

fn settle(journal: &Journal, path: &std::path::Path, waiting: &mut Waiting) -> Result<(), ImportError> {
    let Some((rx, expected)) = waiting.pop_front() else { return Ok(()) };
    let appended = rx.blocking_recv().map_err(|_| JournalError::Closed)??;
    let appended = appended.map_err(|c| JournalError::corrupt(path, None, format!("import hit a conflict: {c}")))?;
    for (pos, (seq, hash)) in appended.positions.iter().zip(&expected) {
        if pos.seq != *seq {
            return Err(
                JournalError::corrupt(path, Some(*seq), format!("import placed event {seq} at {}", pos.seq)).into()
            );
        }
        let got = journal.hash_at(*seq)?;
        if got != Some(*hash) {
            return Err(
                JournalError::corrupt(path, Some(*seq), "imported event hashes differently from the export").into()
            );
        }
    }
    Ok(())
}

/// What verifying a bundle found.
#[derive(Clone, Debug)]
pub struct BundleReport {
    /// The same checks as `strata journal verify`, over the bundle's events and checkpoints.
    pub verify: VerifyReport,
    /// Consistency proofs: (from, to, verified).
    pub consistency: Vec<(u64, u64, bool)>,
    /// Keys named in the bundle (informational; trust comes from the caller's keys).
    pub bundle_keys: Vec<String>,
    /// Attestations in the bundle, for the caller to recompute and compare.
    pub attestations: Vec<Attestation>,
}

/// Verifies an audit bundle (or a plain export) offline. `on_event` sees every decoded event in
/// order (so the caller can replay projections and compare attestations).
pub fn verify_bundle(
    path: &std::path::Path,
    reader: &mut dyn BufRead,
    keys: Vec<VerifierKey>,
    on_event: &mut dyn FnMut(&Record<'_>, &Hash),
) -> Result<BundleReport, ImportError> {
    let mut verifier: Option<Verifier> = None;
    let mut end: Option<EndLine> = None;
    let mut notes: Vec<String> = Vec::new();
    let mut proofs: Vec<ConsistencyLine> = Vec::new();
    let mut bundle_keys = Vec::new();
    let mut attestations = Vec::new();
    let mut keys = Some(keys);
    let last = for_each_line(path, reader, |line_no, text| {
        if end.is_some() {
            return Err(bad(path, line_no, "text after the \"end\" line"));
        }
        let l: Line<'_> =
            serde_json::from_str(text).map_err(|e| bad(path, line_no, format!("not a valid bundle line: {e}")))?;
        let Some(v) = verifier.as_mut() else {
            let (Some(format), Some(origin)) = (l.format, l.origin) else {
                return Err(bad(path, line_no, "the first line must be the header"));
            };
            if format != EXPORT_FORMAT {
                return Err(bad(path, line_no, format!("unsupported format {format:?}")));
            }
            verifier = Some(Verifier::new(&origin, keys.take().unwrap_or_default()));
            return Ok(true);
        };
        if let Some(e) = l.end {
            end = Some(e);
        } else if let Some(n) = l.checkpoint {
            notes.push(n);
        } else if let Some(c) = l.consistency {
            proofs.push(c);
        } else if let Some(k) = l.key {
            bundle_keys.push(k);
        } else if let Some(a) = l.attestation {
            attestations.push(a);
        } else {
            let ev = parse_event(path, line_no, l)?;
            let rec = ev.record();
            let bytes = rec.encode();
            v.record(Some(ev.hash), &bytes);
            on_event(&rec, &ev.hash);
        }
        Ok(true)
    })?;
    let Some(mut v) = verifier else { return Err(ImportError::Truncated { path: path.to_owned(), line: last }) };
    let Some(end) = end else { return Err(ImportError::Truncated { path: path.to_owned(), line: last }) };
    let mut roots: BTreeMap<u64, Hash> = BTreeMap::new();
    for (i, n) in notes.iter().enumerate() {
        v.add_checkpoint(&format!("bundle checkpoint {}", i + 1), n);
        if let Ok(cp) = SignedNote::parse(n).and_then(|s| Checkpoint::parse_body(&s.text)) {
            roots.insert(cp.size, cp.root);
        }
    }
    let events = v.events();
    let report = v.finish(None);
    let mut verify = report;
    if end.events != events
        || Hash::from_hex(&end.head) != Some(verify.head_hash)
        || Hash::from_hex(&end.root) != Some(verify.root)
    {
        verify.problems.push(crate::verify::Problem {
            seq: Some(events.min(end.events) + 1),
            kind: "truncated",
            detail: format!(
                "the bundle's end line says {} events with root {}, its events give {events} with root {}",
                end.events, end.root, verify.root
            ),
        });
        verify.first_bad_seq = verify.problems.iter().filter_map(|p| p.seq).min();
    }
    let mut consistency = Vec::new();
    for c in proofs {
        let proof: Option<Vec<Hash>> = c.proof.iter().map(|h| Hash::from_hex(h)).collect();
        let ok = match (proof, roots.get(&c.from), roots.get(&c.to)) {
            (Some(p), Some(a), Some(b)) => merkle::verify_consistency(c.from, c.to, a, b, &p),
            _ => false,
        };
        if !ok {
            verify.problems.push(crate::verify::Problem {
                seq: None,
                kind: "consistency",
                detail: format!(
                    "consistency proof from size {} to {} does not verify against the bundle's checkpoints",
                    c.from, c.to
                ),
            });
        }
        consistency.push((c.from, c.to, ok));
    }
    Ok(BundleReport { verify, consistency, bundle_keys, attestations })
}
