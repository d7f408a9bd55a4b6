//! strata-journal: the append-only, tamper-evident event log every other part of strata writes to.
//!
//! What it is for: storing events durably and in one global order, proving they were not changed
//! afterwards, and replaying them. It knows nothing of strata's domain: an event is a stream id,
//! a type name, a schema version, ids, a timestamp supplied by the caller, and a compact JSON
//! payload it does not interpret.
//!
//! The main trade-off: sled 0.34 charges a fixed cost per key written, so the single writer packs
//! each group-commit batch into a few *frames* (one sled value each) and keeps the stream and
//! event-id indexes in memory, snapshotted beside the log. Appends then cost one sled transaction
//! and one flush per batch, not per event; the price is index memory proportional to the journal
//! (about 40 bytes per event) and a tail replay at open.
//!
//! What it guarantees:
//! * an acknowledged append is durable at the configured [`Durability`] and visible to readers;
//!   nothing unacknowledged is ever served;
//! * global sequences are gapless from 1 across restarts; stream versions gapless from 1;
//! * optimistic concurrency per stream ([`Conflict`] is a value, not an error) and idempotency by
//!   event id; multi-stream appends are atomic;
//! * every record's exact stored bytes are hashed (blake3), chained, and covered by an RFC 6962
//!   Merkle tree; signed checkpoints and offline bundles let an auditor detect any change,
//!   removal, reordering or truncation behind a checkpoint.
//!
//! What it deliberately does not do: read a clock, an RNG or the environment (time and ids come
//! from the caller), interpret payloads, or let two processes open one journal.

#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod body;
pub mod error;
pub mod export;
pub mod frame;
pub mod hash;
mod index;
mod journal;
pub mod limits;
pub mod merkle;
pub mod note;
pub mod pending;
pub mod pg;
pub mod projection;
pub mod record;
pub mod shared;
pub mod snapshot;
pub mod store;
pub mod verify;

pub use error::{Conflict, InputError, JournalError, NoteError, RecordError};
pub use hash::Hash;
pub use journal::{
    AppendResult, Appended, CHECKPOINT_EVENT_TYPE, CHECKPOINT_STREAM, ExpectedVersion, Head, Journal,
    LOCK_WAIT_DEFAULT, OpenOptions, Position, Recovery, SignedCheckpoint, StreamAppend, Subscription, WriterStats,
    checkpoint_note, checkpoints_dir, wait_for_unlock,
};
pub use record::{Envelope, EventData, Record};
pub use store::{Durability, MemStore, SledStore, Store};
