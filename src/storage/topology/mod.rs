//! The connections and what is known of each node: which Redis the calls
//! go to ([`Backend`]: one node, the primary behind Sentinel, or a
//! Cluster's primaries), each node's request and background lanes
//! (`lanes.rs`), every fred client the layer builds
//! (`connect.rs`), and the background work that keeps each node's state
//! (`guard.rs`): the slot table, the Sentinel watch and the memory poll.
//!
//! Arrows inside: `backend` → `cluster`, `sentinel_watch`, `connect`,
//! `guard`, `lanes`; `cluster` → `connect`, `guard`, `lanes`; `lanes` →
//! `connect`; `memory_watch` → `backend`;
//! `sentinel_watch` → `connect`; `guard` → `connect`. Nothing here runs a
//! call for a caller: that is `exec/`.

mod backend;
mod cluster;
mod connect;
mod guard;
mod lanes;
mod memory_watch;
mod sentinel_watch;

pub(super) use backend::Backend;
pub(super) use cluster::{Cluster, Node};
pub(super) use connect::{scan_client, spawn_until_stopped};
pub(super) use guard::NodeGuard;
#[cfg(test)]
pub(crate) use lanes::BACKGROUND_MIN_SLOTS;
pub(super) use lanes::{Lane, Lanes};
pub(super) use memory_watch::watch as watch_memory;
pub(super) use sentinel_watch::SentinelWatch;
