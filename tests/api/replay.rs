//! `sticky-routing replay` (contract v1.2 §5): the real binary and the
//! replay library, against the running service and an independent model.
//! Its harness is `support::replay` and `support::replay_model`.

mod model;
mod service;
