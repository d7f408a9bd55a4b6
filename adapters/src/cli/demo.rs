//! `strata demo`: the bundled example, end to end, on the embedded sled journal.
//!
//! It initialises a workspace, appends the example knowledge-base events with optimistic
//! concurrency, signs a checkpoint with a fresh key, appends the rest, signs again, then proves
//! the result three ways: `journal verify` against the public key, an offline audit bundle
//! verified without the database, and a replay whose projection hashes match the bundle's.

use std::io::BufReader;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use serde::Deserialize;
use strata_engine::ports::{Clock, Ids};
use strata_journal::export;
use strata_journal::note::SignerKey;
use strata_journal::projection::Projections;
use strata_journal::verify::verify_dir;
use strata_journal::{EventData, ExpectedVersion};

use super::EXIT_PROBLEMS;
use super::journal::{check_attestations, demo_options, open_with, projection_attestations};
use crate::config::Config;
use crate::system::{SystemClock, V7Ids, random_seed};
use crate::table::Table;
use crate::workspace::{Workspace, record_initialized};

const EXAMPLE: &str = include_str!("../../../examples/journal/events.jsonl");
const MARKER: &str = ".strata-demo";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExampleLine {
    stream: String,
    #[serde(rename = "type")]
    event_type: String,
    payload: serde_json::Value,
}

pub(crate) fn run(at: &Path, json: bool) -> anyhow::Result<ExitCode> {
    if at.exists() {
        if !at.join(MARKER).exists() {
            anyhow::bail!(
                "[STRATA-E0602] {} exists and is not an earlier demo; pass --at with a new directory",
                at.display()
            );
        }
        std::fs::remove_dir_all(at).with_context(|| format!("cannot remove the earlier demo at {}", at.display()))?;
    }
    std::fs::create_dir_all(at).with_context(|| format!("cannot create {}", at.display()))?;
    std::fs::write(at.join(MARKER), "created by `strata demo`; safe to delete\n")?;
    let ws = Workspace::at(at);
    let config = Config::default();
    let journal = ws.create(&format!("strata.demo/{}", V7Ids.next_id()), &config)?;
    record_initialized(&journal, &config)?;

    let lines: Vec<ExampleLine> =
        EXAMPLE.lines().map(serde_json::from_str).collect::<Result<_, _>>().context("bundled example is malformed")?;
    let half = lines.len() / 2;
    let key = Arc::new(SignerKey::from_seed("strata-demo", random_seed()?)?);
    let key_path = at.join("demo.key");
    super::write_new_file(&key_path, key.to_text().as_bytes(), 0o600)?;
    super::write_new_file(&at.join("demo.key.pub"), format!("{}\n", key.verifier().to_text()).as_bytes(), 0o644)?;
    let mut checkpoints = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let ev = EventData {
            id: V7Ids.next_id(),
            event_type: line.event_type.clone(),
            schema_version: 1,
            recorded_at_ns: SystemClock.now_ns(),
            causation: None,
            correlation: None,
            payload: serde_json::to_vec(&line.payload)?,
        };
        let expected = ExpectedVersion::Exact(journal.stream_version(&line.stream));
        journal.append_blocking(&line.stream, expected, vec![ev])?.map_err(anyhow::Error::from)?;
        if i + 1 == half || i + 1 == lines.len() {
            checkpoints.push(journal.checkpoint_blocking(key.clone(), V7Ids.next_id(), SystemClock.now_ns())?);
        }
    }
    let head = journal.head();
    journal.close_blocking()?;
    drop(journal);

    // 1. Verify the database against the public key.
    let options = demo_options("demo");
    let report = verify_dir(&ws.journal_dir(), &options, vec![key.verifier()], &[])?;

    // 2. Replay every projection from sequence 1 and export an offline bundle attesting to them.
    let journal = open_with(&ws.journal_dir(), &options)?;
    let mut projections = Projections::new(strata_engine::standard_projections());
    let statuses = projections.rebuild(&journal)?;
    projections.save_snapshots(&journal)?;
    let attestations = projection_attestations(&projections);
    let bundle_path = at.join("audit-bundle.jsonl");
    {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&bundle_path)?);
        export::export_bundle(&journal, &mut w, &[key.verifier()], &attestations)?;
    }
    drop(journal);

    // 3. Verify the bundle offline and replay its events through the same projections.
    let mut offline = Projections::new(strata_engine::standard_projections());
    let mut replay_err = None;
    let bundle = export::verify_bundle(
        &bundle_path,
        &mut BufReader::new(std::fs::File::open(&bundle_path)?),
        vec![key.verifier()],
        &mut |rec, _| {
            if let Err(e) = offline.apply(rec) {
                replay_err.get_or_insert(e.to_string());
            }
        },
    )?;
    if let Some(e) = replay_err {
        anyhow::bail!("replaying the bundle failed: {e}");
    }
    let offline_hashes = offline.state_hashes();
    let checks = check_attestations(&bundle.attestations, &offline);
    let attested_ok = !checks.is_empty() && checks.iter().all(|(_, ok)| *ok);
    let ok = report.ok()
        && bundle.verify.ok()
        && attested_ok
        && report.checkpoints.iter().all(|c| c.root_matches && !c.signed_by.is_empty());

    if json {
        println!(
            "{}",
            serde_json::json!({
                "ok": ok,
                "workspace": at.display().to_string(),
                "events": head.seq,
                "head_hash": head.hash.to_hex(),
                "merkle_root": head.root.to_hex(),
                "checkpoints": checkpoints.iter().map(|c| serde_json::json!({"size": c.checkpoint.size, "seq": c.position.seq})).collect::<Vec<_>>(),
                "verify_problems": report.problems.len(),
                "bundle": bundle_path.display().to_string(),
                "bundle_problems": bundle.verify.problems.len(),
                "projections": statuses.iter().map(|s| serde_json::json!({"name": s.name, "events": s.applied, "state_hash": s.state_hash.to_hex()})).collect::<Vec<_>>(),
                "attestations_match": attested_ok,
            })
        );
    } else {
        println!("strata demo: bundled example on the embedded sled journal ({})", at.display());
        println!(
            "  appended   {} events in {} streams (durability {})",
            head.seq,
            report.streams,
            config.durability.as_str()
        );
        for c in &checkpoints {
            println!("  checkpoint size {} signed by {} (event {})", c.checkpoint.size, key.name(), c.position.seq);
        }
        println!("  head       {}", head.hash);
        println!("  root       {}", head.root);
        println!(
            "  verify     {} ({} checkpoints, signatures checked against {})",
            if report.ok() { "ok" } else { "FAILED" },
            report.checkpoints.len(),
            key.verifier().to_text()
        );
        println!(
            "  bundle     {} verified offline: {} ({} consistency proofs)",
            bundle_path.display(),
            if bundle.verify.ok() { "ok" } else { "FAILED" },
            bundle.consistency.len()
        );
        let mut t = Table::new(&["  PROJECTION", "EVENTS", "STATE HASH", "BUNDLE"]);
        for s in &statuses {
            let same = offline_hashes.get(&s.name) == Some(&s.state_hash);
            t.row(vec![
                format!("  {}", s.name),
                s.applied.to_string(),
                s.state_hash.to_hex(),
                if same { "same".into() } else { "DIFFERS".into() },
            ]);
        }
        print!("{}", t.render());
        println!("{}", if ok { "demo complete: every check passed" } else { "demo FAILED: see above" });
        println!(
            "next: strata --dir {0} journal log; strata --dir {0} journal verify --pubkey {0}/demo.key.pub",
            at.display()
        );
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(EXIT_PROBLEMS) })
}
