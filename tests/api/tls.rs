//! TLS to Redis with certificates that openssl makes here, and what an
//! operator sees when a certificate or a password is wrong: the service
//! starts, stays NOT_SERVING and logs why. It never hangs.

use std::process::Stdio;
use std::time::{Duration, Instant};

use sticky_routing::config::Settings;
use sticky_routing::storage::{ClientCertFiles, TlsFiles};
use sticky_routing::transport::pb;
use tokio::io::AsyncReadExt;
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;

use crate::support::*;
use test_support::pki::Pki;
use test_support::redis_server::ServerOptions;

/// What the TLS-to-Redis tests make of a [`Pki`]: its certificates, a
/// Redis that serves them, and the service's settings for them.
trait RedisTls {
    fn make() -> Self;
    fn server_args(&self) -> Vec<String>;
    fn redis(&self) -> RedisServer;
    fn files(&self, ca: &str) -> TlsFiles;
}

impl RedisTls for Pki {
    /// A private CA, a server and a client certificate it signed, and a
    /// second CA that signed nothing here.
    fn make() -> Self {
        let pki = Self::empty();
        pki.self_signed_ca("ca", "sticky-test-ca");
        pki.self_signed_ca("other-ca", "some-other-ca");
        for name in ["server", "client"] {
            pki.leaf(name, "ca", "IP:127.0.0.1,DNS:localhost");
        }
        pki
    }

    /// redis-server arguments for TLS with our CA, requiring a client
    /// certificate from it.
    fn server_args(&self) -> Vec<String> {
        let args = [
            ("--tls-cert-file", self.arg("server.crt")),
            ("--tls-key-file", self.arg("server.key")),
            ("--tls-ca-cert-file", self.arg("ca.crt")),
            ("--tls-auth-clients", "yes".into()),
        ];
        args.into_iter()
            .flat_map(|(k, v)| [k.to_owned(), v])
            .collect()
    }

    /// Redis on TLS only.
    fn redis(&self) -> RedisServer {
        RedisServer::start_with(ServerOptions {
            args: self.server_args(),
            tls: true,
            ..ServerOptions::default()
        })
    }

    fn files(&self, ca: &str) -> TlsFiles {
        TlsFiles {
            ca_file: Some(self.path(ca)),
            client_cert: Some(ClientCertFiles {
                cert_file: self.path("client.crt"),
                key_file: self.path("client.key"),
            }),
        }
    }
}

#[tokio::test]
async fn the_service_talks_tls_with_a_private_ca_and_a_client_certificate() {
    let pki = Pki::make();
    let redis = pki.redis();
    assert!(redis.url().starts_with("rediss://"));
    serves_through(test_settings(&redis), &pki, 1).await;
}

#[tokio::test]
async fn the_service_talks_tls_to_a_cluster() {
    let pki = Pki::make();
    let cluster = RedisCluster::start_with_tls(Some(pki.server_args()));
    assert!(cluster.url().starts_with("rediss-cluster://"));
    // Enough customers to reach every shard.
    serves_through(test_settings_for(cluster.url()), &pki, 30).await;
}

/// Builds the service with `settings` and the PKI's trust and identity,
/// and records and reads `customers` customers through it.
async fn serves_through(mut settings: Settings, pki: &Pki, customers: usize) {
    settings.redis.tls = Some(pki.files("ca.crt"));
    let peer = crate::support::peer::Peer::start(settings).await;
    let mut api = peer.api.clone();
    for i in 0..customers {
        let customer = format!("c{i}");
        let request = outcome("m1", &customer, "GIGADAT", pb::Outcome::Success);
        let reply = api.record_outcome(request).await.unwrap().into_inner();
        assert_eq!(reply.result, APPLIED);
        let pin = api.get_pin(pin_request(&customer, &[])).await.unwrap();
        assert_eq!(pin.into_inner().connector, "GIGADAT");
    }
    peer.stop().await;
}

#[tokio::test]
async fn an_untrusted_redis_certificate_means_not_serving_and_a_log_line_saying_why() {
    let pki = Pki::make();
    let redis = pki.redis();
    let vars = [
        ("STICKY_ROUTING_REDIS_URL", redis.url()),
        ("STICKY_ROUTING_REDIS_TLS_CA_FILE", pki.arg("other-ca.crt")),
        ("STICKY_ROUTING_REDIS_TLS_CERT_FILE", pki.arg("client.crt")),
        ("STICKY_ROUTING_REDIS_TLS_KEY_FILE", pki.arg("client.key")),
    ];
    let log = not_serving_log(&vars).await;
    assert!(log.contains("redis connection failed"), "{log}");
    assert!(
        log.to_lowercase().contains("certificate"),
        "the log does not say the certificate is the problem:\n{log}"
    );
}

#[tokio::test]
async fn a_wrong_password_means_not_serving_and_a_log_line_saying_why() {
    let redis = RedisServer::start();
    let vars = [
        ("STICKY_ROUTING_REDIS_URL", redis.url()),
        ("STICKY_ROUTING_REDIS_USERNAME", SERVICE_USER.to_owned()),
        (
            "STICKY_ROUTING_REDIS_PASSWORD",
            "not-the-password".to_owned(),
        ),
    ];
    let log = not_serving_log(&vars).await;
    assert!(log.contains("redis connection failed"), "{log}");
    assert!(
        log.contains("WRONGPASS"),
        "the log does not say why:\n{log}"
    );
    assert!(
        !log.contains("not-the-password"),
        "the password was logged:\n{log}"
    );
}

/// Runs the binary with `vars`, checks that it comes up (liveness SERVING)
/// within seconds but stays NOT_SERVING, and returns what it logged.
async fn not_serving_log(vars: &[(&str, String)]) -> String {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut all = vec![
        ("STICKY_ROUTING_LISTEN_ADDR", addr.clone()),
        (
            "STICKY_ROUTING_METRICS_ADDR",
            format!("127.0.0.1:{}", free_port()),
        ),
    ];
    all.extend_from_slice(vars);
    let started = Instant::now();
    let mut child = service_binary(&all)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let channel = loop {
        if let Ok(channel) = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
        {
            break channel;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the service never listened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let health = HealthClient::new(channel);
    assert_eq!(health_status(&health, "").await, SERVING, "liveness");
    assert!(started.elapsed() < Duration::from_secs(10), "start-up hung");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(health_status(&health, API).await, NOT_SERVING);
    child.start_kill().unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .await
        .unwrap();
    log
}
