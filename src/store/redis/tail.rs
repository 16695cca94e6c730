//! Live tails: a run live on another relay, read from Redis as that relay keeps its events
//! (`XREAD BLOCK` on its stream, on a connection of its own), into one log shared by this
//! relay's readers of it. A tailing relay marks the run (`relay:tail:{id}`) so the owner does
//! not pack its stream away while a blocking read may wait on it.
//!
//! Invariants: a tailed log only gets events Redis kept, in order (one that does not continue
//! it ends the tail); every tail ends with a terminal event: the run's own, or one this relay
//! makes (`response.failed`, shown to its readers only) when the run was deleted or its log
//! cannot be followed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::redis::RedisError;

use super::conn::{Link, Timeouts, script};
use super::kept::{Kept, entry_of, event_of, kept_of};
use super::scripts::TAIL_STEP;
use super::{Redis, StoreError, unfinished};
use crate::eventlog::emitter::end_as_failed;
use crate::eventlog::log::{LogEntry, RunLog};

/// How long a blocking read waits before checking on the run.
pub(super) const BLOCK_MS: u64 = 1000;
/// A relay tailing a live run marks it (`relay:tail:{id}`, lasting this long): while the mark
/// lasts, the run's stream is not replaced by its packed log, so a blocking read never waits on
/// a stream that went away. The owner tries again once the mark may have lapsed.
pub(super) const TAIL: &str = "relay:tail:";
pub(super) const MARK_MS: u64 = 5000;
/// A tailing relay renews its mark before a blocking read once the mark is this old.
pub(super) const MARK_RENEW: Duration = Duration::from_millis(2000);

/// `XREAD`'s reply: per stream, its entries as (id, fields).
pub(super) type StreamReply = Vec<(String, Vec<(String, HashMap<String, String>)>)>;

impl Redis {
    /// One step of tailing run `id` ([`TAIL_STEP`]): `None` for a run gone; else its status and
    /// the events kept from `next` on (or, once it is packed, all of them), marking a run that
    /// goes on as tailed.
    pub(super) async fn tail_step(&self, id: &str, next: u64) -> Result<Option<Kept>, StoreError> {
        let mut cmd = script(
            TAIL_STEP,
            &[Self::resp_key(id), Self::log_key(id), Self::mark_key(id)],
        );
        cmd.arg(format!("0-{}", next + 1)).arg(256).arg(MARK_MS);
        let reply: Vec<::redis::Value> = self.inner.conn.query(&cmd).await?;
        kept_of(id, reply)
    }
}

/// Feeds `log` with the events another relay appends to the run's stream, from `next` on,
/// until the terminal event (or until no reader holds the log any more).
///
/// Each round first takes a step ([`TAIL_STEP`], one script) unless this relay marked the run
/// as tailed less than [`MARK_RENEW`] ago: it reads what was kept after `next` (from the stream,
/// or from the packed log once the owner replaced the stream by it) and, while the run goes on,
/// renews the mark. Then, caught up, it waits on the stream (`XREAD BLOCK`). The mark keeps the
/// owner from packing the stream away while this relay may be about to wait on it (a blocking
/// read of a deleted stream would wait its whole time before noticing): a finished run's stream
/// is gone only once no relay tailing it marked it for [`MARK_MS`].
pub(super) async fn tail(store: Redis, id: String, log: Arc<RunLog>, next: u64) {
    let mut t = Tail {
        key: Redis::log_key(&id),
        store,
        id,
        log,
        next,
        marked: None,
        conn: None,
    };
    while !t.log.is_finished() && Arc::strong_count(&t.log) > 1 {
        if t.marked.is_none_or(|m| m.elapsed() >= MARK_RENEW) {
            match t.step().await {
                Round::Wait => {}
                Round::Again => continue,
                Round::Finished => break,
                Round::Ended => return,
            }
        }
        if let Round::Ended = t.wait().await {
            return;
        }
    }
    t.store
        .inner
        .tails
        .lock()
        .expect("tails poisoned")
        .retain(|_, w| w.strong_count() > 0);
}

/// What a round of a tail does next.
enum Round {
    /// Caught up with a run that goes on: wait on its stream.
    Wait,
    /// Start the next round.
    Again,
    /// The log got its terminal event.
    Finished,
    /// The tail ended the log itself (it will get nothing more from Redis).
    Ended,
}

/// The state of one tail ([`tail`]).
struct Tail {
    store: Redis,
    id: String,
    log: Arc<RunLog>,
    /// The seq of the next event the log needs.
    next: u64,
    /// When this relay last marked the run as tailed (`None`: to be marked in the next step).
    marked: Option<Instant>,
    /// The connection blocking reads use (none: to be made).
    conn: Option<Link>,
    /// The run's stream.
    key: String,
}

const CANNOT_FOLLOW: &str = "This relay could not follow the response's event log.";

impl Tail {
    /// Takes a step ([`TAIL_STEP`]): follows what was kept after `next`, and renews the mark
    /// of a run that goes on.
    async fn step(&mut self) -> Round {
        let (store, id) = (&self.store, &self.id);
        let asked = Instant::now();
        match store.tail_step(id, self.next).await {
            Ok(None) => {
                // Deleted (or expired) while tailed: end the readers' streams.
                end_tail(
                    store,
                    id,
                    &self.log,
                    "This response was deleted while it was running.",
                );
                Round::Ended
            }
            Ok(Some(Kept { status, entries })) => {
                let live = unfinished(&status);
                self.marked = live.then_some(asked);
                let read = entries.len();
                // A packed log holds every event; a stream's read starts at `next`.
                let from = self.next;
                let new = entries.into_iter().skip_while(|e| e.seq < from);
                if let Err(e) = follow(&self.log, new, &mut self.next) {
                    tracing::error!(response_id = %id, error = %e, "a tailed event does not continue the log");
                    end_tail(store, id, &self.log, CANNOT_FOLLOW);
                    return Round::Ended;
                }
                if self.log.is_finished() {
                    return Round::Finished;
                }
                if !live && read == 0 {
                    // Finished, yet nothing kept after what this relay has: a log without
                    // its end (which a run's status is never written without).
                    tracing::error!(response_id = %id, "a finished run's kept log has no end");
                    end_tail(store, id, &self.log, CANNOT_FOLLOW);
                    return Round::Ended;
                }
                if !live {
                    return Round::Again;
                }
                Round::Wait
            }
            Err(e) => {
                tracing::warn!(response_id = %id, error = %e, "tailing a run failed; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
                Round::Again
            }
        }
    }

    /// Waits on the run's stream (`XREAD BLOCK`, up to [`BLOCK_MS`]) and follows what it read;
    /// after a wait that read nothing, checks the run is still there and its owner alive.
    async fn wait(&mut self) -> Round {
        let id = &self.id;
        let c = match &mut self.conn {
            Some(c) => c,
            None => {
                // Its own connection: a blocking read holds the connection it is sent on.
                let timeouts = Timeouts {
                    connect: Duration::from_secs(1),
                    response: Some(Duration::from_millis(BLOCK_MS) + Duration::from_secs(5)),
                };
                match self.store.inner.conn.open(timeouts).await {
                    Ok((c, _)) => self.conn.insert(c),
                    Err(e) => {
                        tracing::warn!(response_id = %id, error = %e, "cannot tail a run: Redis is unavailable; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        return Round::Again;
                    }
                }
            }
        };
        let mut cmd = ::redis::cmd("XREAD");
        cmd.arg("COUNT")
            .arg(256)
            .arg("BLOCK")
            .arg(BLOCK_MS)
            .arg("STREAMS")
            .arg(&self.key)
            .arg(format!("0-{}", self.next));
        let read: Result<Option<StreamReply>, RedisError> = cmd.query_async(c).await;
        match read {
            Ok(Some(streams)) => {
                let entries = streams
                    .into_iter()
                    .flat_map(|(_, entries)| entries)
                    .map(|(_, fields)| entry_of(&fields))
                    .collect::<Result<Vec<_>, _>>();
                if let Err(e) =
                    entries.and_then(|e| follow(&self.log, e.into_iter(), &mut self.next))
                {
                    tracing::error!(response_id = %id, error = %e, "a tailed event does not continue the log");
                    end_tail(&self.store, id, &self.log, CANNOT_FOLLOW);
                    return Round::Ended;
                }
            }
            Ok(None) => {
                // Nothing new for a while: is the run still there, and its owner alive? (The
                // next round takes a step, which finds a run deleted, ended, or packed.)
                self.marked = None;
                match self.store.fields(id, &["status"]).await {
                    Ok(f) if f[0].as_deref().is_some_and(unfinished) => {
                        if let Err(e) = self.store.recover(id).await {
                            tracing::warn!(response_id = %id, error = %e, "could not finish an abandoned run");
                        }
                    }
                    _ => {}
                }
            }
            Err(e) => {
                tracing::warn!(response_id = %id, error = %e, "tailing a run failed; reconnecting");
                self.conn = None;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Round::Again
    }
}

/// Appends `entries` (kept by another relay, from `*next` on) to a tailed log.
pub(super) fn follow(
    log: &RunLog,
    entries: impl Iterator<Item = LogEntry>,
    next: &mut u64,
) -> Result<(), StoreError> {
    for e in entries {
        let ev = event_of(&e)?;
        log.append_kept(e, &ev).map_err(StoreError::Corrupt)?;
        *next += 1;
    }
    Ok(())
}

/// Ends a tailed log that will get no more events from Redis with a terminal event of its own
/// (open items closed, `response.failed` saying why), shown to this relay's readers only, so
/// that every stream still ends with a terminal event and `[DONE]`.
pub(super) fn end_tail(store: &Redis, id: &str, log: &Arc<RunLog>, message: &str) {
    // Not shared any more: later readers and GETs go to Redis, not to this made-up ending.
    store.inner.tails.lock().expect("tails poisoned").remove(id);
    if log.snapshot().is_none() {
        // Not even `response.created` was seen: there is nothing to end.
        log.publish(log.len(), true);
        return;
    }
    end_as_failed(
        log.clone(),
        Arc::new(crate::eventlog::emitter::Immediate),
        message,
    );
}
