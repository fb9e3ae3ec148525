//! Repository checks: the files that ship beside the code (the Dockerfile,
//! `deploy/`, `deploy/monitoring/`, the ghz recipes) held to the code and
//! to each other. No Redis and no server, so they run in a second or two,
//! apart from the integration tests in `tests/api`.

// A failed expectation in a test should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod deploy_files;
mod dockerfile;
mod loadtest_recipes;
mod monitoring;
