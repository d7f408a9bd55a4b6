//! Promotion of a routing policy: the statistics behind the gates ([`stats`]). The gates, the
//! evaluator and the signed measurement envelope build on it.

pub mod stats;
