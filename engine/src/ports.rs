//! Ports: the only ways the engine learns the time or gets a fresh id.
//!
//! Adapters implement them with the system clock and UUIDv7; the simulator implements them with
//! a simulated clock and a seeded generator. Whatever a port returns is written into the events
//! it influenced, so replay never asks a port again.

use uuid::Uuid;

/// Source of "now".
pub trait Clock {
    /// Nanoseconds since the Unix epoch, UTC.
    fn now_ns(&self) -> i64;
}

/// Source of fresh event ids.
pub trait Ids {
    /// A new, unique id (UUIDv7 in production: time-ordered).
    fn next_id(&mut self) -> Uuid;
}

/// A clock that returns a fixed instant; for tests and fixtures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedClock(pub i64);

impl Clock for FixedClock {
    fn now_ns(&self) -> i64 {
        self.0
    }
}

/// Ids counting up from a base; for tests and fixtures (never for production journals, whose ids
/// must be unique across journals).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountingIds {
    next: u128,
}

impl CountingIds {
    /// Starts at `base`.
    pub fn new(base: u128) -> CountingIds {
        CountingIds { next: base }
    }
}

impl Ids for CountingIds {
    fn next_id(&mut self) -> Uuid {
        let id = Uuid::from_u128(self.next);
        self.next += 1;
        id
    }
}
