//! `strata discover "TEXT"`: which entities, specifications and knowledge chunks a request
//! concerns, ranked by a BM25 index of the journal at a position (the approximate phase before
//! the exact traversal of `strata graph impact`).

use std::process::ExitCode;

use serde_json::json;
use strata_engine::kb::discover::documents;
use strata_engine::kb::graph::Graph;
use strata_engine::knowledge::state::Knowledge;
use strata_journal::Journal;
use strata_journal::projection::{Projection, catch_up_state};

use crate::app::kb::load_graph;
use crate::app::workspace::Workspace;
use crate::discover::{Discovery, Hit};
use crate::table::Table;

/// The index of the journal's documents as of `at` (the head when `None`).
pub fn index_at(journal: &Journal, at: Option<u64>) -> anyhow::Result<Discovery> {
    let head = journal.head().seq;
    let (g, k, seq) = match at {
        Some(seq) if seq > head => {
            anyhow::bail!("[STRATA-E2505] --at {seq} is past the journal head {head}; pass a sequence up to {head}")
        }
        Some(seq) => {
            let (mut g, mut k) = (Graph::new(), Knowledge::default());
            let r = journal
                .scan(1, seq, |rec, _| {
                    g.apply_record(rec)?;
                    k.apply(rec).map(|()| true)
                })
                .map_err(|e| anyhow::anyhow!(e.to_string()))?;
            r.map_err(|e| anyhow::anyhow!("replay to {seq} failed: {e}"))?;
            (g, k, seq)
        }
        None => {
            let g = load_graph(journal)?;
            let mut k = Knowledge::default();
            catch_up_state(&mut k, journal)?;
            (g, k, head)
        }
    };
    Ok(Discovery::build(documents(&g, Some(&k)), seq)?)
}

/// The JSON of one hit.
pub fn hit_json(h: &Hit) -> serde_json::Value {
    json!({"rank": h.rank, "kind": h.kind, "id": h.id, "entity": h.entity, "title": h.title, "score": round(h.score), "matched": h.matched})
}

/// A score with four decimals, as shown.
pub fn round(score: f32) -> f64 {
    (f64::from(score) * 10_000.0).round() / 10_000.0
}

pub(crate) fn run(
    ws: &Workspace,
    text: &str,
    at: Option<u64>,
    limit: usize,
    kinds: &[String],
    json: bool,
) -> anyhow::Result<ExitCode> {
    let journal = ws.open_journal("discover")?;
    let index = index_at(&journal, at)?;
    let only: Vec<&str> = kinds.iter().map(String::as_str).collect();
    let hits = index.search(text, limit, &only)?;
    if json {
        outln!(
            ws,
            "{}",
            json!({"query": text, "at": index.seq, "documents": index.len(), "results": hits.iter().map(hit_json).collect::<Vec<_>>()})
        );
    } else if hits.is_empty() {
        outln!(ws, "no document matches {text:?} (as of sequence {}, {} documents)", index.seq, index.len());
    } else {
        outln!(ws, "discover {text:?} (as of sequence {}, {} documents):", index.seq, index.len());
        let mut t = Table::new(&["RANK", "SCORE", "KIND", "ID", "ENTITY", "MATCHED"]);
        for h in &hits {
            t.row(vec![
                h.rank.to_string(),
                format!("{:.4}", round(h.score)),
                h.kind.into(),
                h.id.clone(),
                h.entity.clone().unwrap_or_default(),
                h.matched.join(", "),
            ]);
        }
        out!(ws, "{}", t.render());
        outln!(ws, "then `strata graph impact ID` for what a change to one of them touches");
    }
    Ok(ExitCode::SUCCESS)
}
