//! A client that races the server's GOAWAY (issue 42): its call in flight
//! when the connection retires completes and is applied once, whatever it
//! sends on the stream it started too late, at the connection's age, at the
//! drain, over TLS, and on the health listener. The race itself is
//! `support::race`.

use std::time::{Duration, Instant};

use fred::prelude::{Builder, ClientLike, Config};
use tokio::net::TcpStream;
use tonic_health::pb::HealthCheckRequest;

use crate::support::frames::{MAX_STREAM_ID, Wire, grpc_message};
use crate::support::race::{new_call, race_the_goaway};
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

/// The health listener, at a connection's age: a Watch in flight on stream
/// 1 (it stays open until the grace's cut), and the race with a Check on
/// stream 3. The final GOAWAY names stream 1 with no error, and the Watch
/// is still open after the race.
#[tokio::test]
async fn a_watch_on_the_health_listener_outlives_a_client_racing_the_goaway() {
    let app = spawn_app_with(|s| {
        s.max_connection_age = Duration::from_secs(1);
        s.max_connection_age_grace = Duration::from_secs(4);
    })
    .await;
    let wire = Wire::default();
    let check = HealthCheckRequest { service: "".into() };
    let late = new_call(3, "/grpc.health.v1.Health/Check", check.clone());
    let tcp = TcpStream::connect(app.health_addr.unwrap()).await.unwrap();
    let mut client = wire.h2_on(tcp, Some(late)).await;
    let request = http::Request::post("http://localhost/grpc.health.v1.Health/Watch")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(request, false).unwrap();
    send.send_data(grpc_message(check).into(), true).unwrap();
    let mut watch = response.await.unwrap().into_body();
    assert!(watch.data().await.unwrap().is_ok(), "the first status");
    let give_up = Instant::now() + Duration::from_secs(3);
    while wire.goaways().len() < 2 && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(wire.snapshot(|log| log.raced.len()), 1, "no race sent");
    let goaways: Vec<(u32, u32)> = wire.goaways().iter().filter_map(|f| f.goaway).collect();
    assert_eq!(goaways, [(MAX_STREAM_ID, 0), (1, 0)], "the GOAWAYs");
    let next = tokio::time::timeout(Duration::from_millis(500), watch.data()).await;
    assert!(next.is_err(), "the Watch ended before the grace: {next:?}");
}
