//! The Redis writer: one task per process takes every write (new runs, events) from a channel
//! in order and sends them in pipelined batches (the events between two new runs in one
//! [`APPEND`] call), then makes each kept event visible on its run's log; it then packs the runs
//! whose end was kept.
//!
//! Invariants: an event is visible only once Redis acknowledged it, and in the order appended;
//! a run whose write failed is failed through its hook once, its later events are shown to its
//! live clients unkept (so they get their terminal event, never one saying it completed), and
//! it is left unfinished in Redis for a relay to finish as `failed`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::redis::FromRedisValue;
use tokio::sync::{mpsc, oneshot};

use super::conn::{Conn, script};
use super::lease::Owned;
use super::packed::Packer;
use super::scripts::{APPEND, PACK};
use super::tail::MARK_MS;
use super::{FailHook, ITEM, Redis, status_of};
use crate::api::Response;
use crate::api::output_as_input;
use crate::eventlog::emitter::LogSink;
use crate::eventlog::log::{LogEntry, RunLog};

/// Largest number of writes sent in one pipeline.
pub(super) const BATCH: usize = 512;

/// How many times the owner tries to pack a finished run that is still tailed (every
/// [`MARK_MS`]); after that its stream stays (it is read whole all the same).
pub(super) const PACK_TRIES: u32 = 24;
/// Where a terminal event's Response JSON is in its group of [`APPEND`]'s ARGV.
pub(super) const END_RESPONSE: usize = 8;

pub(super) enum Cmd {
    Insert {
        id: String,
        cmd: ::redis::Cmd,
        owned: Option<Owned>,
    },
    /// `args`: the event's group of [`APPEND`]'s ARGV (without its length).
    Append {
        id: String,
        log: Arc<RunLog>,
        entry: LogEntry,
        terminal: bool,
        args: Vec<String>,
        fail: Option<FailHook>,
    },
    Flush {
        reply: oneshot::Sender<()>,
    },
}

/// Appends one run's events through the writer.
pub struct Sink {
    pub(super) id: String,
    pub(super) tx: mpsc::UnboundedSender<Cmd>,
    pub(super) fail: Option<FailHook>,
}

impl LogSink for Sink {
    fn append(&self, log: &Arc<RunLog>, entry: &LogEntry, terminal: Option<&Response>) {
        let mut args: Vec<String> = vec![
            self.id.clone(),
            format!("0-{}", entry.seq + 1),
            entry.seq.to_string(),
            entry.offset_ms.to_string(),
            entry.kind().to_string(),
            String::from_utf8_lossy(&entry.json()).into_owned(),
        ];
        match terminal {
            Some(r) => {
                args.push("1".into());
                args.push(status_of(r));
                args.push(serde_json::to_string(r).expect("serializes"));
                for o in &r.output {
                    if let Some(i) = output_as_input(o) {
                        args.push(o.id().to_string());
                        args.push(serde_json::to_string(&i).expect("serializes"));
                    }
                }
            }
            None => args.extend(["0".into(), String::new(), String::new()]),
        }
        let c = Cmd::Append {
            id: self.id.clone(),
            log: log.clone(),
            entry: entry.clone(),
            terminal: terminal.is_some(),
            args,
            fail: self.fail.clone(),
        };
        if self.tx.send(c).is_err() {
            tracing::error!("the Redis writer is gone; an event could not be kept");
        }
    }
}

/// The writer: takes every write from the channel in order, sends them as pipelined scripts,
/// then makes each kept event visible. A run whose write fails is failed through its hook; its
/// later events are shown to its live clients without being kept (so they get their terminal
/// event) and the run is left unfinished in Redis, where a relay finishes it as `failed`.
pub(super) async fn write_loop(
    conn: Arc<Conn>,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
    owned: Arc<Mutex<HashMap<String, Owned>>>,
    instance: String,
) {
    let mut writer = Writer {
        conn,
        owned,
        instance,
        broken: HashMap::new(),
        packer: Packer::new()
            .inspect_err(|e| tracing::error!(error = %e, "finished runs will not be packed"))
            .ok(),
        ended: Vec::new(),
    };
    let mut batch = Vec::with_capacity(BATCH);
    // Waits for one command, then takes every one already queued (up to BATCH).
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let (pipe, calls, sent) = writer.pipeline(&batch);
        let mut results = if calls.is_empty() {
            Vec::new().into_iter()
        } else {
            send(&writer.conn, &pipe, &calls).await.into_iter()
        };
        for (c, was_sent) in batch.drain(..).zip(sent) {
            let result = if was_sent {
                Some(results.next().unwrap_or_else(|| Err("no reply".into())))
            } else {
                None
            };
            match c {
                Cmd::Insert { id, owned: o, .. } => writer.inserted(id, o, result),
                Cmd::Append {
                    id,
                    log,
                    entry,
                    terminal,
                    fail,
                    args,
                } => {
                    let event = Appended {
                        id,
                        log,
                        entry,
                        terminal,
                        fail,
                        args,
                    };
                    writer.appended(event, result).await;
                }
                Cmd::Flush { reply } => {
                    let _ = reply.send(());
                }
            }
        }
        writer.pack_ended();
    }
}

/// The writer task's state between batches.
struct Writer {
    conn: Arc<Conn>,
    owned: Arc<Mutex<HashMap<String, Owned>>>,
    instance: String,
    /// Runs whose events Redis did not keep, with the reason their clients are told.
    broken: HashMap<String, String>,
    packer: Option<Packer>,
    /// Runs whose terminal event this batch kept: (id, log, its length, Response JSON).
    ended: Vec<(String, Arc<RunLog>, usize, String)>,
}

/// One event of a batch, as the writer settles it once Redis answered.
struct Appended {
    id: String,
    log: Arc<RunLog>,
    entry: LogEntry,
    terminal: bool,
    fail: Option<FailHook>,
    args: Vec<String>,
}

impl Writer {
    /// The pipeline for `batch`: each insert as its own script; the appends between two inserts
    /// as one script call (so an insert still precedes its run's first event). Also answers, per
    /// pipelined command, how many events it appends (0: an insert), and per write whether it
    /// is sent (a broken run's events are not).
    fn pipeline(&self, batch: &[Cmd]) -> (::redis::Pipeline, Vec<usize>, Vec<bool>) {
        let mut pipe = ::redis::pipe();
        pipe.ignore_errors();
        let mut sent = Vec::with_capacity(batch.len());
        let mut calls: Vec<usize> = Vec::new();
        let mut group: Vec<(&str, &[String])> = Vec::new();
        for c in batch {
            match c {
                Cmd::Insert { cmd, .. } => {
                    if !group.is_empty() {
                        calls.push(group.len());
                        pipe.add_command(append_call(&self.instance, &group));
                        group.clear();
                    }
                    pipe.add_command(cmd.clone());
                    calls.push(0);
                    sent.push(true);
                }
                Cmd::Append { id, args, .. } if !self.broken.contains_key(id) => {
                    group.push((id, args));
                    sent.push(true);
                }
                _ => sent.push(false),
            }
        }
        if !group.is_empty() {
            calls.push(group.len());
            pipe.add_command(append_call(&self.instance, &group));
        }
        (pipe, calls, sent)
    }

    /// A new run was kept (its lease taken) or not (it is failed at once).
    fn inserted(&mut self, id: String, o: Option<Owned>, result: Option<Result<i64, String>>) {
        match result {
            Some(Ok(_)) => {
                if let Some(o) = o
                    && !self.broken.contains_key(&id)
                {
                    self.owned.lock().expect("owned poisoned").insert(id, o);
                }
            }
            _ => {
                tracing::error!(response_id = %id, "Redis could not keep a new run");
                let message =
                    "The relay's store (Redis) is unavailable; this response was not kept.";
                self.broken.insert(id.clone(), message.into());
                if let Some(o) = o {
                    (o.fail)(message.into());
                }
            }
        }
    }

    /// Settles one event by Redis's answer (`None`: not sent, its run is broken): a kept one is
    /// made visible; one refused or lost breaks its run (failed through its hook, once); a
    /// broken run's events are still shown to its live clients, its end as a failure.
    async fn appended(&mut self, e: Appended, result: Option<Result<i64, String>>) {
        let Appended {
            id,
            log,
            entry,
            terminal,
            fail,
            mut args,
        } = e;
        let kept = matches!(result, Some(Ok(1)));
        if kept {
            log.publish(entry.seq as usize + 1, terminal);
            if terminal {
                self.owned.lock().expect("owned poisoned").remove(&id);
                if args.len() > END_RESPONSE {
                    let response = args.swap_remove(END_RESPONSE);
                    self.ended.push((id, log, entry.seq as usize + 1, response));
                }
            }
            return;
        }
        let skipped = result.is_none();
        let lost = matches!(result, Some(Err(_)));
        if let Some(r) = result {
            let message = refusal(&id, r);
            if !self.broken.contains_key(&id) {
                self.owned.lock().expect("owned poisoned").remove(&id);
                if let Some(f) = &fail {
                    f(message.clone());
                }
                self.broken.insert(id.clone(), message);
            }
        }
        if terminal {
            // Not kept (unless an error hid that Redis ran the script: then Redis
            // holds the run's end, and it is asked), but the live clients still need
            // their end, and it must not tell them the run completed.
            if !(lost && end_was_kept(&self.conn, &id, &log).await) {
                log.fail_pending_terminal(self.broken.get(&id).map_or(
                    "The relay's store (Redis) could not keep this response; it was not kept.",
                    String::as_str,
                ));
            }
            log.publish(entry.seq as usize + 1, true);
            self.broken.remove(&id);
        } else if skipped {
            log.publish(entry.seq as usize + 1, false);
        }
    }

    /// Packs the runs whose end this batch kept.
    fn pack_ended(&mut self) {
        if let Some(packer) = &mut self.packer
            && !self.ended.is_empty()
        {
            pack(&self.conn, packer, self.ended.drain(..));
        }
    }
}

/// What a run's clients are told when Redis did not keep one of its events (`r`: the code the
/// append script answered, or the error).
fn refusal(id: &str, r: Result<i64, String>) -> String {
    match r {
        Ok(0) => "This response was deleted while it ran.".to_string(),
        Ok(-1) | Ok(-2) => {
            "Another relay took this response over (this relay lost its lease).".to_string()
        }
        Ok(-3) => {
            tracing::error!(response_id = %id, "Redis refused an event of the run's log (out of order)");
            "The relay's store (Redis) refused an event; this response was not kept.".to_string()
        }
        Ok(code) => {
            tracing::error!(response_id = %id, code, "Redis answered an event with an unknown code");
            "The relay's store (Redis) answered unexpectedly; this response was not kept."
                .to_string()
        }
        Err(e) => {
            tracing::error!(response_id = %id, error = %e, "Redis could not keep an event");
            "The relay's store (Redis) became unavailable; this response was not kept.".to_string()
        }
    }
}

/// Packs runs whose terminal event Redis acknowledged: each one's whole log and final Response
/// into one blob ([`packed`](super::packed), as SQLite keeps a finished run), which then replaces its stream
/// and its `response` field ([`PACK`], one script for them all, sent beside the writer's next
/// batches). A run tailed by another relay is packed once that relay stopped marking it. A run
/// left unpacked (Redis away, this relay stopped first) keeps its stream: read whole all the
/// same.
pub(super) fn pack(
    conn: &Arc<Conn>,
    packer: &mut Packer,
    ended: impl Iterator<Item = (String, Arc<RunLog>, usize, String)>,
) {
    let mut runs: Vec<(String, usize, Vec<u8>)> = Vec::new();
    for (id, log, n, response) in ended {
        let entries = log.entries_upto(n);
        match packer.pack(&entries, response.as_bytes()) {
            Ok(blob) => runs.push((id, entries.len(), blob)),
            Err(e) => {
                tracing::warn!(response_id = %id, error = %e, "could not pack a finished run")
            }
        }
    }
    if runs.is_empty() {
        return;
    }
    let conn = conn.clone();
    tokio::spawn(async move {
        for _ in 0..PACK_TRIES {
            let keys: Vec<String> = runs
                .iter()
                .flat_map(|(id, ..)| [Redis::resp_key(id), Redis::log_key(id), Redis::mark_key(id)])
                .collect();
            let mut cmd = script(PACK, &keys);
            for (_, n, blob) in &runs {
                cmd.arg(n).arg(blob.as_slice());
            }
            match conn.query::<Vec<i64>>(&cmd).await {
                Ok(codes) => {
                    runs = runs
                        .into_iter()
                        .zip(codes)
                        .filter(|(_, code)| *code == -1)
                        .map(|(r, _)| r)
                        .collect();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not pack finished runs (their streams stay)");
                    return;
                }
            }
            if runs.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(MARK_MS)).await;
        }
    });
}

/// After an error on a run's end (whose reply may have been lost after Redis ran the script):
/// whether Redis holds the run with that end's status.
pub(super) async fn end_was_kept(conn: &Conn, id: &str, log: &RunLog) -> bool {
    let Some(status) = log.snapshot().map(|r| status_of(&r)) else {
        return false;
    };
    let mut cmd = ::redis::cmd("HGET");
    cmd.arg(Redis::resp_key(id)).arg("status");
    matches!(conn.query::<Option<String>>(&cmd).await, Ok(Some(s)) if s == status)
}

/// One [`APPEND`] call for `events` (run id, group), in order.
pub(super) fn append_call(instance: &str, events: &[(&str, &[String])]) -> ::redis::Cmd {
    let keys: Vec<String> = events
        .iter()
        .flat_map(|(id, _)| [Redis::resp_key(id), Redis::log_key(id)])
        .collect();
    let mut cmd = script(APPEND, &keys);
    cmd.arg(instance).arg(ITEM);
    for (_, args) in events {
        cmd.arg(args.len()).arg(*args);
    }
    cmd
}

/// How long a batch waits for a replica to acknowledge it (behind Sentinel, with a replica).
const REPLICA_WAIT_MS: u64 = 250;

/// Sends the writer's pipeline; one result per write: per insert its reply, per appended event
/// its code (every write of a command that failed gets that command's error).
pub(super) async fn send(
    conn: &Conn,
    pipe: &::redis::Pipeline,
    calls: &[usize],
) -> Vec<Result<i64, String>> {
    // Behind Sentinel, with a replica attached, the batch counts as kept once a replica has it
    // too (or the wait lapsed): what a failover then loses is what the replica did not get.
    let waited;
    let pipe = match conn.replicas() {
        0 => pipe,
        _ => {
            let mut p = pipe.clone();
            p.cmd("WAIT").arg(1).arg(REPLICA_WAIT_MS);
            waited = p;
            &waited
        }
    };
    let replies: Vec<Result<::redis::Value, String>> = match conn.get().await {
        Ok(mut c) => match pipe
            .query_async::<Vec<::redis::RedisResult<::redis::Value>>>(&mut c)
            .await
        {
            Ok(mut v) => {
                // A demoted primary answers each write `READONLY`: look for the new one.
                if let Some(e) = v
                    .iter()
                    .filter_map(|r| r.as_ref().err())
                    .find(|e| e.code() == Some("READONLY"))
                {
                    conn.failed(e).await;
                }
                if v.len() > calls.len()
                    && let Some(Ok(::redis::Value::Int(0))) = v.pop()
                {
                    tracing::debug!(
                        "a batch was kept by the primary; no replica acknowledged it in time"
                    );
                }
                v.into_iter()
                    .map(|r| r.map_err(|e| e.to_string()))
                    .collect()
            }
            Err(e) => {
                conn.failed(&e).await;
                vec![Err(e.to_string()); calls.len()]
            }
        },
        Err(e) => vec![Err(e.to_string()); calls.len()],
    };
    let mut out = Vec::with_capacity(calls.iter().map(|n| (*n).max(1)).sum());
    for (events, reply) in calls.iter().zip(
        replies
            .into_iter()
            .chain(std::iter::repeat(Err("no reply".to_string()))),
    ) {
        match (*events, reply) {
            (0, r) => out.push(r.and_then(|v| i64::from_redis_value(v).map_err(|e| e.to_string()))),
            (n, Ok(v)) => match Vec::<i64>::from_redis_value(v) {
                Ok(codes) if codes.len() == n => out.extend(codes.into_iter().map(Ok)),
                Ok(codes) => out.extend(std::iter::repeat_n(
                    Err(format!("{} codes for {n} events", codes.len())),
                    n,
                )),
                Err(e) => out.extend(std::iter::repeat_n(Err(e.to_string()), n)),
            },
            (n, Err(e)) => out.extend(std::iter::repeat_n(Err(e), n)),
        }
    }
    out
}
