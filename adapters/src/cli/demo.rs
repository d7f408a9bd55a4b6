//! `strata demo`: the bundled example, end to end, on the embedded sled journal.
//!
//! The bundled example is the seed-scale knowledge base (15 entities, 164 specification files,
//! about 615,000 tokens, generated deterministically from seed 7). The demo writes it as files,
//! takes it in (one atomic append), validates the spec graph, computes the impact of a change
//! request across entity boundaries, assembles and verifies an agent's prompt for it, edits a requirement to show suspicion spreading and the
//! approval gate holding (and the prompt assembled for that change request flagged superseded,
//! the published summaries stale), signs checkpoints with a fresh key, then proves the journal three ways:
//! `journal verify` against the public key, an offline audit bundle verified without the
//! database, and a replay whose projection hashes match the bundle's attestations.

use std::io::BufReader;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use strata_engine::kb::commands::{self, Ctx};
use strata_engine::kb::fixture::{FixtureSpec, generate, render};
use strata_engine::kb::intake;
use strata_engine::kb::kind::{ArtifactKey, ArtifactKind};
use strata_engine::ports::{Clock, Ids};
use strata_journal::export;
use strata_journal::note::SignerKey;
use strata_journal::projection::Projections;
use strata_journal::verify::verify_dir;

use super::EXIT_PROBLEMS;
use super::journal::{check_attestations, projection_attestations};
use crate::app::workspace::{Workspace, record_initialized};
use crate::config::Config;
use crate::system::{SystemClock, V7Ids, random_seed};
use crate::table::Table;
use strata_engine::context::assemble::{Inputs, Task, TokenCounter, assemble};
use strata_engine::context::prompts;
use strata_engine::context::state::ContextState;
use strata_engine::context::summary::{self, Summaries};
use strata_engine::kb::graph::Graph;
use strata_journal::Journal;
use strata_journal::projection::catch_up_one;

use crate::app::append::{Committed, Decided, Folded, decide_and_append};
use crate::app::kb::load_graph;

const MARKER: &str = ".strata-demo";
const SEED: u64 = 7;

/// Takes `files` in through the one decide-and-append; `refused` says what a refusal means.
fn take_in(
    journal: &Journal,
    files: &[intake::SourceFile],
    refused: &str,
) -> anyhow::Result<Committed<intake::IntakePlan>> {
    let decided = decide_and_append(journal, &mut Graph::new(), |g| {
        let plan = intake::plan(g, files, &mut V7Ids, &SystemClock)?;
        Ok(Decided { appends: plan.appends.clone(), answer: plan })
    });
    super::appended(decided, |p: Vec<intake::IntakeProblem>| anyhow::anyhow!("{refused}: {:?}", p.first()))
}

/// Records what `decide` decides on `state`, through the one decide-and-append.
fn record<S: Folded, E: std::fmt::Display>(
    journal: &Journal,
    state: &mut S,
    mut decide: impl FnMut(&S) -> Result<Vec<strata_journal::StreamAppend>, E>,
) -> anyhow::Result<()> {
    let decided = decide_and_append(journal, state, |s| Ok::<_, E>(Decided { appends: decide(s)?, answer: () }));
    super::appended(decided, |e| anyhow::anyhow!("{e}")).map(|_| ())
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
    let key = Arc::new(SignerKey::from_seed("strata-demo", random_seed()?)?);
    super::write_new_file(&at.join("demo.key"), key.to_text().as_bytes(), 0o600)?;
    super::write_new_file(&at.join("demo.key.pub"), format!("{}\n", key.verifier().to_text()).as_bytes(), 0o644)?;

    // 1. The bundled knowledge base, written as files and taken in all at once.
    let fx = generate(&FixtureSpec::seed_scale(SEED));
    let files = fx.files();
    let kb_dir = at.join("kb");
    for f in &files {
        let path = kb_dir.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, &f.bytes)?;
    }
    let spec_files = fx.drafts.iter().filter(|d| d.key.kind.is_spec()).count();
    let spec_tokens: usize = fx
        .drafts
        .iter()
        .filter(|d| d.key.kind.is_spec())
        .map(|d| strata_engine::tokens::count(&String::from_utf8_lossy(&render(d).bytes)))
        .sum();
    let taken = take_in(&journal, &files, "the bundled example does not take in")?.answer.created.len();
    let first_checkpoint = journal.checkpoint_blocking(key.clone(), V7Ids.next_id(), SystemClock.now_ns())?;
    let mut g = load_graph(&journal)?;
    let findings = g.validate();

    // 2. Impact of a product change request, across entity boundaries.
    let cr = fx
        .of(ArtifactKind::ChangeRequest)
        .find(|d| {
            g.node_id(&d.key).is_some_and(|n| {
                g.impact(n).iter().any(|r| r.key.kind == ArtifactKind::Entity && r.key.id == "shared-services")
            }) && d.entity() != Some("shared-services")
        })
        .map(|d| d.key.clone())
        .unwrap_or_else(|| ArtifactKey::new(ArtifactKind::ChangeRequest, "CR-3"));
    let impact = g.node_id(&cr).map(|n| g.impact(n)).unwrap_or_default();
    let shared_path = impact
        .iter()
        .find(|r| r.key.kind == ArtifactKind::Entity && r.key.id == "shared-services")
        .map(|r| r.path.clone());

    // 2b. Context: the shipped profiles registered, the summaries published, and a backend
    //     developer's prompt for that change request assembled with its bill of materials,
    //     recorded, and verified against the journal.
    crate::app::kb::register_builtin(&journal)?;
    let mut state = ContextState::default();
    let mut summaries = Summaries::build(&mut g);
    record(&journal, &mut state, |s| summary::publish(&summaries, &s.published, &mut V7Ids, &SystemClock))?;
    let Some((profile_version, profile)) = state.profiles.latest("backend-developer").map(|(v, p)| (v, p.clone()))
    else {
        anyhow::bail!("the shipped backend-developer profile is not registered");
    };
    let task = Task {
        id: "demo-1".into(),
        objective: format!("Implement change request {}.", cr.id),
        plan: Some(cr.id.clone()),
    };
    let at_head = journal.head();
    let inputs = Inputs {
        graph: &g,
        summaries: &summaries,
        profile: &profile,
        profile_version,
        task: &task,
        position: at_head.seq,
        position_hash: at_head.hash,
        continuation: None,
    };
    let assembly = assemble(&inputs, &mut TokenCounter::new(config.token_factor(&profile.model)))?;
    record(&journal, &mut state, |_| {
        Ok::<_, String>(vec![prompts::record(&assembly.manifest, &mut V7Ids, &SystemClock)?])
    })?;
    let prompt_path = at.join("demo-1.prompt.md");
    std::fs::write(&prompt_path, &assembly.prompt)?;
    std::fs::write(at.join("demo-1.prompt.md.manifest.json"), serde_json::to_string_pretty(&assembly.manifest)?)?;
    let prompt_problems =
        prompts::verify(&journal, &assembly.manifest, Some(assembly.prompt.as_bytes())).map_err(anyhow::Error::msg)?;

    // 3. A requirement that change request depends on is edited: everything derived from it
    //    becomes suspect, and the change request cannot be approved until reviewed.
    let brd_id = g
        .get(&cr)
        .and_then(|n| n.fields.get("brdRefs"))
        .and_then(|v| v.as_array())
        .and_then(|a| a.first())
        .and_then(|v| v.as_str())
        .unwrap_or("BRD-2.1")
        .to_owned();
    let brd_key = ArtifactKey::new(ArtifactKind::BrdRequirement, &brd_id);
    let mut edited = fx.drafts.iter().find(|d| d.key == brd_key).cloned().context("bundled requirement missing")?;
    edited.body.push_str("\nThe correction threshold is now configurable per region.\n");
    let edited_file = render(&edited);
    std::fs::write(kb_dir.join(&edited_file.path), &edited_file.bytes)?;
    // The prompt was given that requirement: taking the edit in flags the prompt as superseded
    // (a reaction to the change), and the published summaries of its entity are stale.
    let edit = take_in(&journal, &[edited_file], "edit refused")?;
    let superseded = edit.reacted.get(crate::app::react::SUPERSEDED_CONTEXT).copied().unwrap_or(0);
    g = load_graph(&journal)?;
    let suspects = g.suspects().len();
    // The summaries of the knowledge base now (a graph loaded from a snapshot marks nothing
    // dirty, so they are built, not refreshed).
    summaries = Summaries::build(&mut g);
    catch_up_one(&mut state, &journal)?;
    let stale = summary::check(&summaries, &state.published).len();
    // A draft change request on the edited requirement, proposed for approval.
    let draft_cr = ArtifactKey::new(ArtifactKind::ChangeRequest, "CR-9000");
    let mut draft = strata_engine::kb::ArtifactDraft {
        key: draft_cr.clone(),
        state: "proposed".into(),
        fields: serde_json::Map::new(),
        body: "Make the correction threshold regional.\n".into(),
        source: Some("changes/CR-9000.md".into()),
    };
    draft
        .fields
        .insert("entity".into(), g.get(&brd_key).and_then(|n| n.fields.get("entity")).cloned().unwrap_or_default());
    draft.fields.insert("title".into(), "Regional correction threshold".into());
    draft.fields.insert("brdRefs".into(), serde_json::json!([brd_id]));
    let mut brd_now = fx.drafts.iter().find(|d| d.key == brd_key).cloned().context("bundled requirement missing")?;
    brd_now.body = edited.body.clone();
    if let Some(n) = g.get(&brd_key) {
        brd_now.fields = n.fields.clone();
    }
    intake::with(&mut brd_now.fields, "linkedCrs", "CR-9000");
    take_in(&journal, &[render(&draft), render(&brd_now)], "draft refused")?;
    g = load_graph(&journal)?;
    let gate = commands::transition(&g, &draft_cr, "approved", None, &mut Ctx { ids: &mut V7Ids, clock: &SystemClock });
    let gate_held = matches!(gate, Err(commands::Rejection::SuspectUpstream { .. }));
    let mut graph = Graph::new();
    record(&journal, &mut graph, |g| {
        commands::review(g, &draft_cr, &mut Ctx { ids: &mut V7Ids, clock: &SystemClock })
    })?;
    record(&journal, &mut graph, |g| {
        let why = Some("reviewed against the edited requirement");
        commands::transition(g, &draft_cr, "approved", why, &mut Ctx { ids: &mut V7Ids, clock: &SystemClock })
    })?;
    let second_checkpoint = journal.checkpoint_blocking(key.clone(), V7Ids.next_id(), SystemClock.now_ns())?;
    let head = journal.head();
    journal.close_blocking()?;
    drop(journal);

    // 4. Verify the database against the public key.
    let report = verify_dir(&ws.journal_dir(), &ws.open_options("demo")?, vec![key.verifier()], &[])?;

    // 5. Replay every projection from sequence 1 and export an offline bundle attesting to them.
    let journal = ws.open_journal("demo")?;
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

    // 6. Verify the bundle offline and replay its events through the same projections.
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
        && findings.is_empty()
        && gate_held
        && suspects > 0
        && prompt_problems.is_empty()
        && superseded == 1
        && stale > 0
        && report.checkpoints.iter().all(|c| c.root_matches && !c.signed_by.is_empty());

    if json {
        outln!(
            ws,
            "{}",
            serde_json::json!({
                "ok": ok,
                "workspace": at.display().to_string(),
                "artifacts": taken,
                "spec_files": spec_files,
                "spec_tokens": spec_tokens,
                "validation_findings": findings.len(),
                "impact": {"artifact": cr.to_string(), "reached": impact.len(), "cross_cutting_path": shared_path},
                "suspects_after_edit": suspects,
                "prompt": {"file": prompt_path.display().to_string(), "profile": assembly.manifest.profile, "tokens": assembly.manifest.total_tokens,
                           "budget": assembly.manifest.token_budget, "included": assembly.manifest.included.len(), "verify_problems": prompt_problems.len(),
                           "superseded_after_edit": superseded == 1},
                "stale_summaries_after_edit": stale,
                "approval_gate_held": gate_held,
                "events": head.seq,
                "head_hash": head.hash.to_hex(),
                "merkle_root": head.root.to_hex(),
                "checkpoints": [first_checkpoint.checkpoint.size, second_checkpoint.checkpoint.size],
                "verify_problems": report.problems.len(),
                "bundle": bundle_path.display().to_string(),
                "bundle_problems": bundle.verify.problems.len(),
                "projections": statuses.iter().map(|s| serde_json::json!({"name": s.name, "events": s.applied, "state_hash": s.state_hash.to_hex()})).collect::<Vec<_>>(),
                "attestations_match": attested_ok,
            })
        );
    } else {
        outln!(ws, "strata demo: the bundled knowledge base on the embedded sled journal ({})", at.display());
        outln!(
            ws,
            "  intake     {taken} artifacts from {} files ({spec_files} specification files, {spec_tokens} tokens) in one atomic append",
            files.len()
        );
        outln!(
            ws,
            "  validate   {}",
            if findings.is_empty() {
                "no dangling references, missing inverses, cycles or bypassing links".to_owned()
            } else {
                format!("{} FINDINGS", findings.len())
            }
        );
        outln!(
            ws,
            "  impact     {cr} reaches {} artifacts{}",
            impact.len(),
            shared_path.map(|p| format!("; cross-cutting via {p}")).unwrap_or_default()
        );
        outln!(
            ws,
            "  context    {} for {}: {} of {} tokens, {} items with reasons; verified against the journal: {}",
            prompt_path.display(),
            assembly.manifest.profile,
            assembly.manifest.total_tokens,
            assembly.manifest.token_budget,
            assembly.manifest.included.len(),
            if prompt_problems.is_empty() { "ok".to_owned() } else { format!("{} PROBLEMS", prompt_problems.len()) }
        );
        outln!(
            ws,
            "  edit       {brd_id} changed: {suspects} artifacts suspect; approving CR-9000 {}",
            if gate_held { "was refused until reviewed" } else { "was NOT refused" }
        );
        outln!(
            ws,
            "             the prompt given {brd_id} {}; {stale} published summaries now stale",
            if superseded == 1 { "is flagged superseded" } else { "was NOT flagged" }
        );
        outln!(
            ws,
            "  journal    {} events, checkpoints at {} and {} signed by {}",
            head.seq,
            first_checkpoint.checkpoint.size,
            second_checkpoint.checkpoint.size,
            key.name()
        );
        outln!(
            ws,
            "  verify     {} (signatures checked against {})",
            if report.ok() { "ok" } else { "FAILED" },
            key.verifier().to_text()
        );
        outln!(
            ws,
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
        out!(ws, "{}", t.render());
        outln!(ws, "{}", if ok { "demo complete: every check passed" } else { "demo FAILED: see above" });
        outln!(
            ws,
            "next: strata --dir {0} graph impact {1}; strata --dir {0} audit context --task demo-1; strata --dir {0} summary check; strata --dir {0} journal verify --pubkey {0}/demo.key.pub",
            at.display(),
            cr.id
        );
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(EXIT_PROBLEMS) })
}
