//! A count of work under way that can be awaited until it reaches zero: the harness counts its
//! appends, the daemon its running commands, and shutdown waits for both without polling.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// Work under way.
#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

/// Counts one piece of work until dropped (also when the work is abandoned mid-way).
#[derive(Debug)]
pub struct Counted(Arc<InFlight>);

impl Drop for Counted {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl InFlight {
    /// Counts one more piece of work.
    pub fn enter(self: &Arc<Self>) -> Counted {
        self.count.fetch_add(1, Ordering::SeqCst);
        Counted(self.clone())
    }

    /// How many are under way.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Returns once nothing is under way.
    pub async fn idle(&self) {
        loop {
            // Register before looking, so a drop between the look and the wait still wakes us.
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}
