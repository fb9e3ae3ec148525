//! A workaround for h2 0.4.20 (the newest, 0.4.21, is the same): the
//! client's WINDOW_UPDATE frames for streams the final GOAWAY refused are
//! dropped before h2 reads them, so that they cannot end the connection.
//!
//! The bug: once a graceful shutdown's PING is acknowledged, h2 lowers the
//! streams it accepts to the last one it opened (`Recv::go_away`) and sends
//! the final GOAWAY. From then on `recv_headers`, `recv_data`, `recv_reset`
//! and `recv_push_promise` in `src/proto/streams/streams.rs` ignore frames
//! for a stream above that id, as RFC 9113 §6.8 allows, but
//! `recv_window_update` does not: the unknown stream reaches
//! `ensure_not_idle`, which answers PROTOCOL_ERROR for the whole connection,
//! cutting the calls the GOAWAY promised to finish. A client that started a
//! call before it read the GOAWAY sends exactly that (gRPC C-core sends a
//! stream's WINDOW_UPDATE right after its HEADERS). The upstream fix is the
//! same `id > max_stream_id()` check at the top of `recv_window_update`;
//! delete this module (and its one use in `retire.rs`) once the locked h2
//! has it.
//!
//! What is dropped is exactly what h2 would ignore, never a frame of a
//! stream it accepted. h2 takes every new stream until it reads the PING
//! acknowledgement carrying its shutdown payload; at that frame it accepts
//! no stream above the highest whose HEADERS it has read. This layer reads
//! the same bytes in the same order, so it draws the same line at the same
//! frame: from the acknowledgement on, a WINDOW_UPDATE for a stream above
//! the highest HEADERS seen before it is dropped. HEADERS, DATA and the
//! rest still pass: h2 ignores them (HEADERS must reach it anyway, to keep
//! its HPACK table in step with the client's). Before the server retires
//! the connection (`retiring`, set by `retire.rs` before the GOAWAY) no
//! frame is dropped, whatever the client sends.
//!
//! The cost on every connection: following the frame boundaries, a few
//! comparisons per frame read, no copy and no allocation; only a retiring
//! connection's bytes after the acknowledgement are copied, to leave out
//! the dropped frames.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The client's connection preface, before the first frame.
const PREFACE_LEN: usize = 24;
const HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const PING: u8 = 0x6;
const WINDOW_UPDATE: u8 = 0x8;
const ACK: u8 = 0x1;
/// The payload of the PING that h2 0.4.20 sends with its first GOAWAY
/// (`SHUTDOWN_PAYLOAD` in `src/frame/ping.rs`): its acknowledgement is
/// where h2 lowers the streams it accepts.
const SHUTDOWN_PING: [u8; 8] = [0x0b, 0x7b, 0xa2, 0xf0, 0x8b, 0x9b, 0xfe, 0x54];

/// Where the reader is in the client's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// In the preface: this many bytes still to come.
    Preface(usize),
    /// In a frame header: this many of its bytes already read.
    Header(usize),
    /// In a frame's payload: this many bytes still to come.
    Payload(u32, Payload),
}

/// What becomes of a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Payload {
    Pass,
    Drop,
    /// A PING acknowledgement on a retiring connection: this many of its
    /// eight bytes already read.
    Ack(usize),
}

/// The client's side of a connection, read as HTTP/2 frames.
#[derive(Debug)]
struct Frames {
    part: Part,
    header: [u8; HEADER_LEN],
    ping: [u8; 8],
    /// The highest stream id of a HEADERS frame read so far.
    highest_opened: u32,
    /// Once h2 read its shutdown PING's acknowledgement: the highest stream
    /// it still accepts; WINDOW_UPDATEs above it are dropped.
    last_accepted: Option<u32>,
}

impl Frames {
    fn new() -> Self {
        Self {
            part: Part::Preface(PREFACE_LEN),
            header: [0; HEADER_LEN],
            ping: [0; 8],
            highest_opened: 0,
            last_accepted: None,
        }
    }

    /// Follows `bytes`, all of which reach h2, until h2 will have drawn
    /// its line: `Some(n)` once the first `n` bytes did it (the rest must
    /// go through [`Self::filter`]), `None` if they did not.
    fn pass(&mut self, bytes: &[u8], retiring: &AtomicBool) -> Option<usize> {
        let mut at = 0;
        while at < bytes.len() {
            let rest = &bytes[at..];
            match self.part {
                Part::Preface(left) => {
                    let n = left.min(rest.len());
                    at += n;
                    self.part = match left - n {
                        0 => Part::Header(0),
                        left => Part::Preface(left),
                    };
                }
                Part::Header(0) if rest.len() >= HEADER_LEN => {
                    self.header.copy_from_slice(&rest[..HEADER_LEN]);
                    at += HEADER_LEN;
                    self.part = self.framed(retiring);
                }
                Part::Header(read) => {
                    let n = (HEADER_LEN - read).min(rest.len());
                    self.header[read..read + n].copy_from_slice(&rest[..n]);
                    at += n;
                    self.part = match read + n {
                        HEADER_LEN => self.framed(retiring),
                        read => Part::Header(read),
                    };
                }
                Part::Payload(left, Payload::Ack(read)) => {
                    let n = (left as usize).min(rest.len());
                    self.ping[read..read + n].copy_from_slice(&rest[..n]);
                    at += n;
                    self.part = Part::Payload(left - n as u32, Payload::Ack(read + n));
                    if left as usize == n {
                        self.part = Part::Header(0);
                        if self.ping == SHUTDOWN_PING {
                            self.last_accepted = Some(self.highest_opened);
                            return Some(at);
                        }
                    }
                }
                Part::Payload(left, _) => {
                    let n = (left as usize).min(rest.len());
                    at += n;
                    self.part = match left - n as u32 {
                        0 => Part::Header(0),
                        left => Part::Payload(left, Payload::Pass),
                    };
                }
            }
        }
        None
    }

    /// After the line is drawn: copies `bytes` to `out` less the dropped
    /// frames. A frame header cut by the end of `bytes` is held back until
    /// its end arrives, as whether it passes depends on all of it.
    fn filter(&mut self, mut bytes: &[u8], out: &mut Vec<u8>) {
        while !bytes.is_empty() {
            match self.part {
                Part::Header(read) => {
                    let n = (HEADER_LEN - read).min(bytes.len());
                    self.header[read..read + n].copy_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    if read + n < HEADER_LEN {
                        self.part = Part::Header(read + n);
                        continue;
                    }
                    let (length, kind, _, stream) = self.fields();
                    let last = self.last_accepted.unwrap_or(u32::MAX);
                    let drop = kind == WINDOW_UPDATE && stream > last;
                    if !drop {
                        out.extend_from_slice(&self.header);
                    }
                    let payload = if drop { Payload::Drop } else { Payload::Pass };
                    self.part = match length {
                        0 => Part::Header(0),
                        length => Part::Payload(length, payload),
                    };
                }
                Part::Payload(left, payload) => {
                    let n = (left as usize).min(bytes.len());
                    if payload != Payload::Drop {
                        out.extend_from_slice(&bytes[..n]);
                    }
                    bytes = &bytes[n..];
                    self.part = match left - n as u32 {
                        0 => Part::Header(0),
                        left => Part::Payload(left, payload),
                    };
                }
                // The preface and the acknowledgement come before the line.
                Part::Preface(_) => {
                    out.extend_from_slice(bytes);
                    return;
                }
            }
        }
    }

    /// A whole header read: what comes next.
    fn framed(&mut self, retiring: &AtomicBool) -> Part {
        let (length, kind, flags, stream) = self.fields();
        if kind == HEADERS {
            self.highest_opened = self.highest_opened.max(stream);
        }
        let payload = if kind == PING
            && flags & ACK != 0
            && length == 8
            && retiring.load(Ordering::Acquire)
        {
            Payload::Ack(0)
        } else {
            Payload::Pass
        };
        match length {
            0 => Part::Header(0),
            length => Part::Payload(length, payload),
        }
    }

    /// The header's length, type, flags and stream id.
    fn fields(&self) -> (u32, u8, u8, u32) {
        let h = &self.header;
        let length = u32::from_be_bytes([0, h[0], h[1], h[2]]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        (length, h[3], h[4], stream)
    }
}

pin_project_lite::pin_project! {
    /// `io` as hyper's HTTP/2 server reads it, less the WINDOW_UPDATEs
    /// for streams the final GOAWAY refused (see the module's doc).
    pub(super) struct RefusedWindows<T> {
        #[pin]
        io: T,
        frames: Frames,
        retiring: Arc<AtomicBool>,
        // Bytes read past the line, filtered, not yet handed to h2.
        filtered: Vec<u8>,
    }
}

impl<T> RefusedWindows<T> {
    /// Wraps `io`; set `retiring` before the connection's first GOAWAY.
    pub(super) fn new(io: T, retiring: Arc<AtomicBool>) -> Self {
        Self {
            io,
            frames: Frames::new(),
            retiring,
            filtered: Vec::new(),
        }
    }
}

impl<T: AsyncRead> AsyncRead for RefusedWindows<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut this = self.project();
        loop {
            if !this.filtered.is_empty() {
                let n = this.filtered.len().min(buf.remaining());
                buf.put_slice(&this.filtered[..n]);
                this.filtered.drain(..n);
                return Poll::Ready(Ok(()));
            }
            let start = buf.filled().len();
            std::task::ready!(this.io.as_mut().poll_read(cx, buf))?;
            let read = &buf.filled()[start..];
            if read.is_empty() {
                // The end of the stream: a header held back is cut anyway.
                return Poll::Ready(Ok(()));
            }
            let kept = if this.frames.last_accepted.is_some() {
                0
            } else {
                match this.frames.pass(read, this.retiring) {
                    None => return Poll::Ready(Ok(())),
                    Some(kept) => kept,
                }
            };
            this.frames.filter(&read[kept..], this.filtered);
            buf.set_filled(start + kept);
            if kept > 0 {
                return Poll::Ready(Ok(()));
            }
            // Nothing kept yet (all dropped, or a header held back): an
            // empty read would look like the end, so read on.
        }
    }
}

impl<T: AsyncWrite> AsyncWrite for RefusedWindows<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
