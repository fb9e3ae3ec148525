//! One fuzz case: which path it calls, the request body (a well-formed
//! frame of a plausible message, a mutated message, a broken frame, or
//! noise), and what the store answers.

use super::requests::{self, Request, Rpc, StoreAnswer};
use super::rng::Rng;
use crate::transport::server::MAX_MESSAGE_BYTES;

/// Where a case sends its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Rpc(Rpc),
    /// A path the service does not serve.
    Unknown(&'static str),
}

#[derive(Debug, Clone)]
pub struct Case {
    pub target: Target,
    pub body: Vec<u8>,
    /// A `grpc-encoding` header, when the case sends one.
    pub encoding: Option<&'static str>,
    pub answer: StoreAnswer,
    /// The message, when the body is exactly its one well-formed frame sent
    /// to its own RPC: the answer must then be what `convert` says of it.
    pub clean: Option<Request>,
}

impl Case {
    /// Whether some frame of the body declares more bytes than the server
    /// accepts, which tonic answers `OUT_OF_RANGE`.
    pub fn declares_over_limit(&self) -> bool {
        let mut at = 0;
        while let Some(header) = self.body.get(at..at + 5) {
            let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
            if len > MAX_MESSAGE_BYTES {
                return true;
            }
            at += 5 + len;
        }
        false
    }
}

/// Paths the StickyRouting server does not serve.
const UNKNOWN_PATHS: &[&str] = &[
    "/sticky_routing.v1.StickyRouting/Nope",
    "/sticky_routing.v1.StickyRouting/",
    "/grpc.health.v1.Health/Check",
    "/",
];

pub fn case(rng: &mut Rng) -> Case {
    let rpc = *rng.pick(&Rpc::ALL);
    // Now and then, another RPC's message: it decodes, with odd fields.
    let message_rpc = if rng.one_in(16) {
        *rng.pick(&Rpc::ALL)
    } else {
        rpc
    };
    let request = requests::request(rng, message_rpc);
    let answer = requests::store_answer(rng, Some(&request));
    let target = if rng.one_in(64) {
        Target::Unknown(UNKNOWN_PATHS[rng.below(UNKNOWN_PATHS.len())])
    } else {
        Target::Rpc(rpc)
    };
    let encoding = rng
        .one_in(64)
        .then(|| *rng.pick(&["gzip", "identity", "br", "x-unknown"]));
    let message = request.encode();
    let (body, well_formed) = match rng.below(20) {
        0..=9 => (frame(0, &message), true),
        10..=14 => (frame(0, &mutate(rng, message)), false),
        15 => {
            let len = rng.below(64);
            (frame(0, &rng.bytes(len)), false)
        }
        16..=18 => (misframe(rng, message), false),
        _ => {
            let len = rng.below(32);
            (rng.bytes(len), false)
        }
    };
    let clean =
        (well_formed && message_rpc == rpc && target == Target::Rpc(rpc) && encoding.is_none())
            .then_some(request);
    Case {
        target,
        body,
        encoding,
        answer,
        clean,
    }
}

/// The gRPC length-prefixed frame: a compression flag, the length as a
/// big-endian u32, the message.
pub fn frame(flag: u8, message: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(5 + message.len());
    body.push(flag);
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(message);
    body
}

/// Protobuf-aware byte edits: bit flips, cuts, copies, and fields with
/// wire types, lengths and varints that are odd or wrong.
fn mutate(rng: &mut Rng, mut bytes: Vec<u8>) -> Vec<u8> {
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(bytes.len() + 1);
        match rng.below(8) {
            0 if at < bytes.len() => bytes[at] ^= 1 << rng.below(8),
            1 if at < bytes.len() => bytes[at] = rng.next() as u8,
            2 => bytes.truncate(at),
            3 => {
                let end = (at + 1 + rng.below(8)).min(bytes.len());
                bytes.drain(at..end);
            }
            4 => {
                let end = (at + 1 + rng.below(16)).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                let to = rng.below(bytes.len() + 1);
                bytes.splice(to..to, copy);
            }
            5 => {
                let piece = *rng.pick(ODD_PIECES);
                bytes.splice(at..at, piece.iter().copied());
            }
            _ => {
                let field = extra_field(rng);
                bytes.splice(at..at, field);
            }
        }
    }
    bytes
}

/// Encodings that are wrong on their own: overlong and unterminated
/// varints, lengths past the end, groups, reserved wire types, field 0.
const ODD_PIECES: &[&[u8]] = &[
    &[0xFF; 10],
    &[0x80; 11],
    &[0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F],
    &[0x0A, 0x7F],
    &[0x0B],
    &[0x0C],
    &[0x0E],
    &[0x0F],
    &[0x00, 0x01],
    &[0xF8, 0xFF, 0xFF, 0xFF, 0x0F, 0x01],
    &[0x0A, 0x02, 0xC3, 0x28],
    &[0x0A, 0x03, 0xED, 0xA0, 0x80],
];

/// A field 1..=9 of any wire type, with a value that may or may not suit
/// the field: prost keeps the last of a scalar and appends to a list.
fn extra_field(rng: &mut Rng) -> Vec<u8> {
    let number = 1 + rng.below(9) as u8;
    let mut out = Vec::new();
    match rng.below(4) {
        0 => {
            out.push(number << 3);
            out.extend(varint(rng.next() >> rng.below(64)));
        }
        1 => {
            out.push((number << 3) | 1);
            out.extend(rng.next().to_le_bytes());
        }
        2 => {
            out.push((number << 3) | 5);
            out.extend((rng.next() as u32).to_le_bytes());
        }
        _ => {
            let value = if rng.one_in(2) {
                (*rng.pick(&["GIGADAT", "m1", "c\u{200B}1", "", "\u{202E}x", "%_{}"]))
                    .as_bytes()
                    .to_vec()
            } else {
                let len = rng.below(12);
                rng.bytes(len)
            };
            out.push((number << 3) | 2);
            out.extend(varint(value.len() as u64));
            out.extend(value);
        }
    }
    out
}

fn varint(mut value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
    out
}

/// A body whose framing is wrong: a length that is off or wild, a
/// compression flag without compression, a cut header, no message, a
/// second frame, trailing bytes, a message over the size limit.
fn misframe(rng: &mut Rng, message: Vec<u8>) -> Vec<u8> {
    let mut body = frame(0, &message);
    match rng.below(9) {
        0 => {
            let len = (message.len() as u32)
                .wrapping_add(1 + rng.below(3) as u32)
                .wrapping_sub(if rng.one_in(2) { 4 } else { 0 });
            body[1..5].copy_from_slice(&len.to_be_bytes());
        }
        1 => body[1..5].copy_from_slice(&(rng.next() as u32).to_be_bytes()),
        2 => body[0] = *rng.pick(&[1, 2, 0x80, 0xFF]),
        3 => body.truncate(rng.below(5)),
        4 => body.clear(),
        5 => {
            let len = rng.below(16);
            body.extend(frame(0, &rng.bytes(len)));
        }
        6 => body.extend(frame(0, &message)),
        7 => {
            let len = 1 + rng.below(6);
            body.extend(rng.bytes(len));
        }
        _ => {
            // Field 15 of wire type 2, over the limit with its padding.
            let mut big = message;
            big.push((15 << 3) | 2);
            big.extend(varint(MAX_MESSAGE_BYTES as u64));
            big.resize(big.len() + MAX_MESSAGE_BYTES, b'x');
            body = frame(0, &big);
        }
    }
    body
}
