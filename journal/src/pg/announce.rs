//! Announcing commits to the other processes sharing a journal, off the append path.
//!
//! A `NOTIFY` inside the append transaction would run while the ordering lock is held, and
//! PostgreSQL serialises every committing `NOTIFY` on one instance-wide lock: on a fast disk it
//! cost a single writer about a fifth of its appends. So the writer only hands the new head to
//! this announcer, whose own thread and session send `pg_notify` after the commit, one for
//! whatever heads came in meanwhile (coalesced), with `synchronous_commit = off` (a notification
//! needs no durability). A notification is only a wake-up: one that is late or lost costs a
//! follower at most its poll interval, never an event. After each notification the announcer
//! waits [`ANNOUNCE_GAP`] before the next, so a writer committing every half millisecond pays
//! for one notification per gap, not one per commit (each is a transaction on the server, on
//! the same CPUs the writer's commits need); a follower wakes at most that much later.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use super::PgOptions;
use super::conn::{Target, connect};

/// The least time between two notifications of one store.
pub(crate) const ANNOUNCE_GAP: Duration = Duration::from_millis(5);

#[derive(Default)]
struct State {
    /// The newest head not announced yet.
    pending: Option<u64>,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// A head to announce, or the store closed.
    cv: Condvar,
    /// The store closed (ends the wait between two notifications early).
    closing: Condvar,
}

/// Sends `pg_notify(channel, head)` for committed heads, from a thread of its own.
pub(crate) struct Announcer {
    shared: Arc<Shared>,
    started: Mutex<bool>,
    target: Target,
    options: PgOptions,
    channel: String,
}

impl Announcer {
    pub(crate) fn new(target: Target, options: PgOptions, channel: String) -> Announcer {
        Announcer { shared: Arc::default(), started: Mutex::new(false), target, options, channel }
    }

    /// Queues the announcement of `head` (started on first use: a store that never commits
    /// runs no thread).
    pub(crate) fn announce(&self, head: u64) {
        {
            let mut st = self.shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            st.pending = Some(st.pending.map_or(head, |p| p.max(head)));
        }
        self.shared.cv.notify_one();
        let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
        if !*started {
            let (shared, target, options, channel) =
                (self.shared.clone(), self.target.clone(), self.options.clone(), self.channel.clone());
            // Without the thread, followers elsewhere still read within their poll interval.
            *started = std::thread::Builder::new()
                .name("strata-journal-announcer".into())
                .spawn(move || run(&shared, &target, &options, &channel))
                .is_ok();
        }
    }
}

impl Drop for Announcer {
    fn drop(&mut self) {
        self.shared.state.lock().unwrap_or_else(PoisonError::into_inner).closed = true;
        self.shared.cv.notify_all();
        self.shared.closing.notify_all();
    }
}

fn run(shared: &Shared, target: &Target, options: &PgOptions, channel: &str) {
    let mut session: Option<postgres::Client> = None;
    loop {
        let head = {
            let mut st = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            while st.pending.is_none() && !st.closed {
                st = shared.cv.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
            // What was committed before the store closed is still announced.
            match st.pending.take() {
                Some(h) => h,
                None => return,
            }
        };
        if session.as_ref().is_none_or(postgres::Client::is_closed) {
            session = connect(target, options).ok().and_then(|mut c| {
                c.batch_execute("SET synchronous_commit = off").ok()?;
                Some(c)
            });
        }
        if let Some(c) = session.as_mut()
            && c.execute("SELECT pg_notify($1, $2)", &[&channel, &head.to_string()]).is_err()
        {
            // Dropped; the next announcement reconnects.
            session = None;
        }
        // Heads committed meanwhile are coalesced into the next notification (new heads do not
        // wake this wait; only the store closing does).
        let st = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !st.closed {
            drop(shared.closing.wait_timeout(st, ANNOUNCE_GAP).unwrap_or_else(PoisonError::into_inner));
        }
    }
}
