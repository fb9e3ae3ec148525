//! A client that races the server's GOAWAY (issue 42): its call in flight
//! when the connection retires completes and is applied once, whatever it
//! sends on the stream it started too late, at the connection's age, at the
//! drain, and over TLS. The race itself is `support::race`.

use std::time::Duration;

use fred::prelude::{Builder, ClientLike, Config};
use tokio::net::TcpStream;

use crate::support::race::race_the_goaway;
use crate::support::tls::{TlsApp, pki, raw_tls, tls_files};
use crate::support::*;

/// Long enough that the frozen Redis answers stream 1 after the race.
const REDIS_TIMEOUT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_call_in_flight_at_the_age_completes_when_the_client_races_the_goaway() {
    let app = spawn_app_with(|s| {
        s.max_connection_age = Duration::from_secs(1);
        s.redis.command_timeout = REDIS_TIMEOUT;
    })
    .await;
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    race_the_goaway(tcp, &app.redis, &app.inspect, async {}).await;
}

#[tokio::test]
async fn a_call_in_flight_at_the_drain_completes_when_the_client_races_the_goaway() {
    let mut app = spawn_app_with(|s| s.redis.command_timeout = REDIS_TIMEOUT).await;
    let drain = app.drain_trigger();
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let start_the_drain = async move {
        // Stream 1 reaches the server (and the frozen Redis) first.
        tokio::time::sleep(Duration::from_millis(300)).await;
        drain.send(()).unwrap();
    };
    race_the_goaway(tcp, &app.redis, &app.inspect, start_the_drain).await;
    let stopped = tokio::time::timeout(Duration::from_secs(10), app.stop()).await;
    assert!(matches!(stopped, Ok(Ok(()))), "{stopped:?}");
}

#[tokio::test]
async fn a_tls_call_in_flight_at_the_age_completes_when_the_client_races_the_goaway() {
    let pki = pki();
    let dir = pki.path("");
    let app = TlsApp::spawn(|s| {
        s.tls = Some(tls_files(&dir, None));
        s.max_connection_age = Duration::from_secs(1);
        s.redis.command_timeout = REDIS_TIMEOUT;
    })
    .await;
    let inspect = Builder::from_config(Config::from_url(&app.redis.url()).unwrap())
        .build()
        .unwrap();
    inspect.init().await.unwrap();
    let tls = raw_tls(&pki, app.addr).await;
    race_the_goaway(tls, &app.redis, &inspect, async {}).await;
}
