//! Synthetic pairs for a corpus: a seeded cost, wall-time and quality model per routing mode, so
//! the whole evaluation pipeline can be exercised without a provider. Every pair is marked
//! `synthetic` (not empirical, not authorised), so the provenance gate fails and they never
//! promote, whatever the statistical gates say. Its costs are amounts (micro-units), and the
//! document says so (`cost_basis: "amount"`).

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

use super::corpus::Corpus;
use super::pairs::{ArmDoc, CorpusRef, CostBasis, PairDoc, PairsDoc, Provenance, SCHEMA};

/// Candidate-to-baseline cost and wall-time ratios by the mode the oracle expects: cheaper
/// where routing keeps work local or reuses context, near parity for teams.
fn ratios(mode: &str) -> (f64, f64) {
    match mode {
        "local" => (0.35, 0.45),
        "resume" => (0.55, 0.6),
        "inherit-recent" => (0.6, 0.7),
        "inherit-full" => (0.7, 0.75),
        "coordinated-team" => (0.95, 0.7),
        _ => (0.75, 0.85),
    }
}

/// A uniform draw in [0, 1) from the top 53 bits.
fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// `x` scaled by e^(spread·(u − ½)), u uniform: multiplicative noise around 1.
fn jitter(rng: &mut ChaCha8Rng, x: f64, spread: f64) -> f64 {
    x * (spread * (unit(rng) - 0.5)).exp()
}

/// Synthetic pairs for every task of `corpus` (digest `corpus_digest`), from `seed`.
pub fn synthesize(corpus: &Corpus, corpus_digest: &str, seed: u64) -> PairsDoc {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..].copy_from_slice(&b"strata synthetic pairs v1 ......"[..24]);
    let mut rng = ChaCha8Rng::from_seed(key);
    let pairs = corpus
        .tasks
        .iter()
        .map(|t| {
            let (cost_ratio, wall_ratio) = ratios(&t.oracle.mode);
            let base_cost = jitter(&mut rng, 400_000.0, 2.0).round().max(1.0);
            let base_wall = jitter(&mut rng, 90_000.0, 1.5).round().max(1.0);
            let cand_cost = jitter(&mut rng, base_cost * cost_ratio, 0.4).round().max(1.0);
            let cand_wall = jitter(&mut rng, base_wall * wall_ratio, 0.4).round().max(1.0);
            let quality = (80.0 + 15.0 * unit(&mut rng)).round();
            let arm = |rng: &mut ChaCha8Rng, cost: f64, wall: f64, quality: f64| ArmDoc {
                cost_micros: cost as u64,
                wall_ms: wall as u64,
                quality,
                rework: (rng.next_u64() % 3) as u32,
                findings: vec![],
                telemetry_cost_micros: Some(jitter(rng, cost, 0.02).round() as u64),
            };
            let baseline = arm(&mut rng, base_cost, base_wall, quality);
            let cand_quality = (quality + 4.0 * unit(&mut rng) - 1.5).clamp(0.0, 100.0).round();
            let candidate = arm(&mut rng, cand_cost, cand_wall, cand_quality);
            PairDoc {
                task_id: t.id.clone(),
                stratum: t.stratum.clone(),
                provenance: Provenance { kind: "synthetic".into(), empirical: false, promotion_authorized: false },
                baseline,
                candidate,
            }
        })
        .collect();
    PairsDoc {
        schema: SCHEMA.to_owned(),
        corpus: CorpusRef {
            name: corpus.name.clone(),
            version: corpus.version.clone(),
            digest: corpus_digest.to_owned(),
        },
        // The model's costs are amounts: around 0.4 currency units a baseline task.
        cost_basis: Some(CostBasis::Amount),
        pairs,
    }
}
