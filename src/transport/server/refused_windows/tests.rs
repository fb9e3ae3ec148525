//! The frame filter against byte streams cut at every place: what reaches
//! h2 is the client's bytes less exactly the WINDOW_UPDATEs above the line.

use super::*;

use tokio::io::AsyncReadExt;

const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut frame = vec![length[1], length[2], length[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

fn headers(stream: u32) -> Vec<u8> {
    // END_HEADERS; the block's content does not matter here.
    frame(HEADERS, 0x4, stream, &[0x83, 0x86])
}

fn data(stream: u32, bytes: usize) -> Vec<u8> {
    frame(0x0, 0x1, stream, &vec![7; bytes])
}

fn window_update(stream: u32) -> Vec<u8> {
    frame(WINDOW_UPDATE, 0, stream, &1_000u32.to_be_bytes())
}

fn ping_ack(payload: [u8; 8]) -> Vec<u8> {
    frame(PING, ACK, 0, &payload)
}

/// An IO that hands out `chunks` one per read, as a socket might.
struct Chunks(Vec<Vec<u8>>);

impl AsyncRead for Chunks {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(chunk) = self.0.first_mut() {
            let n = chunk.len().min(buf.remaining());
            buf.put_slice(&chunk[..n]);
            chunk.drain(..n);
            if chunk.is_empty() {
                self.0.remove(0);
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Chunks {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(b.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// What h2 reads of `parts` (concatenated), cut as `cuts` says, in reads
/// of at most `read_size` bytes.
async fn through(parts: &[Vec<u8>], cuts: &[usize], retiring: bool, read_size: usize) -> Vec<u8> {
    let bytes: Vec<u8> = parts.concat();
    let mut chunks = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain([&bytes.len()]) {
        if cut > from {
            chunks.push(bytes[from..cut].to_vec());
            from = cut;
        }
    }
    let flag = Arc::new(AtomicBool::new(retiring));
    let mut io = RefusedWindows::new(Chunks(chunks), flag);
    let mut seen = Vec::new();
    let mut buf = vec![0; read_size];
    loop {
        let n = io.read(&mut buf).await.unwrap();
        if n == 0 {
            return seen;
        }
        seen.extend_from_slice(&buf[..n]);
    }
}

/// The race of issue 42: stream 1 in flight, then the shutdown PING's
/// acknowledgement with a new stream 3's HEADERS, WINDOW_UPDATE and DATA.
fn race() -> Vec<Vec<u8>> {
    vec![
        PREFACE.to_vec(),
        frame(0x4, 0, 0, &[]),
        headers(1),
        window_update(1),
        data(1, 20),
        ping_ack(SHUTDOWN_PING),
        headers(3),
        window_update(3),
        data(3, 20),
        window_update(1),
        window_update(0),
        window_update(5),
        frame(0x3, 0, 3, &8u32.to_be_bytes()),
    ]
}

/// Every way of cutting `parts` in two or three, and byte by byte.
async fn for_every_cut(parts: &[Vec<u8>], retiring: bool, expected: &[u8]) {
    let len: usize = parts.iter().map(Vec::len).sum();
    for a in 0..len {
        for b in (a..len).step_by(7) {
            let seen = through(parts, &[a, b], retiring, 4096).await;
            assert_eq!(seen, expected, "cut at {a} and {b}");
        }
    }
    let every_byte: Vec<usize> = (1..len).collect();
    assert_eq!(through(parts, &every_byte, retiring, 4096).await, expected);
    for read_size in [1, 5, 9, 13] {
        assert_eq!(through(parts, &[], retiring, read_size).await, expected);
    }
}

#[tokio::test]
async fn after_the_acknowledgement_only_window_updates_above_the_line_are_dropped() {
    let parts = race();
    // Stream 3's and stream 5's WINDOW_UPDATEs go; everything else stays,
    // stream 3's HEADERS, DATA and RST_STREAM included.
    let expected: Vec<u8> = parts
        .iter()
        .filter(|part| **part != window_update(3) && **part != window_update(5))
        .flatten()
        .copied()
        .collect();
    for_every_cut(&parts, true, &expected).await;
}

#[tokio::test]
async fn nothing_is_dropped_on_a_connection_that_is_not_retiring() {
    let parts = race();
    for_every_cut(&parts, false, &parts.concat()).await;
}

/// A stream opened between the first GOAWAY and the acknowledgement is one
/// h2 accepted: its WINDOW_UPDATEs pass, before and after.
#[tokio::test]
async fn a_stream_opened_before_the_acknowledgement_keeps_its_window_updates() {
    let parts = vec![
        PREFACE.to_vec(),
        headers(1),
        headers(3),
        window_update(3),
        ping_ack(SHUTDOWN_PING),
        window_update(3),
        window_update(1),
        headers(5),
        window_update(5),
    ];
    let expected: Vec<u8> = parts[..parts.len() - 1].concat();
    for_every_cut(&parts, true, &expected).await;
}

/// Only the shutdown PING's acknowledgement draws the line: a keepalive's
/// does not, and streams opened after it are h2's like any other.
#[tokio::test]
async fn another_pings_acknowledgement_draws_no_line() {
    let parts = vec![
        PREFACE.to_vec(),
        headers(1),
        ping_ack([0x3b, 0x7c, 0xdb, 0x7a, 0x0b, 0x87, 0x16, 0xb4]),
        headers(3),
        window_update(3),
    ];
    for_every_cut(&parts, true, &parts.concat()).await;
}
