//! An OpenTelemetry collector stand-in for `sticky-bench --trace-sample`:
//! it accepts OTLP/gRPC trace exports and only counts the spans, so that
//! the service's tracing cost is measured with its exporter really sending,
//! and the count shows that it did.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

use crate::BoxError;

/// A running sink: its address, and the spans it has received so far.
pub struct OtlpSink {
    pub addr: SocketAddr,
    spans: Arc<AtomicU64>,
}

impl OtlpSink {
    /// Starts the sink on a free local port, on the current runtime.
    pub async fn start() -> Result<Self, BoxError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let spans = Arc::new(AtomicU64::new(0));
        let service = TraceServiceServer::new(Counter(spans.clone()));
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        Ok(Self { addr, spans })
    }

    pub fn spans(&self) -> u64 {
        self.spans.load(Ordering::Relaxed)
    }
}

struct Counter(Arc<AtomicU64>);

#[tonic::async_trait]
impl TraceService for Counter {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: usize = request
            .get_ref()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0.fetch_add(spans as u64, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}
