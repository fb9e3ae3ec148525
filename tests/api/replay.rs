//! `sticky-routing replay` (contract v1.2 §5): the real binary and the
//! replay library, against the running service, an independent model and
//! hand-computed histories. Its harness is `support::replay` and
//! `support::replay_model`.

mod bad_rows;
mod filters;
mod input;
mod model;
mod report;
mod rules;
mod service;
