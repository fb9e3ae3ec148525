//! `sticky-routing replay` (contract v1.2 §5): the real binary and the
//! replay library, against the running service. Its harness is
//! `support::replay`.

mod service;
