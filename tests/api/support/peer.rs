//! Another instance of the service, serving and ready: a second one
//! beside a test's app, with the same settings and so on the same Redis
//! (what the tests of work shared between instances drive), or one with
//! settings of its own.

use sticky_routing::config::Settings;
use sticky_routing::startup::{Application, StartupError};
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;

use super::{TestApp, wait_for_readiness};

/// Another instance, serving; stopped (its last flush done) by
/// [`Peer::stop`].
pub struct Peer {
    pub api: StickyRoutingClient<Channel>,
    shutdown: oneshot::Sender<()>,
    server: JoinHandle<Result<(), StartupError>>,
}

impl TestApp {
    /// Starts another instance with this app's settings.
    pub async fn peer(&self) -> Peer {
        Peer::start(self.settings.clone()).await
    }
}

impl Peer {
    /// Starts an instance with `settings` and waits until it is ready.
    pub async fn start(settings: Settings) -> Self {
        let app = Application::build(settings).await.expect("the peer builds");
        let addr = app.grpc_addr();
        let (shutdown, stopped) = oneshot::channel();
        let server = tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        wait_for_readiness(&HealthClient::new(channel.clone()), true).await;
        Peer {
            api: StickyRoutingClient::new(channel),
            shutdown,
            server,
        }
    }

    pub async fn stop(self) {
        let _ = self.shutdown.send(());
        self.server
            .await
            .expect("the peer's task does not panic")
            .expect("the peer stops cleanly");
    }
}
