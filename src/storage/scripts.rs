//! The Lua scripts that make the read-modify-write rules atomic.
//!
//! Each touches one key, or (breaker_transition.lua) keys of one Cluster
//! slot (one hash tag), so they run unchanged on Redis Cluster. They
//! are called by SHA (EVALSHA, one round trip, no script body on the wire);
//! a Redis that forgot them (restart, failover, `SCRIPT FLUSH`) answers
//! NOSCRIPT, and the call is repeated once as EVAL, which also caches the
//! script again. NOSCRIPT means the script did not run, so the repeat can
//! never apply a write twice. Each repeat is counted
//! (`sticky_routing_noscript_fallbacks_total`): a steady count means Redis
//! keeps losing its script cache and every call pays two round trips.
//!
//! The calls go out as custom commands, not through fred's `LuaInterface`:
//! fred 10 does not implement that interface for a client with per-call
//! options, so `evalsha` on one silently drops them (no `fail_fast`, no
//! per-call timeout: fred issue #353). A custom command takes them.

use fred::clients::{Client, WithOptions};
use fred::interfaces::ClientLike;
use fred::prelude::{Error, FromValue, Value};
use fred::types::scripts::Script;
use fred::types::{ClusterHash, CustomCommand};
use fred::util::redis_keyslot;

use super::ops::ScriptName;
use crate::telemetry::{Metrics, RedisCommand};

/// One script, with its SHA computed once at start-up.
pub struct LuaScript {
    script: Script,
    body: &'static str,
    /// The call it is, as `/metrics` names it.
    pub command: RedisCommand,
}

impl LuaScript {
    fn new(command: RedisCommand, body: &'static str) -> Self {
        Self {
            script: Script::from_lua(body),
            body,
            command,
        }
    }

    /// Runs the script against `key`, with the client's per-call options;
    /// a fallback to EVAL is counted on `metrics`.
    pub async fn run<R: FromValue>(
        &self,
        client: &WithOptions<Client>,
        key: &str,
        args: &[Value],
        metrics: &Metrics,
    ) -> Result<R, Error> {
        self.send(client, &[key], args, metrics).await
    }

    /// Runs the script against `keys`, which must all be of one Cluster
    /// slot (one hash tag: Cluster refuses others with CROSSSLOT); the
    /// first one routes the call.
    pub async fn run_keys<R: FromValue>(
        &self,
        client: &WithOptions<Client>,
        keys: &[&str],
        args: &[Value],
        metrics: &Metrics,
    ) -> Result<R, Error> {
        self.send(client, keys, args, metrics).await
    }

    /// Runs a script that touches no key (the permission probe): on
    /// Cluster, the node the client is connected to runs it.
    pub async fn run_keyless<R: FromValue>(
        &self,
        client: &WithOptions<Client>,
        args: &[Value],
        metrics: &Metrics,
    ) -> Result<R, Error> {
        self.send(client, &[], args, metrics).await
    }

    async fn send<R: FromValue>(
        &self,
        client: &WithOptions<Client>,
        keys: &[&str],
        args: &[Value],
        metrics: &Metrics,
    ) -> Result<R, Error> {
        // On a clustered client a custom command's slot must be given
        // outright: fred hashes the first string argument otherwise, which
        // here is the script. The service's pools are centralized clients,
        // one per node (the store routes by slot itself), where fred reads
        // no hash: the CRC16 of the key is not computed for them.
        let slot = match keys.first() {
            Some(key) if client.is_clustered() => {
                ClusterHash::Custom(redis_keyslot(key.as_bytes()))
            }
            _ => ClusterHash::FirstKey,
        };
        let command = |name: &'static str, script: &str| {
            let mut line = Vec::with_capacity(args.len() + keys.len() + 2);
            line.push(Value::from(script));
            line.push(Value::from(keys.len() as i64));
            line.extend(keys.iter().map(|key| Value::from(*key)));
            line.extend(args.iter().cloned());
            (CustomCommand::new_static(name, slot.clone(), false), line)
        };
        let (evalsha, line) = command("EVALSHA", self.script.sha1());
        match client.custom(evalsha, line).await {
            Err(error) if error.details().starts_with("NOSCRIPT") => {
                metrics.noscript_fallback(self.command);
                let (eval, line) = command("EVAL", self.body);
                client.custom(eval, line).await
            }
            result => result,
        }
    }
}

impl LuaScript {
    /// The script itself, to cache it on the server (SCRIPT LOAD) so the
    /// first call does not pay the NOSCRIPT round trip.
    pub fn as_script(&self) -> &Script {
        &self.script
    }
}

/// The service's scripts.
pub struct Scripts {
    pub record_success: LuaScript,
    pub record_failure: LuaScript,
    pub admit: LuaScript,
    /// Whether the service's Redis user may run what the service needs
    /// (`permissions.rs`); it runs nothing and writes nothing.
    pub probe: LuaScript,
    /// The circuit breaker's: one merchant's pending counts
    /// (`scripts/breaker_flush.lua`), one breaker's transition
    /// (`breaker_transition.lua`), the global index (`breaker_index.lua`).
    pub breaker_flush: LuaScript,
    pub breaker_transition: LuaScript,
    pub breaker_index: LuaScript,
    /// The experiment counts log's: one instance's tick of a shard
    /// (`scripts/experiment_append.lua`), a chunk of its compaction into
    /// the day hashes (`experiment_compact.lua`), GetUplift's read
    /// (`experiment_read.lua`).
    pub experiment_append: LuaScript,
    pub experiment_compact: LuaScript,
    pub experiment_read: LuaScript,
    /// The first three above, many calls per EVALSHA (bulk import only; see
    /// `scripts/batch.lua`).
    pub batch: Script,
}

/// The batch script's body, for a call that must not be refused with
/// NOSCRIPT (`chunks.rs`).
pub(super) fn batch_body() -> &'static str {
    BATCH
}

/// The batch script: the three scripts' files, each wrapped unchanged as a
/// function of `(KEYS, ARGV)` that shadows Redis's globals, then the loop
/// that calls them. Built from the same files, so a row of the import runs
/// the code RecordOutcome's call runs.
const BATCH: &str = concat!(
    include_str!("scripts/attempts.lua"),
    "local function record_success(KEYS, ARGV)\n",
    include_str!("scripts/record_success.lua"),
    "\nend\nlocal function record_failure(KEYS, ARGV)\n",
    include_str!("scripts/record_failure.lua"),
    "\nend\nlocal function admit(KEYS, ARGV)\n",
    include_str!("scripts/admit.lua"),
    "\nend\n",
    include_str!("scripts/batch.lua"),
);

impl Scripts {
    pub fn new() -> Self {
        Self {
            // The attempt memory is shared Lua, put in front of each write
            // script: a script sent to Redis cannot load another.
            record_success: LuaScript::new(
                RedisCommand::RecordSuccess,
                concat!(
                    include_str!("scripts/attempts.lua"),
                    include_str!("scripts/record_success.lua")
                ),
            ),
            record_failure: LuaScript::new(
                RedisCommand::RecordFailure,
                concat!(
                    include_str!("scripts/attempts.lua"),
                    include_str!("scripts/record_failure.lua")
                ),
            ),
            admit: LuaScript::new(RedisCommand::Admit, include_str!("scripts/admit.lua")),
            probe: LuaScript::new(
                RedisCommand::PermissionProbe,
                include_str!("scripts/probe.lua"),
            ),
            // The counts hash's layout and helpers are shared Lua, put in
            // front of the two scripts that read it.
            breaker_flush: LuaScript::new(
                RedisCommand::BreakerFlush,
                concat!(
                    include_str!("scripts/breaker_common.lua"),
                    include_str!("scripts/breaker_flush.lua")
                ),
            ),
            breaker_transition: LuaScript::new(
                RedisCommand::BreakerTransition,
                concat!(
                    include_str!("scripts/breaker_common.lua"),
                    include_str!("scripts/breaker_transition.lua")
                ),
            ),
            breaker_index: LuaScript::new(
                RedisCommand::BreakerIndex,
                include_str!("scripts/breaker_index.lua"),
            ),
            // Where the log stands is shared Lua, put in front of the three.
            experiment_append: LuaScript::new(
                RedisCommand::ExperimentFlush,
                concat!(
                    include_str!("scripts/experiment_log_state.lua"),
                    include_str!("scripts/experiment_append.lua")
                ),
            ),
            experiment_compact: LuaScript::new(
                RedisCommand::ExperimentCompact,
                concat!(
                    include_str!("scripts/experiment_log_state.lua"),
                    include_str!("scripts/experiment_compact.lua")
                ),
            ),
            experiment_read: LuaScript::new(
                RedisCommand::ExperimentRead,
                concat!(
                    include_str!("scripts/experiment_log_state.lua"),
                    include_str!("scripts/experiment_read.lua")
                ),
            ),
            batch: Script::from_lua(BATCH),
        }
    }
}

impl Scripts {
    /// The script an encoded op runs.
    pub(super) fn of(&self, name: ScriptName) -> &LuaScript {
        match name {
            ScriptName::RecordSuccess => &self.record_success,
            ScriptName::RecordFailure => &self.record_failure,
            ScriptName::Admit => &self.admit,
        }
    }

    pub fn all(&self) -> [&LuaScript; 10] {
        [
            &self.record_success,
            &self.record_failure,
            &self.admit,
            &self.probe,
            &self.breaker_flush,
            &self.breaker_transition,
            &self.breaker_index,
            &self.experiment_append,
            &self.experiment_compact,
            &self.experiment_read,
        ]
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests;
