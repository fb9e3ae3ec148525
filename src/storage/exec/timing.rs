//! How long each of the store's Redis calls took, for `/metrics`
//! (`sticky_routing_redis_command_duration_seconds`), however the call ended,
//! and its span, a child of the RPC's, when traces are exported.

use std::time::Instant;

use tracing::Instrument as _;

use super::super::error::StorageError;
use crate::telemetry::{Metrics, RedisCommand, traces};

/// Runs `call`, one Redis call of `command` already handed to the Redis
/// client, and records how long it took.
///
/// The time is recorded when the call ends, or when it is dropped before it
/// ends: the RPC's deadline passed and the handler stopped waiting for it
/// (or the caller went away). Those are the slowest calls, so a histogram
/// that skipped them would hide exactly the stalls it is for. A call
/// dropped at or after `deadline` is also counted as an error,
/// `deadline_exceeded`, the answer its caller got; one dropped earlier was
/// abandoned by the caller, which says nothing about Redis.
///
/// Two clock reads and one histogram record per call; no allocation.
///
/// On the single-node path, which every call takes, the store uses
/// [`Timed`] in place instead: passing the call's future into this function
/// copies it (fred's futures run to kilobytes), which callgrind counted at
/// thousands of instructions per call.
pub(super) async fn timed<T>(
    metrics: &Metrics,
    command: RedisCommand,
    deadline: Instant,
    call: impl Future<Output = Result<T, StorageError>>,
) -> Result<T, StorageError> {
    let timed = Timed::start(metrics, command, deadline);
    let result = match timed.span() {
        None => call.await,
        Some(span) => call.instrument(span.clone()).await,
    };
    timed.finish(&result);
    result
}

/// One Redis call being timed, and its span: see [`timed`]. Start it just
/// before the call, await the call with [`Timed::span`] (instrumenting it
/// only when there is one, so that without traces the call's future is
/// never moved into a wrapper), then [`Timed::finish`]. Dropped unfinished
/// (the caller stopped waiting), it still records the time.
pub(super) struct Timed<'a> {
    timer: Timer<'a>,
    span: tracing::Span,
}

impl<'a> Timed<'a> {
    pub(super) fn start(metrics: &'a Metrics, command: RedisCommand, deadline: Instant) -> Self {
        // The readiness check belongs to no call: a span would start a trace
        // of its own twice a second. Background work (the breakers' flush,
        // transitions and index poll, the experiments' flush) has no RPC
        // span around it, and `redis_span` builds nothing without one; an
        // admin RPC's index write has one, and is traced under it.
        let span = match command {
            RedisCommand::Ping | RedisCommand::PermissionProbe => tracing::Span::none(),
            _ => traces::redis_span(command.label()),
        };
        Self {
            timer: Timer {
                metrics,
                command,
                deadline,
                started: Instant::now(),
                ended: false,
            },
            span,
        }
    }

    /// The call's span; `None` (one check) unless traces are exported.
    pub(super) fn span(&self) -> Option<&tracing::Span> {
        (!self.span.is_disabled()).then_some(&self.span)
    }

    /// Records the time and, on the span, a failure's kind.
    pub(super) fn finish<T>(mut self, result: &Result<T, StorageError>) {
        self.timer.ended = true;
        if let Err(error) = result {
            traces::record_redis_error(&self.span, error.kind());
        }
    }
}

/// Records on drop: see [`timed`].
struct Timer<'a> {
    metrics: &'a Metrics,
    command: RedisCommand,
    deadline: Instant,
    started: Instant,
    /// Whether the call ended with an answer (or an error) of its own.
    ended: bool,
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        let now = Instant::now();
        self.metrics
            .redis_command(self.command, now.saturating_duration_since(self.started));
        if !self.ended && now >= self.deadline {
            self.metrics
                .redis_error(StorageError::DeadlineExceeded.kind());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn count(text: &str, series: &str) -> Option<u64> {
        text.lines().find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().unwrap())
        })
    }

    #[tokio::test]
    async fn a_call_is_timed_however_it_ends_and_one_dropped_past_its_deadline_is_an_error() {
        let metrics = Metrics::new().unwrap();
        let later = Instant::now() + Duration::from_secs(60);
        let answered = timed(&metrics, RedisCommand::Forget, later, async { Ok(1) }).await;
        assert_eq!(answered.unwrap(), 1);
        let failed: Result<(), _> = timed(&metrics, RedisCommand::Forget, later, async {
            Err(StorageError::Unexpected("odd".into()))
        })
        .await;
        assert!(failed.is_err());

        // Dropped by a caller who went away before the deadline: timed only.
        let pending = std::future::pending::<Result<(), StorageError>>();
        let abandoned = timed(&metrics, RedisCommand::Forget, later, pending);
        assert!(
            tokio::time::timeout(Duration::from_millis(1), abandoned)
                .await
                .is_err()
        );
        // Dropped when the deadline passed: timed, and an error.
        let soon = Instant::now() + Duration::from_millis(5);
        let pending = std::future::pending::<Result<(), StorageError>>();
        let stalled = timed(&metrics, RedisCommand::Forget, soon, pending);
        assert!(tokio::time::timeout_at(soon.into(), stalled).await.is_err());

        let text = metrics.render();
        let series = "sticky_routing_redis_command_duration_seconds_count{command=\"forget\"}";
        assert_eq!(count(&text, series), Some(4), "{text}");
        // Errors the call returned are its caller's to count; only the
        // stalled one is counted here.
        assert_eq!(
            count(
                &text,
                "sticky_routing_redis_errors_total{kind=\"deadline_exceeded\"}"
            ),
            Some(1),
            "{text}"
        );
    }
}
