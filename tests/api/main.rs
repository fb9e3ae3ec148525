//! Integration tests: the real service on port 0 against a real
//! `redis-server`, called over gRPC. One binary, so it links once.

// A failed expectation in a test should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The app harness (spawn_app, the bulk commands, the wire, the load); the
// processes it runs come from the test-support crate.
mod support;

mod admission;
mod admission_memory;
mod bad_input;
mod breaker;
mod breaker_off;
mod bulk_fail_fast;
mod bulk_tenants;
mod concurrency;
mod connections;
mod exactly_once;
mod experiment;
mod experiment_log;
mod export;
mod failover;
mod faults;
mod get_pin;
mod goaway_race;
mod grpc_tls;
mod habits;
mod health;
mod health_veto;
mod import;
mod import_exact;
mod import_failures;
mod import_progress;
mod import_stops;
mod least_privilege;
mod observability;
mod overload;
mod permissions;
mod priorities;
mod real_clients;
mod record_outcome;
mod replay;
mod rollout;
mod shutdown;
mod telemetry;
mod tenants;
mod tls;
