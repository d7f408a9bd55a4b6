//! A plan task's `request` in place of `specs`: the run's preflight ranks the knowledge base for
//! the request's text (the edge's full-text index, `strata discover`), and [`choose`] picks the
//! specifications the task then follows. The candidates, their scores and the choice are kept on
//! the task as recorded ([`Discovered`]), the evidence `audit run` and the plan event carry.

use serde::{Deserialize, Serialize};

/// Longest `request`, bytes.
pub const REQUEST_BYTES_MAX: usize = 2_000;
/// Candidates kept as evidence, at most.
pub const CANDIDATES_MAX: usize = 10;
/// Specifications chosen, at most.
pub const CHOSEN_MAX: usize = 3;
/// A specification is chosen only when its score is at least this share of the best one's,
/// percent.
pub const SCORE_SHARE_MIN_PERCENT: u64 = 50;

/// The specification kinds a request is resolved to (not entities, change requests or chunks).
pub const SPEC_KINDS: [&str; 4] = ["brd-requirement", "functional-domain", "backend-module", "ui-screen"];

/// One ranked candidate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    /// 1-based rank in the discovery.
    pub rank: u32,
    /// Its kind (`brd-requirement`, …).
    pub kind: String,
    /// Its id.
    pub id: String,
    /// BM25 score, thousandths.
    pub score_milli: u64,
    /// The request's words found in it.
    pub matched: Vec<String>,
}

/// What discovery found for a task and what was chosen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Discovered {
    /// The journal position the index was built at.
    pub seq: u64,
    /// The specification candidates, best first.
    pub candidates: Vec<Candidate>,
    /// The specifications chosen (the task's `specs`).
    pub chosen: Vec<String>,
}

/// The specifications of `candidates` (best first) a request resolves to: at most
/// [`CHOSEN_MAX`], each matching a word of the request and scoring at least
/// [`SCORE_SHARE_MIN_PERCENT`] of the best specification's score.
pub fn choose(candidates: &[Candidate]) -> Vec<String> {
    let specs: Vec<&Candidate> =
        candidates.iter().filter(|c| SPEC_KINDS.contains(&c.kind.as_str()) && !c.matched.is_empty()).collect();
    let Some(best) = specs.first().map(|c| c.score_milli) else { return Vec::new() };
    specs
        .iter()
        .filter(|c| c.score_milli.saturating_mul(100) >= best.saturating_mul(SCORE_SHARE_MIN_PERCENT))
        .take(CHOSEN_MAX)
        .map(|c| c.id.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(rank: u32, kind: &str, id: &str, score: u64, matched: &[&str]) -> Candidate {
        Candidate {
            rank,
            kind: kind.into(),
            id: id.into(),
            score_milli: score,
            matched: matched.iter().map(|m| (*m).to_owned()).collect(),
        }
    }

    #[test]
    fn specifications_near_the_best_are_chosen_in_rank_order_and_nothing_else() {
        let found = [
            c(1, "entity", "billing", 9_000, &["invoice"]),
            c(2, "brd-requirement", "BRD-1.2", 8_000, &["invoice", "rounding"]),
            c(3, "chunk", "style", 7_900, &["rounding"]),
            c(4, "backend-module", "billing-api", 4_100, &["invoice"]),
            c(5, "ui-screen", "billing-screen-1", 3_900, &["invoice"]),
            c(6, "functional-domain", "billing-domain-1", 4_000, &[]),
        ];
        assert_eq!(choose(&found), ["BRD-1.2", "billing-api"]);
        assert!(choose(&found[..1]).is_empty(), "an entity alone resolves to no specification");
        let many: Vec<Candidate> = (1..=6).map(|i| c(i, "brd-requirement", &format!("BRD-{i}"), 100, &["x"])).collect();
        assert_eq!(choose(&many).len(), CHOSEN_MAX);
    }
}
