//! Connections and streams the server must bound: a connection past its
//! maximum age gets GOAWAY, idle or not, so that clients reconnect and spread
//! over the pods an autoscaler added since they connected; a stream whose
//! request never finishes arriving is ended.

use std::time::{Duration, Instant};

use crate::helpers::*;

#[tokio::test]
async fn a_connection_past_its_age_gets_goaway_and_closes() {
    let age = Duration::from_secs(1);
    let grace = Duration::from_millis(500);
    let app = spawn_app_with(|s| {
        s.max_connection_age = age;
        s.max_connection_age_grace = grace;
    })
    .await;
    let tcp = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let opened = Instant::now();
    let (_client, connection) = h2::client::handshake(tcp).await.unwrap();
    // The connection future returns once the server has closed it.
    let closed = tokio::time::timeout(Duration::from_secs(5), connection).await;
    let lived = opened.elapsed();
    assert!(
        closed.is_ok(),
        "an idle connection still open after {lived:?}"
    );
    // The age moves by ±10 %; an idle connection closes at GOAWAY, well
    // within the grace. The upper bound allows a busy test machine's timer
    // a moment late (one run closed at 1.6035 s against a 1.6 s bound).
    let scheduling = Duration::from_millis(500);
    assert!(lived >= age * 9 / 10, "closed after {lived:?}");
    assert!(
        lived <= age * 11 / 10 + grace + scheduling,
        "closed after {lived:?}"
    );
}

/// A client that sends a request's headers and never its body must not hold
/// a call open: the server ends it within its 10 s bound.
#[tokio::test]
async fn a_request_whose_body_never_arrives_is_ended_by_the_server() {
    let app = spawn_app().await;
    let tcp = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::post(format!(
        "http://{}/sticky_routing.v1.StickyRouting/GetPin",
        app.addr
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let sent = Instant::now();
    // Headers only: the body stream stays open, and nothing follows.
    let (response, _body) = client.send_request(request, false).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        match response.await {
            // An answer: it must be a gRPC error, in headers or trailers.
            Ok(response) => {
                let (parts, mut body) = response.into_parts();
                let status = match parts.headers.get("grpc-status") {
                    Some(status) => status.clone(),
                    None => body.trailers().await.unwrap().unwrap()["grpc-status"].clone(),
                };
                assert_ne!(status, "0", "the call succeeded without a body");
            }
            // Or the stream is reset.
            Err(error) => assert!(error.is_reset() || error.is_go_away(), "{error:?}"),
        }
    })
    .await;
    let took = sent.elapsed();
    assert!(ended.is_ok(), "the server held the call for {took:?}");
    assert!(
        took >= Duration::from_secs(9),
        "ended after {took:?}: not the bound"
    );
}
