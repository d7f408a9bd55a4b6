//! Learned routing: what the serve log and the session outcomes say about the chunks.
//!
//! * **Merge candidates**: pairs of chunks served together, with support (share of serves holding
//!   both), confidence each way (share of A's serves that also hold B) and lift (how much more
//!   often than chance). A pair is a candidate when both confidences reach the threshold (the seed:
//!   "together 90% of the time").
//! * **Removal candidates**: live chunks not served for N days (and older than N days).
//! * **Review candidates**: chunks whose sessions fail more often than sessions without them, with
//!   the counts and a one-sided Fisher exact test p-value (a small p-value: unlikely by chance).
//! * **Bundle candidates**: the most frequent requested concern combinations.
//! * **Replay**: for any proposal (remove some chunks, merge some pairs), what every logged serve
//!   would have received instead: tokens saved, and the sessions that would have lost a chunk they
//!   used (a session "used" a chunk when it was served the chunk and its outcome was success).
//!
//! Everything is computed from the projection and the parameters; "now" is a parameter, never
//! read from a clock.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::state::Knowledge;

const DAY_NS: i64 = 86_400_000_000_000;

/// What to analyse.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// Only serves recorded at or after this instant (ns).
    pub since_ns: Option<i64>,
    /// The instant "not served in N days" is measured from (ns).
    pub now_ns: i64,
    /// N for removal candidates.
    pub unused_days: u32,
    /// Fewest co-serves (merge) or queries (bundles) to report.
    pub min_support: u32,
    /// Fewest sessions with an outcome that received a chunk, to judge it (review).
    pub min_sessions: u32,
    /// Both confidences at least this make a pair a merge candidate.
    pub merge_confidence: f64,
    /// A review candidate's p-value is below this.
    pub alpha: f64,
}

impl Params {
    /// Defaults: 30 days, support 3, 5 sessions, confidence 0.9, alpha 0.05.
    pub fn at(now_ns: i64) -> Params {
        Params {
            since_ns: None,
            now_ns,
            unused_days: 30,
            min_support: 3,
            min_sessions: 5,
            merge_confidence: 0.9,
            alpha: 0.05,
        }
    }
}

/// A proposal to replay.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Proposal {
    /// Chunks removed.
    pub remove: Vec<String>,
    /// Pairs merged into one chunk (its tokens the sum of both).
    pub merge: Vec<(String, String)>,
}

/// What a proposal would have changed over the logged serves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Replay {
    /// Serves whose answer would differ.
    pub serves_changed: u64,
    /// Tokens served, as logged.
    pub tokens_before: u64,
    /// Tokens that would have been served.
    pub tokens_after: u64,
    /// `before - after` (negative: the proposal serves more).
    pub tokens_saved: i64,
    /// Sessions with outcome success that were served a removed chunk.
    pub sessions_losing_a_used_chunk: Vec<String>,
}

/// A merge candidate (or a near one).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pair {
    /// First slug.
    pub a: String,
    /// Second slug.
    pub b: String,
    /// Serves holding both.
    pub together: u64,
    /// Serves holding `a`.
    pub a_serves: u64,
    /// Serves holding `b`.
    pub b_serves: u64,
    /// `together / serves`.
    pub support: f64,
    /// `together / a_serves`.
    pub confidence_a_to_b: f64,
    /// `together / b_serves`.
    pub confidence_b_to_a: f64,
    /// `support / (P(a) P(b))`.
    pub lift: f64,
    /// Both confidences reach the threshold.
    pub candidate: bool,
    /// Merging them, replayed.
    pub replay: Replay,
}

/// A removal candidate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unused {
    /// Slug.
    pub slug: String,
    /// Last serve (ns), if ever.
    pub last_served_ns: Option<i64>,
    /// Whole days since the last serve (or since the current version, if never served).
    pub days_unused: i64,
    /// Tokens.
    pub tokens: u32,
    /// Removing it, replayed.
    pub replay: Replay,
}

/// A review candidate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Review {
    /// Slug.
    pub slug: String,
    /// Sessions with an outcome that were served it.
    pub sessions_served: u64,
    /// Of those, failures.
    pub failures_served: u64,
    /// Sessions with an outcome that were not.
    pub sessions_other: u64,
    /// Of those, failures.
    pub failures_other: u64,
    /// Failure rates.
    pub failure_rate_served: f64,
    /// Failure rates.
    pub failure_rate_other: f64,
    /// One-sided Fisher exact test: P(at least this many failures among its sessions by chance).
    pub p_value: f64,
    /// `p_value < alpha`.
    pub candidate: bool,
}

/// A bundle candidate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bundle {
    /// The concern combination, sorted.
    pub concerns: Vec<String>,
    /// Queries with exactly this combination.
    pub queries: u64,
    /// Share of all serves.
    pub share: f64,
    /// Chunks served for it, by how often.
    pub chunks: Vec<(String, u64)>,
}

/// The whole analysis.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Insights {
    /// Serves analysed.
    pub serves: u64,
    /// Sessions among them.
    pub sessions: u64,
    /// Sessions with an outcome.
    pub sessions_with_outcome: u64,
    /// Pairs served together at least `min_support` times, best first.
    pub merge: Vec<Pair>,
    /// Chunks not served for `unused_days`.
    pub removal: Vec<Unused>,
    /// Chunks judged on `min_sessions` or more sessions, most suspicious first.
    pub review: Vec<Review>,
    /// Frequent concern combinations.
    pub bundles: Vec<Bundle>,
    /// Every merge candidate and every removal candidate together, replayed.
    pub proposal: Proposal,
    /// Its replay.
    pub proposal_replay: Replay,
}

fn in_window(p: &Params, at: i64) -> bool {
    p.since_ns.is_none_or(|s| at >= s)
}

/// Replays `proposal` over the serves in the window.
pub fn replay(k: &Knowledge, p: &Params, proposal: &Proposal) -> Replay {
    let removed: BTreeSet<&str> = proposal.remove.iter().map(String::as_str).collect();
    let mut merged_into: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, (a, b)) in proposal.merge.iter().enumerate() {
        merged_into.insert(a, i);
        merged_into.insert(b, i);
    }
    let tokens_of = |slug: &str| k.chunk(slug).map_or(0, |c| u64::from(c.tokens));
    let mut r = Replay::default();
    let mut losing: BTreeSet<String> = BTreeSet::new();
    for s in k.serves().iter().filter(|s| in_window(p, s.at_ns)) {
        let before: u64 = s.chunks.iter().map(|c| u64::from(c.2)).sum();
        let mut after = 0u64;
        let mut merges_served: BTreeSet<usize> = BTreeSet::new();
        let mut changed = false;
        for (slug, _, tokens) in &s.chunks {
            if removed.contains(slug.as_str()) {
                changed = true;
                if let Some(sess) = &s.session
                    && k.session(sess).and_then(|x| x.outcome.as_ref()).is_some_and(|(o, _)| o == "success")
                {
                    losing.insert(sess.clone());
                }
                continue;
            }
            match merged_into.get(slug.as_str()) {
                Some(&m) => {
                    if merges_served.insert(m) {
                        let (a, b) = &proposal.merge[m];
                        after += tokens_of(a) + tokens_of(b);
                        changed |= !(s.chunks.iter().any(|c| &c.0 == a) && s.chunks.iter().any(|c| &c.0 == b));
                    }
                }
                None => after += u64::from(*tokens),
            }
        }
        r.tokens_before += before;
        r.tokens_after += after;
        r.serves_changed += u64::from(changed);
    }
    r.tokens_saved = r.tokens_before as i64 - r.tokens_after as i64;
    r.sessions_losing_a_used_chunk = losing.into_iter().collect();
    r
}

/// `ln(n!)` for `n` in `0..=max`.
fn ln_factorials(max: usize) -> Vec<f64> {
    let mut v = vec![0.0f64; max + 1];
    for i in 1..=max {
        v[i] = v[i - 1] + (i as f64).ln();
    }
    v
}

/// One-sided Fisher exact test: P(X ≥ x) for X hypergeometric (population `n`, `successes`
/// marked, `draws` drawn).
pub fn fisher_upper(x: u64, draws: u64, successes: u64, n: u64) -> f64 {
    let lf = ln_factorials(n as usize);
    let ln_choose = |a: u64, b: u64| lf[a as usize] - lf[b as usize] - lf[(a - b) as usize];
    let hi = draws.min(successes);
    let lo = draws.saturating_sub(n - successes);
    let mut p = 0.0;
    for i in x.max(lo)..=hi {
        p += (ln_choose(successes, i) + ln_choose(n - successes, draws - i) - ln_choose(n, draws)).exp();
    }
    p.min(1.0)
}

/// Analyses the serve log.
pub fn analyse(k: &Knowledge, p: &Params) -> Insights {
    let serves: Vec<_> = k.serves().iter().filter(|s| in_window(p, s.at_ns)).collect();
    let n = serves.len() as u64;
    // Co-serves.
    let mut single: BTreeMap<&str, u64> = BTreeMap::new();
    let mut pairs: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut combos: BTreeMap<Vec<String>, (u64, BTreeMap<&str, u64>)> = BTreeMap::new();
    let mut sessions: BTreeSet<&str> = BTreeSet::new();
    let mut served_in: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for s in &serves {
        let mut slugs: Vec<&str> = s.chunks.iter().map(|c| c.0.as_str()).collect();
        slugs.sort_unstable();
        slugs.dedup();
        for (i, a) in slugs.iter().enumerate() {
            *single.entry(a).or_default() += 1;
            for b in &slugs[i + 1..] {
                *pairs.entry((a, b)).or_default() += 1;
            }
        }
        if s.concerns.len() >= 2 {
            let e = combos.entry(s.concerns.clone()).or_default();
            e.0 += 1;
            for slug in &slugs {
                *e.1.entry(slug).or_default() += 1;
            }
        }
        if let Some(sess) = &s.session {
            sessions.insert(sess);
            for slug in &slugs {
                served_in.entry(slug).or_default().insert(sess);
            }
        }
    }
    let mut merge: Vec<Pair> = pairs
        .iter()
        .filter(|(_, t)| **t >= u64::from(p.min_support))
        .map(|(&(a, b), &t)| {
            let (na, nb) = (single[a], single[b]);
            let (ca, cb) = (t as f64 / na as f64, t as f64 / nb as f64);
            let support = t as f64 / n as f64;
            let lift = support / ((na as f64 / n as f64) * (nb as f64 / n as f64));
            let proposal = Proposal { remove: vec![], merge: vec![(a.to_owned(), b.to_owned())] };
            Pair {
                a: a.to_owned(),
                b: b.to_owned(),
                together: t,
                a_serves: na,
                b_serves: nb,
                support,
                confidence_a_to_b: ca,
                confidence_b_to_a: cb,
                lift,
                candidate: ca.min(cb) >= p.merge_confidence,
                replay: replay(k, p, &proposal),
            }
        })
        .collect();
    merge.sort_by(|x, y| {
        let kx = x.confidence_a_to_b.min(x.confidence_b_to_a);
        let ky = y.confidence_a_to_b.min(y.confidence_b_to_a);
        ky.total_cmp(&kx).then(y.together.cmp(&x.together)).then((&x.a, &x.b).cmp(&(&y.a, &y.b)))
    });
    merge.truncate(50);

    // Removal: the last serve of each chunk over the whole log (not only the window).
    let mut last: BTreeMap<&str, i64> = BTreeMap::new();
    for s in k.serves() {
        for c in &s.chunks {
            let e = last.entry(c.0.as_str()).or_insert(s.at_ns);
            *e = (*e).max(s.at_ns);
        }
    }
    let horizon = i64::from(p.unused_days) * DAY_NS;
    let mut removal: Vec<Unused> = k
        .chunks()
        .filter(|c| !c.retired && p.now_ns - c.updated_ns >= horizon)
        .filter_map(|c| {
            let since = last.get(c.slug.as_str()).copied();
            let idle = p.now_ns - since.unwrap_or(c.updated_ns);
            (idle >= horizon).then(|| Unused {
                slug: c.slug.clone(),
                last_served_ns: since,
                days_unused: idle / DAY_NS,
                tokens: c.tokens,
                replay: replay(k, p, &Proposal { remove: vec![c.slug.clone()], merge: vec![] }),
            })
        })
        .collect();
    removal.sort_by(|x, y| y.days_unused.cmp(&x.days_unused).then(x.slug.cmp(&y.slug)));

    // Review: sessions with an outcome, in the window.
    let judged: BTreeMap<&str, bool> = sessions
        .iter()
        .filter_map(|s| k.session(s).and_then(|x| x.outcome.as_ref()).map(|(o, _)| (*s, o == "failure")))
        .collect();
    let total = judged.len() as u64;
    let failures = judged.values().filter(|f| **f).count() as u64;
    let mut review: Vec<Review> = served_in
        .iter()
        .filter_map(|(slug, ss)| {
            let with: Vec<bool> = ss.iter().filter_map(|s| judged.get(s).copied()).collect();
            let n1 = with.len() as u64;
            if n1 < u64::from(p.min_sessions) || n1 == total {
                return None;
            }
            let f1 = with.iter().filter(|f| **f).count() as u64;
            let (n0, f0) = (total - n1, failures - f1);
            let (r1, r0) = (f1 as f64 / n1 as f64, f0 as f64 / n0 as f64);
            let pv = fisher_upper(f1, n1, failures, total);
            Some(Review {
                slug: (*slug).to_owned(),
                sessions_served: n1,
                failures_served: f1,
                sessions_other: n0,
                failures_other: f0,
                failure_rate_served: r1,
                failure_rate_other: r0,
                p_value: pv,
                candidate: r1 > r0 && pv < p.alpha,
            })
        })
        .collect();
    review.sort_by(|x, y| x.p_value.total_cmp(&y.p_value).then(x.slug.cmp(&y.slug)));

    let mut bundles: Vec<Bundle> = combos
        .into_iter()
        .filter(|(_, (q, _))| *q >= u64::from(p.min_support))
        .map(|(concerns, (queries, chunks))| {
            let mut chunks: Vec<(String, u64)> = chunks.into_iter().map(|(s, c)| (s.to_owned(), c)).collect();
            chunks.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            Bundle { concerns, queries, share: queries as f64 / n.max(1) as f64, chunks }
        })
        .collect();
    bundles.sort_by(|a, b| b.queries.cmp(&a.queries).then(a.concerns.cmp(&b.concerns)));
    bundles.truncate(20);

    let proposal = Proposal {
        remove: removal.iter().map(|u| u.slug.clone()).collect(),
        merge: merge.iter().filter(|m| m.candidate).map(|m| (m.a.clone(), m.b.clone())).collect(),
    };
    let proposal_replay = replay(k, p, &proposal);
    Insights {
        serves: n,
        sessions: sessions.len() as u64,
        sessions_with_outcome: total,
        merge,
        removal,
        review,
        bundles,
        proposal,
        proposal_replay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fisher_matches_known_values() {
        // 2x2 table [[3, 1], [1, 3]]: one-sided p = 0.2429 (population 8, 4 failures, 4 drawn).
        let p = fisher_upper(3, 4, 4, 8);
        assert!((p - 0.242_857).abs() < 1e-5, "{p}");
        // Everything drawn fails and nothing else does: [[5, 0], [0, 5]], p = 1/252.
        let p = fisher_upper(5, 5, 5, 10);
        assert!((p - 1.0 / 252.0).abs() < 1e-9, "{p}");
        assert!((fisher_upper(0, 3, 2, 6) - 1.0).abs() < 1e-12);
    }
}
