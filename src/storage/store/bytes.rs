//! The little-endian byte helpers the counts logs' frames share (the
//! breaker's, `breaker/log.rs`, and the experiment's, `experiment/log.rs`):
//! length-prefixed ids and a cursor that reads them back.

pub(super) fn put_u16(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u16::try_from(n).unwrap_or(u16::MAX).to_le_bytes());
}

pub(super) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Every id this service keeps is far shorter than u16::MAX (64 bytes
    // a tenant or connector, 128 a merchant).
    put_u16(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// Reads a frame's body front to back; every read is `None` past its end.
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    pub(super) fn done(&self) -> bool {
        self.at >= self.bytes.len()
    }

    pub(super) fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let bytes = self.bytes.get(self.at..self.at + N)?.try_into().ok()?;
        self.at += N;
        Some(bytes)
    }

    pub(super) fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }

    pub(super) fn text(&mut self) -> Option<&'a str> {
        let len = usize::from(self.u16()?);
        let bytes = self.bytes.get(self.at..self.at + len)?;
        self.at += len;
        std::str::from_utf8(bytes).ok()
    }
}
