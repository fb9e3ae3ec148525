//! What a Redis call the service makes is for, as the metrics label it:
//! one closed set, each at its own index, so that an instrument can keep a
//! series per command in an array.

/// What a Redis call the service makes is for: the `command` label of
/// `sticky_routing_redis_command_duration_seconds`, and the `script` label
/// of `sticky_routing_noscript_fallbacks_total` for the three scripts.
/// Named by the store's operation, not by the Redis command, because an
/// operation may be two commands (GetHabits' HGETALL and TTL, a script's
/// EVALSHA and EVAL after NOSCRIPT) and two operations share a command
/// (GetPin's and GetHabits' HGETALL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisCommand {
    /// GetPin: HGETALL of the customer's hash.
    ReadCombos = 0,
    /// GetHabits: HGETALL and TTL of the customer's hash, sent together.
    ReadHabits,
    /// ForgetCustomer: DEL of the customer's hash.
    Forget,
    /// RecordOutcome, a success: record_success.lua.
    RecordSuccess,
    /// RecordOutcome, a gateway failure: record_failure.lua.
    RecordFailure,
    /// RecordOutcome, a new customer's success: admit.lua on the merchant's
    /// admission key.
    Admit,
    /// The readiness check: PING every 500 ms (to every primary on Cluster).
    Ping,
    /// The readiness check's other half: probe.lua, which asks Redis whether
    /// the service's user may run every command the service needs.
    PermissionProbe,
    /// The circuit breaker's background flush of one merchant's counts:
    /// breaker_flush.lua.
    BreakerFlush,
    /// One breaker's trip, close or reopen: breaker_transition.lua.
    BreakerTransition,
    /// The breaker index's poll, and its writes (trips, overrides):
    /// breaker_index.lua.
    BreakerIndex,
    /// GetConnectorHealth: HGETALL of the merchant's breaker counts and of
    /// the breaker index.
    BreakerHealth,
    /// The experiment counts' background flush of one instance's tick of
    /// a shard onto the shard's log: experiment_append.lua.
    ExperimentFlush,
    /// GetUplift: the shard's log and the merchant's day hashes
    /// (experiment_read.lua), and HGETALL of each day's hash of the layout
    /// before the shards.
    ExperimentRead,
    /// The experiment counts log's compaction: a read of a batch's frames
    /// (LRANGE), and the adding of one of its chunks into the day hashes
    /// (experiment_compact.lua).
    ExperimentCompact,
}

impl RedisCommand {
    /// Every command, each at its own index.
    pub const ALL: [Self; 15] = [
        Self::ReadCombos,
        Self::ReadHabits,
        Self::Forget,
        Self::RecordSuccess,
        Self::RecordFailure,
        Self::Admit,
        Self::Ping,
        Self::PermissionProbe,
        Self::BreakerFlush,
        Self::BreakerTransition,
        Self::BreakerIndex,
        Self::BreakerHealth,
        Self::ExperimentFlush,
        Self::ExperimentRead,
        Self::ExperimentCompact,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::ReadCombos => "read_combos",
            Self::ReadHabits => "read_habits",
            Self::Forget => "forget",
            Self::RecordSuccess => "record_success",
            Self::RecordFailure => "record_failure",
            Self::Admit => "admit",
            Self::Ping => "ping",
            Self::PermissionProbe => "permission_probe",
            Self::BreakerFlush => "breaker_flush",
            Self::BreakerTransition => "breaker_transition",
            Self::BreakerIndex => "breaker_index",
            Self::BreakerHealth => "breaker_health",
            Self::ExperimentFlush => "experiment_flush",
            Self::ExperimentRead => "experiment_read",
            Self::ExperimentCompact => "experiment_compact",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_redis_command_sits_at_its_own_index_under_its_own_label() {
        let labels: std::collections::BTreeSet<&str> =
            RedisCommand::ALL.iter().map(|c| c.label()).collect();
        assert_eq!(labels.len(), RedisCommand::ALL.len());
        for (index, command) in RedisCommand::ALL.into_iter().enumerate() {
            assert_eq!(command as usize, index, "{command:?}");
        }
    }
}
