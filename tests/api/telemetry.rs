//! Traces and logs of the real binary, read the way an on-call engineer's
//! tools read them: spans arrive over OTLP/gRPC at an in-test collector and
//! continue the caller's `traceparent`; JSON log lines carry the call's ids,
//! and an outage is summarised instead of logged call by call.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use sticky_routing::transport::pb;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use tokio::io::AsyncReadExt as _;
use tokio::process::Child;
use tokio::sync::mpsc;

use crate::support::*;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN_ID: &str = "00f067aa0ba902b7";
/// A customer id that must never leave the service in a span or a line.
const CUSTOMER: &str = "cust-secret-4711";

/// Receives OTLP trace exports, as an OpenTelemetry collector would.
struct Collector(mpsc::UnboundedSender<(String, Span)>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(text_of)
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    let _ = self.0.send((service.clone(), span));
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Starts a collector on a free port; spans arrive on the receiver with
/// their resource's `service.name`.
async fn start_collector() -> (String, mpsc::UnboundedReceiver<(String, Span)>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Collector(tx)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (format!("http://{addr}"), rx)
}

fn text_of(kv: &KeyValue) -> Option<String> {
    match kv.value.as_ref()?.value.as_ref()? {
        AnyValue::StringValue(text) => Some(text.clone()),
        AnyValue::IntValue(n) => Some(n.to_string()),
        AnyValue::BoolValue(b) => Some(b.to_string()),
        AnyValue::DoubleValue(x) => Some(x.to_string()),
        _ => None,
    }
}

fn attributes(span: &Span) -> HashMap<String, String> {
    span.attributes
        .iter()
        .filter_map(|kv| Some((kv.key.clone(), text_of(kv)?)))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn with_metadata<T>(message: T, pairs: &[(&'static str, String)]) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    for (name, value) in pairs {
        request.metadata_mut().insert(*name, value.parse().unwrap());
    }
    request
}

/// Collects spans until `done` says the set is complete, for at most 15 s.
async fn spans_until(
    rx: &mut mpsc::UnboundedReceiver<(String, Span)>,
    done: impl Fn(&[(String, Span)]) -> bool,
) -> Vec<(String, Span)> {
    let mut spans = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !done(&spans) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(span)) => spans.push(span),
            _ => panic!(
                "the collector got {} spans, not the ones expected: {:#?}",
                spans.len(),
                spans.iter().map(|(_, s)| &s.name).collect::<Vec<_>>()
            ),
        }
    }
    spans
}

#[tokio::test]
async fn spans_reach_a_collector_over_otlp_and_continue_the_callers_trace() {
    let redis = RedisServer::start();
    let (endpoint, mut received) = start_collector().await;
    let (mut child, channel) = start_binary_listening(
        redis.url(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_SERVICE_NAME", "sticky-routing-under-test".into()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
            ("STICKY_ROUTING_MAX_CUSTOMERS_mclosed", "0".into()),
        ],
        Stdio::null(),
    )
    .await;
    let mut api = StickyRoutingClient::new(channel);
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01");
    api.record_outcome(with_metadata(
        outcome("m-traced", CUSTOMER, "ADYEN", pb::Outcome::Success),
        &[("traceparent", traceparent.clone())],
    ))
    .await
    .unwrap();
    // No traceparent: the service starts a trace of its own.
    let pinned = api
        .get_pin(pb::GetPinRequest {
            merchant_id: "m-traced".into(),
            ..pin_request(CUSTOMER, &[])
        })
        .await
        .unwrap()
        .into_inner();
    assert!(pinned.pinned);
    // A merchant with no budget: the span says why nothing was written.
    api.record_outcome(outcome("mclosed", CUSTOMER, "ADYEN", pb::Outcome::Success))
        .await
        .unwrap();
    // Bad input: the span says which code it got.
    api.record_outcome(outcome("", CUSTOMER, "ADYEN", pb::Outcome::Success))
        .await
        .unwrap_err();

    let rpc = "sticky_routing.v1.StickyRouting/";
    let spans = spans_until(&mut received, |spans| {
        let named = |name: String| spans.iter().filter(|(_, s)| s.name == name).count();
        named(format!("{rpc}RecordOutcome")) >= 3 && named(format!("{rpc}GetPin")) >= 1
    })
    .await;
    let record = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.name == format!("{rpc}RecordOutcome") && hex(&s.trace_id) == TRACE_ID)
        .expect("the RecordOutcome span carries the caller's trace id");
    assert_eq!(
        hex(&record.parent_span_id),
        CALLER_SPAN_ID,
        "its parent is the caller's span"
    );
    assert_eq!(record.kind, SpanKind::Server as i32);
    let attrs = attributes(record);
    for (key, value) in [
        ("rpc.system", "grpc"),
        ("rpc.method", "RecordOutcome"),
        ("rpc.grpc.status_code", "0"),
        ("sticky_routing.code", "OK"),
        ("sticky_routing.result", "applied"),
        ("sticky_routing.merchant_id", "m-traced"),
    ] {
        assert_eq!(
            attrs.get(key).map(String::as_str),
            Some(value),
            "{key} in {attrs:?}"
        );
    }

    // Its Redis calls are its children.
    let redis_calls: Vec<&Span> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.parent_span_id == record.span_id)
        .collect();
    assert!(!redis_calls.is_empty(), "no child span under RecordOutcome");
    // A new customer's success: the write finds no hash, admission, the write.
    let operations: Vec<String> = redis_calls
        .iter()
        .filter_map(|call| attributes(call).remove("db.operation.name"))
        .collect();
    for operation in ["record_success", "admit"] {
        assert!(
            operations.iter().any(|o| o == operation),
            "no {operation} span in {operations:?}"
        );
    }
    for call in &redis_calls {
        assert_eq!(call.trace_id, record.trace_id);
        assert_eq!(call.kind, SpanKind::Client as i32);
        assert_eq!(
            attributes(call).get("db.system.name").map(String::as_str),
            Some("redis"),
            "{call:?}"
        );
    }

    let pin = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.name == format!("{rpc}GetPin"))
        .unwrap();
    assert!(
        pin.parent_span_id.is_empty(),
        "GetPin had no traceparent: a root span"
    );
    assert_ne!(hex(&pin.trace_id), TRACE_ID);
    assert_eq!(
        attributes(pin)
            .get("sticky_routing.result")
            .map(String::as_str),
        Some("pinned")
    );

    let refused = spans
        .iter()
        .map(|(_, s)| attributes(s))
        .find(|a| a.get("sticky_routing.merchant_id").map(String::as_str) == Some("mclosed"))
        .expect("a span for the merchant with no budget");
    assert_eq!(
        refused.get("sticky_routing.result").map(String::as_str),
        Some("not_admitted")
    );
    assert_eq!(
        refused
            .get("sticky_routing.admission_refusal")
            .map(String::as_str),
        Some("budget")
    );

    let bad = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| {
            s.name == format!("{rpc}RecordOutcome")
                && attributes(s).get("sticky_routing.code").map(String::as_str)
                    == Some("INVALID_ARGUMENT")
        })
        .expect("the bad call's span says INVALID_ARGUMENT");
    assert_eq!(
        attributes(bad)
            .get("rpc.grpc.status_code")
            .map(String::as_str),
        Some("3")
    );

    for (service, span) in &spans {
        assert_eq!(service, "sticky-routing-under-test");
        for kv in &span.attributes {
            let text = text_of(kv).unwrap_or_default();
            assert!(
                !text.contains(CUSTOMER),
                "customer id in span {} attribute {}",
                span.name,
                kv.key
            );
        }
    }
    child.kill().await.unwrap();
}

/// The sample is decided before a span is built, with the configured
/// sampler: a caller's "not sampled" is followed, about half of the traces
/// the service starts are kept at ratio 0.5, and each kept one has the
/// trace id the SDK's own ratio sampler keeps (the id it was sampled on),
/// with its Redis span under it.
#[tokio::test]
async fn only_the_calls_the_sampler_keeps_are_traced_and_they_keep_their_trace_id() {
    use opentelemetry::trace::{SpanKind as OtelKind, TraceId};
    use opentelemetry_sdk::trace::{Sampler, SamplingDecision, ShouldSample};

    let redis = RedisServer::start();
    let (endpoint, mut received) = start_collector().await;
    let (mut child, channel) = start_binary_listening(
        redis.url(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio".into()),
            ("OTEL_TRACES_SAMPLER_ARG", "0.5".into()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
        ],
        Stdio::null(),
    )
    .await;
    let mut api = StickyRoutingClient::new(channel);
    let roots = 200;
    for _ in 0..roots {
        api.get_pin(pin_request(CUSTOMER, &[])).await.unwrap();
    }
    let unsampled: Vec<String> = (1..=20u128).map(|t| format!("{t:032x}")).collect();
    for trace in &unsampled {
        let traceparent = format!("00-{trace}-{CALLER_SPAN_ID}-00");
        api.get_pin(with_metadata(
            pin_request(CUSTOMER, &[]),
            &[("traceparent", traceparent)],
        ))
        .await
        .unwrap();
    }
    // Last, a call the caller sampled: once its span is in, every earlier
    // one has had its chance to arrive (one exporter, spans in order).
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01");
    api.get_pin(with_metadata(
        pin_request(CUSTOMER, &[]),
        &[("traceparent", traceparent)],
    ))
    .await
    .unwrap();
    let rpc = "sticky_routing.v1.StickyRouting/GetPin";
    let mut spans = spans_until(&mut received, |spans| {
        spans
            .iter()
            .any(|(_, s)| s.name == rpc && hex(&s.trace_id) == TRACE_ID)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    while let Ok(span) = received.try_recv() {
        spans.push(span);
    }

    let pins: Vec<&Span> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.name == rpc)
        .collect();
    let roots_kept: Vec<&&Span> = pins
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert!(
        (60..=140).contains(&roots_kept.len()),
        "{} of {roots} root calls kept at ratio 0.5",
        roots_kept.len()
    );
    let sdk = Sampler::TraceIdRatioBased(0.5);
    for span in &roots_kept {
        let id = TraceId::from_hex(&hex(&span.trace_id)).unwrap();
        let decision = sdk
            .should_sample(None, id, rpc, &OtelKind::Server, &[], &[])
            .decision;
        assert_eq!(decision, SamplingDecision::RecordAndSample, "trace {id}");
    }
    for span in &pins {
        assert!(
            !unsampled.contains(&hex(&span.trace_id)),
            "the caller did not sample trace {}",
            hex(&span.trace_id)
        );
    }
    // 1 + the roots kept: the caller's sampled call is the only other one.
    assert_eq!(pins.len(), roots_kept.len() + 1);
    let redis_spans = spans
        .iter()
        .filter(|(_, s)| s.name == "read_combos")
        .count();
    assert_eq!(redis_spans, pins.len(), "one Redis span per kept GetPin");
    child.kill().await.unwrap();
}

/// Reads the binary's stderr as it comes, so that a chatty binary never
/// blocks on a full pipe; the text arrives once the binary exits.
fn read_stderr(child: &mut Child) -> tokio::task::JoinHandle<String> {
    let mut stderr = child.stderr.take().unwrap();
    tokio::spawn(async move {
        let mut text = String::new();
        stderr.read_to_string(&mut text).await.unwrap();
        text
    })
}

/// Stops the binary with SIGTERM and returns all it wrote to stderr.
async fn stop(mut child: Child, stderr: tokio::task::JoinHandle<String>) -> String {
    test_support::signal::send_to_child(&child, "-TERM");
    let text = tokio::time::timeout(Duration::from_secs(30), stderr)
        .await
        .expect("the binary exits after SIGTERM")
        .unwrap();
    child.wait().await.unwrap();
    text
}

#[tokio::test]
async fn json_lines_carry_the_calls_ids_and_an_outage_is_summarised() {
    // Nothing listens here: every call fails the same way.
    let dead_redis = format!("redis://127.0.0.1:{}", free_port());
    let (mut child, channel) = start_binary_listening(
        dead_redis,
        &[("STICKY_ROUTING_LOG_FORMAT", "json".into())],
        Stdio::piped(),
    )
    .await;
    let stderr = read_stderr(&mut child);
    let mut api = StickyRoutingClient::new(channel);
    let calls = 1_000;
    let started = Instant::now();
    for i in 0..calls {
        let mut ids = vec![
            ("x-request-id", format!("req-{i}")),
            ("x-tenant-id", "tenant-eu".to_owned()),
        ];
        if i == 0 {
            ids.push(("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01")));
        }
        let request = with_metadata(
            outcome("m-down", CUSTOMER, "ADYEN", pb::Outcome::Success),
            &ids,
        );
        let status = api.record_outcome(request).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    }
    let took = started.elapsed();
    let stderr = stop(child, stderr).await;

    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"))
        })
        .collect();
    assert!(lines.iter().all(serde_json::Value::is_object));
    assert!(
        !stderr.contains(CUSTOMER),
        "a customer id was logged:\n{stderr}"
    );

    let failed: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("call failed"))
        })
        .collect();
    assert_eq!(
        failed.len(),
        1,
        "one full line for the outage, not one per call:\n{stderr}"
    );
    let first = failed[0];
    assert_eq!(first["trace_id"], TRACE_ID, "{first}");
    assert_eq!(first["request_id"], "req-0", "{first}");
    assert_eq!(first["tenant_id"], "tenant-eu", "{first}");
    assert_eq!(first["kind"], "no_connection", "{first}");
    assert_eq!(first["level"], "WARN", "{first}");

    let summaries: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["kind"] == "no_connection" && l["count"].is_u64())
        .collect();
    let counted: u64 = summaries.iter().map(|l| l["count"].as_u64().unwrap()).sum();
    assert_eq!(
        counted,
        calls - 1,
        "every later failure is counted once:\n{stderr}"
    );
    // One summary a second at most, plus the one written at shutdown.
    let most = took.as_secs() + 2;
    assert!(
        summaries.len() as u64 <= most,
        "{} summary lines in {took:?}",
        summaries.len()
    );
}
