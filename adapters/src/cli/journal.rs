//! `strata journal …`: read, verify, export, import and checkpoint the journal.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Subcommand;
use strata_engine::is_known_event;
use strata_engine::ports::{Clock, Ids};
use strata_journal::export::{self, Attestation, ImportError, format_time};
use strata_journal::note::{SignerKey, VerifierKey};
use strata_journal::pg::SCHEMA_DEFAULT;
use strata_journal::projection::Projections;
use strata_journal::verify::{Coverage, VerifyReport, verify_dir};
use strata_journal::{Envelope, OpenOptions};

use super::{EXIT_PROBLEMS, read_key_arg, read_key_file};
use crate::app::workspace::{Workspace, holder};
use crate::config::{Backend, Config};
use crate::system::{SystemClock, V7Ids};
use crate::table::Table;

/// Largest export or bundle file `journal import` and `journal verify --bundle` read (each is
/// read once, whole, and checked from memory).
pub const EXPORT_FILE_BYTES_MAX: u64 = 2 * 1024 * 1024 * 1024;

#[derive(Subcommand, Debug)]
pub(crate) enum JournalCommand {
    /// Show events (newest last).
    Log {
        /// First sequence to show (default: the last `--limit` events).
        #[arg(long)]
        from: Option<u64>,
        /// Most events to show.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Only this stream.
        #[arg(long)]
        stream: Option<String>,
    },
    /// Recompute every hash, the chain, the Merkle root and every checkpoint; exit 3 on any
    /// problem, naming the first bad sequence. Says how far the checkpoints reach and how many
    /// events lie beyond them, unattested.
    Verify {
        /// Trusted public key (file or `<name>+<id>+<key>` text); checkpoints must carry a valid
        /// signature by one of them, and each key must have signed at least one. Repeatable.
        #[arg(long)]
        pubkey: Vec<String>,
        /// Every event must lie within a checkpoint signed by a trusted key: an unattested tail
        /// is a problem (exit 3).
        #[arg(long, requires = "pubkey")]
        require_attested: bool,
        /// A signed checkpoint kept elsewhere, to check this journal against. Repeatable.
        #[arg(value_parser = crate::cli::path_arg, long)]
        checkpoint: Vec<PathBuf>,
        /// Verify an offline audit bundle instead of the workspace's journal.
        #[arg(value_parser = crate::cli::path_arg, long)]
        bundle: Option<PathBuf>,
    },
    /// Export the journal as JSON lines, or as an offline audit bundle.
    Export {
        /// Write JSON lines (the import format).
        #[arg(long, conflicts_with = "bundle")]
        jsonl: bool,
        /// Write an audit bundle (events, checkpoints, proofs, keys, projection hashes) to this
        /// file.
        #[arg(value_parser = crate::cli::path_arg, long)]
        bundle: Option<PathBuf>,
        /// Output file for --jsonl (default: standard output).
        #[arg(value_parser = crate::cli::path_arg, long)]
        out: Option<PathBuf>,
        /// Public keys to include in a bundle. Repeatable.
        #[arg(long)]
        pubkey: Vec<String>,
    },
    /// Create this workspace's journal from an export; every hash must match. All or nothing:
    /// a failed or killed import leaves no journal.
    Import {
        #[arg(value_parser = crate::cli::path_arg)]
        /// The export file.
        file: PathBuf,
        /// Where the journal goes: `sled` (`.strata/journal/`) or `postgres` (a new schema in a
        /// database; needs --url). Default: the workspace config's backend, else sled.
        #[arg(long)]
        backend: Option<String>,
        /// With `--backend postgres`: `postgresql://user@host:port/database`, without a password.
        #[arg(long)]
        url: Option<String>,
        /// With `--backend postgres`: the schema to create (default `strata`); it must not exist.
        #[arg(long)]
        schema: Option<String>,
    },
    /// Sign a checkpoint (origin, size, Merkle root) with a key, append it and print it.
    Checkpoint {
        /// Private key file from `strata keygen`.
        #[arg(value_parser = crate::cli::path_arg, long)]
        key: PathBuf,
    },
}

pub(crate) fn run(ws: &Workspace, cmd: JournalCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        JournalCommand::Log { from, limit, stream } => log(ws, from, limit, stream.as_deref(), json),
        JournalCommand::Verify { pubkey, require_attested, checkpoint, bundle } => {
            let keys = parse_pubkeys(ws, &pubkey)?;
            let extra = read_checkpoint_files(&checkpoint)?;
            match bundle {
                Some(b) => verify_bundle(ws.out(), &b, keys, &extra, require_attested, json),
                None => {
                    let mut report = match ws.served_journal() {
                        // The daemon holds the journal: verify through its handle.
                        Some(j) => strata_journal::verify::verify_store(
                            j.store().as_ref(),
                            Some(&strata_journal::checkpoints_dir(&ws.journal_dir())),
                            keys,
                            &extra,
                        ),
                        None => match ws.config()?.backend.pg_options("journal verify")? {
                            Some(pg) => strata_journal::pg::PgStore::connect(&pg)
                                .and_then(|store| strata_journal::verify::verify_store(&store, None, keys, &extra)),
                            None => verify_dir(&ws.journal_dir(), &ws.open_options("journal verify")?, keys, &extra),
                        },
                    }
                    .map_err(|e| match e {
                        strata_journal::JournalError::NotAJournal { .. } => {
                            anyhow::Error::from(crate::diagnostic::no_workspace(ws.root()))
                        }
                        e => e.into(),
                    })?;
                    if require_attested {
                        report.require_attested();
                    }
                    Ok(print_report(ws.out(), &report, &[], json))
                }
            }
        }
        JournalCommand::Export { jsonl, bundle, out, pubkey } => export_cmd(ws, jsonl, bundle, out, &pubkey, json),
        JournalCommand::Import { file, backend, url, schema } => {
            import(ws, &file, (backend.as_deref(), url.as_deref(), schema.as_deref()), json)
        }
        JournalCommand::Checkpoint { key } => checkpoint(ws, &key, json),
    }
}

fn parse_pubkeys(ws: &Workspace, args: &[String]) -> anyhow::Result<Vec<VerifierKey>> {
    args.iter().map(|a| VerifierKey::parse(&read_key_arg(ws, a)?).with_context(|| format!("--pubkey {a}"))).collect()
}

fn read_checkpoint_files(paths: &[PathBuf]) -> anyhow::Result<Vec<(String, String)>> {
    let max = strata_journal::limits::NOTE_BYTES_MAX as u64;
    paths
        .iter()
        .map(|p| Ok((p.display().to_string(), crate::files::read_text_bounded(p, max, "--checkpoint")?)))
        .collect()
}

/// JSON form of one event (the export line's fields, with the payload as JSON).
pub(crate) fn envelope_json(e: &Envelope) -> serde_json::Value {
    serde_json::json!({
        "seq": e.seq,
        "id": e.id.to_string(),
        "stream": e.stream,
        "version": e.version,
        "type": e.event_type,
        "schema": e.schema_version,
        "recorded_at": format_time(e.recorded_at_ns),
        "causation": e.causation.map(|u| u.to_string()),
        "correlation": e.correlation.map(|u| u.to_string()),
        "payload": serde_json::from_slice::<serde_json::Value>(&e.payload).unwrap_or(serde_json::Value::Null),
        "prev": e.prev.to_hex(),
        "hash": e.hash.to_hex(),
    })
}

fn log(ws: &Workspace, from: Option<u64>, limit: usize, stream: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let journal = ws.open_journal("journal log")?;
    let limit = limit.clamp(1, strata_journal::limits::READ_EVENTS_MAX);
    let events = match stream {
        Some(s) => {
            let version = journal.stream_version(s);
            let start = from.unwrap_or_else(|| version.saturating_sub(limit as u64 - 1).max(1));
            journal.read_stream(s, start, limit)?
        }
        None => {
            let head = journal.head().seq;
            let start = from.unwrap_or_else(|| head.saturating_sub(limit as u64 - 1).max(1));
            journal.read_range(start, limit)?
        }
    };
    if json {
        let v: Vec<serde_json::Value> = events.iter().map(envelope_json).collect();
        outln!(ws, "{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&["SEQ", "STREAM", "VER", "TYPE", "RECORDED AT", "HASH"]);
    for e in &events {
        t.row(vec![
            e.seq.to_string(),
            e.stream.clone(),
            e.version.to_string(),
            e.event_type.clone(),
            format_time(e.recorded_at_ns),
            e.hash.to_hex()[..16].to_owned(),
        ]);
    }
    out!(ws, "{}", t.render());
    let head = journal.head();
    outln!(
        ws,
        "head {} ({}), {}",
        head.seq,
        &head.hash.to_hex()[..16],
        crate::plural::count(journal.stream_count() as u64, "stream", "streams")
    );
    Ok(ExitCode::SUCCESS)
}

fn report_json(r: &VerifyReport, attestations: &[(String, bool)]) -> serde_json::Value {
    serde_json::json!({
        "ok": r.ok() && attestations.iter().all(|(_, ok)| *ok),
        "origin": r.origin,
        "events": r.events,
        "streams": r.streams,
        "head_hash": r.head_hash.to_hex(),
        "root": r.root.to_hex(),
        "signatures_checked": r.signatures_checked,
        "coverage": coverage_json(&r.coverage),
        "first_bad_seq": r.first_bad_seq,
        "checkpoints": r.checkpoints.iter().map(|c| serde_json::json!({
            "source": c.source, "size": c.size, "root_matches": c.root_matches, "signed_by": c.signed_by,
        })).collect::<Vec<_>>(),
        "problems": r.problems.iter().map(|p| serde_json::json!({"seq": p.seq, "kind": p.kind, "detail": p.detail})).collect::<Vec<_>>(),
        "problems_truncated": r.problems_truncated,
        "attestations": attestations.iter().map(|(n, ok)| serde_json::json!({"name": n, "matches": ok})).collect::<Vec<_>>(),
    })
}

fn coverage_json(c: &Coverage) -> serde_json::Value {
    serde_json::json!({
        "signatures_checked": c.signatures_checked,
        "attested_to": c.size,
        "unattested": c.unattested,
        "first_unattested": c.first_unattested,
        "keys": c.reach.iter().filter(|r| r.key.is_some()).map(|r| serde_json::json!({
            "key": r.key, "attested_to": r.size, "unattested": r.unattested,
        })).collect::<Vec<_>>(),
    })
}

/// How far `size` reaches and what lies beyond; `none` says what having no checkpoint means.
fn reach_line(size: Option<u64>, unattested: u64, none: &str) -> String {
    match size {
        None if unattested == 0 => "nothing to attest (no events)".to_owned(),
        None => format!("{none}: all {} unattested", crate::plural::count(unattested, "event", "events")),
        Some(n) => {
            format!("events 1..={n}; {} after it unattested", crate::plural::count(unattested, "event", "events"))
        }
    }
}

fn print_coverage(o: &crate::output::Out, c: &Coverage) {
    if !c.signatures_checked {
        let line = reach_line(c.size, c.unattested, "no checkpoint");
        outln!(o, "attested    {line} (signatures not checked: pass --pubkey)");
        return;
    }
    for r in &c.reach {
        let key = r.key.as_deref().unwrap_or("?");
        outln!(o, "attested    by {key}: {}", reach_line(r.size, r.unattested, "NO CHECKPOINT signed by this key"));
    }
}

fn print_report(o: &crate::output::Out, r: &VerifyReport, attestations: &[(String, bool)], json: bool) -> ExitCode {
    let ok = r.ok() && attestations.iter().all(|(_, ok)| *ok);
    if json {
        outln!(o, "{}", report_json(r, attestations));
    } else {
        outln!(o, "origin      {}", if r.origin.is_empty() { "(unreadable)" } else { r.origin.as_str() });
        outln!(o, "events      {} in {}", r.events, crate::plural::count(r.streams as u64, "stream", "streams"));
        outln!(o, "head        {}", r.head_hash);
        outln!(o, "merkle root {}", r.root);
        if r.checkpoints.is_empty() {
            outln!(o, "checkpoints none");
        } else {
            let mut t = Table::new(&["CHECKPOINT", "SIZE", "ROOT", "SIGNED BY"]);
            for c in &r.checkpoints {
                let signed = if !r.signatures_checked {
                    "(not checked: pass --pubkey)".to_owned()
                } else if c.signed_by.is_empty() {
                    "NO TRUSTED SIGNATURE".to_owned()
                } else {
                    c.signed_by.join(", ")
                };
                t.row(vec![
                    c.source.clone(),
                    c.size.to_string(),
                    if c.root_matches { "ok".into() } else { "MISMATCH".into() },
                    signed,
                ]);
            }
            out!(o, "{}", t.render());
        }
        print_coverage(o, &r.coverage);
        for (name, matches) in attestations {
            outln!(o, "attestation {name}: {}", if *matches { "matches replay" } else { "DIFFERS from replay" });
        }
        if ok {
            outln!(o, "verified: no problems");
        } else {
            for p in &r.problems {
                outln!(
                    o,
                    "PROBLEM [{}]{} {}",
                    p.kind,
                    p.seq.map(|s| format!(" seq {s}:")).unwrap_or_default(),
                    p.detail
                );
            }
            if r.problems_truncated {
                outln!(o, "(more problems not listed)");
            }
            match r.first_bad_seq {
                Some(s) => outln!(o, "FAILED: first bad sequence {s}"),
                None => outln!(o, "FAILED"),
            }
        }
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::from(EXIT_PROBLEMS) }
}

fn verify_bundle(
    o: &crate::output::Out,
    path: &Path,
    keys: Vec<VerifierKey>,
    extra: &[(String, String)],
    require_attested: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if !extra.is_empty() {
        anyhow::bail!("[STRATA-E0303] --checkpoint is for a journal; a bundle carries its own checkpoints");
    }
    let bytes = crate::files::read_bounded(path, EXPORT_FILE_BYTES_MAX, "--bundle")?;
    let mut projections = Projections::new(strata_engine::standard_projections());
    let mut apply_err: Option<String> = None;
    let report = export::verify_bundle(path, &mut &bytes[..], keys, &mut |rec, _| {
        if apply_err.is_none()
            && let Err(e) = projections.apply(rec)
        {
            apply_err = Some(e.to_string());
        }
    })?;
    if let Some(e) = apply_err {
        anyhow::bail!("replaying the bundle failed: {e}");
    }
    let checks = check_attestations(&report.attestations, &projections);
    let mut verify = report.verify;
    if !report.consistency.is_empty() && !json {
        outln!(
            o,
            "consistency proofs: {} checked, {} failed",
            report.consistency.len(),
            report.consistency.iter().filter(|c| !c.2).count()
        );
    }
    if require_attested {
        verify.require_attested();
    }
    verify.problems.sort_by_key(|p| p.seq.unwrap_or(u64::MAX));
    Ok(print_report(o, &verify, &checks, json))
}

fn export_cmd(
    ws: &Workspace,
    jsonl: bool,
    bundle: Option<PathBuf>,
    out: Option<PathBuf>,
    pubkeys: &[String],
    json: bool,
) -> anyhow::Result<ExitCode> {
    if !jsonl && bundle.is_none() {
        anyhow::bail!("[STRATA-E0303] say what to export: --jsonl (optionally with --out FILE) or --bundle FILE");
    }
    let journal = ws.open_journal("journal export")?;
    let summary = if let Some(path) = bundle {
        let keys = parse_pubkeys(ws, pubkeys)?;
        let mut projections = Projections::new(strata_engine::standard_projections());
        projections.rebuild(&journal)?;
        let attestations = projection_attestations(&projections);
        let f = std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = BufWriter::new(f);
        let s = export::export_bundle(&journal, &mut w, &keys, &attestations)?;
        w.into_inner().map_err(|e| anyhow::anyhow!("cannot write {}: {}", path.display(), e.error()))?.sync_all()?;
        if !json {
            errln!(ws, "wrote bundle {} ({})", path.display(), crate::plural::count(s.events, "event", "events"));
        }
        s
    } else if let Some(path) = out {
        let f = std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = BufWriter::new(f);
        let s = export::export_jsonl(&journal, &mut w)?;
        w.into_inner().map_err(|e| anyhow::anyhow!("cannot write {}: {}", path.display(), e.error()))?.sync_all()?;
        if !json {
            errln!(ws, "wrote {} ({})", path.display(), crate::plural::count(s.events, "event", "events"));
        }
        s
    } else {
        let mut w = BufWriter::new(ws.out().stdout());
        export::export_jsonl(&journal, &mut w)?;
        w.flush()?;
        return Ok(ExitCode::SUCCESS);
    };
    if json {
        outln!(
            ws,
            "{}",
            serde_json::json!({"events": summary.events, "head": summary.head.to_hex(), "root": summary.root.to_hex()})
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The backend an import writes to: the flags, else the workspace config's (sled without one).
/// Flags that disagree with an existing config are refused.
fn import_backend(
    ws: &Workspace,
    config: &Config,
    (backend, url, schema): (Option<&str>, Option<&str>, Option<&str>),
) -> anyhow::Result<Backend> {
    let wanted = match (backend, url) {
        (None, None) if schema.is_none() => return Ok(config.backend.clone()),
        (Some("postgres"), Some(url)) => Backend::postgres(url, schema.unwrap_or(SCHEMA_DEFAULT), "--url")?,
        (Some("sled"), None) if schema.is_none() => Backend::Sled,
        (Some("postgres"), None) => {
            anyhow::bail!("[STRATA-E0601] --backend postgres needs --url postgresql://user@host:port/database")
        }
        (Some("sled") | None, _) => anyhow::bail!("[STRATA-E0601] --url and --schema need --backend postgres"),
        (Some(other), _) => anyhow::bail!("[STRATA-E0601] --backend must be sled or postgres, not {other:?}"),
    };
    if ws.config_path().exists() && wanted != config.backend {
        anyhow::bail!(
            "[STRATA-E0601] {} already names another journal backend; import without --backend/--url/--schema, or into a new workspace",
            ws.config_path().display()
        );
    }
    Ok(wanted)
}

fn import(
    ws: &Workspace,
    file: &Path,
    flags: (Option<&str>, Option<&str>, Option<&str>),
    json: bool,
) -> anyhow::Result<ExitCode> {
    let config = ws.config()?;
    let config = Config { backend: import_backend(ws, &config, flags)?, ..config };
    let pg = config.backend.pg_options("journal import")?;
    if pg.is_none() && ws.journal_dir().join("sled").exists() {
        let j = ws.open_journal("journal import")?;
        return Err(ImportError::TargetNotEmpty { events: j.head().seq }.into());
    }
    // Read once and check the whole file before creating anything, so bad input leaves no trace
    // and a file changed while it is imported cannot bring in anything unchecked.
    let bytes = crate::files::read_bounded(file, EXPORT_FILE_BYTES_MAX, "journal import file")?;
    let checked = export::check_bytes(file, &bytes, &is_known_event)?;
    let strata_existed = ws.strata_dir().exists();
    std::fs::create_dir_all(ws.strata_dir()).with_context(|| format!("cannot create {}", ws.strata_dir().display()))?;
    let wrote_config = !ws.config_path().exists();
    let options = OpenOptions {
        durability: config.durability,
        cache_bytes: config.cache_mib * 1024 * 1024,
        holder: holder("journal import"),
        // A fresh directory nobody else holds.
        lock_wait: std::time::Duration::from_secs(1),
    };
    let written = if wrote_config {
        std::fs::write(ws.config_path(), config.render())
            .with_context(|| format!("cannot write {}", ws.config_path().display()))
    } else {
        Ok(())
    };
    let (imported, into) = match &pg {
        // Built in a temporary schema and renamed into place in one transaction.
        Some(pg) => (
            written.and_then(|()| Ok(strata_journal::pg::import_new_postgres(&checked, pg)?)),
            strata_journal::pg::PgStore::label_of(pg),
        ),
        None => (
            written.and_then(|()| Ok(export::import_new(&checked, &ws.journal_dir(), &options)?)),
            ws.journal_dir().display().to_string(),
        ),
    };
    if let Err(e) = imported {
        // Take back what this import created; the journal itself was never put in place.
        if !strata_existed {
            let _ = std::fs::remove_dir_all(ws.strata_dir());
        } else if wrote_config {
            let _ = std::fs::remove_file(ws.config_path());
        }
        return Err(e);
    }
    let check = checked.summary();
    if json {
        outln!(
            ws,
            "{}",
            serde_json::json!({"events": check.events, "head": check.head.to_hex(), "root": check.root.to_hex(), "origin": check.origin})
        );
    } else {
        outln!(ws, "imported {} events into {into} (origin {}); head {}", check.events, check.origin, check.head);
    }
    Ok(ExitCode::SUCCESS)
}

fn checkpoint(ws: &Workspace, key_path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let text = read_key_file(key_path, "--key")?;
    let key = SignerKey::parse(&text).with_context(|| format!("--key {}", key_path.display()))?;
    let journal = ws.open_journal("journal checkpoint")?;
    let signed = journal.checkpoint_blocking(Arc::new(key), V7Ids.next_id(), SystemClock.now_ns())?;
    ws.finish(&journal)?;
    if json {
        outln!(
            ws,
            "{}",
            serde_json::json!({"origin": signed.checkpoint.origin, "size": signed.checkpoint.size, "root": signed.checkpoint.root.to_hex(), "seq": signed.position.seq, "note": signed.note})
        );
    } else {
        out!(ws, "{}", signed.note);
    }
    Ok(ExitCode::SUCCESS)
}

/// The state hash of every projection, as bundle attestations named `projection:<name>`.
pub(crate) fn projection_attestations(projections: &Projections) -> Vec<Attestation> {
    projections
        .state_hashes()
        .into_iter()
        .map(|(name, h)| Attestation { name: format!("projection:{name}"), value: h.to_hex() })
        .collect()
}

/// Compares a bundle's projection attestations with replayed state: `(name, matches)`.
pub(crate) fn check_attestations(attested: &[Attestation], replayed: &Projections) -> Vec<(String, bool)> {
    let hashes = replayed.state_hashes();
    attested
        .iter()
        .filter_map(|a| {
            let name = a.name.strip_prefix("projection:")?;
            Some((a.name.clone(), hashes.get(name).map(|h| h.to_hex()).as_deref() == Some(a.value.as_str())))
        })
        .collect()
}
