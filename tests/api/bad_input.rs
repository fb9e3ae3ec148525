//! Bad input: every malformed request (bad fields, undecodable or oversized
//! messages) gets INVALID_ARGUMENT naming the field, or a size-limit code,
//! and writes nothing; valid edge cases are accepted.

use prost::Message;
use prost::bytes::BufMut;
use sticky_routing::transport::pb;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Status};

use rstest::rstest;
use std::time::Duration;

use crate::support::*;

/// A valid RecordOutcome, for a case to spoil one field of.
fn good(kind: pb::Outcome) -> pb::RecordOutcomeRequest {
    outcome("m1", "c1", "GIGADAT", kind)
}

/// Merchant and customer ids that must be rejected, with a label.
fn bad_ids() -> Vec<(&'static str, String)> {
    vec![
        ("empty", String::new()),
        ("whitespace", " \t ".into()),
        ("129 bytes", "x".repeat(129)),
        ("NUL", "a\u{0}b".into()),
        ("newline", "a\nb".into()),
        ("DEL", "a\u{7f}b".into()),
        ("zero-width space", "c\u{200B}1".into()),
        ("right-to-left override", "\u{202E}1c".into()),
        // Unicode blanks at the ends, which `str::trim` used to strip.
        ("trailing line separator", "c1\u{2028}".into()),
        ("trailing NEL", "c1\u{85}".into()),
        ("leading no-break space", "\u{A0}c1".into()),
        ("trailing ideographic space", " c1\u{3000}\t".into()),
    ]
}

/// Payment methods and types that must be rejected.
fn bad_methods() -> Vec<(&'static str, String)> {
    vec![
        ("empty", String::new()),
        ("blank", "  ".into()),
        ("colon", "inter:ac".into()),
        ("65 bytes", "p".repeat(65)),
    ]
}

/// The id and payment-method cases both RecordOutcome and GetPin must
/// reject: (label, field, bad value).
fn shared_cases() -> Vec<(String, &'static str, String)> {
    let mut cases = Vec::new();
    for (label, value) in bad_ids() {
        for field in ["merchant_id", "customer_id"] {
            cases.push((format!("{field} {label}"), field, value.clone()));
        }
    }
    for (label, value) in bad_methods() {
        for field in ["payment_method", "payment_method_type"] {
            cases.push((format!("{field} {label}"), field, value.clone()));
        }
    }
    cases
}

/// The four fields RecordOutcome and GetPin requests share, in the order
/// merchant_id, customer_id, payment_method, payment_method_type.
trait SharedFields {
    fn shared_fields(&mut self) -> [&mut String; 4];
}

macro_rules! shared_fields {
    ($($request:ty),*) => {$(
        impl SharedFields for $request {
            fn shared_fields(&mut self) -> [&mut String; 4] {
                let Self { merchant_id, customer_id, payment_method, payment_method_type, .. } = self;
                [merchant_id, customer_id, payment_method, payment_method_type]
            }
        }
    )*};
}

shared_fields!(pb::RecordOutcomeRequest, pb::GetPinRequest);

/// The request field named `field`, from the four both RPCs share, in the
/// order merchant_id, customer_id, payment_method, payment_method_type.
fn pick<'r>(
    field: &str,
    [merchant, customer, method, method_type]: [&'r mut String; 4],
) -> &'r mut String {
    match field {
        "merchant_id" => merchant,
        "customer_id" => customer,
        "payment_method" => method,
        "payment_method_type" => method_type,
        other => panic!("no shared field {other}"),
    }
}

/// True when `field` appears in `message` as a whole word, so that
/// `payment_method` is not satisfied by `payment_method_type`.
fn names(message: &str, field: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    message.match_indices(field).any(|(at, _)| {
        !message[..at].chars().next_back().is_some_and(word)
            && !message[at + field.len()..].chars().next().is_some_and(word)
    })
}

fn assert_invalid<T: std::fmt::Debug>(
    result: Result<T, Status>,
    field: &str,
    case: &str,
) -> Status {
    let status = result.expect_err(&format!("{case}: accepted"));
    assert_eq!(status.code(), Code::InvalidArgument, "{case}: {status:?}");
    assert!(
        names(status.message(), field),
        "{case}: `{}` does not name {field}",
        status.message()
    );
    status
}

async fn assert_nothing_written(app: &TestApp) {
    assert_eq!(
        app.keys().await,
        Vec::<String>::new(),
        "a bad request wrote to redis"
    );
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn bad_record_outcome_fields_are_rejected_by_name(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    // Each case runs as a success and as a gateway failure, with nothing
    // arranged beforehand, so any write at all would show.
    let mut cases: Vec<(String, String, pb::RecordOutcomeRequest)> = Vec::new();
    let mut case = |label: String, field: &str, edit: &dyn Fn(&mut pb::RecordOutcomeRequest)| {
        for kind in [pb::Outcome::Success, pb::Outcome::GatewayFailure] {
            let mut request = good(kind);
            edit(&mut request);
            cases.push((format!("{label} ({kind:?})"), field.to_owned(), request));
        }
    };
    for (label, field, value) in shared_cases() {
        case(label, field, &|r| {
            *pick(field, r.shared_fields()) = value.clone()
        });
    }
    for (label, value) in [
        ("empty", String::new()),
        ("NUL", "GIGA\u{0}DAT".into()),
        ("tab", "GIGA\tDAT".into()),
        ("65 bytes", "c".repeat(65)),
    ] {
        case(format!("connector {label}"), "connector", &|r| {
            r.connector = value.clone()
        });
    }
    for (label, field, request) in cases {
        assert_invalid(app.record(request).await, &field, &label);
    }
    for (value, case) in [
        (0, "OUTCOME_UNSPECIFIED"),
        (7, "unknown outcome 7"),
        (-1, "unknown outcome -1"),
    ] {
        let mut request = good(pb::Outcome::Success);
        request.outcome = value;
        assert_invalid(app.record(request).await, "outcome", case);
    }
    assert_nothing_written(&app).await;
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn a_field_over_64_bytes_is_rejected_even_when_each_part_fits(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    for kind in [pb::Outcome::Success, pb::Outcome::GatewayFailure] {
        let mut request = good(kind);
        // 30 + ':' + 30 + ':' + 10 = 72 bytes, every part within 64.
        request.payment_method = "p".repeat(30);
        request.payment_method_type = "t".repeat(30);
        request.connector = "c".repeat(10);
        let status = assert_invalid(app.record(request).await, "connector", "combined field");
        for other in ["payment_method", "payment_method_type"] {
            assert!(
                names(status.message(), other),
                "`{}` does not mention {other}",
                status.message()
            );
        }
    }
    assert_nothing_written(&app).await;
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn bad_get_pin_requests_are_rejected_by_name(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    let mut cases: Vec<(String, String, pb::GetPinRequest)> = Vec::new();
    let mut case = |label: String, field: &str, edit: &dyn Fn(&mut pb::GetPinRequest)| {
        let mut request = pin_request("c1", &[]);
        edit(&mut request);
        cases.push((label, field.to_owned(), request));
    };
    for (label, field, value) in shared_cases() {
        case(label, field, &|r| {
            *pick(field, r.shared_fields()) = value.clone()
        });
    }
    case("65 eligible".into(), "eligible_connectors", &|r| {
        r.eligible_connectors = vec!["GIGADAT".into(); 65]
    });
    case("empty entry".into(), "eligible_connectors[2]", &|r| {
        r.eligible_connectors = vec!["A".into(), "B".into(), String::new()];
    });
    case("control entry".into(), "eligible_connectors[1]", &|r| {
        r.eligible_connectors = vec!["A".into(), "B\nC".into()];
    });
    case("65-byte entry".into(), "eligible_connectors[0]", &|r| {
        r.eligible_connectors = vec!["c".repeat(65)]
    });
    for (label, field, request) in cases {
        assert_invalid(app.pin(request).await, &field, &label);
    }
    let many: Vec<String> = (0..64).map(|i| format!("C{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let answer = app
        .pin(pin_request("c1", &many))
        .await
        .expect("64 eligible connectors are accepted");
    assert!(!answer.pinned);
    assert_nothing_written(&app).await;
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn bad_ids_are_rejected_by_get_habits_and_forget_customer(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    app.success("c1", "GIGADAT").await;
    let before = app.keys().await;
    for (label, id) in bad_ids() {
        for (field, merchant, customer) in [
            ("merchant_id", id.clone(), "c1".to_owned()),
            ("customer_id", "m1".into(), id.clone()),
        ] {
            let habits = pb::GetHabitsRequest {
                merchant_id: merchant.clone(),
                customer_id: customer.clone(),
            };
            let result = app.api.clone().get_habits(habits).await;
            assert_invalid(result, field, &format!("GetHabits {field} {label}"));
            let forget = pb::ForgetCustomerRequest {
                merchant_id: merchant,
                customer_id: customer,
            };
            let result = app.api.clone().forget_customer(forget).await;
            assert_invalid(result, field, &format!("ForgetCustomer {field} {label}"));
        }
    }
    assert_eq!(app.keys().await, before, "a bad request changed redis");
    assert!(
        app.pin(pin_request("c1", &[])).await.unwrap().pinned,
        "a bad forget deleted the customer"
    );
}

/// A zero-width space makes a look-alike of a customer that exists, and a
/// right-to-left override makes an id display as another: every RPC refuses
/// them by field name, in every text field, and writes nothing.
#[tokio::test]
async fn invisible_and_bidi_characters_are_rejected_by_name() {
    let app = spawn_app().await;
    app.success("c1", "GIGADAT").await;
    let before = app.keys().await;
    for (field, merchant, customer) in [
        ("customer_id", "m1", "c\u{200B}1"),
        ("customer_id", "m1", "\u{202E}1c"),
        ("merchant_id", "m\u{200B}1", "c1"),
        ("merchant_id", "\u{202E}1m", "c1"),
    ] {
        let case = format!("{field} {:?}", format!("{merchant}/{customer}"));
        for kind in [pb::Outcome::Success, pb::Outcome::GatewayFailure] {
            let request = outcome(merchant, customer, "GIGADAT", kind);
            assert_invalid(app.record(request).await, field, &case);
        }
        let mut pin = pin_request(customer, &[]);
        pin.merchant_id = merchant.into();
        assert_invalid(app.pin(pin).await, field, &case);
        let (merchant_id, customer_id) = (merchant.to_owned(), customer.to_owned());
        let habits = pb::GetHabitsRequest {
            merchant_id: merchant_id.clone(),
            customer_id: customer_id.clone(),
        };
        assert_invalid(app.api.clone().get_habits(habits).await, field, &case);
        let forget = pb::ForgetCustomerRequest {
            merchant_id,
            customer_id,
        };
        assert_invalid(app.api.clone().forget_customer(forget).await, field, &case);
    }
    let mut request = outcome("m1", "c1", "GIGA\u{200D}DAT", pb::Outcome::Success);
    assert_invalid(app.record(request.clone()).await, "connector", "ZWJ");
    request.connector = "GIGADAT".into();
    request.attempt_id = "pay\u{200B}1".into();
    assert_invalid(app.record(request).await, "attempt_id", "ZWSP");
    let pin = pin_request("c1", &["GIGADAT", "\u{202E}TADAGIG"]);
    assert_invalid(app.pin(pin).await, "eligible_connectors[1]", "RLO");
    assert_eq!(app.keys().await, before, "a bad request changed redis");
    assert_eq!(app.habits("c1").await.habits[0].net_count, 1);
}

/// `c1` followed by U+2028 (or NBSP, NEL, an ideographic space) was
/// trimmed into `c1` and counted as that customer. Only ASCII blanks are
/// trimmed; any other blank at an end is refused naming the field, so the
/// two never merge, on every RPC.
#[tokio::test]
async fn unicode_blanks_at_the_ends_of_ids_are_refused_never_stripped() {
    let app = spawn_app().await;
    app.success("c1", "GIGADAT").await;
    for blank in ['\u{2028}', '\u{85}', '\u{A0}', '\u{3000}'] {
        for (field, merchant, customer) in [
            ("customer_id", "m1".to_owned(), format!("c1{blank}")),
            ("customer_id", "m1".to_owned(), format!("{blank}c1")),
            ("merchant_id", format!("m1{blank}"), "c1".to_owned()),
        ] {
            let case = format!("{field} {merchant:?}/{customer:?}");
            let mut request = outcome(&merchant, &customer, "GIGADAT", pb::Outcome::Success);
            let status = assert_invalid(app.record(request.clone()).await, field, &case);
            assert!(status.message().starts_with(field), "{case}: {status:?}");
            request.outcome = pb::Outcome::GatewayFailure.into();
            assert_invalid(app.record(request).await, field, &case);
            let mut pin = pin_request(&customer, &[]);
            pin.merchant_id.clone_from(&merchant);
            assert_invalid(app.pin(pin).await, field, &case);
            let habits = pb::GetHabitsRequest {
                merchant_id: merchant.clone(),
                customer_id: customer.clone(),
            };
            assert_invalid(app.api.clone().get_habits(habits).await, field, &case);
            let forget = pb::ForgetCustomerRequest {
                merchant_id: merchant,
                customer_id: customer,
            };
            assert_invalid(app.api.clone().forget_customer(forget).await, field, &case);
        }
        let mut request = outcome("m1", "c1", "GIGADAT", pb::Outcome::Success);
        request.attempt_id = format!("pay_1{blank}");
        assert_invalid(app.record(request).await, "attempt_id", "attempt blank");
    }
    assert_eq!(app.habits("c1").await.habits[0].net_count, 1);
    // ASCII blanks are still trimmed: this is c1.
    app.success(" c1\t", "GIGADAT").await;
    assert_eq!(app.habits("c1").await.habits[0].net_count, 2);
    assert_eq!(app.customer_keys().await.len(), 1);
}

/// With several bad fields, the answer names the one with the lowest
/// number in the proto: a 61-byte connector (its combo over 64 bytes) and
/// OUTCOME_UNSPECIFIED is a bad `connector`, field 5, not `outcome`.
#[tokio::test]
async fn several_bad_fields_are_answered_with_the_lowest_numbered() {
    let app = spawn_app().await;
    let mut request = good(pb::Outcome::Unspecified);
    request.connector = "c".repeat(61);
    request.attempt_id = "x".repeat(129);
    let status = assert_invalid(
        app.record(request).await,
        "connector",
        "61 bytes, unspecified",
    );
    assert!(status.message().starts_with("connector:"), "{status:?}");
    let mut pin = pin_request("c1", &["", "GIGADAT"]);
    pin.payment_method_type = "a:b".into();
    pin.min_score_ratio = Some(2.0);
    let status = assert_invalid(app.pin(pin).await, "payment_method_type", "pin");
    assert!(
        status.message().starts_with("payment_method_type:"),
        "{status:?}"
    );
    let habits = pb::GetHabitsRequest {
        merchant_id: String::new(),
        customer_id: "x".repeat(129),
    };
    let status = app.api.clone().get_habits(habits).await.unwrap_err();
    assert!(status.message().starts_with("merchant_id:"), "{status:?}");
    let forget = pb::ForgetCustomerRequest {
        merchant_id: "m\u{200B}1".into(),
        customer_id: String::new(),
    };
    let status = app.api.clone().forget_customer(forget).await.unwrap_err();
    assert!(status.message().starts_with("merchant_id:"), "{status:?}");
    assert_nothing_written(&app).await;
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn valid_edge_cases_are_accepted(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    let (long_merchant, long_customer) = ("m".repeat(128), "c".repeat(128));
    let request = outcome(
        &long_merchant,
        &long_customer,
        "GIGADAT",
        pb::Outcome::Success,
    );
    assert_eq!(
        app.record(request)
            .await
            .expect("128-byte ids are accepted")
            .result,
        APPLIED
    );
    let mut pin = pin_request(&long_customer, &[]);
    pin.merchant_id = long_merchant;
    assert_eq!(app.pin(pin).await.unwrap().connector, "GIGADAT");

    // Ids are trimmed: " c1 " and "c1" are one customer, of merchant "m1".
    let request = outcome(" m1\t", " c1 ", "GIGADAT", pb::Outcome::Success);
    assert_eq!(app.record(request).await.unwrap().result, APPLIED);
    let answer = app.pin(pin_request("c1", &[])).await.unwrap();
    assert!(answer.pinned && answer.connector == "GIGADAT", "{answer:?}");
    assert_eq!(app.success("c1", "GIGADAT").await.net_count, 2);

    // A connector may hold ':'; the field splits at its first two colons.
    assert_eq!(app.success("c2", "acme:eu:1").await.result, APPLIED);
    let answer = app.pin(pin_request("c2", &["acme:eu:1"])).await.unwrap();
    assert_eq!(
        (answer.pinned, answer.connector.as_str()),
        (true, "acme:eu:1")
    );

    // A field of exactly 64 bytes: 30 + ':' + 30 + ':' + 2.
    let mut request = outcome("m1", "c3", "cc", pb::Outcome::Success);
    request.payment_method = "p".repeat(30);
    request.payment_method_type = "t".repeat(30);
    assert_eq!(
        app.record(request)
            .await
            .expect("a 64-byte field is accepted")
            .result,
        APPLIED
    );
}

/// Sends a `Vec<u8>` verbatim as the message; decodes the answer with prost.
#[derive(Clone, Copy, Default)]
struct RawCodec;
struct RawEncoder;
struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = pb::RecordOutcomeResponse;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = pb::RecordOutcomeResponse;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        Message::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(format!("test decoder: {e}")))
    }
}

async fn record_raw(app: &TestApp, body: Vec<u8>) -> Result<pb::RecordOutcomeResponse, Status> {
    let channel = Channel::from_shared(format!("http://{}", app.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("the channel is ready");
    let path = PathAndQuery::from_static("/sticky_routing.v1.StickyRouting/RecordOutcome");
    grpc.unary(tonic::Request::new(body), path, RawCodec)
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn undecodable_messages_are_invalid_argument() {
    let app = spawn_app().await;
    let cases: [(&str, Vec<u8>); 3] = [
        ("invalid UTF-8 in merchant_id", vec![0x0a, 0x02, 0xff, 0xfe]),
        ("garbage", vec![0xff, 0xff, 0xff, 0xff]),
        ("truncated field", vec![0x0a, 0x10, b'm']),
    ];
    for (case, body) in cases {
        let status = record_raw(&app, body).await.expect_err(case);
        assert_eq!(status.code(), Code::InvalidArgument, "{case}: {status:?}");
    }
    assert_nothing_written(&app).await;
    let metrics = app.scrape().await;
    assert!(
        metrics.contains(
            "sticky_routing_refused_calls_total{class=\"feedback\",reason=\"undecodable\"} 3"
        ),
        "{metrics}"
    );
    // The raw path itself works: a well-formed message is applied.
    let good = good(pb::Outcome::Success).encode_to_vec();
    assert_eq!(
        record_raw(&app, good)
            .await
            .expect("a valid raw message")
            .result,
        APPLIED
    );
}

/// The status of a RecordOutcome whose body is `body`, verbatim, over a
/// raw HTTP/2 stream: tonic's client would frame it properly.
async fn record_unframed(app: &TestApp, body: Vec<u8>) -> Status {
    let tcp = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::post(format!(
        "http://{}/sticky_routing.v1.StickyRouting/RecordOutcome",
        app.addr
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let (response, mut stream) = client.send_request(request, body.is_empty()).unwrap();
    if !body.is_empty() {
        stream.send_data(body.into(), true).unwrap();
    }
    let answer = async {
        let (parts, mut body) = response.await.unwrap().into_parts();
        if let Some(status) = Status::from_header_map(&parts.headers) {
            return status;
        }
        // The trailers come after the message, which must be read first.
        while let Some(data) = body.data().await {
            data.unwrap();
        }
        Status::from_header_map(&body.trailers().await.unwrap().unwrap()).unwrap()
    };
    tokio::time::timeout(Duration::from_secs(5), answer)
        .await
        .expect("an answer within 5 s")
}

/// A body that is not one well-formed gRPC frame is bad input, not a fault
/// of the service: tonic alone would answer INTERNAL.
#[tokio::test]
async fn broken_frames_are_invalid_argument() {
    let app = spawn_app().await;
    let message = good(pb::Outcome::Success).encode_to_vec();
    let mut frame = vec![0];
    frame.extend((message.len() as u32).to_be_bytes());
    frame.extend(&message);
    let mut compressed = frame.clone();
    compressed[0] = 1;
    let cases = [
        ("no message", Vec::new()),
        ("a cut header", frame[..3].to_vec()),
        ("a cut message", frame[..frame.len() - 1].to_vec()),
        ("compressed without grpc-encoding", compressed),
    ];
    for (case, body) in cases {
        let status = record_unframed(&app, body).await;
        assert_eq!(status.code(), Code::InvalidArgument, "{case}: {status:?}");
        assert!(names(status.message(), "request"), "{case}: {status:?}");
    }
    assert_nothing_written(&app).await;
    let metrics = app.scrape().await;
    assert!(
        metrics.contains(
            "sticky_routing_refused_calls_total{class=\"feedback\",reason=\"undecodable\"} 4"
        ),
        "{metrics}"
    );
    // The raw path itself works: the whole frame is applied.
    let status = record_unframed(&app, frame).await;
    assert_eq!(status.code(), Code::Ok, "{status:?}");
}

#[tokio::test]
async fn a_message_over_the_size_limit_is_refused() {
    let app = spawn_app().await;
    let mut request = good(pb::Outcome::Success);
    request.connector = "c".repeat(100_000);
    let status = app
        .api
        .clone()
        .max_encoding_message_size(1 << 20)
        .record_outcome(request)
        .await
        .unwrap_err();
    assert!(
        matches!(status.code(), Code::ResourceExhausted | Code::OutOfRange),
        "{status:?}"
    );
    assert_nothing_written(&app).await;
    let metrics = app.scrape().await;
    assert!(
        metrics.contains(
            "sticky_routing_refused_calls_total{class=\"feedback\",reason=\"over_size\"} 1"
        ),
        "{metrics}"
    );
}
