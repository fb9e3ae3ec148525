//! The transport floor: the service's generated server, codec, in-flight
//! gate and transport settings, with handlers that answer at once without touching Redis. The
//! gap between it and the service is what Redis and the rules cost.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sticky_routing::domain::priority::Shares;
use sticky_routing::telemetry::Metrics;
use sticky_routing::transport::pb::sticky_routing_server::StickyRouting;
use sticky_routing::transport::pb::{
    ConnectorCount, ForgetCustomerRequest, ForgetCustomerResponse, GetConnectorHealthRequest,
    GetConnectorHealthResponse, GetHabitsRequest, GetHabitsResponse, GetPinRequest, GetPinResponse,
    GetUpliftRequest, GetUpliftResponse, PinReason, RecordOutcomeRequest, RecordOutcomeResponse,
    RecordResult, SetConnectorOverrideRequest, SetConnectorOverrideResponse,
};
use sticky_routing::transport::server::{AfterDrain, GrpcServer, Lifetime, api};
use sticky_routing::transport::tls::plain_incoming;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic::{Request, Response, Status};

use crate::BoxError;

/// Answers every call with a fixed reply of the real reply's shape.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopService;

#[tonic::async_trait]
impl StickyRouting for NoopService {
    async fn record_outcome(
        &self,
        _request: Request<RecordOutcomeRequest>,
    ) -> Result<Response<RecordOutcomeResponse>, Status> {
        Ok(Response::new(RecordOutcomeResponse {
            result: RecordResult::Applied as i32,
            net_count: 1,
            pruned: 0,
        }))
    }

    async fn get_pin(
        &self,
        _request: Request<GetPinRequest>,
    ) -> Result<Response<GetPinResponse>, Status> {
        let connector = "connector_00".to_owned();
        Ok(Response::new(GetPinResponse {
            pinned: true,
            connector: connector.clone(),
            net_count: 1,
            candidates: vec![ConnectorCount {
                connector: connector.clone(),
                net_count: 1,
            }],
            vetoed: Vec::new(),
            reason: PinReason::Pinned.into(),
            would_pin: connector,
            vetoes: Vec::new(),
        }))
    }

    async fn get_habits(
        &self,
        _request: Request<GetHabitsRequest>,
    ) -> Result<Response<GetHabitsResponse>, Status> {
        Ok(Response::new(GetHabitsResponse::default()))
    }

    async fn forget_customer(
        &self,
        _request: Request<ForgetCustomerRequest>,
    ) -> Result<Response<ForgetCustomerResponse>, Status> {
        Ok(Response::new(ForgetCustomerResponse::default()))
    }

    async fn get_connector_health(
        &self,
        _request: Request<GetConnectorHealthRequest>,
    ) -> Result<Response<GetConnectorHealthResponse>, Status> {
        Ok(Response::new(GetConnectorHealthResponse::default()))
    }

    async fn set_connector_override(
        &self,
        _request: Request<SetConnectorOverrideRequest>,
    ) -> Result<Response<SetConnectorOverrideResponse>, Status> {
        Ok(Response::new(SetConnectorOverrideResponse {}))
    }

    async fn get_uplift(
        &self,
        _request: Request<GetUpliftRequest>,
    ) -> Result<Response<GetUpliftResponse>, Status> {
        Ok(Response::new(GetUpliftResponse::default()))
    }
}

/// Serves the no-op floor on `listener` until the process ends.
pub async fn serve(listener: TcpListener, max_in_flight: usize) -> Result<(), BoxError> {
    // The service's own API shape (message limit, in-flight gate), so the
    // floor differs from the service only in its handlers.
    let service = api(
        NoopService,
        max_in_flight,
        Shares::default(),
        Arc::new(Metrics::new()?),
    );
    // The service's own connection ages, so that the floor pays what the
    // service pays for them.
    let lifetime = Lifetime {
        max_age: Duration::from_secs(300),
        grace: Duration::from_secs(10),
    };
    let never = CancellationToken::new();
    GrpcServer::new(Routes::new(service), max_in_flight, lifetime)
        .serve(
            plain_incoming(listener),
            never.clone(),
            never,
            AfterDrain::StopAccepting,
        )
        .await;
    Ok(())
}

/// Binds `addr` (port 0 for any) and returns the listener and real address.
pub async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), BoxError> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    Ok((listener, bound))
}
