//! The gate's answers: refusals told apart, broken frames re-labelled, and
//! each class shed at its own ceiling with its pushback.

use super::*;

fn answer(status: Status) -> http::Response<Body> {
    status.into_http()
}

#[test]
fn refusals_before_the_handler_are_told_apart_from_handler_errors() {
    let undecodable = Status::invalid_argument(format!("{UNDECODABLE} (invalid wire type)"));
    assert_eq!(
        refused_before_the_handler(&answer(undecodable)),
        Some(Refusal::Undecodable)
    );
    let too_big = Status::out_of_range("decoded message length too large");
    assert_eq!(
        refused_before_the_handler(&answer(too_big)),
        Some(Refusal::OverSize)
    );
    let bad_field = Status::invalid_argument("merchant_id: must not be empty");
    assert_eq!(refused_before_the_handler(&answer(bad_field)), None);
    let ok = http::Response::new(Body::empty());
    assert_eq!(refused_before_the_handler(&ok), None);
}

#[test]
fn broken_frames_are_the_callers_fault_and_other_internals_stay() {
    for words in [
        "Missing request message.",
        "Unexpected EOF decoding stream.",
        "protocol error: received message with compressed-flag but no grpc-encoding was specified",
        "protocol error: received message with invalid compression flag: 2 (valid flags are 0 and 1), while sending request",
    ] {
        let answer = relabel_broken_frame(answer(Status::internal(words)));
        let status = Status::from_header_map(answer.headers()).unwrap();
        assert_eq!(status.code(), Code::InvalidArgument, "{words}");
        assert!(status.message().starts_with(UNDECODABLE), "{status:?}");
        assert!(status.message().contains(words), "{status:?}");
        assert_eq!(
            refused_before_the_handler(&answer),
            Some(Refusal::Undecodable)
        );
    }
    let foreign = Status::internal("a value stored under the customer's hash is not one");
    let answer = relabel_broken_frame(answer(foreign));
    let status = Status::from_header_map(answer.headers()).unwrap();
    assert_eq!(status.code(), Code::Internal);
    let ok = relabel_broken_frame(http::Response::new(Body::empty()));
    assert!(ok.headers().is_empty());
}

/// A gate of `limit` whose calls stay in flight until their future is
/// dropped, as a call on a stalled Redis does.
fn stalled_gate(
    limit: usize,
) -> ApiGate<
    impl Service<
        http::Request<Body>,
        Response = http::Response<Body>,
        Error = Infallible,
        Future = impl Future<Output = Result<http::Response<Body>, Infallible>>,
    >,
> {
    ApiGate::new(
        tower::service_fn(|_: http::Request<Body>| std::future::pending()),
        limit,
        Shares::default(),
        Arc::new(Metrics::new().unwrap()),
    )
}

fn call_to(method: &str, priority: Option<&str>) -> http::Request<Body> {
    let mut request = http::Request::builder()
        .uri(format!("/sticky_routing.v1.StickyRouting/{method}"))
        .body(Body::empty())
        .unwrap();
    if let Some(value) = priority {
        request
            .headers_mut()
            .insert(PRIORITY_HEADER, value.parse().unwrap());
    }
    request
}

/// Whether the call was admitted (still pending), or else its refusal's
/// message and pushback.
fn outcome<F: Future<Output = Result<http::Response<Body>, Infallible>>>(
    future: Pin<&mut F>,
) -> Option<(String, String)> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match future.poll(&mut cx) {
        Poll::Pending => None,
        Poll::Ready(Ok(response)) => {
            let headers = response.headers();
            let code = headers.get("grpc-status").unwrap();
            assert_eq!(Code::from_bytes(code.as_bytes()), Code::ResourceExhausted);
            assert_eq!(headers.get("content-type").unwrap(), "application/grpc");
            let message = percent_decoded(headers.get("grpc-message").unwrap().as_bytes());
            let pushback = headers.get("grpc-retry-pushback-ms").unwrap();
            Some((message, pushback.to_str().unwrap().to_owned()))
        }
    }
}

#[test]
fn feedback_stops_at_its_share_while_pins_fill_the_limit() {
    let mut gate = stalled_gate(10);
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut call = Box::pin(gate.call(call_to("RecordOutcome", None)));
        assert_eq!(outcome(call.as_mut()), None, "feedback below 8 of 10");
        held.push(call);
    }
    let mut refused = Box::pin(gate.call(call_to("RecordOutcome", None)));
    let (message, pushback) = outcome(refused.as_mut()).expect("the 9th feedback call");
    assert!(
        message.contains("feedback calls start only below 8 of this server's 10"),
        "{message}"
    );
    assert_eq!(pushback, "250");
    for _ in 0..2 {
        let mut call = Box::pin(gate.call(call_to("GetPin", None)));
        assert_eq!(outcome(call.as_mut()), None, "pins up to the limit");
        held.push(call);
    }
    let mut refused = Box::pin(gate.call(call_to("GetPin", None)));
    let (message, pushback) = outcome(refused.as_mut()).expect("the 11th call");
    assert!(
        message.contains("limit of 10 calls in progress"),
        "{message}"
    );
    assert_eq!(pushback, "20");
    // A call that ends gives its slot back, whether answered or dropped.
    held.pop();
    let mut call = Box::pin(gate.call(call_to("GetPin", None)));
    assert_eq!(outcome(call.as_mut()), None);
    drop(call);
    drop(held);
    assert_eq!(gate.shared.in_flight.load(Ordering::Relaxed), 0);
}

#[test]
fn admin_and_low_calls_stop_at_the_low_share_whatever_their_method() {
    let mut gate = stalled_gate(10);
    let mut first = Box::pin(gate.call(call_to("GetHabits", None)));
    assert_eq!(
        outcome(first.as_mut()),
        None,
        "one admin call of 10 % of 10"
    );
    for (method, priority, pushback) in [
        ("ForgetCustomer", None, "1000"),
        ("GetHabits", Some("high"), "1000"),
        ("GetConnectorHealth", None, "1000"),
        ("SetConnectorOverride", None, "1000"),
        ("GetUplift", None, "1000"),
        ("RecordOutcome", Some("low"), "2000"),
        ("GetPin", Some("LOW"), "2000"),
    ] {
        let mut call = Box::pin(gate.call(call_to(method, priority)));
        let (message, got) = outcome(call.as_mut()).expect("over the low share");
        assert_eq!(got, pushback, "{method} {priority:?}");
        assert!(message.contains("below 1 of this server's 10"), "{message}");
    }
    // Unmarked, the same GetPin and RecordOutcome are still admitted.
    let mut pin = Box::pin(gate.call(call_to("GetPin", Some("high"))));
    assert_eq!(outcome(pin.as_mut()), None);
    let mut feedback = Box::pin(gate.call(call_to("RecordOutcome", None)));
    assert_eq!(outcome(feedback.as_mut()), None);
    let text = gate.shared.metrics.render();
    for (class, refused) in [("admin", 5), ("low", 2)] {
        let series = format!(
            "sticky_routing_refused_calls_total{{class=\"{class}\",reason=\"shed\"}} {refused}"
        );
        assert!(text.contains(&series), "{series} in {text}");
    }
}
