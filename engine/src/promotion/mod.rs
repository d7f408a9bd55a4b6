//! Promotion of a routing policy: the statistics behind the gates ([`stats`]), the gates over a
//! paired evaluation ([`gates`]), the rollout stages ([`stages`]), the evaluation corpus
//! ([`corpus`]) and measured pairs ([`pairs`]), the signed measurement envelope ([`envelope`]) and
//! the whole evaluation with its provenance gate ([`promote`]).

pub mod corpus;
pub mod envelope;
pub mod gates;
pub mod pairs;
pub mod promote;
pub mod rollout;
pub mod stages;
pub mod stats;
pub mod synthetic;
