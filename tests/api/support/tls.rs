//! The service over TLS for the tests: the certificates (made with
//! openssl), the app on them, and clients of it, tonic's and raw.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use sticky_routing::config::Settings;
use sticky_routing::pki::ServerTlsFiles;
use sticky_routing::startup::{Application, StartupError};
use sticky_routing::transport::pb;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use test_support::pki::Pki;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic_health::pb::health_client::HealthClient;

use crate::support::*;

/// `server-ca` signs the server's certificate and `clients-ca` the
/// clients'; `other-ca` signs a client that must be refused, whose
/// certificate names the admin identity all the same.
pub fn pki() -> Pki {
    let pki = Pki::empty();
    for ca in ["server-ca", "clients-ca", "other-ca"] {
        pki.self_signed_ca(ca, ca);
    }
    pki.leaf("server", "server-ca", "IP:127.0.0.1,DNS:localhost");
    pki.leaf(
        "orchestrator",
        "clients-ca",
        "URI:spiffe://test/orchestrator",
    );
    pki.leaf("admin", "clients-ca", "URI:spiffe://test/admin");
    pki.leaf("ops", "clients-ca", "DNS:ops.test");
    pki.leaf("stranger", "other-ca", "URI:spiffe://test/admin");
    pki
}

pub fn tls_files(dir: &Path, client_ca: Option<&str>) -> ServerTlsFiles {
    ServerTlsFiles {
        cert_file: dir.join("server.crt"),
        key_file: dir.join("server.key"),
        client_ca_file: client_ca.map(|ca| dir.join(format!("{ca}.crt"))),
    }
}

/// The service over TLS, running until dropped.
pub struct TlsApp {
    pub addr: SocketAddr,
    pub health_addr: SocketAddr,
    pub redis: TestRedis,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<Result<(), StartupError>>>,
}

impl TlsApp {
    pub async fn spawn(configure: impl FnOnce(&mut Settings)) -> Self {
        let redis = RedisServer::start();
        let mut settings = test_settings(&redis);
        configure(&mut settings);
        let app = Application::build(settings).await.unwrap();
        let (addr, health_addr) = (app.grpc_addr(), app.health_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        let health = HealthClient::new(plaintext(health_addr).await);
        wait_for_readiness(&health, true).await;
        Self {
            addr,
            health_addr,
            redis: TestRedis::Single(redis),
            stop: Some(stop),
            server: Some(server),
        }
    }

    /// A client trusting `server_ca`, presenting `client`'s certificate if
    /// given. Err: the connection failed (a refused handshake may only show
    /// on the first call, so callers check that too).
    pub async fn client(
        &self,
        pki: &Pki,
        server_ca: &str,
        client: Option<&str>,
    ) -> Result<Channel, tonic::transport::Error> {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(pki.read(&format!("{server_ca}.crt"))))
            .domain_name("localhost");
        if let Some(name) = client {
            tls = tls.identity(Identity::from_pem(
                pki.read(&format!("{name}.crt")),
                pki.read(&format!("{name}.key")),
            ));
        }
        Channel::from_shared(format!("https://{}", self.addr))
            .unwrap()
            .tls_config(tls)?
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
    }

    /// Records one outcome through a new connection; the code it got.
    pub async fn record_through(&self, pki: &Pki, server_ca: &str, client: Option<&str>) -> Code {
        let channel = match self.client(pki, server_ca, client).await {
            Ok(channel) => channel,
            Err(_) => return Code::Unavailable,
        };
        let request = outcome("m1", "c1", "ADYEN", pb::Outcome::Success);
        match StickyRoutingClient::new(channel)
            .record_outcome(request)
            .await
        {
            Ok(_) => Code::Ok,
            Err(status) => status.code(),
        }
    }
}

impl Drop for TlsApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

pub async fn plaintext(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// A raw TLS connection to `addr` that trusts `server-ca` and offers h2,
/// for a client that speaks HTTP/2 itself.
pub async fn raw_tls(pki: &Pki, addr: SocketAddr) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(
        rustls::pki_types::CertificateDer::pem_slice_iter(&pki.read("server-ca.crt"))
            .map(Result::unwrap),
    );
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap()
}
