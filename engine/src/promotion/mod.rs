//! Promotion of a routing policy: the statistics behind the gates ([`stats`]) and the gates over
//! a paired evaluation ([`gates`]). The signed measurement envelope and the command line build
//! on them.

pub mod gates;
pub mod stages;
pub mod stats;
