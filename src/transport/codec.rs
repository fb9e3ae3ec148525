//! The protobuf codec of the generated service: prost's, except that a
//! request that does not decode is the caller's fault.
//!
//! tonic-prost maps every decode error to `INTERNAL`, following the gRPC
//! status-code guide for a server's own parse failures. For this service a
//! request with invalid UTF-8 or garbage bytes is bad input, and `INTERNAL`
//! is reserved for real bugs, so the decoder answers `INVALID_ARGUMENT`.

use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::{Code, Status};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// How the answer to a request that does not decode begins; the gate
/// counts such answers by it.
pub const UNDECODABLE: &str = "request: the message does not decode as protobuf";

/// `ProstCodec` with decode failures reported as `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct StrictProstCodec<T, U> {
    inner: ProstCodec<T, U>,
}

impl<T, U> Default for StrictProstCodec<T, U> {
    fn default() -> Self {
        Self {
            inner: ProstCodec::default(),
        }
    }
}

impl<T, U> Codec for StrictProstCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.inner.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder(self.inner.decoder())
    }
}

/// Wraps prost's decoder and re-labels its parse failures.
#[derive(Debug)]
pub struct StrictDecoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|status| match status.code() {
            Code::Internal => {
                Status::invalid_argument(format!("{UNDECODABLE} ({})", status.message()))
            }
            _ => status,
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
