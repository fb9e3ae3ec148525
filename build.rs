//! Compiles `proto/` with protox, a pure-Rust protobuf compiler, so a fresh
//! machine builds without `protoc` and without downloading anything.

use std::path::PathBuf;

const PROTO: &str = "proto/sticky_routing/v1/sticky_routing.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptors = protox::compile([PROTO], ["proto"])?;
    // Server reflection serves this encoded set, so grpcurl and ghz need no .proto file.
    std::fs::write(
        out_dir.join("sticky_routing_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .codec_path("crate::transport::codec::StrictProstCodec")
        .compile_fds(descriptors)?;
    Ok(())
}
