//! A client that races the server's GOAWAY, as gRPC C-core may: its call
//! on stream 1 is in flight (Redis frozen under it) when the server retires
//! the connection, and it answers the GOAWAY's PING with a new call on
//! stream 3 (HEADERS, WINDOW_UPDATE, DATA) in the same write, a call it
//! started before it read the GOAWAY. h2 0.4.20 answered that
//! WINDOW_UPDATE with PROTOCOL_ERROR for the whole connection, cutting
//! stream 1 after Redis had applied it (issue 42).

use std::future::Future;
use std::time::Duration;

use fred::prelude::{HashesInterface, KeysInterface};
use sticky_routing::transport::pb;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::support::frames::{Wire, frame_on, grpc_message, unary};
use crate::support::{TestRedis, outcome};

pub const RECORD_OUTCOME: &str = "/sticky_routing.v1.StickyRouting/RecordOutcome";
const HEADERS: u8 = 0x1;
const DATA: u8 = 0x0;
const WINDOW_UPDATE: u8 = 0x8;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// One header as HPACK's "literal without indexing, new name": it leaves
/// the server's table as it is, whether or not the server reads the call.
fn literal(name: &str, value: &str) -> Vec<u8> {
    let mut field = vec![0];
    for text in [name, value] {
        field.push(u8::try_from(text.len()).unwrap());
        field.extend_from_slice(text.as_bytes());
    }
    field
}

/// A whole unary call to `path` on `stream`, as a client sends it: its
/// HEADERS, a WINDOW_UPDATE for the answer, and its DATA.
pub fn new_call(stream: u32, path: &str, message: impl prost::Message) -> Vec<u8> {
    let block: Vec<u8> = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    .iter()
    .flat_map(|(name, value)| literal(name, value))
    .collect();
    let mut frames = frame_on(stream, HEADERS, END_HEADERS, &block);
    let increment = 1_000_000u32.to_be_bytes();
    frames.extend(frame_on(stream, WINDOW_UPDATE, 0, &increment));
    frames.extend(frame_on(stream, DATA, END_STREAM, &grpc_message(message)));
    frames
}

/// The customer hash's count of INTERAC/RTP with GIGADAT, as Redis holds it.
async fn stored_count(inspect: &fred::prelude::Client, customer: &str) -> Option<String> {
    let key = format!("sticky_gw_m1_{customer}");
    inspect.hget(key, "INTERAC:RTP:GIGADAT").await.unwrap()
}

/// Runs the race over `io`, a new connection to a server whose Redis is
/// `redis` (inspected through `inspect`): stream 1 records a success for
/// `c1` with Redis frozen, `retire` makes the server retire the connection
/// (waiting for its age, or starting the drain), and the client's race
/// starts a call for `c3` on stream 3. Then it asserts what the contract
/// promises: stream 1 is answered OK and applied once, stream 3 is refused
/// by the final GOAWAY (which names stream 1) and never applied, and no
/// GOAWAY carries an error code.
pub async fn race_the_goaway<T, F>(
    io: T,
    redis: &TestRedis,
    inspect: &fred::prelude::Client,
    retire: F,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Future<Output = ()>,
{
    let wire = Wire::default();
    let late = new_call(3, RECORD_OUTCOME, record("c3"));
    let mut client = wire.h2_on(io, Some(late)).await;
    redis.signal("-STOP");
    let call = tokio::spawn(async move {
        let answer = unary(&mut client, RECORD_OUTCOME, record("c1")).await;
        // Held until the answer: dropping the client would end the stream.
        (answer, client)
    });
    retire.await;
    // The final GOAWAY, or the connection's end.
    let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
    while wire.goaways().len() < 2 && tokio::time::Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Time for the server to read the race, and to fail on it if it does.
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.signal("-CONT");
    let (answer, _client) = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("stream 1 was never answered")
        .unwrap();
    let frames = wire.snapshot(|log| format!("raced {:?}; {:?}", log.raced, log.frames));
    assert_eq!(
        wire.snapshot(|log| log.raced.len()),
        1,
        "the race was never sent: {frames}"
    );
    assert_eq!(
        answer.as_deref().map_err(ToString::to_string),
        Ok("0"),
        "stream 1, in flight at the GOAWAY: {frames}"
    );
    let goaways: Vec<(u32, u32)> = wire.goaways().iter().filter_map(|f| f.goaway).collect();
    assert!(
        goaways.iter().all(|(_, code)| *code == 0),
        "a GOAWAY with an error code: {goaways:?}"
    );
    assert_eq!(
        goaways.last().map(|(last, _)| *last),
        Some(1),
        "the final GOAWAY names stream 1: {goaways:?}"
    );
    assert_eq!(stored_count(inspect, "c1").await.as_deref(), Some("1"));
    let refused: i64 = inspect.exists("sticky_gw_m1_c3").await.unwrap();
    assert_eq!(refused, 0, "stream 3 was refused, yet applied");
}

fn record(customer: &str) -> pb::RecordOutcomeRequest {
    outcome("m1", customer, "GIGADAT", pb::Outcome::Success)
}
