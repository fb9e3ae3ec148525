//! Connection lifetime: the server sends GOAWAY to a connection past its
//! maximum age, idle or not, so that clients reconnect and spread over the
//! pods an autoscaler added since they connected.

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
    // within the grace.
    assert!(lived >= age * 9 / 10, "closed after {lived:?}");
    assert!(lived <= age * 11 / 10 + grace, "closed after {lived:?}");
}
