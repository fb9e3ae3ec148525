//! A fuzz of the gRPC edge, in process and without Redis: random bodies go
//! through the generated server and the in-flight gate as a connection's
//! would (framing, size limit, the strict codec), then validation, key
//! encoding and the answer (`fuzz/backend.rs`), and come back as the
//! client sees them. No body may panic the service or get `INTERNAL`, and
//! a refused one names the field it refuses.
//!
//! Stable Rust, no libFuzzer: a seeded generator (`fuzz/cases.rs`) makes
//! well-formed messages of plausible fields, protobuf-aware mutations of
//! them, broken frames and noise, so most calls reach validation rather
//! than stop at decoding. A well-formed message must get exactly the answer
//! `convert` gives it. `make test` runs a short run; `make fuzz` runs
//! `long_run` in release (docs/development.md), `FUZZ_CASES` and
//! `FUZZ_SEED` override its size and seed, and `FUZZ_CASE` replays one case.

mod backend;
mod cases;
mod requests;
mod rng;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use prost::Message as _;
use tonic::body::Body;
use tonic::codegen::Bytes;
use tonic::codegen::http;
use tonic::{Code, Status};
use tower::Service;

use self::backend::Backend;
use self::cases::{Case, Target};
use self::requests::{Request, Rpc, StoreFailure};
use self::rng::Rng;
use super::convert;
use super::gate::ApiGate;
use super::pb;
use super::pb::sticky_routing_server::StickyRoutingServer;
use crate::domain::pin::ScoreRatio;
use crate::domain::priority::Shares;
use crate::domain::rollout::Mode;
use crate::telemetry::Metrics;

type Server = ApiGate<StickyRoutingServer<Backend>>;

/// The seed of `make test` and, unless `FUZZ_SEED` says otherwise, of `make fuzz`.
const DEFAULT_SEED: u64 = 0x5EED_F022;

/// The server as start-up assembles it, around the fuzz backend.
fn server() -> Server {
    super::server::api(
        Backend,
        1,
        Shares::default(),
        Arc::new(Metrics::new().unwrap()),
    )
}

/// What came back: the status, and the answer's one frame when it is OK.
struct Answer {
    status: Status,
    frame: Option<Bytes>,
}

/// The output of a future that never waits: every part of a fuzz call is
/// in memory, so a future still pending after many polls is a bug.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..64 {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
    panic!("a fuzz call waited for something");
}

fn call(server: &mut Server, case: &Case) -> Answer {
    let path = match case.target {
        Target::Rpc(rpc) => rpc.path(),
        Target::Unknown(path) => path,
    };
    let mut request = http::Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(encoding) = case.encoding {
        request = request.header("grpc-encoding", encoding);
    }
    let mut request = request
        .body(Full::new(Bytes::from(case.body.clone())))
        .unwrap();
    request.extensions_mut().insert(case.answer.clone());
    let Ok(()) = ready(std::future::poll_fn(|cx| {
        Service::<http::Request<Full<Bytes>>>::poll_ready(server, cx)
    }));
    let Ok(response): Result<http::Response<Body>, Infallible> = ready(server.call(request));
    let (parts, body) = response.into_parts();
    // An error leaves as a trailers-only answer: the status is in the headers.
    if let Some(status) = Status::from_header_map(&parts.headers) {
        return Answer {
            status,
            frame: None,
        };
    }
    let collected = ready(body.collect()).expect("the answer's body");
    let status = collected
        .trailers()
        .and_then(Status::from_header_map)
        .expect("grpc-status in the answer's trailers");
    Answer {
        status,
        frame: Some(collected.to_bytes()),
    }
}

/// The fields a refusal may name: every request field, and `request` for
/// a body that is not one well-formed message.
const FIELDS: &[&str] = &[
    "merchant_id",
    "customer_id",
    "payment_method",
    "payment_method_type",
    "connector",
    "outcome",
    "attempt_id",
    "eligible_connectors",
    "connector_scores",
    "min_score_ratio",
    "override",
    "ttl_seconds",
    "pin_connector",
    "days",
    "request",
];

fn named_field(message: &str) -> Option<&str> {
    let (field, _) = message.split_once(": ")?;
    let indexed = field
        .strip_prefix("eligible_connectors[")
        .and_then(|rest| rest.strip_suffix(']'))
        .is_some_and(|i| i.parse::<usize>().is_ok());
    (FIELDS.contains(&field) || indexed).then_some(field)
}

fn failure_code(failure: StoreFailure) -> Code {
    match failure {
        StoreFailure::Unavailable => Code::Unavailable,
        StoreFailure::MaybeApplied => Code::Unknown,
        StoreFailure::DeadlineExceeded => Code::DeadlineExceeded,
    }
}

/// What `convert` says of a well-formed message: `Err(field)` when it refuses it.
fn validated(request: &Request, min_pin_count: i64) -> Result<(), String> {
    let result = match request {
        Request::Record(r) => convert::record_command(r).map(drop),
        Request::Pin(r) => convert::pin_query(r, min_pin_count, ScoreRatio::DEFAULT).map(drop),
        Request::Habits(r) => convert::customer_ref(&r.merchant_id, &r.customer_id).map(drop),
        Request::Forget(r) => convert::customer_ref(&r.merchant_id, &r.customer_id).map(drop),
        Request::Health(r) => convert::connector_health_request(r).map(drop),
        Request::Override(r) => convert::connector_override(r).map(drop),
        Request::Uplift(r) => convert::uplift_request(r).map(drop),
    };
    result.map_err(|invalid| invalid.field)
}

/// Whether `answer` is one the service may give to `case`; `Err` says why not.
fn check(case: &Case, answer: &Answer) -> Result<(), String> {
    let (code, message) = (answer.status.code(), answer.status.message());
    if code == Code::Internal {
        return Err(format!("INTERNAL: {message}"));
    }
    // A server without the breaker answers its admin RPCs before reading them.
    let breaker_off =
        case.answer.breaker_off && matches!(case.target, Target::Rpc(rpc) if rpc.needs_breaker());
    if breaker_off && case.clean.is_some() {
        return match code == Code::FailedPrecondition && message.contains("STICKY_ROUTING_BREAKER")
        {
            true => Ok(()),
            false => Err(format!(
                "expected FAILED_PRECONDITION, got {code:?}: {message}"
            )),
        };
    }
    // The store's failure, for a call that reaches the store.
    let failure = match case.target {
        Target::Rpc(rpc) => case.answer.fails(rpc),
        Target::Unknown(_) => None,
    };
    if let Some(request) = &case.clean {
        let expected = validated(request, case.answer.min_pin_count);
        let fine = match (&expected, failure) {
            (Err(field), _) => {
                code == Code::InvalidArgument && message.starts_with(&format!("{field}: "))
            }
            (Ok(()), Some(failure)) => code == failure_code(failure),
            (Ok(()), None) => code == Code::Ok,
        };
        if !fine {
            return Err(format!("expected {expected:?}, got {code:?}: {message}"));
        }
    }
    let fine = match code {
        Code::Ok => return check_frame(case, answer.frame.as_deref()),
        Code::InvalidArgument => named_field(message).is_some(),
        Code::OutOfRange => case.declares_over_limit(),
        Code::FailedPrecondition => breaker_off,
        Code::Unimplemented => matches!(case.target, Target::Unknown(_)) || case.encoding.is_some(),
        other => failure.map(failure_code) == Some(other),
    };
    if fine {
        Ok(())
    } else {
        Err(format!("{code:?} is not an answer to this case: {message}"))
    }
}

/// An OK answer is one well-formed frame of the RPC's response, whose pin
/// and lists keep the rules' promises.
fn check_frame(case: &Case, frame: Option<&[u8]>) -> Result<(), String> {
    let Target::Rpc(rpc) = case.target else {
        return Err("OK from a path the service does not serve".into());
    };
    let frame = frame.ok_or("OK without a message")?;
    let message = frame
        .get(5..)
        .filter(|m| frame[0] == 0 && frame[1..5] == (m.len() as u32).to_be_bytes())
        .ok_or("the answer is not one uncompressed frame")?;
    let wrong = |e: prost::DecodeError| e.to_string();
    match rpc {
        Rpc::RecordOutcome => drop(pb::RecordOutcomeResponse::decode(message).map_err(wrong)?),
        Rpc::GetHabits => {
            let habits = pb::GetHabitsResponse::decode(message).map_err(wrong)?;
            let counts: Vec<i64> = habits.habits.iter().map(|h| h.net_count).collect();
            if !counts.is_sorted_by(|a, b| a >= b) || habits.ttl_seconds < 0 {
                return Err(format!("habits out of order or a negative TTL: {habits:?}"));
            }
        }
        Rpc::ForgetCustomer => drop(pb::ForgetCustomerResponse::decode(message).map_err(wrong)?),
        Rpc::SetConnectorOverride => {
            pb::SetConnectorOverrideResponse::decode(message).map_err(wrong)?;
        }
        Rpc::GetUplift => drop(pb::GetUpliftResponse::decode(message).map_err(wrong)?),
        Rpc::GetConnectorHealth => {
            let health = pb::GetConnectorHealthResponse::decode(message).map_err(wrong)?;
            let names: Vec<&[u8]> = health
                .connectors
                .iter()
                .map(|c| c.connector.as_bytes())
                .collect();
            let sound = names.is_sorted_by(|a, b| a < b)
                && health.connectors.iter().all(|c| {
                    let open = c.state() == pb::BreakerState::Open;
                    let overridden = c.r#override() != pb::BreakerOverride::None;
                    c.state() != pb::BreakerState::Unspecified
                        && (open || c.open_until_unix_ms == 0)
                        && (overridden || c.override_until_unix_ms == 0)
                });
            if !sound {
                return Err(format!(
                    "connector health that breaks the rules: {health:?}"
                ));
            }
        }
        Rpc::GetPin => {
            let pin = pb::GetPinResponse::decode(message).map_err(wrong)?;
            let counts: Vec<i64> = pin.candidates.iter().map(|c| c.net_count).collect();
            let pinned = pb::ConnectorCount {
                connector: pin.connector.clone(),
                net_count: pin.net_count,
            };
            let sound = counts.is_sorted_by(|a, b| a >= b)
                && pin.vetoed.iter().all(|v| pin.candidates.contains(v))
                && pin.pinned == pin.candidates.contains(&pinned)
                && !pin.vetoed.contains(&pinned)
                && counts.iter().all(|c| *c >= case.answer.min_pin_count)
                && pin.vetoes.len() == pin.vetoed.len()
                && pin.vetoes.iter().zip(&pin.vetoed).all(|(veto, vetoed)| {
                    veto.connector == vetoed.connector
                        && veto.net_count == vetoed.net_count
                        && veto.reason() != pb::VetoReason::Unspecified
                })
                && reason_agrees(&pin, case.answer.mode);
            if !sound {
                return Err(format!("a pin that breaks the rules: {pin:?}"));
            }
        }
    }
    Ok(())
}

/// GetPin's reason agrees with the rest of its answer and the merchant's
/// mode (contract v1.2 §4): pinned exactly when PINNED, `would_pin` equal
/// to the pin then; HOLDOUT and SHADOW name a candidate not vetoed;
/// NO_HABIT, ALL_VETOED and DISABLED name none; DISABLED (mode off alone)
/// lists nothing, read nothing.
fn reason_agrees(pin: &pb::GetPinResponse, mode: Mode) -> bool {
    let named = |c: &str| {
        pin.candidates.iter().any(|x| x.connector == c)
            && !pin.vetoed.iter().any(|x| x.connector == c)
    };
    let lists_nothing = pin.candidates.is_empty() && pin.vetoed.is_empty() && pin.vetoes.is_empty();
    let not_pinned = !pin.pinned && pin.connector.is_empty() && pin.net_count == 0;
    match pin.reason() {
        pb::PinReason::Pinned => mode == Mode::On && pin.pinned && pin.would_pin == pin.connector,
        pb::PinReason::NoHabit => {
            mode != Mode::Off && not_pinned && pin.would_pin.is_empty() && pin.candidates.is_empty()
        }
        pb::PinReason::AllVetoed => {
            mode != Mode::Off
                && not_pinned
                && pin.would_pin.is_empty()
                && !pin.candidates.is_empty()
                && pin.vetoed == pin.candidates
        }
        pb::PinReason::Holdout => mode == Mode::On && not_pinned && named(&pin.would_pin),
        pb::PinReason::Shadow => mode == Mode::Shadow && not_pinned && named(&pin.would_pin),
        pb::PinReason::Disabled => {
            mode == Mode::Off && not_pinned && pin.would_pin.is_empty() && lists_nothing
        }
        pb::PinReason::Unspecified => false,
    }
}

/// Enough of a case to see what it was; `FUZZ_CASE` replays it whole.
fn describe(case: &Case) -> String {
    let shown = &case.body[..case.body.len().min(256)];
    format!(
        "target {:?}, grpc-encoding {:?}, body of {} bytes {shown:02x?}, clean message {:?}",
        case.target,
        case.encoding,
        case.body.len(),
        case.clean
    )
}

/// Answers by code, and the time the run took.
#[derive(Default)]
struct Tally {
    cases: u64,
    clean: u64,
    codes: BTreeMap<String, u64>,
    elapsed: Duration,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rate = self.cases as f64 / self.elapsed.as_secs_f64().max(1e-9);
        writeln!(
            f,
            "fuzz: {} cases in {:.2?} ({rate:.0} cases/s), {} well-formed messages checked against convert",
            self.cases, self.elapsed, self.clean
        )?;
        for (code, n) in &self.codes {
            writeln!(f, "  {code:<18} {n:>9}")?;
        }
        Ok(())
    }
}

/// Runs cases `indices` of the run seeded with `seed`; panics with the
/// case and how to replay it at the first bad answer.
fn run(seed: u64, indices: impl Iterator<Item = u64>) -> Tally {
    let mut server = server();
    let mut tally = Tally::default();
    let started = Instant::now();
    for index in indices {
        let case = cases::case(&mut Rng::for_case(seed, index));
        let replay = || format!("replay: FUZZ_SEED={seed} FUZZ_CASE={index} make fuzz");
        let answer = match catch_unwind(AssertUnwindSafe(|| call(&mut server, &case))) {
            Ok(answer) => answer,
            Err(panic) => {
                eprintln!(
                    "fuzz case {index} panicked: {}\n{}",
                    describe(&case),
                    replay()
                );
                resume_unwind(panic)
            }
        };
        if let Err(problem) = check(&case, &answer) {
            panic!(
                "fuzz case {index}: {problem}\n{}\n{}",
                describe(&case),
                replay()
            );
        }
        tally.cases += 1;
        tally.clean += u64::from(case.clean.is_some());
        *tally
            .codes
            .entry(format!("{:?}", answer.status.code()))
            .or_default() += 1;
    }
    tally.elapsed = started.elapsed();
    tally
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    let value = value.trim();
    let parsed = match value.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => value.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={value} is not a number")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The short run of `make test`: a few seconds in a debug build.
    #[test]
    fn a_short_fuzz_run_finds_no_panic_and_no_internal() {
        let tally = run(DEFAULT_SEED, 0..SHORT_RUN);
        println!("{tally}");
        // Most calls must get past decoding, or the fuzz tests little.
        assert!(tally.codes["Ok"] > SHORT_RUN / 4, "{tally}");
        assert!(tally.codes["InvalidArgument"] > SHORT_RUN / 4, "{tally}");
    }

    const SHORT_RUN: u64 = 10_000;

    /// `make fuzz`: a million cases (`FUZZ_CASES`), or the one `FUZZ_CASE`.
    #[test]
    #[ignore = "the long run: make fuzz"]
    fn long_run() {
        let seed = env_u64("FUZZ_SEED").unwrap_or(DEFAULT_SEED);
        let tally = match env_u64("FUZZ_CASE") {
            Some(index) => run(seed, index..=index),
            None => run(seed, 0..env_u64("FUZZ_CASES").unwrap_or(1_000_000)),
        };
        println!("seed {seed:#x}\n{tally}");
    }

    /// Bodies that are not one well-formed frame are the caller's fault:
    /// tonic answers them `INTERNAL`, which the gate re-labels.
    #[test]
    fn broken_frames_are_invalid_argument_naming_the_request() {
        let message = pb::GetHabitsRequest {
            merchant_id: "m1".into(),
            customer_id: "c1".into(),
        }
        .encode_to_vec();
        let whole = cases::frame(0, &message);
        let mut compressed = whole.clone();
        compressed[0] = 1;
        let mut bad_flag = whole.clone();
        bad_flag[0] = 2;
        let bodies = [
            ("no message", Vec::new()),
            ("a cut header", vec![0, 0, 0]),
            ("a cut message", whole[..whole.len() - 1].to_vec()),
            ("compressed without grpc-encoding", compressed),
            ("compression flag 2", bad_flag),
        ];
        let mut server = server();
        for (label, body) in bodies {
            let mut case = cases::case(&mut Rng::for_case(1, 0));
            case.target = Target::Rpc(Rpc::GetHabits);
            case.encoding = None;
            case.clean = None;
            case.body = body;
            let status = call(&mut server, &case).status;
            assert_eq!(status.code(), Code::InvalidArgument, "{label}: {status:?}");
            assert_eq!(named_field(status.message()), Some("request"), "{label}");
        }
    }
}
