//! The service's own count of its Redis calls, from its `/metrics`
//! (`sticky_routing_redis_command_duration_seconds_count` by `command`), so
//! the request path's calls and the background's are told apart: Redis's
//! `INFO commandstats` sees one EVALSHA whoever sent it.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::BoxError;

/// The family counted: one `_count` series per `command` label.
const FAMILY: &str = "sticky_routing_redis_command_duration_seconds_count";

/// Commands a call makes while its caller waits (telemetry/redis_command.rs).
const REQUEST_PATH: [&str; 8] = [
    "read_combos",
    "read_habits",
    "forget",
    "record_success",
    "record_failure",
    "admit",
    "breaker_health",
    "experiment_read",
];

/// The readiness check's own calls: neither a caller's nor the background's.
const READINESS: [&str; 2] = ["ping", "permission_probe"];

/// Who a Redis call the service made was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// A caller waits for it.
    RequestPath,
    /// The readiness check.
    Readiness,
    /// Everything else: the breaker's and the experiment's flushes, the
    /// breaker index's poll and transitions, and any command label this
    /// kit does not know yet (a new label is background until named here,
    /// so a redesign's new background calls are never missed).
    Background,
}

/// The side a `command` label is on.
pub fn side(command: &str) -> Side {
    if REQUEST_PATH.contains(&command) {
        Side::RequestPath
    } else if READINESS.contains(&command) {
        Side::Readiness
    } else {
        Side::Background
    }
}

/// Calls by `command` label at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommandCounts(pub BTreeMap<String, f64>);

impl CommandCounts {
    /// The counts in a Prometheus text exposition, summed over any other
    /// labels a series has.
    pub fn parse(text: &str) -> Self {
        let mut counts = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some(rest) = line.strip_prefix(FAMILY) else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once(' ') else {
                continue;
            };
            let (Some(command), Ok(value)) = (label(labels, "command"), value.parse::<f64>())
            else {
                continue;
            };
            *counts.entry(command.to_owned()).or_insert(0.0) += value;
        }
        Self(counts)
    }

    /// Calls by label between `self` and `later` (a label absent before
    /// counted from 0).
    pub fn delta(&self, later: &CommandCounts) -> CommandCounts {
        CommandCounts(
            later
                .0
                .iter()
                .map(|(k, v)| (k.clone(), v - self.0.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, v)| *v > 0.0)
                .collect(),
        )
    }

    /// The calls on `side`, summed (0, not the -0 of an empty `sum`).
    pub fn total(&self, on: Side) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| side(k) == on)
            .fold(0.0, |total, (_, v)| total + v)
    }

    /// The calls on `side`, by label.
    pub fn of(&self, on: Side) -> BTreeMap<String, f64> {
        self.0
            .iter()
            .filter(|(k, _)| side(k) == on)
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}

/// `name`'s value in a `{a="x",b="y"}` label set (values hold no quotes
/// here: they are the service's own fixed names).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let inner = labels.strip_prefix('{')?.strip_suffix('}')?;
    inner.split(',').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key.trim() == name).then(|| value.trim().trim_matches('"'))
    })
}

/// The service's `/metrics` text, fetched as a scraper does (HTTP/1.1, one
/// connection per scrape); the tests' `scrape` does the same.
pub async fn scrape(addr: SocketAddr) -> Result<String, BoxError> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    body(&response).map(str::to_owned)
}

/// The body of a `200` HTTP/1.1 response with a whole body (the service
/// sends a Content-Length; a chunked one would mix chunk sizes into it).
fn body(response: &str) -> Result<&str, BoxError> {
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or("/metrics: no end of headers")?;
    if !head.starts_with("HTTP/1.1 200") {
        let status = head.lines().next().unwrap_or_default();
        return Err(format!("/metrics answered {status:?}").into());
    }
    if head.lines().any(|h| {
        h.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    }) {
        return Err("/metrics answered chunked, which this reader does not decode".into());
    }
    Ok(body)
}

/// The counts on `/metrics` at `addr` now.
pub async fn command_counts(addr: SocketAddr) -> Result<CommandCounts, BoxError> {
    Ok(CommandCounts::parse(&scrape(addr).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP sticky_routing_redis_command_duration_seconds Redis calls\n\
        # TYPE sticky_routing_redis_command_duration_seconds histogram\n\
        sticky_routing_redis_command_duration_seconds_bucket{command=\"record_success\",le=\"0.001\"} 90\n\
        sticky_routing_redis_command_duration_seconds_count{command=\"record_success\"} 100\n\
        sticky_routing_redis_command_duration_seconds_count{command=\"record_failure\"} 25\n\
        sticky_routing_redis_command_duration_seconds_count{command=\"ping\"} 4\n\
        sticky_routing_redis_command_duration_seconds_count{command=\"breaker_flush\"} 12\n\
        sticky_routing_redis_command_duration_seconds_count{otel_scope_name=\"x\",command=\"experiment_flush\"} 3.5e1\n\
        sticky_routing_redis_command_duration_seconds_count_other{command=\"admit\"} 9\n\
        sticky_routing_redis_command_duration_seconds_sum{command=\"admit\"} 0.5\n\
        sticky_routing_rpc_duration_seconds_count{method=\"RecordOutcome\"} 125\n";

    #[test]
    fn counts_are_read_by_command_from_the_count_series_only() {
        let counts = CommandCounts::parse(TEXT);
        assert_eq!(counts.0.get("record_success"), Some(&100.0));
        assert_eq!(counts.0.get("experiment_flush"), Some(&35.0));
        assert_eq!(counts.0.get("admit"), None, "{counts:?}");
        assert_eq!(counts.0.len(), 5, "{counts:?}");
    }

    #[test]
    fn calls_are_split_into_request_path_readiness_and_background() {
        let before = CommandCounts::parse(TEXT);
        let later = TEXT
            .replace("\"} 100", "\"} 300")
            .replace("\"} 12", "\"} 52")
            .replace("{command=\"ping\"} 4", "{command=\"ping\"} 8")
            + "sticky_routing_redis_command_duration_seconds_count{command=\"breaker_shard_flush\"} 7\n";
        let delta = before.delta(&CommandCounts::parse(&later));
        assert_eq!(delta.total(Side::RequestPath), 200.0);
        assert_eq!(delta.total(Side::Readiness), 4.0);
        // An unknown label is background, from 0.
        assert_eq!(delta.total(Side::Background), 47.0);
        let background = delta.of(Side::Background);
        assert_eq!(background.get("breaker_shard_flush"), Some(&7.0));
        assert!(!background.contains_key("experiment_flush"), "no change");
        let none = CommandCounts::default().total(Side::Background);
        assert!(
            none == 0.0 && none.is_sign_positive(),
            "printed as 0.0, not -0.0"
        );
        assert_eq!(side("admit"), Side::RequestPath);
        assert_eq!(side("breaker_transition"), Side::Background);
        assert_eq!(side("permission_probe"), Side::Readiness);
    }

    #[test]
    fn only_a_whole_200_body_is_taken() {
        let ok = "HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc";
        assert_eq!(body(ok).unwrap(), "abc");
        let missing = "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
        assert!(body(missing).unwrap_err().to_string().contains("404"));
        let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        assert!(body(chunked).is_err());
        assert!(body("HTTP/1.1 200 OK\r\n").is_err());
    }
}
