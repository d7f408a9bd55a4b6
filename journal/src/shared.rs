//! What a store shared by several processes (a database server) adds to [`crate::Store`].
//!
//! With sled one process owns the journal, so its writer's in-memory index is the truth. With a
//! shared store other processes append too; the writer therefore takes the store's *ordering
//! lock* before each batch, reads whatever the others committed since its index head (checking
//! the chain as it goes), decides idempotency and expected versions against that, and commits
//! while still holding the lock. A follower thread reads the others' appends by sequence,
//! woken by [`SharedOrder::wait_for_appends`] (a wake-up that carries no history) or a bounded
//! poll, so subscriptions and projections follow every process's appends with no gap.
//!
//! No directory is shared by every process either, so a shared store also keeps the signed
//! checkpoint notes that a sled journal writes to its `checkpoints/` directory.

use std::time::Duration;

use crate::error::JournalError;
use crate::hash::Hash;

/// The ordering lock, wake-ups and checkpoint notes of a shared store.
pub trait SharedOrder: Send + Sync {
    /// Takes the ordering lock for the next [`crate::Store::commit`] (which releases it) and
    /// returns the stored head `(seq, hash)`. Nothing else can commit until it is released.
    fn lock_order(&self) -> Result<(u64, Hash), JournalError>;
    /// Releases the lock without writing anything (every request of the batch was a retry or a
    /// conflict, or the batch failed).
    fn release_order(&self);
    /// Waits at most `timeout` for a sign that someone committed: `Ok(Some(seq))` when one came
    /// (`seq`: the highest head it announced, `u64::MAX` when unknown), `Ok(None)` on a timeout.
    /// The sign is only a hint: the caller reads by sequence either way, and only skips a read
    /// when what was announced is already in its index.
    fn wait_for_appends(&self, timeout: Duration) -> Result<Option<u64>, JournalError>;
    /// Keeps the signed checkpoint note `note` over the first `size` events (once: saving the
    /// same note again changes nothing).
    fn save_note(&self, size: u64, note: &str) -> Result<(), JournalError>;
    /// Every note kept, as (where it is kept, text), by size then text; at most
    /// [`NOTES_MAX`] of them.
    fn notes(&self) -> Result<Vec<(String, String)>, JournalError>;
}

/// Most checkpoint notes read from a shared store.
pub const NOTES_MAX: i64 = 100_000;

/// Longest a follower waits for a wake-up before reading anyway (a lost notification costs at
/// most this much delay, never an event).
pub const FOLLOW_POLL: Duration = Duration::from_millis(250);

/// Most events a catch-up reads per pass before it publishes them.
pub const CATCH_UP_EVENTS_MAX: usize = 8192;
