//! The gRPC edge: thin tonic handlers over the store, the protobuf codec,
//! deadlines, health, the server's connections and the one error-to-`Status`
//! mapping. Which files make the TLS config and who may call the admin
//! RPCs are [`crate::pki`]'s; serving with them is here.

pub mod codec;
mod convert;
pub mod deadline;
#[cfg(test)]
mod fuzz;
pub mod gate;
pub mod health;
pub mod server;
mod service;
mod status;
mod tenant;
pub mod tls;

pub use service::StickyRoutingService;
pub use status::ApiError;

/// The generated protobuf types, server and client.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod pb {
    tonic::include_proto!("sticky_routing.v1");

    /// The encoded descriptors that server reflection serves.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/sticky_routing_descriptor.bin"));
}
