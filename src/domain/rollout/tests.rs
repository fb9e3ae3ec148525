//! Tests of the rollout rules.
