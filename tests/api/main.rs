//! Integration tests: the real service on port 0 against a real
//! `redis-server`, called over gRPC. One binary, so it links once.

// A failed expectation in a test should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod admission;
mod admission_memory;
mod bad_input;
mod bulk_fail_fast;
mod concurrency;
mod connections;
mod deploy_files;
mod dockerfile;
mod exactly_once;
mod export;
mod failover;
mod fault_proxy;
mod faults;
mod frames;
mod get_pin;
mod grpc_tls;
mod habits;
mod health;
mod health_veto;
mod held_calls;
mod helpers;
mod import;
mod import_exact;
mod import_failures;
mod import_progress;
mod import_stops;
mod least_privilege;
mod load;
mod loadtest_recipes;
mod monitoring;
mod observability;
mod overload;
mod permissions;
mod pki;
mod priorities;
mod record_outcome;
mod redis_cluster;
mod redis_sentinel;
mod redis_server;
mod shutdown;
mod telemetry;
mod tls;
