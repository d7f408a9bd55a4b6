//! `strata replay`: rebuild every projection from sequence 1 and print its state hash.
//!
//! Read-only by default (an audit must not change what it audits); `--save-snapshots` stores the
//! rebuilt state so later catch-ups start from it.

use std::process::ExitCode;

use strata_journal::projection::{ProjectionStatus, Projections};

use super::EXIT_PROBLEMS;
use crate::app::workspace::Workspace;
use crate::system::peak_rss_mib;
use crate::table::Table;

pub(crate) fn run(ws: &Workspace, check: bool, save_snapshots: bool, json: bool) -> anyhow::Result<ExitCode> {
    let journal = ws.open_journal("replay")?;
    let head = journal.head();
    let mut from_snapshots: Option<Vec<ProjectionStatus>> = None;
    if check {
        let mut p = Projections::new(strata_engine::standard_projections());
        from_snapshots = Some(p.catch_up(&journal)?);
    }
    let mut projections = Projections::new(strata_engine::standard_projections());
    let rebuilt = projections.rebuild(&journal)?;
    // An audit replay writes nothing unless asked: it must not change what it audits.
    if save_snapshots {
        projections.save_snapshots(&journal)?;
    }
    // Close before reading the peak, so it covers the whole life of the journal in this process.
    ws.finish(&journal)?;
    drop(journal);
    let mismatches: Vec<&str> = match &from_snapshots {
        Some(snap) => rebuilt
            .iter()
            .zip(snap)
            .filter(|(a, b)| a.state_hash != b.state_hash)
            .map(|(a, _)| a.name.as_str())
            .collect(),
        None => Vec::new(),
    };
    if json {
        let items: Vec<serde_json::Value> = rebuilt
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut v = serde_json::json!({"name": s.name, "version": s.version, "events": s.applied, "state_hash": s.state_hash.to_hex()});
                if let Some(snap) = &from_snapshots {
                    v["snapshot_seq"] = serde_json::json!(snap[i].from_snapshot);
                    v["snapshot_plus_tail_hash"] = serde_json::json!(snap[i].state_hash.to_hex());
                }
                v
            })
            .collect();
        outln!(
            ws,
            "{}",
            serde_json::json!({"head": head.seq, "head_hash": head.hash.to_hex(), "projections": items, "ok": mismatches.is_empty(), "peak_rss_mib": peak_rss_mib()})
        );
    } else {
        let mut t = Table::new(&["PROJECTION", "VERSION", "EVENTS", "STATE HASH"]);
        for s in &rebuilt {
            t.row(vec![s.name.clone(), s.version.to_string(), s.applied.to_string(), s.state_hash.to_hex()]);
        }
        out!(ws, "{}", t.render());
        outln!(ws, "replayed {} events from sequence 1 (head {})", head.seq, &head.hash.to_hex()[..16]);
        if let Some(snap) = &from_snapshots {
            for s in snap {
                outln!(
                    ws,
                    "{}: snapshot at {} + {} tail events -> {}",
                    s.name,
                    s.from_snapshot,
                    s.applied,
                    if mismatches.contains(&s.name.as_str()) { "DIFFERS" } else { "same state" }
                );
            }
        }
    }
    if mismatches.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        errln!(
            ws,
            "[STRATA-E0502] nondeterminism: {} differ between snapshot + tail and a full replay",
            mismatches.join(", ")
        );
        Ok(ExitCode::from(EXIT_PROBLEMS))
    }
}
