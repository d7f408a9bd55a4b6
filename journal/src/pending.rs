//! Appends a process had to defer because it could not reach the journal's writer in time.
//!
//! Why this exists: a decision that must be recorded (a write guard's denial) can be made while
//! the journal's owner is stopped, killed or slow. Losing the record would leave the audit blind
//! to exactly the cases that matter, and waiting for the owner would let the decision come too
//! late. So the decider writes the event durably into `<journal dir>/pending/` (one file per
//! event, named by its id, written to a temporary name, synced, renamed, the directory synced)
//! and the next process that opens the journal appends it ([`fold`]), or the running owner does
//! when it next looks ([`crate::Journal::fold_pending`]).
//!
//! Idempotency by event id makes folding safe to repeat: a file is removed only after its event
//! is durable, and a crash between the two appends nothing twice. A file that does not parse or
//! validate is moved aside to `pending/rejected/`, never silently dropped and never retried
//! forever.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::JournalError;
use crate::journal::{ExpectedVersion, Journal, StreamAppend};
use crate::record::EventData;

/// The directory, inside a journal directory, holding deferred appends.
pub const PENDING_DIR: &str = "pending";
/// Largest deferred-append file read (a payload is at most 256 KiB; JSON escaping may grow it).
pub const PENDING_FILE_BYTES_MAX: u64 = 2 * 1024 * 1024;
/// Most deferred appends folded by one call (the rest wait for the next).
pub const PENDING_FILES_MAX: usize = 4_096;

/// One deferred event, as stored.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Deferred {
    stream: String,
    id: String,
    event_type: String,
    schema_version: u32,
    recorded_at_ns: i64,
    causation: Option<String>,
    correlation: Option<String>,
    payload: Box<serde_json::value::RawValue>,
}

/// `<journal dir>/pending/`.
pub fn pending_dir(journal_dir: &Path) -> PathBuf {
    journal_dir.join(PENDING_DIR)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |e| JournalError::io(path, e)
}

/// Writes `event` for `stream` durably into `journal_dir`'s pending directory, to be appended by
/// the next [`fold`]. The event is checked as an append would check it.
pub fn defer(journal_dir: &Path, stream: &str, event: &EventData) -> Result<PathBuf, JournalError> {
    crate::record::validate_stream(stream)?;
    event.validate()?;
    let payload = serde_json::value::RawValue::from_string(String::from_utf8_lossy(&event.payload).into_owned())
        .map_err(|e| JournalError::io(journal_dir, std::io::Error::other(e)))?;
    let record = Deferred {
        stream: stream.to_owned(),
        id: event.id.to_string(),
        event_type: event.event_type.clone(),
        schema_version: event.schema_version,
        recorded_at_ns: event.recorded_at_ns,
        causation: event.causation.map(|u| u.to_string()),
        correlation: event.correlation.map(|u| u.to_string()),
        payload,
    };
    let bytes = serde_json::to_vec(&record).map_err(|e| JournalError::io(journal_dir, std::io::Error::other(e)))?;
    let dir = pending_dir(journal_dir);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let tmp = dir.join(format!("{}.tmp", event.id));
    let done = dir.join(format!("{}.json", event.id));
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(&tmp).map_err(io(&tmp))?;
    f.write_all(&bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, &done).map_err(io(&done))?;
    std::fs::File::open(&dir).and_then(|d| d.sync_all()).map_err(io(&dir))?;
    Ok(done)
}

/// How many deferred appends wait in `journal_dir`.
pub fn count(journal_dir: &Path) -> usize {
    std::fs::read_dir(pending_dir(journal_dir))
        .map_or(0, |entries| entries.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".json")).count())
}

fn read(path: &Path) -> Result<(String, EventData), String> {
    use std::io::Read as _;
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".to_owned());
    }
    let mut bytes = Vec::new();
    f.take(PENDING_FILE_BYTES_MAX + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > PENDING_FILE_BYTES_MAX {
        return Err(format!("over {PENDING_FILE_BYTES_MAX} bytes"));
    }
    let d: Deferred = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    let uuid = |s: &str| Uuid::parse_str(s).map_err(|e| format!("{s:?} is not a UUID: {e}"));
    let event = EventData {
        id: uuid(&d.id)?,
        event_type: d.event_type,
        schema_version: d.schema_version,
        recorded_at_ns: d.recorded_at_ns,
        causation: d.causation.as_deref().map(uuid).transpose()?,
        correlation: d.correlation.as_deref().map(uuid).transpose()?,
        payload: d.payload.get().as_bytes().to_vec(),
    };
    event.validate().map_err(|e| e.to_string())?;
    Ok((d.stream, event))
}

fn set_aside(dir: &Path, path: &Path) -> Result<(), JournalError> {
    let rejected = dir.join("rejected");
    std::fs::create_dir_all(&rejected).map_err(io(&rejected))?;
    let to = rejected.join(path.file_name().unwrap_or_default());
    std::fs::rename(path, &to).map_err(io(&to))
}

/// Appends the deferred events waiting in `journal_dir` to `journal` (its journal), oldest first,
/// then removes their files; returns how many were appended (or already present). A file that
/// cannot be read or appended as it stands is moved to `pending/rejected/`.
pub fn fold(journal: &Journal, journal_dir: &Path) -> Result<usize, JournalError> {
    let dir = pending_dir(journal_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(JournalError::io(&dir, e)),
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    // Event ids are UUIDv7: their order is the order they were made.
    files.sort();
    files.truncate(PENDING_FILES_MAX);
    let mut folded = 0;
    for path in files {
        let (stream, event) = match read(&path) {
            Ok(r) => r,
            Err(_) => {
                set_aside(&dir, &path)?;
                continue;
            }
        };
        let append = StreamAppend { stream, expected: ExpectedVersion::Any, events: vec![event] };
        match journal.append_multi_blocking(vec![append]) {
            Ok(Ok(_)) => {
                std::fs::remove_file(&path).map_err(io(&path))?;
                folded += 1;
            }
            Err(JournalError::Input(_)) | Ok(Err(_)) => {
                set_aside(&dir, &path)?;
            }
            Err(e) => return Err(e),
        }
    }
    if folded > 0 {
        std::fs::File::open(&dir).and_then(|d| d.sync_all()).map_err(io(&dir))?;
    }
    Ok(folded)
}
