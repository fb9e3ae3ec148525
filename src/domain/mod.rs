//! The sticky-routing rules as pure logic: no I/O, no Redis, no gRPC.
//!
//! Everything here is deterministic and cheap to test exhaustively; the
//! storage layer either calls these functions or runs a Lua mirror of them
//! that a property test holds equal to them (see `src/storage/scripts/tests.rs`).

pub mod admission;
pub mod attempts;
pub mod breaker;
pub mod combo;
pub mod counts;
pub mod customer_hash;
pub mod habits;
pub mod ids;
pub mod import_mark;
pub mod keys;
pub mod memory_guard;
pub mod percent;
pub mod pin;
pub mod priority;
pub mod prune;
pub mod rollout;
pub mod rules;
pub mod shards;
pub mod tenant;
pub mod text;
pub mod uplift;

pub use ids::InvalidInput;
pub use rules::Rules;
