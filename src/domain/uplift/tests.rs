//! Tests of the uplift arithmetic.
