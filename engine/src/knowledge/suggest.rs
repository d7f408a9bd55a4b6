//! Concern suggestions for a task text: which concerns of the vocabulary a request such as
//! "rounding of multi-currency invoices is wrong" concerns, from a full-text ranking of the
//! chunks that carry them.
//!
//! The ranking itself (BM25 over the live chunks) is the adapters' discovery index; this module
//! only turns its hits into concerns, so the rule is pure and the same wherever it runs: a
//! concern's score is the sum of the scores of the matching chunks that carry it and apply to the
//! project (shared, or scoped to it); concerns already asked for are not suggested; ties are
//! broken by name.

use std::collections::BTreeMap;

use super::KnowledgeError;
use super::state::Knowledge;

/// Concerns one suggestion answer lists at most.
pub const SUGGESTIONS_MAX: usize = 10;
/// Chunks a suggestion names as its evidence at most.
pub const EVIDENCE_MAX: usize = 5;

/// One chunk the text matched, as the full-text index ranked it.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkHit<'a> {
    /// The chunk's slug.
    pub slug: &'a str,
    /// Its score (higher is closer).
    pub score: f32,
    /// The words of the text found in it, as the text wrote them.
    pub matched: &'a [String],
}

/// One suggested concern.
#[derive(Clone, Debug, PartialEq)]
pub struct Suggestion {
    /// The concern.
    pub concern: String,
    /// The summed score of the chunks that suggest it.
    pub score: f64,
    /// Those chunks, best first (at most [`EVIDENCE_MAX`]).
    pub chunks: Vec<String>,
    /// The words of the text they matched, in the order first seen, without repeats.
    pub matched: Vec<String>,
}

/// The concerns `hits` suggest for `project` (shared chunks only when `None`), best first, at
/// most [`SUGGESTIONS_MAX`], without those in `asked`. An unknown project is refused as
/// `get_knowledge` refuses it; hits on retired or unknown chunks are ignored.
pub fn concerns(
    k: &Knowledge,
    project: Option<&str>,
    asked: &[String],
    hits: &[ChunkHit<'_>],
) -> Result<Vec<Suggestion>, KnowledgeError> {
    if let Some(p) = project
        && !k.projects().any(|x| x == p)
    {
        return Err(k.unknown_project(p));
    }
    let mut by: BTreeMap<&str, Suggestion> = BTreeMap::new();
    for hit in hits {
        let Some(c) = k.chunk(hit.slug).filter(|c| !c.retired) else { continue };
        let applies = c.project_scope.is_empty() || project.is_some_and(|p| c.project_scope.iter().any(|s| s == p));
        if !applies {
            continue;
        }
        for concern in c.concerns.iter().filter(|x| !asked.contains(x)) {
            let s = by.entry(concern).or_insert_with(|| Suggestion {
                concern: concern.clone(),
                score: 0.0,
                chunks: Vec::new(),
                matched: Vec::new(),
            });
            s.score += f64::from(hit.score);
            if s.chunks.len() < EVIDENCE_MAX {
                s.chunks.push(c.slug.clone());
            }
            for w in hit.matched {
                if !s.matched.contains(w) {
                    s.matched.push(w.clone());
                }
            }
        }
    }
    let mut out: Vec<Suggestion> = by.into_values().collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.concern.cmp(&b.concern)));
    out.truncate(SUGGESTIONS_MAX);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use strata_journal::{Journal, projection::catch_up_state};

    use super::*;
    use crate::knowledge::{decide, fixture};
    use crate::ports::{CountingIds, FixedClock};

    /// The bundled example catalogue, declared and put into a journal in memory.
    fn example() -> Knowledge {
        let j = Journal::in_memory("strata.test/suggest").unwrap();
        let (mut ids, clock) = (CountingIds::new(1), FixedClock(0));
        let own = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        let declared = decide::declare(
            &Knowledge::default(),
            &own(&fixture::EXAMPLE_CONCERNS),
            &own(&fixture::EXAMPLE_PROJECTS),
            &mut ids,
            &clock,
        )
        .unwrap();
        j.append_multi_blocking(declared.into_iter().collect()).unwrap().unwrap();
        let mut k = Knowledge::default();
        catch_up_state(&mut k, &j).unwrap();
        let plan = decide::put(&k, &fixture::example(), &mut ids, &clock).unwrap();
        j.append_multi_blocking(plan.appends).unwrap().unwrap();
        catch_up_state(&mut k, &j).unwrap();
        k
    }

    #[test]
    fn scores_sum_per_concern_ties_go_by_name_and_asked_concerns_are_left_out() {
        let k = example();
        let mut live = k.chunks().filter(|c| !c.retired && c.project_scope.is_empty());
        let (a, b) = (live.next().unwrap(), live.next().unwrap());
        let words = vec!["rounding".to_owned()];
        let hits = [
            ChunkHit { slug: &a.slug, score: 2.0, matched: &words },
            ChunkHit { slug: &b.slug, score: 1.0, matched: &words },
        ];
        let got = concerns(&k, None, &[], &hits).unwrap();
        for s in &got {
            let want: f64 =
                [(a, 2.0), (b, 1.0)].iter().filter(|(c, _)| c.concerns.contains(&s.concern)).map(|(_, w)| *w).sum();
            assert_eq!(s.score, want, "{}", s.concern);
            assert_eq!(s.matched, words);
        }
        assert!(
            got.windows(2)
                .all(|w| w[0].score > w[1].score || (w[0].score == w[1].score && w[0].concern < w[1].concern))
        );
        let first = got[0].concern.clone();
        let without = concerns(&k, None, std::slice::from_ref(&first), &hits).unwrap();
        assert!(without.iter().all(|s| s.concern != first));
        assert_eq!(without.len() + 1, got.len());
    }

    #[test]
    fn a_chunk_scoped_to_another_project_suggests_nothing_and_an_unknown_project_is_refused() {
        let k = example();
        let Some(scoped) = k.chunks().find(|c| !c.retired && !c.project_scope.is_empty()) else {
            panic!("the example catalogue has a project-scoped chunk");
        };
        let hits = [ChunkHit { slug: &scoped.slug, score: 1.0, matched: &[] }];
        assert!(concerns(&k, None, &[], &hits).unwrap().is_empty());
        let own = scoped.project_scope[0].clone();
        assert!(!concerns(&k, Some(&own), &[], &hits).unwrap().is_empty());
        let e = concerns(&k, Some("no-such-project"), &[], &hits).unwrap_err();
        assert!(e.to_string().contains("STRATA-E1003"), "{e}");
    }
}
