//! Making a store's kept entries visible with one cross-thread wake-up per serving lane per
//! batch. A store's writer (a thread or task of its own) gathers a batch's publications in a
//! [`Batch`]: one per run (the furthest entry wins) under the run's [`Home`], the serving lane its
//! sink was made on (a thread that is no lane has no home). Each home's publications are then
//! made on that home's thread, where waking the run's readers (driven by their clients' bodies,
//! on the same lane) is a push onto the lane's own queue, not a system call per run. A store's
//! flush answers once its writes are kept; their visibility on a lane may follow a moment later.
//!
//! Invariant: every gathered publication is made exactly once: on its home's thread, or on the
//! thread that drops it where the run has no home or its home no longer runs (publications are
//! made when their carrier is dropped, so a task a stopped runtime never polls still makes them).

use std::collections::HashMap;
use std::sync::Arc;

use super::log::RunLog;

/// The runtime a run's readers are woken on (the serving lane its sink was made on).
pub struct Home(tokio::runtime::Handle);

thread_local! {
    /// This thread's home: set by a serving lane, whose runtime lives as long as its thread.
    static HOME: std::cell::OnceCell<Arc<Home>> = const { std::cell::OnceCell::new() };
}

impl Home {
    /// Makes the current runtime this thread's home. Called once by each serving lane, on its
    /// thread, inside its runtime (which runs until the thread ends); a thread with no home
    /// has its runs' publications made by the store's writer itself.
    pub fn install() {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            HOME.with(|h| {
                let _ = h.set(Arc::new(Home(rt)));
            });
        }
    }

    /// This thread's home, if it is a serving lane. Every run started on a lane shares its
    /// lane's home, so a batch's publications group by lane.
    pub fn here() -> Option<Arc<Home>> {
        HOME.with(|h| h.get().cloned())
    }
}

/// Publications not made yet: made when dropped.
struct Pending(Vec<(Arc<RunLog>, usize, bool)>);

impl Drop for Pending {
    fn drop(&mut self) {
        for (log, upto, finished) in self.0.drain(..) {
            log.publish(upto, finished);
        }
    }
}

/// One batch's publications, gathered per run and per home, then sent with [`Batch::send`].
#[derive(Default)]
pub struct Batch {
    homes: Vec<(Option<Arc<Home>>, Pending)>,
    /// Each run's place: its log's address to (home, publication) indexes.
    at: HashMap<usize, (usize, usize)>,
}

impl Batch {
    /// Entries of `log` up to `upto` (exclusive) are kept; `finished` once its terminal one is.
    pub fn add(
        &mut self,
        home: Option<&Arc<Home>>,
        log: &Arc<RunLog>,
        upto: usize,
        finished: bool,
    ) {
        let key = Arc::as_ptr(log) as usize;
        if let Some(&(h, i)) = self.at.get(&key) {
            let p = &mut self.homes[h].1.0[i];
            p.1 = p.1.max(upto);
            p.2 |= finished;
            return;
        }
        let same = |other: &Option<Arc<Home>>| match (other, home) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        let h = match self.homes.iter().position(|(other, _)| same(other)) {
            Some(h) => h,
            None => {
                self.homes.push((home.cloned(), Pending(Vec::new())));
                self.homes.len() - 1
            }
        };
        let pending = &mut self.homes[h].1.0;
        pending.push((log.clone(), upto, finished));
        self.at.insert(key, (h, pending.len() - 1));
    }

    /// Makes every gathered publication: each home's on its thread (one task each), the rest
    /// here. Leaves the batch empty.
    pub fn send(&mut self) {
        self.at.clear();
        for (home, pending) in self.homes.drain(..) {
            match home {
                Some(home) => {
                    home.0.spawn(async move { drop(pending) });
                }
                None => drop(pending),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eventlog::log::LogEntry;

    /// A log of `n` entries none of which is visible yet.
    fn log_of(n: usize) -> Arc<RunLog> {
        let log = Arc::new(RunLog::new());
        for _ in 0..n {
            log.append_with(|_, seq| {
                Some(LogEntry {
                    seq,
                    offset_ms: 0,
                    frame: bytes::Bytes::from_static(b"event: e\ndata: {}\n\n"),
                })
            });
        }
        log
    }

    fn visible(log: &RunLog) -> usize {
        log.progress().0
    }

    #[test]
    fn a_batch_makes_each_runs_furthest_entry_visible_once_and_without_a_home_at_once() {
        let (a, b) = (log_of(3), log_of(2));
        let mut batch = Batch::default();
        batch.add(None, &a, 1, false);
        batch.add(None, &b, 1, false);
        batch.add(None, &a, 3, false);
        assert_eq!(
            visible(&a),
            0,
            "nothing is visible before the batch is sent"
        );
        batch.send();
        assert_eq!((visible(&a), visible(&b)), (3, 1));
    }

    #[test]
    fn publications_for_a_lane_are_made_on_it_and_still_made_if_it_stopped() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(
            Home::here().is_none(),
            "a thread is no lane until it says so"
        );
        let home = rt
            .block_on(async {
                Home::install();
                Home::here()
            })
            .expect("a lane's thread has a home");
        let log = log_of(2);
        let mut batch = Batch::default();
        batch.add(Some(&home), &log, 2, false);
        batch.send();
        assert_eq!(visible(&log), 0, "made on the lane, not here");
        rt.block_on(async {
            let (log, upto) = (log.clone(), 1);
            log.wait_past(upto).await;
        });
        assert_eq!(visible(&log), 2);

        drop(rt);
        let later = log_of(1);
        batch.add(Some(&home), &later, 1, false);
        batch.send();
        assert_eq!(
            visible(&later),
            1,
            "a stopped lane's publications are made here"
        );
    }
}
