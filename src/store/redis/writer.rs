//! The Redis writer: one task per process takes every write (new runs, events) from a channel
//! in order and sends them in pipelined batches (the events between two new runs in one
//! [`APPEND`] call, per hash slot on a cluster), then makes each kept event visible on its run's
//! log; it then packs the runs whose end was kept.
//!
//! Invariants: an event is visible only once Redis acknowledged it, and in the order appended;
//! a run whose write failed is failed through its hook once, its later events are shown to its
//! live clients unkept (so they get their terminal event, never one saying it completed), and
//! it is left unfinished in Redis for a relay to finish as `failed`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::redis::FromRedisValue;
use ::redis::cluster_routing::Slot;
use tokio::sync::{mpsc, oneshot};

use super::conn::{Conn, script};
use super::lease::Owned;
use super::packed::Packer;
use super::scripts::{APPEND, PACK};
use super::tail::MARK_MS;
use super::{FailHook, LEASES, Redis, keep_item, status_of};
use crate::api::Response;
use crate::api::output_as_input;
use crate::eventlog::emitter::LogSink;
use crate::eventlog::log::{LogEntry, RunLog};
use crate::eventlog::publish::{Batch, Home};

/// Largest number of writes sent in one pipeline.
pub(super) const BATCH: usize = 512;

/// How many times the owner tries to pack a finished run that is still tailed (every
/// [`MARK_MS`]); after that its stream stays (it is read whole all the same).
pub(super) const PACK_TRIES: u32 = 24;
/// Where a terminal event's Response JSON is in its group of [`APPEND`]'s ARGV.
pub(super) const END_RESPONSE: usize = 8;

pub(super) enum Cmd {
    /// `beside`: commands of other slots sent with it (index entries, input items).
    Insert {
        id: String,
        cmd: ::redis::Cmd,
        beside: Vec<::redis::Cmd>,
        owned: Option<Owned>,
    },
    /// `args`: the event's group of [`APPEND`]'s ARGV (without its length); `beside`: commands
    /// of other slots sent with it (an end's output items, its lease's index entry).
    Append {
        id: String,
        /// Where the run's readers are woken (see `eventlog::publish`).
        home: Option<Arc<Home>>,
        log: Arc<RunLog>,
        entry: LogEntry,
        terminal: bool,
        args: Vec<String>,
        beside: Vec<::redis::Cmd>,
        fail: Option<FailHook>,
    },
    Flush {
        reply: oneshot::Sender<()>,
    },
}

/// Appends one run's events through the writer.
pub struct Sink {
    pub(super) id: String,
    pub(super) home: Option<Arc<Home>>,
    pub(super) tx: mpsc::UnboundedSender<Cmd>,
    pub(super) fail: Option<FailHook>,
    /// The key prefix of the run's items, and its deadline (unix s, 0: none).
    pub(super) items: String,
    pub(super) deadline: i64,
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
        let mut beside = Vec::new();
        match terminal {
            Some(r) => {
                args.push("1".into());
                args.push(status_of(r));
                args.push(serde_json::to_string(r).expect("serializes"));
                for o in &r.output {
                    if let Some(i) = output_as_input(o) {
                        let json = serde_json::to_string(&i).expect("serializes");
                        beside.push(keep_item(
                            &self.items,
                            o.id(),
                            &self.id,
                            &json,
                            self.deadline,
                            "set",
                        ));
                    }
                }
                let mut unindexed = ::redis::cmd("ZREM");
                unindexed.arg(LEASES).arg(&self.id);
                beside.push(unindexed);
            }
            None => args.extend(["0".into(), String::new(), String::new()]),
        }
        let c = Cmd::Append {
            id: self.id.clone(),
            home: self.home.clone(),
            log: log.clone(),
            entry: entry.clone(),
            terminal: terminal.is_some(),
            args,
            beside,
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
        published: Batch::default(),
    };
    let mut batch = Vec::with_capacity(BATCH);
    // Waits for one command, then takes every one already queued (up to BATCH).
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let plan = writer.plan(&mut batch);
        let mut results = send(&writer.conn, plan).await.into_iter();
        for c in batch.drain(..) {
            let result = results.next().flatten();
            match c {
                Cmd::Insert { id, owned: o, .. } => writer.inserted(id, o, result),
                Cmd::Append {
                    id,
                    home,
                    log,
                    entry,
                    terminal,
                    fail,
                    args,
                    ..
                } => {
                    let event = Appended {
                        id,
                        home,
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
        writer.published.send();
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
    /// The batch's events made visible, sent once it is settled: one wake-up per lane.
    published: Batch,
}

/// One event of a batch, as the writer settles it once Redis answered.
struct Appended {
    id: String,
    home: Option<Arc<Home>>,
    log: Arc<RunLog>,
    entry: LogEntry,
    terminal: bool,
    fail: Option<FailHook>,
    args: Vec<String>,
}

impl Writer {
    /// The commands for `batch`, in order: each insert as its own script (with the commands
    /// beside it); the appends between two inserts as one script call per group (all of them on
    /// one Redis, per hash slot on a cluster), so an insert still precedes its run's first
    /// event; then the commands beside the appends. A broken run's events are not sent.
    fn plan(&self, batch: &mut [Cmd]) -> Plan {
        let mut plan = Plan {
            cmds: Vec::new(),
            replies: Vec::new(),
            writes: batch.len(),
        };
        let mut groups: Vec<(Option<Slot>, Vec<usize>)> = Vec::new();
        let mut later: Vec<::redis::Cmd> = Vec::new();
        for i in 0..batch.len() {
            // The commands are moved out (the writes keep what settling them needs).
            match &mut batch[i] {
                Cmd::Insert { cmd, beside, .. } => {
                    let (cmd, beside) = (std::mem::take(cmd), std::mem::take(beside));
                    self.flush_groups(batch, &mut groups, &mut plan);
                    plan.push(cmd, Reply::Insert(i));
                    for b in beside {
                        plan.push(b, Reply::Ignored);
                    }
                }
                Cmd::Append { id, beside, .. } if !self.broken.contains_key(id.as_str()) => {
                    later.append(beside);
                    let slot = self.conn.group_of(&Redis::resp_key(id));
                    match groups.iter_mut().find(|(s, _)| *s == slot) {
                        Some((_, g)) => g.push(i),
                        None => groups.push((slot, vec![i])),
                    }
                }
                _ => {}
            }
        }
        self.flush_groups(batch, &mut groups, &mut plan);
        for b in later {
            plan.push(b, Reply::Ignored);
        }
        plan
    }

    /// One [`APPEND`] call per group of appends.
    fn flush_groups(
        &self,
        batch: &[Cmd],
        groups: &mut Vec<(Option<Slot>, Vec<usize>)>,
        plan: &mut Plan,
    ) {
        for (_, g) in groups.drain(..) {
            let events: Vec<(&str, &[String])> = g
                .iter()
                .filter_map(|i| match &batch[*i] {
                    Cmd::Append { id, args, .. } => Some((id.as_str(), args.as_slice())),
                    _ => None,
                })
                .collect();
            plan.push(append_call(&self.instance, &events), Reply::Appends(g));
        }
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
            home,
            log,
            entry,
            terminal,
            fail,
            mut args,
        } = e;
        let kept = matches!(result, Some(Ok(1)));
        let upto = entry.seq as usize + 1;
        if kept {
            self.published.add(home.as_ref(), &log, upto, terminal);
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
            self.published.add(home.as_ref(), &log, upto, true);
            self.broken.remove(&id);
        } else if skipped {
            self.published.add(home.as_ref(), &log, upto, false);
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
            // One script per hash slot (all together on one Redis).
            let groups = conn.by_slot(runs.drain(..), |(id, ..)| Redis::resp_key(id));
            let cmds: Vec<::redis::Cmd> = groups
                .iter()
                .map(|g| {
                    let keys: Vec<String> = g
                        .iter()
                        .flat_map(|(id, ..)| {
                            [Redis::resp_key(id), Redis::log_key(id), Redis::mark_key(id)]
                        })
                        .collect();
                    let mut cmd = script(PACK, &keys);
                    for (_, n, blob) in g {
                        cmd.arg(n).arg(blob.as_slice());
                    }
                    cmd
                })
                .collect();
            for (g, reply) in groups.into_iter().zip(conn.send(cmds, &[]).await) {
                match reply.and_then(|v| Vec::<i64>::from_redis_value(v).map_err(|e| e.to_string()))
                {
                    // Those still tailed are tried again later.
                    Ok(codes) => runs.extend(
                        g.into_iter()
                            .zip(codes)
                            .filter(|(_, code)| *code == -1)
                            .map(|(r, _)| r),
                    ),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not pack finished runs (their streams stay)")
                    }
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
    cmd.arg(instance);
    for (_, args) in events {
        cmd.arg(args.len()).arg(*args);
    }
    cmd
}

/// What a batch sends: its commands, what each one's reply settles, and how many writes the
/// batch holds.
pub(super) struct Plan {
    cmds: Vec<::redis::Cmd>,
    replies: Vec<Reply>,
    writes: usize,
}

impl Plan {
    fn push(&mut self, cmd: ::redis::Cmd, reply: Reply) {
        self.cmds.push(cmd);
        self.replies.push(reply);
    }
}

/// What a command's reply settles: an insert (the write's index in the batch), the appended
/// events (theirs), or nothing (a command beside them: its failure is only logged).
enum Reply {
    Insert(usize),
    Appends(Vec<usize>),
    Ignored,
}

/// How long a batch waits for a replica to acknowledge it (behind Sentinel or on a cluster, with
/// replicas).
const REPLICA_WAIT_MS: u64 = 250;

/// Sends a batch's commands; answers per write of the batch its result: an insert's reply, an
/// appended event's code (every event of a call that failed gets its error), `None` for a write
/// not sent (a broken run's event, a flush).
pub(super) async fn send(conn: &Conn, plan: Plan) -> Vec<Option<Result<i64, String>>> {
    let mut out: Vec<Option<Result<i64, String>>> = vec![None; plan.writes];
    if plan.cmds.is_empty() {
        return out;
    }
    // With a replica attached, the batch counts as kept once a replica has it too (or the
    // wait lapsed): what a failover then loses is what the replica did not get.
    let wait = match conn.replicas() {
        0 => Vec::new(),
        _ => {
            let mut w = ::redis::cmd("WAIT");
            w.arg(1).arg(REPLICA_WAIT_MS);
            vec![w]
        }
    };
    let replies = conn.send(plan.cmds, &wait).await;
    for (reply, r) in plan.replies.iter().zip(replies) {
        match reply {
            Reply::Insert(i) => {
                out[*i] = Some(r.and_then(|v| i64::from_redis_value(v).map_err(|e| e.to_string())))
            }
            Reply::Appends(events) => {
                let n = events.len();
                let codes: Vec<Result<i64, String>> = match r {
                    Ok(v) => match Vec::<i64>::from_redis_value(v) {
                        Ok(codes) if codes.len() == n => codes.into_iter().map(Ok).collect(),
                        Ok(codes) => vec![Err(format!("{} codes for {n} events", codes.len())); n],
                        Err(e) => vec![Err(e.to_string()); n],
                    },
                    Err(e) => vec![Err(e); n],
                };
                for (i, code) in events.iter().zip(codes) {
                    out[*i] = Some(code);
                }
            }
            Reply::Ignored => {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "Redis did not keep an index entry or an item");
                }
            }
        }
    }
    out
}
