//! gRPC over TLS and mTLS, the admin RPCs' callers, the plaintext health
//! listener, certificate rotation without a restart, and the start-up
//! errors for bad TLS settings. Certificates are made here with openssl.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use sticky_routing::config::Settings;
use sticky_routing::pki::AdminClients;
use sticky_routing::transport::pb;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use sticky_routing::transport::tls::RELOAD_INTERVAL;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;

use crate::support::frames::{MAX_STREAM_ID, Wire};
use crate::support::tls::{TlsApp, pki, plaintext, raw_tls, tls_files};
use crate::support::*;
use test_support::pki::Pki;

#[tokio::test]
async fn with_mtls_only_clients_signed_by_the_client_ca_get_in() {
    let pki = pki();
    let dir = pki.path("");
    let app = TlsApp::spawn(|s| s.tls = Some(tls_files(&dir, Some("clients-ca")))).await;
    assert_eq!(
        app.record_through(&pki, "server-ca", Some("orchestrator"))
            .await,
        Code::Ok
    );
    assert_ne!(
        app.record_through(&pki, "server-ca", None).await,
        Code::Ok,
        "a client without a certificate got in"
    );
    assert_ne!(
        app.record_through(&pki, "server-ca", Some("stranger"))
            .await,
        Code::Ok,
        "a client certificate from another CA got in"
    );
    assert_ne!(
        app.record_through(&pki, "other-ca", Some("orchestrator"))
            .await,
        Code::Ok,
        "the client trusted a server certificate it has no CA for"
    );
}

/// The TLS listener retires its connections as the plaintext one does: the
/// two-step GOAWAY at the connection's age, read after decryption.
#[tokio::test]
async fn a_tls_connection_gets_goaway_at_its_age() {
    let pki = pki();
    let dir = pki.path("");
    let age = Duration::from_secs(1);
    let app = TlsApp::spawn(|s| {
        s.tls = Some(tls_files(&dir, None));
        s.max_connection_age = age;
    })
    .await;
    let tls = raw_tls(&pki, app.addr).await;
    let wire = Wire::default();
    wire.idle_peer_on(tls).await;
    let opened = wire.snapshot(|log| log.opened[0]);
    let started = Instant::now();
    let goaways = loop {
        let seen = wire.goaways();
        if seen.len() >= 2 || started.elapsed() > age * 3 {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(goaways.len(), 2, "{goaways:?}");
    assert_eq!(goaways[0].goaway, Some((MAX_STREAM_ID, 0)));
    assert_eq!(goaways[1].goaway, Some((0, 0)));
    let at = goaways[0].at - opened;
    assert!(
        at >= age * 9 / 10 && at <= age * 11 / 10 + Duration::from_millis(500),
        "GOAWAY after {at:?}"
    );
}

#[tokio::test]
async fn tls_without_a_client_ca_takes_clients_without_certificates() {
    let pki = pki();
    let dir = pki.path("");
    let app = TlsApp::spawn(|s| s.tls = Some(tls_files(&dir, None))).await;
    assert_eq!(app.record_through(&pki, "server-ca", None).await, Code::Ok);
    let plain = Channel::from_shared(format!("http://{}", app.addr))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await;
    if let Ok(channel) = plain {
        let request = outcome("m1", "c1", "ADYEN", pb::Outcome::Success);
        let answer = StickyRoutingClient::new(channel)
            .record_outcome(request)
            .await;
        assert!(answer.is_err(), "plaintext reached the TLS port");
    }
}

/// The service over mTLS, its admin RPCs for a URI identity,
/// `spiffe://test/admin`, and a DNS one, `ops.test`.
async fn admin_app(pki: &Pki) -> TlsApp {
    let dir = pki.path("");
    TlsApp::spawn(|s| {
        s.tls = Some(tls_files(&dir, Some("clients-ca")));
        s.admin_clients = AdminClients::parse("spiffe://test/admin, ops.test").unwrap();
    })
    .await
}

#[tokio::test]
async fn admin_rpcs_answer_only_the_named_identities() {
    let pki = pki();
    let app = admin_app(&pki).await;
    let habits = pb::GetHabitsRequest {
        merchant_id: "m1".into(),
        customer_id: "c1".into(),
    };
    let forget = pb::ForgetCustomerRequest {
        merchant_id: "m1".into(),
        customer_id: "c1".into(),
    };
    let orchestrator = app
        .client(&pki, "server-ca", Some("orchestrator"))
        .await
        .unwrap();
    let mut api = StickyRoutingClient::new(orchestrator.clone());
    let request = outcome("m1", "c1", "ADYEN", pb::Outcome::Success);
    assert_eq!(
        api.record_outcome(request)
            .await
            .unwrap()
            .into_inner()
            .result,
        APPLIED
    );
    let denied = api.get_habits(habits.clone()).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(
        denied.message().contains("STICKY_ROUTING_ADMIN_CLIENTS"),
        "{denied:?}"
    );
    let denied = api.forget_customer(forget.clone()).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    // Health and reflection stay open to any client that completed the
    // handshake.
    assert_eq!(
        health_status(&HealthClient::new(orchestrator), API).await,
        SERVING
    );

    for admin in ["admin", "ops"] {
        let channel = app.client(&pki, "server-ca", Some(admin)).await.unwrap();
        let habits = StickyRoutingClient::new(channel)
            .get_habits(habits.clone())
            .await;
        let habits = habits.unwrap().into_inner();
        assert_eq!(habits.habits.len(), 1, "{admin}: {habits:?}");
    }
    let channel = app.client(&pki, "server-ca", Some("admin")).await.unwrap();
    let forgot = StickyRoutingClient::new(channel)
        .forget_customer(forget)
        .await;
    assert!(forgot.unwrap().into_inner().existed);
}

/// webpki checks DNS names but passes URI names through unchecked, so a
/// certificate whose URI name spells `ops.test` proves nothing about the
/// DNS name `ops.test`. Each entry matches only its own kind of name: a
/// bare name a DNS name, a URI (a SPIFFE id) a URI name.
#[tokio::test]
async fn admin_identities_match_only_their_own_kind_of_name() {
    let pki = pki();
    pki.leaf("uri-spells-dns", "clients-ca", "URI:ops.test");
    pki.leaf("dns-spells-uri", "clients-ca", "DNS:spiffe://test/admin");
    pki.leaf("both", "clients-ca", "URI:ops.test,DNS:ops.test");
    let app = admin_app(&pki).await;
    let habits = pb::GetHabitsRequest {
        merchant_id: "m1".into(),
        customer_id: "c1".into(),
    };
    for (client, expected) in [
        ("admin", Code::Ok),
        ("ops", Code::Ok),
        ("both", Code::Ok),
        ("uri-spells-dns", Code::PermissionDenied),
        ("dns-spells-uri", Code::PermissionDenied),
    ] {
        let channel = app.client(&pki, "server-ca", Some(client)).await.unwrap();
        let answer = StickyRoutingClient::new(channel)
            .get_habits(habits.clone())
            .await;
        let code = answer
            .as_ref()
            .map_or_else(tonic::Status::code, |_| Code::Ok);
        assert_eq!(code, expected, "{client}: {answer:?}");
    }
}

#[tokio::test]
async fn the_health_listener_serves_plaintext_health_and_nothing_else() {
    let pki = pki();
    let dir = pki.path("");
    let app = TlsApp::spawn(|s| s.tls = Some(tls_files(&dir, Some("clients-ca")))).await;
    let channel = plaintext(app.health_addr).await;
    assert_eq!(
        health_status(&HealthClient::new(channel.clone()), API).await,
        SERVING
    );
    assert_eq!(
        health_status(&HealthClient::new(channel.clone()), "").await,
        SERVING
    );
    let request = outcome("m1", "c1", "ADYEN", pb::Outcome::Success);
    let refused = StickyRoutingClient::new(channel)
        .record_outcome(request)
        .await;
    assert_eq!(refused.unwrap_err().code(), Code::Unimplemented);
}

/// A Kubernetes Secret volume: the files are symlinks through `..data`,
/// which points at a timestamped directory; an update swaps `..data`.
struct SecretVolume {
    root: std::path::PathBuf,
}

impl SecretVolume {
    const FILES: [&str; 3] = ["server.crt", "server.key", "clients-ca.crt"];

    fn new(root: &Path) -> Self {
        std::fs::create_dir_all(root).unwrap();
        for file in Self::FILES {
            std::os::unix::fs::symlink(format!("..data/{file}"), root.join(file)).unwrap();
        }
        Self {
            root: root.to_owned(),
        }
    }

    /// Publishes version `n`: `sources` are (file in the volume, file to copy).
    fn publish(&self, n: u32, sources: [&Path; 3]) {
        let version = self.root.join(format!("..v{n}"));
        std::fs::create_dir_all(&version).unwrap();
        for (file, source) in Self::FILES.iter().zip(sources) {
            std::fs::copy(source, version.join(file)).unwrap();
        }
        let next = self.root.join("..data_tmp");
        std::os::unix::fs::symlink(format!("..v{n}"), &next).unwrap();
        std::fs::rename(&next, self.root.join("..data")).unwrap();
    }
}

#[tokio::test]
async fn rotated_certificates_and_client_ca_are_used_without_a_restart() {
    let pki = pki();
    pki.self_signed_ca("server-ca-2", "server-ca-2");
    pki.leaf("server-2", "server-ca-2", "IP:127.0.0.1,DNS:localhost");
    let volume = SecretVolume::new(&pki.path("volume"));
    let p = |name: &str| pki.path(name);
    volume.publish(
        1,
        [&p("server.crt"), &p("server.key"), &p("clients-ca.crt")],
    );
    let dir = volume.root.clone();
    let app = TlsApp::spawn(|s| s.tls = Some(tls_files(&dir, Some("clients-ca")))).await;
    assert_eq!(
        app.record_through(&pki, "server-ca", Some("orchestrator"))
            .await,
        Code::Ok
    );
    assert_ne!(
        app.record_through(&pki, "server-ca-2", Some("orchestrator"))
            .await,
        Code::Ok
    );

    // The new server certificate, and a client CA that now trusts only
    // `other-ca`'s clients.
    volume.publish(
        2,
        [&p("server-2.crt"), &p("server-2.key"), &p("other-ca.crt")],
    );
    let rotated = Instant::now();
    while app
        .record_through(&pki, "server-ca-2", Some("stranger"))
        .await
        != Code::Ok
    {
        assert!(
            rotated.elapsed() < RELOAD_INTERVAL * 4,
            "new connections never used the rotated files"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_ne!(
        app.record_through(&pki, "server-ca-2", Some("orchestrator"))
            .await,
        Code::Ok,
        "the old client CA still admits its clients"
    );

    // A half-written rotation: the first pair's certificate with the
    // second pair's key. The service keeps the good pair.
    volume.publish(
        3,
        [&p("server.crt"), &p("server-2.key"), &p("other-ca.crt")],
    );
    tokio::time::sleep(RELOAD_INTERVAL * 2).await;
    assert_eq!(
        app.record_through(&pki, "server-ca-2", Some("stranger"))
            .await,
        Code::Ok,
        "a certificate that does not fit its key replaced a good one"
    );
}

/// The configuration problems for `vars`, one line each.
fn problems(vars: &[(&str, String)]) -> String {
    let env: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    match Settings::load(None, &env) {
        Ok(_) => String::new(),
        Err(error) => error.to_string(),
    }
}

#[test]
fn bad_tls_settings_are_start_up_errors_naming_the_variable() {
    let pki = pki();
    let a = |name: &str| pki.arg(name);
    std::fs::write(pki.path("garbage.pem"), "not pem at all").unwrap();
    let cert = ("STICKY_ROUTING_TLS_CERT_FILE", a("server.crt"));
    let key = ("STICKY_ROUTING_TLS_KEY_FILE", a("server.key"));
    let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
        (vec![cert.clone()], "STICKY_ROUTING_TLS_CERT_FILE"),
        (vec![key.clone()], "STICKY_ROUTING_TLS_KEY_FILE"),
        (
            vec![
                cert.clone(),
                ("STICKY_ROUTING_TLS_KEY_FILE", a("admin.key")),
            ],
            "STICKY_ROUTING_TLS_KEY_FILE",
        ),
        (
            vec![
                ("STICKY_ROUTING_TLS_CERT_FILE", a("missing.crt")),
                key.clone(),
            ],
            "STICKY_ROUTING_TLS_CERT_FILE",
        ),
        (
            vec![
                ("STICKY_ROUTING_TLS_CERT_FILE", a("garbage.pem")),
                key.clone(),
            ],
            "STICKY_ROUTING_TLS_CERT_FILE",
        ),
        (
            vec![
                cert.clone(),
                ("STICKY_ROUTING_TLS_KEY_FILE", a("garbage.pem")),
            ],
            "STICKY_ROUTING_TLS_KEY_FILE",
        ),
        (
            vec![
                cert.clone(),
                key.clone(),
                ("STICKY_ROUTING_TLS_CLIENT_CA_FILE", a("garbage.pem")),
            ],
            "STICKY_ROUTING_TLS_CLIENT_CA_FILE",
        ),
        (
            vec![("STICKY_ROUTING_TLS_CLIENT_CA_FILE", a("clients-ca.crt"))],
            "STICKY_ROUTING_TLS_CLIENT_CA_FILE",
        ),
        (
            vec![
                cert.clone(),
                key.clone(),
                ("STICKY_ROUTING_ADMIN_CLIENTS", "spiffe://x".into()),
            ],
            "STICKY_ROUTING_ADMIN_CLIENTS",
        ),
        (
            vec![("STICKY_ROUTING_HEALTH_LISTEN_ADDR", "nowhere".into())],
            "STICKY_ROUTING_HEALTH_LISTEN_ADDR",
        ),
    ];
    for (vars, named) in cases {
        let found = problems(&vars);
        assert!(
            found.contains(named),
            "{vars:?} should name {named}, got: {found:?}"
        );
    }
    let good = problems(&[
        cert.clone(),
        key.clone(),
        ("STICKY_ROUTING_TLS_CLIENT_CA_FILE", a("clients-ca.crt")),
        ("STICKY_ROUTING_ADMIN_CLIENTS", "spiffe://test/admin".into()),
        ("STICKY_ROUTING_HEALTH_LISTEN_ADDR", "off".into()),
    ]);
    assert_eq!(good, "", "a good TLS setup was refused");
}

#[test]
fn keys_in_pkcs8_pkcs1_rsa_and_sec1_ec_form_are_all_taken() {
    let pki = pki();
    // PKCS#1 RSA and SEC1 EC keys, each with a certificate from server-ca.
    pki.openssl(&["genrsa", "-traditional", "-out", "rsa.key", "2048"]);
    pki.openssl(&[
        "ecparam",
        "-name",
        "prime256v1",
        "-genkey",
        "-noout",
        "-out",
        "ec.key",
    ]);
    for name in ["rsa", "ec"] {
        pki.leaf_for_key(name, "server-ca", "DNS:localhost");
        let (key, crt) = (format!("{name}.key"), format!("{name}.crt"));
        let header = String::from_utf8(pki.read(&key)).unwrap();
        let form = if name == "rsa" {
            "BEGIN RSA PRIVATE KEY"
        } else {
            "BEGIN EC PRIVATE KEY"
        };
        assert!(
            header.contains(form),
            "openssl made {name}.key in another form"
        );
        let found = problems(&[
            ("STICKY_ROUTING_TLS_CERT_FILE", pki.arg(&crt)),
            ("STICKY_ROUTING_TLS_KEY_FILE", pki.arg(&key)),
        ]);
        assert_eq!(found, "", "{name} key refused");
    }
}

#[tokio::test]
async fn a_bad_tls_file_exits_with_status_2_and_names_the_variable() {
    let pki = pki();
    let output = service_binary(&[
        ("STICKY_ROUTING_TLS_CERT_FILE", pki.arg("server.crt")),
        ("STICKY_ROUTING_TLS_KEY_FILE", pki.arg("ops.key")),
    ])
    .output()
    .await
    .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("STICKY_ROUTING_TLS_KEY_FILE"), "{stderr}");
}
