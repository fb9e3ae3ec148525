//! Many ops sent at once (bulk import).
//!
//! A batch goes out as one pipeline per connection: calls on one key always
//! share a connection and keep their order, calls on different keys spread
//! over the pool (on Cluster, over each key's primary), so thousands of rows
//! cost one round trip. Inside a pipeline the calls travel
//! [`CALLS_PER_SCRIPT`] at a time in one EVALSHA of `scripts/batch.lua`,
//! which runs the same three scripts call by call: fred writes and flushes
//! the socket after every script command, even in a pipeline, and Redis
//! dispatches each command, so one EVALSHA per row would make those costs,
//! not the scripts, most of an import's time (bench/README.md, "Import").
//! The ops are encoded and their replies decoded by `ops.rs`, as for one
//! call at a time.

use std::collections::HashMap;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::prelude::{Error, ErrorKind, Value};
use fred::types::scripts::Script;
use fred::types::{ClusterHash, CustomCommand};
use fred::util::redis_keyslot;

use super::super::error::{CallKind, NoAnswer, NotApplied, StorageError, is_acl_refusal};
use super::super::ops::{BatchOutcome, Decode, Op, ScriptCall};
use super::super::scripts::batch_body;
use super::super::topology::Backend;
use super::Exec;
use super::chunks::chunks;

/// One call's fate inside the pipeline, before its reply is decoded.
#[derive(Debug)]
enum CallOutcome {
    Replied(Vec<i64>),
    NotRun,
    Failed(StorageError),
}

impl Exec {
    /// Sends `calls` in one pipeline per connection and waits for every
    /// reply. Calls on the same key go, in the given order, on the same
    /// connection, so Redis runs them in that order. The answer has one
    /// outcome per call, in the same order.
    pub async fn run_batch(&self, ops: Vec<Op<'_>>) -> Vec<BatchOutcome> {
        let total = ops.len();
        if let Err(error) = self.check_fence() {
            return ops
                .iter()
                .map(|_| BatchOutcome::Failed(error.clone()))
                .collect();
        }
        let calls: Vec<ScriptCall> = ops.iter().map(Op::encode).collect();
        let decodes: Vec<Decode> = calls.iter().map(|call| call.decode).collect();
        let mut outcomes: Vec<Option<CallOutcome>> = (0..total).map(|_| None).collect();
        let mut groups: HashMap<String, (Client, Vec<(usize, ScriptCall)>)> = HashMap::new();
        for (index, call) in calls.into_iter().enumerate() {
            let slot = redis_keyslot(call.key.as_bytes());
            let client = match &self.backend {
                Backend::Single { lanes, .. } => spread(lanes.request.clients(), slot).cloned(),
                Backend::Cluster(cluster) => match cluster.route(slot) {
                    Ok(node) => spread(node.lanes.request.clients(), slot).cloned(),
                    Err(_) => {
                        cluster.refresh_soon();
                        outcomes[index] = Some(CallOutcome::NotRun);
                        continue;
                    }
                },
            };
            let Some(client) = client else {
                outcomes[index] = Some(CallOutcome::Failed(no_connection()));
                continue;
            };
            groups
                .entry(client.id().to_string())
                .or_insert_with(|| (client, Vec::new()))
                .1
                .push((index, call));
        }
        // A batched call is a write: a lost answer means it may have run.
        let kind = CallKind {
            write: true,
            deadline_bound: false,
            timeout: self.command_timeout,
        };
        let by_slot = matches!(self.backend, Backend::Cluster(_));
        let mut pipelines = tokio::task::JoinSet::new();
        for (_, (client, group)) in groups {
            let script = self.scripts.batch.clone();
            pipelines.spawn(async move {
                let replies = send_pipeline(&client, &script, group, by_slot, kind).await;
                if replies
                    .iter()
                    .any(|(_, r)| matches!(r, CallOutcome::NotRun))
                {
                    // Best effort: a load that fails shows again as NOSCRIPT.
                    let _ = script.load(&client).await;
                }
                replies
            });
        }
        while let Some(joined) = pipelines.join_next().await {
            let Ok(replies) = joined else {
                continue;
            };
            for (index, outcome) in replies {
                outcomes[index] = Some(outcome);
            }
        }
        if let Backend::Cluster(cluster) = &self.backend
            && outcomes
                .iter()
                .any(|o| matches!(o, Some(CallOutcome::NotRun)))
        {
            cluster.refresh_soon();
        }
        outcomes
            .into_iter()
            .zip(decodes)
            .map(|(outcome, decode)| match outcome {
                Some(CallOutcome::Replied(reply)) => BatchOutcome::Replied(decode.reply(&reply)),
                Some(CallOutcome::NotRun) => BatchOutcome::NotRun,
                Some(CallOutcome::Failed(error)) => BatchOutcome::Failed(error),
                None => BatchOutcome::Failed(no_connection()),
            })
            .collect()
    }
}

/// The connection of `clients` for a key in `slot`: always the same one for
/// one key, so its calls keep their order.
fn spread(clients: &[Client], slot: u16) -> Option<&Client> {
    if clients.is_empty() {
        return None;
    }
    clients.get(usize::from(slot) % clients.len())
}

fn no_connection() -> StorageError {
    StorageError::Unavailable {
        why: NotApplied::NoConnection,
        detail: "no connection to Redis for this batch".into(),
    }
}

/// Calls per EVALSHA of the batch script. Enough that the per-command cost
/// (Redis's dispatch, fred's write and flush) fades; few enough that one
/// script holds Redis for well under a millisecond, so the service's own
/// calls on the same Redis wait little behind an import.
const CALLS_PER_SCRIPT: usize = 64;

/// One connection's calls: in chunks of at most [`CALLS_PER_SCRIPT`] (see
/// `chunks.rs`: a key's calls stay in one chunk when they fit; on Cluster a
/// chunk holds one slot), one script call per chunk, all written as one
/// pipeline, then every reply read. Each outcome comes back with its
/// call's index.
async fn send_pipeline(
    client: &Client,
    script: &Script,
    group: Vec<(usize, ScriptCall)>,
    by_slot: bool,
    kind: CallKind,
) -> Vec<(usize, CallOutcome)> {
    let chunks = chunks(group, by_slot, CALLS_PER_SCRIPT);
    let mut indices = Vec::with_capacity(chunks.len());
    let pipeline = client.pipeline();
    for chunk in chunks {
        let slot = chunk
            .calls
            .first()
            .map_or(0, |(_, call)| redis_keyslot(call.key.as_bytes()));
        let (name, sent): (_, &str) = if chunk.with_body {
            ("EVAL", batch_body())
        } else {
            ("EVALSHA", script.sha1())
        };
        let (these, line) = script_line(sent, chunk.calls);
        indices.push(these);
        let command = CustomCommand::new_static(name, ClusterHash::Custom(slot), false);
        if let Err(error) = pipeline.custom::<(), _>(command, line).await {
            let failed = StorageError::from_redis(&error, kind);
            return every(indices.concat(), || CallOutcome::Failed(failed.clone()));
        }
    }
    let replies = pipeline.try_all::<Value>().await;
    if replies.len() != indices.len() {
        // The whole pipeline failed (not sent, or no answer in time).
        let failed = replies
            .into_iter()
            .find_map(Result::err)
            .map_or_else(no_connection, |e| StorageError::from_redis(&e, kind));
        return every(indices.concat(), || CallOutcome::Failed(failed.clone()));
    }
    let mut outcomes = Vec::new();
    for (these, reply) in indices.into_iter().zip(replies) {
        outcomes.extend(chunk_outcomes(these, reply, kind));
    }
    outcomes
}

/// The batch script's arguments for `chunk` (see `scripts/batch.lua`),
/// after `script` (its SHA1 or its body): the keys, then each call's
/// script, argument count and arguments. Also gives back the calls'
/// indices, in order.
fn script_line(script: &str, chunk: Vec<(usize, ScriptCall)>) -> (Vec<usize>, Vec<Value>) {
    let argc: usize = chunk.iter().map(|(_, call)| call.args.len() + 2).sum();
    let mut line = Vec::with_capacity(2 + chunk.len() + argc);
    line.push(Value::from(script));
    line.push(Value::from(chunk.len() as i64));
    let mut arguments = Vec::with_capacity(argc);
    let mut indices = Vec::with_capacity(chunk.len());
    for (index, call) in chunk {
        indices.push(index);
        line.push(Value::from(call.key));
        arguments.push(Value::from_static_str(call.script.batch_letter()));
        arguments.push(Value::from(call.args.len() as i64));
        arguments.extend(call.args);
    }
    line.extend(arguments);
    (indices, line)
}

/// One EVALSHA's reply, as one outcome per call of its chunk.
fn chunk_outcomes(
    indices: Vec<usize>,
    reply: Result<Value, Error>,
    kind: CallKind,
) -> Vec<(usize, CallOutcome)> {
    match reply {
        Ok(Value::Array(replies)) if replies.len() == indices.len() => indices
            .into_iter()
            .zip(replies)
            .map(|(index, reply)| (index, call_outcome(reply, kind)))
            .collect(),
        Ok(other) => {
            let unexpected = StorageError::Unexpected(format!(
                "the batch script replied {other:?} for {} calls",
                indices.len()
            ));
            every(indices, || CallOutcome::Failed(unexpected.clone()))
        }
        Err(error) if not_run(&error) => every(indices, || CallOutcome::NotRun),
        Err(error) => {
            let failed = StorageError::from_redis(&error, kind);
            every(indices, || CallOutcome::Failed(failed.clone()))
        }
    }
}

/// One call's reply inside the batch script's: the script's integers, or
/// the message of the error that stopped that call alone.
fn call_outcome(reply: Value, kind: CallKind) -> CallOutcome {
    let message = match reply {
        Value::String(message) => message.to_string(),
        Value::Bytes(message) => String::from_utf8_lossy(&message).into_owned(),
        integers => {
            return match integers.convert::<Vec<i64>>() {
                Ok(integers) => CallOutcome::Replied(integers),
                Err(error) => CallOutcome::Failed(StorageError::Unexpected(format!(
                    "a script replied with something other than integers: {error}"
                ))),
            };
        }
    };
    // WRONGTYPE: the key holds another Redis type, so the service does not
    // own it. The scripts' first command on a key is a read, so nothing was
    // written, and the batch script caught it: this call alone failed.
    if message.starts_with("WRONGTYPE") {
        return CallOutcome::Failed(StorageError::ForeignValue {
            key_kind: "the key",
            detail: "it holds another Redis type (WRONGTYPE)".into(),
        });
    }
    // A command the user may not run, refused inside the script (the batch
    // script caught it, so its words name no script place): the call's
    // earlier commands may have written.
    if is_acl_refusal(&message) {
        return CallOutcome::Failed(StorageError::MaybeApplied {
            why: NoAnswer::ScriptStopped,
            detail: message,
        });
    }
    let error = Error::new(ErrorKind::Unknown, message);
    CallOutcome::Failed(StorageError::from_redis(&error, kind))
}

fn every(indices: Vec<usize>, outcome: impl Fn() -> CallOutcome) -> Vec<(usize, CallOutcome)> {
    indices
        .into_iter()
        .map(|index| (index, outcome()))
        .collect()
}

/// Errors that say the script did not run at all, so sending it again can
/// never apply it twice.
fn not_run(error: &Error) -> bool {
    let details = error.details();
    details.starts_with("NOSCRIPT")
        || (*error.kind() == ErrorKind::Cluster
            && ["MOVED", "ASK", "TRYAGAIN"]
                .iter()
                .any(|w| details.starts_with(w)))
}
