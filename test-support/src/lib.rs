//! The processes and files sticky-routing's tests run against, shared by
//! the integration tests (`tests/api`, `tests/repo`), the library's unit
//! tests (`src/storage/scripts/tests.rs`) and the bench kit.
//!
//! - [`redis_server`], [`redis_cluster`], [`redis_sentinel`]: a real Redis
//!   per test, with the service's documented ACL users;
//! - [`fault_proxy`]: the network faults between the service and Redis;
//! - [`pki`]: private CAs and certificates made with openssl;
//! - [`signal`]: the one way a test sends a Unix signal to a process;
//! - [`wait`]: polling until a condition holds, with a deadline;
//! - [`repo`]: the repository's own files, for tests that check them.
//!
//! This crate does not depend on `sticky-routing`: the app helpers
//! (`spawn_app`, the test settings, the gRPC clients) stay in
//! `tests/api/support/`. A crate that depended on the service would be a
//! second build of it for every test binary that uses this one, and the
//! library's unit tests (a dev-dependency of the same package) would link two
//! copies of the library whose types do not match. Without that edge this
//! crate builds once, in parallel with the service, and the bench kit can use
//! it without pulling in the test-only parts of the service.

// A failed expectation in a harness should panic with its message: this
// crate only ever runs inside tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod fault_proxy;
pub mod pki;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_server;
pub mod repo;
pub mod signal;
pub mod wait;
