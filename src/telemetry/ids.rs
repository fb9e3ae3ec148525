//! The ids a log line about a call carries, to find the call elsewhere: its
//! trace id, and the caller's `x-request-id` and `x-tenant-id`.

use tonic::metadata::MetadataMap;
use tracing::Span;

use super::traces;

/// At most this many bytes of a caller's id reach a log line, so that a
/// caller cannot make one line arbitrarily long.
const MAX_ID_BYTES: usize = 128;

/// A call's ids for its log lines; each is absent when the call has none.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CallIds {
    pub trace_id: Option<String>,
    pub request_id: Option<String>,
    pub tenant_id: Option<String>,
}

impl CallIds {
    /// Read when a line is about to be written, never for a call that
    /// logs nothing.
    pub fn of(span: &Span, metadata: &MetadataMap) -> Self {
        let header = |name: &str| {
            let value = metadata.get(name)?.to_str().ok()?.trim();
            // Visible ASCII (`to_str` checked it), so any cut is on a
            // character boundary.
            let value = &value[..value.len().min(MAX_ID_BYTES)];
            (!value.is_empty()).then(|| value.to_owned())
        };
        Self {
            trace_id: traces::trace_id(span, metadata).map(|id| id.to_string()),
            request_id: header("x-request-id"),
            tenant_id: header("x-tenant-id"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_from_the_metadata_and_are_bounded() {
        let mut metadata = MetadataMap::new();
        metadata.insert("x-request-id", "req-1".parse().unwrap());
        metadata.insert("x-tenant-id", "x".repeat(500).parse().unwrap());
        metadata.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                .parse()
                .unwrap(),
        );
        let ids = CallIds::of(&Span::none(), &metadata);
        assert_eq!(ids.request_id.as_deref(), Some("req-1"));
        assert_eq!(ids.tenant_id.map(|t| t.len()), Some(MAX_ID_BYTES));
        assert_eq!(
            ids.trace_id.as_deref(),
            Some("0af7651916cd43dd8448eb211c80319c")
        );
        assert_eq!(
            CallIds::of(&Span::none(), &MetadataMap::new()),
            CallIds::default()
        );
    }
}
