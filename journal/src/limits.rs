//! Every bound the journal enforces, in one place.
//!
//! Names follow `<noun>_<unit>_max`. A request that exceeds one of these is refused with a typed
//! error before it reaches the writer, so nothing is appended. The relationships between the
//! limits are asserted at compile time below, each with the reason it must hold.

/// Largest event payload (compact JSON) accepted by `append`.
pub const PAYLOAD_BYTES_MAX: usize = 256 * 1024;

/// Longest stream id, in bytes.
pub const STREAM_BYTES_MAX: usize = 200;

/// Longest event type name, in bytes.
pub const EVENT_TYPE_BYTES_MAX: usize = 100;

/// Most events in one append request (all streams together). Large enough for an all-or-nothing
/// intake of a whole knowledge base (the seed-scale fixture is a few hundred artifacts).
pub const EVENTS_PER_APPEND_MAX: usize = 4096;

/// Most streams touched by one atomic multi-stream append.
pub const STREAMS_PER_APPEND_MAX: usize = 4096;

/// Most append requests waiting for the writer; further appenders wait for room (back-pressure).
pub const QUEUE_REQUESTS_MAX: usize = 4096;

/// Most events the writer commits in one group-commit batch (a single larger request still
/// forms a batch of its own).
pub const BATCH_EVENTS_MAX: usize = 8192;

/// Most record bytes the writer gathers into one group-commit batch (a single larger request
/// still forms a batch of its own).
pub const BATCH_BYTES_MAX: usize = 32 * 1024 * 1024;

/// A stored frame (one sled value) holds at most this many record bytes; a batch larger than this
/// is split into several frames written in the same sled transaction.
pub const FRAME_BYTES_MAX: usize = 64 * 1024;

/// Most records in one frame.
pub const FRAME_EVENTS_MAX: usize = 1024;

/// Most events returned by one `read_range` / `read_stream` call.
pub const READ_EVENTS_MAX: usize = 100_000;

/// Longest line accepted when importing an export or a bundle.
pub const IMPORT_LINE_BYTES_MAX: usize = 2 * PAYLOAD_BYTES_MAX + 4096;

/// Longest checkpoint origin line.
pub const ORIGIN_BYTES_MAX: usize = 200;

/// Largest signed note (checkpoint) accepted.
pub const NOTE_BYTES_MAX: usize = 8 * 1024;

/// Most signature lines on one signed note.
pub const NOTE_SIGNATURES_MAX: usize = 16;

/// The journal index is snapshotted after this many events past the previous snapshot, so an
/// open replays at most this many records to rebuild it.
pub const INDEX_SNAPSHOT_EVENTS_MAX: u64 = 262_144;

/// Fixed part of an encoded record: see `record.rs` for the layout.
pub(crate) const RECORD_FIXED_BYTES: usize = 1 + 8 + 16 + 8 + 8 + 4 + 32 + 1;

/// Largest encoded record.
pub const RECORD_BYTES_MAX: usize =
    RECORD_FIXED_BYTES + 2 * 16 + 2 + STREAM_BYTES_MAX + 2 + EVENT_TYPE_BYTES_MAX + 4 + PAYLOAD_BYTES_MAX;

const _: () = {
    // One maximal request must fit in one batch, or it could never be committed.
    assert!(EVENTS_PER_APPEND_MAX <= BATCH_EVENTS_MAX);
    // A maximal record must fit in a batch (frames may exceed FRAME_BYTES_MAX for a single record).
    assert!(RECORD_BYTES_MAX <= BATCH_BYTES_MAX);
    // Stream ids and type names are stored with u16 length prefixes.
    assert!(STREAM_BYTES_MAX <= u16::MAX as usize);
    assert!(EVENT_TYPE_BYTES_MAX <= u16::MAX as usize);
    // Payloads are stored with a u32 length prefix.
    assert!(PAYLOAD_BYTES_MAX <= u32::MAX as usize);
    // An import line carries one payload (possibly escaped once more) plus the envelope fields.
    assert!(IMPORT_LINE_BYTES_MAX > PAYLOAD_BYTES_MAX);
    assert!(FRAME_EVENTS_MAX <= BATCH_EVENTS_MAX);
};
