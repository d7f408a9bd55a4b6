//! `strata eval`: the paired evaluation corpus, synthetic pairs, measurement keys and signed
//! envelopes, and the promotion evaluation that records each measurement run it consumes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use serde_json::Value;
use strata_engine::ce::ledger::{self, Ledger};
use strata_engine::ce::time;
use strata_engine::ports::Clock as _;
use strata_engine::promotion::envelope::{self, Claims, Expected, TrustedKeys};
use strata_engine::promotion::gates::Thresholds;
use strata_engine::promotion::promote::{self, Options};
use strata_engine::promotion::rollout::{self, Rollouts};
use strata_engine::promotion::stages::Stage;
use strata_engine::promotion::{corpus, synthetic};
use strata_journal::{ExpectedVersion, StreamAppend};

use super::EXIT_PROBLEMS;
use crate::app::append::{AppendError, Both, Decided, decide_and_append};
use crate::system::{SystemClock, V7Ids};

/// The synthetic corpus shipped with strata.
pub const BUNDLED_CORPUS: &str = include_str!("../../../corpus/synthetic.json");
/// Fewest bootstrap resamples for an evaluation that consumes a run (so nobody promotes on a
/// coarse interval).
const RECORDED_RESAMPLES_MIN: usize = 10_000;
/// Largest corpus, pairs or envelope file read.
const DOC_BYTES_MAX: u64 = 64 << 20;
/// Largest trusted-keys file (the reference's limit).
const KEYS_BYTES_MAX: u64 = 65_536;
/// Largest measurement key file (a PEM private key is a few hundred bytes).
const KEY_BYTES_MAX: u64 = 65_536;

/// `strata eval …`
#[derive(Subcommand, Debug)]
pub enum EvalCommand {
    /// The evaluation corpus.
    #[command(subcommand)]
    Corpus(CorpusCommand),
    /// Measure pairs: run every chosen corpus task under the baseline and the candidate policy,
    /// each in a fresh workspace and repository through `strata run`, and read each pair from
    /// the arms' journals (on the simulated provider the pairs are synthetic). Exit 3 when some
    /// task could not be measured.
    Run(Box<crate::eval_run::RunArgs>),
    /// Write seeded synthetic pairs for a corpus (marked synthetic: they never promote).
    Synthesize {
        /// Corpus file (default: the bundled synthetic corpus).
        #[arg(long, value_parser = crate::cli::path_arg)]
        corpus: Option<PathBuf>,
        /// Seed; the same seed gives the same pairs.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Generate an Ed25519 measurement key: PKCS #8 PEM at OUT (mode 0600), SPKI PEM at
    /// OUT.pub, and print the trusted-keys entry.
    Keygen {
        /// Key id (`measurement-key-` and 1–64 of a-z 0-9 . _ -).
        #[arg(long)]
        key_id: String,
        /// Private key file to create.
        #[arg(long, value_parser = crate::cli::path_arg)]
        out: PathBuf,
    },
    /// Sign a measurement envelope (v2) over a pairs file; prints the envelope.
    Sign {
        /// Pairs file (`strata.paired-results/v1`).
        #[arg(long, value_parser = crate::cli::path_arg)]
        pairs: PathBuf,
        /// Private key (PKCS #8 PEM, Ed25519).
        #[arg(long, value_parser = crate::cli::path_arg)]
        key: PathBuf,
        /// The key's id.
        #[arg(long)]
        key_id: String,
        /// Candidate policy version measured.
        #[arg(long)]
        candidate_version: String,
        /// Runtime measured (`sha256:…`).
        #[arg(long)]
        runtime_digest: String,
        /// Run id (default: a new random `measurement-<32 hex>`).
        #[arg(long)]
        run_id: Option<String>,
        /// When measured, RFC 3339 (default: now).
        #[arg(long)]
        measured_at: Option<String>,
    },
    /// Evaluate a candidate: every gate over the pairs, provenance first. Records the
    /// envelope's run as consumed in the journal. Exit 0 when it promotes, 3 when it does not.
    Promote {
        /// Pairs file.
        #[arg(long, value_parser = crate::cli::path_arg)]
        pairs: PathBuf,
        /// Corpus file (default: the bundled synthetic corpus).
        #[arg(long, value_parser = crate::cli::path_arg)]
        corpus: Option<PathBuf>,
        /// Signed measurement envelope.
        #[arg(long, value_parser = crate::cli::path_arg)]
        envelope: Option<PathBuf>,
        /// Trusted keys: JSON object of key id → SPKI PEM.
        #[arg(long, value_parser = crate::cli::path_arg)]
        trusted_keys: Option<PathBuf>,
        /// The candidate version being promoted (the envelope must name it).
        #[arg(long)]
        candidate_version: String,
        /// The runtime it runs on, `sha256:…` (the envelope must name it).
        #[arg(long)]
        runtime_digest: String,
        /// Journal recording consumed runs (a journal directory or a workspace root; a `--dir`
        /// on the command line that names a workspace names it too; without either, a trial
        /// run that records and trusts nothing).
        #[arg(long, value_parser = crate::cli::path_arg)]
        journal: Option<PathBuf>,
        /// Rollout stage evaluated for (adds the stage policy's action).
        #[arg(long)]
        stage: Option<String>,
        /// Bootstrap resamples.
        #[arg(long, default_value_t = 10_000)]
        resamples: usize,
        /// Stricter thresholds: a JSON file with any of the threshold fields.
        #[arg(long, value_parser = crate::cli::path_arg)]
        thresholds: Option<PathBuf>,
        /// Evaluate for this rollout's current stage and record the stage policy's decision
        /// (advance, hold or roll back) with the run's consumption, in one append. Needs
        /// --journal; nothing moves when provenance fails.
        #[arg(long)]
        rollout: Option<String>,
    },
}

/// `strata eval corpus …`
#[derive(Subcommand, Debug)]
pub enum CorpusCommand {
    /// Validate a corpus and replay every oracle. Exit 3 when problems are found.
    Check {
        /// Corpus file (default: the bundled synthetic corpus).
        #[arg(value_parser = crate::cli::path_arg)]
        file: Option<PathBuf>,
    },
}

fn read_json(path: &Path, what: &str, max: u64) -> anyhow::Result<Value> {
    let text = crate::files::read_text_bounded(path, max, what)?;
    serde_json::from_str(&text).with_context(|| {
        format!("[STRATA-E1403] {what} {} is not JSON; fix the syntax at the position shown", path.display())
    })
}

fn corpus_doc(path: Option<&Path>) -> anyhow::Result<Value> {
    match path {
        Some(p) => read_json(p, "corpus", DOC_BYTES_MAX),
        None => Ok(serde_json::from_str(BUNDLED_CORPUS)?),
    }
}

fn pretty(v: &impl serde::Serialize) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(v)?)
}

/// Runs an `eval` command in directory `dir`; `dir_journal` is the workspace `--dir` named on
/// the command line, which `promote` records in when `--journal` is not given.
pub fn run(
    o: &crate::output::Out,
    cmd: EvalCommand,
    dir: &Path,
    dir_journal: Option<PathBuf>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    match cmd {
        EvalCommand::Run(args) => {
            let doc = corpus_doc(args.corpus.as_deref())?;
            crate::eval_run::run(o, dir, *args, &doc, json)
        }
        EvalCommand::Corpus(CorpusCommand::Check { file }) => corpus_check(o, file.as_deref(), json),
        EvalCommand::Synthesize { corpus: path, seed } => {
            let doc = corpus_doc(path.as_deref())?;
            let report = corpus::check(&doc).map_err(|e| anyhow::anyhow!("[STRATA-E1404] {e}"))?;
            let c = corpus::parse(&doc).map_err(|e| anyhow::anyhow!("[STRATA-E1404] {e}"))?;
            outln!(o, "{}", pretty(&synthetic::synthesize(&c, &report.digest, seed))?);
            Ok(ExitCode::SUCCESS)
        }
        EvalCommand::Keygen { key_id, out } => keygen(o, &key_id, &out, json),
        EvalCommand::Sign { pairs, key, key_id, candidate_version, runtime_digest, run_id, measured_at } => {
            let doc = read_json(&pairs, "pairs", DOC_BYTES_MAX)?;
            let parsed =
                strata_engine::promotion::pairs::parse(&doc).map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
            let text = crate::files::read_text_bounded(&key, KEY_BYTES_MAX, "measurement key")?;
            let signing = envelope::signing_key_from_pem(&text)
                .map_err(|e| anyhow::anyhow!("[STRATA-E1406] {}: {e}", key.display()))?;
            let run_id = match run_id {
                Some(r) => r,
                None => {
                    let seed = crate::system::random_seed()?;
                    format!("measurement-{}", seed[..16].iter().map(|b| format!("{b:02x}")).collect::<String>())
                }
            };
            let measured_at = measured_at.unwrap_or_else(|| time::format_rfc3339(SystemClock.now_ns()));
            let claims = Claims {
                candidate_version,
                corpus_version: corpus::envelope_version(&parsed.corpus.version, &parsed.corpus.digest),
                runtime_digest,
                measured_at,
                measurement_run_id: run_id,
                signer_key_id: key_id,
                promotion_authorized: parsed.pairs.iter().all(|p| p.provenance.promotes()),
            };
            let env =
                envelope::sign(&claims, &doc["pairs"], &signing).map_err(|e| anyhow::anyhow!("[STRATA-E1406] {e}"))?;
            if !claims.promotion_authorized {
                errln!(
                    o,
                    "note: some pairs are not measured and authorised; the envelope says promotion_authorized: false"
                );
            }
            outln!(o, "{}", pretty(&env)?);
            Ok(ExitCode::SUCCESS)
        }
        EvalCommand::Promote {
            pairs,
            corpus: corpus_path,
            envelope: envelope_path,
            trusted_keys,
            candidate_version,
            runtime_digest,
            journal,
            stage,
            resamples,
            thresholds,
            rollout,
        } => {
            let journal = journal.or(dir_journal);
            let corpus_value = corpus_doc(corpus_path.as_deref())?;
            let pairs_value = read_json(&pairs, "pairs", DOC_BYTES_MAX)?;
            let envelope_value = envelope_path.map(|p| read_json(&p, "envelope", DOC_BYTES_MAX)).transpose()?;
            let keys = match trusted_keys {
                None => TrustedKeys::default(),
                Some(p) => TrustedKeys::from_json(&read_json(&p, "trusted keys", KEYS_BYTES_MAX)?)
                    .map_err(|e| anyhow::anyhow!("[STRATA-E1406] {e}"))?,
            };
            let thresholds = match thresholds {
                None => Thresholds::default(),
                Some(p) => serde_json::from_value(read_json(&p, "thresholds", KEYS_BYTES_MAX)?).map_err(|e| {
                    anyhow::anyhow!(
                        "[STRATA-E1407] thresholds: {e}; fields are those of `thresholds` in the evaluation"
                    )
                })?,
            };
            let stage = stage
                .map(|s| {
                    Stage::parse(&s).ok_or_else(|| {
                        anyhow::anyhow!("[STRATA-E1407] --stage {s:?}: one of off, observe, shadow, canary-10, canary-25, canary-50, on")
                    })
                })
                .transpose()?;
            if !(1..=100_000).contains(&resamples) {
                bail!("[STRATA-E1407] --resamples {resamples}: 1 to 100000");
            }
            if journal.is_some() && resamples < RECORDED_RESAMPLES_MIN {
                bail!(
                    "[STRATA-E1407] --resamples {resamples}: an evaluation recorded in a journal takes at least {RECORDED_RESAMPLES_MIN} (fewer only for a trial run without --journal)"
                );
            }
            let opts = Options {
                thresholds,
                resamples,
                evaluation_id: None,
                stage,
                expected: Expected {
                    now_ns: i128::from(SystemClock.now_ns()),
                    candidate_version: &candidate_version,
                    corpus_version: "", // the corpus's own version; set by the evaluation
                    runtime_digest: &runtime_digest,
                    keys: &keys,
                },
                engine_version: env!("CARGO_PKG_VERSION"),
                recordable: journal.is_some(),
            };
            if rollout.is_some() && journal.is_none() {
                bail!("[STRATA-E1407] --rollout needs --journal: the rollout lives in a journal");
            }
            let doc = promote_recorded(
                o,
                &corpus_value,
                &pairs_value,
                envelope_value.as_ref(),
                opts,
                journal.as_deref(),
                rollout.as_deref(),
            )?;
            if json {
                outln!(o, "{}", pretty(&doc)?);
            } else {
                print_evaluation(o, &doc);
            }
            Ok(if doc.evaluation.promote { ExitCode::SUCCESS } else { ExitCode::from(EXIT_PROBLEMS) })
        }
    }
}

/// Evaluates; with a journal, records the envelope's run as consumed (one append expecting the
/// ledger's version, decided again if another process moved it), and with a rollout, the stage
/// policy's decision on the rollout's stream in the same append.
fn promote_recorded(
    o: &crate::output::Out,
    corpus_value: &Value,
    pairs_value: &Value,
    envelope_value: Option<&Value>,
    mut opts: Options<'_>,
    journal: Option<&Path>,
    rollout_name: Option<&str>,
) -> anyhow::Result<promote::Document> {
    let fail = |e: promote::PromoteError| anyhow::anyhow!("[{}] {e}", e.code());
    let Some(dir) = journal else {
        return promote::evaluate(corpus_value, pairs_value, envelope_value, &opts, &|_| None)
            .map(|d| d.0)
            .map_err(fail);
    };
    // Never a new journal: a run consumed in a journal nobody keeps protects nothing.
    let journal = super::ce::open_journal_at(dir, false, super::ce::LOCK_WAIT).map_err(|e| {
        anyhow::anyhow!(
            "[STRATA-E1408] {}; --journal names the journal that keeps consumed runs and rollouts (create it with `strata init` or `strata rollout start`)",
            e.detail
        )
    })?;
    let result = record(o, &journal, corpus_value, pairs_value, envelope_value, &mut opts, rollout_name);
    journal.close_blocking()?;
    result
}

fn record(
    o: &crate::output::Out,
    journal: &strata_journal::Journal,
    corpus_value: &Value,
    pairs_value: &Value,
    envelope_value: Option<&Value>,
    opts: &mut Options<'_>,
    rollout_name: Option<&str>,
) -> anyhow::Result<promote::Document> {
    let fail = |e: promote::PromoteError| anyhow::anyhow!("[{}] {e}", e.code());
    let refused = |e: rollout::RolloutError| anyhow::anyhow!("[STRATA-E1601] {e}");
    let mut state = Both(Ledger::default(), Rollouts::default());
    let asked_stage = opts.stage;
    let decided = decide_and_append(journal, &mut state, |Both(ledger_state, rollouts)| -> anyhow::Result<_> {
        if let Some(name) = rollout_name {
            let ro = rollouts.get(name).ok_or_else(|| refused(rollout::RolloutError::Unknown(name.to_owned())))?;
            if asked_stage.is_some_and(|s| s != ro.stage) {
                bail!(
                    "[STRATA-E1407] --stage differs from rollout {name}'s stage {}; leave --stage out",
                    ro.stage.as_str()
                );
            }
            if opts.expected.candidate_version != ro.start.candidate_version
                || opts.expected.runtime_digest != ro.start.runtime_digest
            {
                bail!(
                    "[STRATA-E1407] rollout {name} is for candidate {} on {}; --candidate-version and --runtime-digest must name them",
                    ro.start.candidate_version,
                    ro.start.runtime_digest
                );
            }
            opts.stage = Some(ro.stage);
        }
        let consumed = |id: &str| ledger_state.consumed_runs().get(id).copied();
        let (mut doc, trusted) =
            promote::evaluate(corpus_value, pairs_value, envelope_value, opts, &consumed).map_err(fail)?;
        let Some(t) = trusted else {
            if rollout_name.is_some() {
                errln!(o, "note: provenance failed; the rollout does not move on this evaluation");
                doc.action = None;
            }
            return Ok(Decided::nothing(doc));
        };
        let event =
            ledger::consume_run(ledger_state, &t.measurement_run_id, &t.corpus_digest, &mut V7Ids, &SystemClock)
                .map_err(|e| anyhow::anyhow!("[STRATA-E1408] {}", e.detail))?;
        let mut appends = vec![StreamAppend {
            stream: ledger::STREAM.to_owned(),
            expected: ExpectedVersion::Exact(ledger_state.version()),
            events: vec![event],
        }];
        if let Some(name) = rollout_name {
            // The document reports what is recorded (limits may turn a hold into a rollback),
            // and the event carries the digest of exactly that document.
            let mut change = rollout::evaluated(rollouts, name, &doc).map_err(refused)?;
            doc.action = Some(change.action);
            if let Some(e) = change.evaluation.as_mut() {
                e.digest = strata_engine::ce::json::sha256_tagged(serde_json::to_string(&doc)?.as_bytes());
            }
            appends.push(StreamAppend {
                stream: rollout::stream(name),
                expected: ExpectedVersion::Exact(rollouts.version(name)),
                events: rollout::stamp(rollout::changed_event(&change), &mut V7Ids, &SystemClock).map_err(refused)?,
            });
        }
        Ok(Decided { appends, answer: doc })
    });
    let done = match decided {
        Err(AppendError::Contended { .. }) => {
            bail!("[STRATA-E1408] the ledger kept moving under this evaluation; run it again")
        }
        r => super::appended(r, |e| e)?,
    };
    if done.events > 0
        && let Some(r) = rollout_name.and_then(|n| state.1.get(n))
    {
        errln!(
            o,
            "rollout {}: now at {} ({})",
            r.start.rollout,
            r.stage.as_str(),
            r.last_reason.as_deref().unwrap_or("")
        );
    }
    Ok(done.answer)
}

fn corpus_check(o: &crate::output::Out, file: Option<&Path>, json: bool) -> anyhow::Result<ExitCode> {
    let doc = corpus_doc(file)?;
    let report = corpus::check(&doc).map_err(|e| anyhow::anyhow!("[STRATA-E1404] {e}"))?;
    if json {
        outln!(o, "{}", pretty(&report)?);
    } else {
        let kind = if report.synthetic { "synthetic" } else { "measured" };
        outln!(o, "corpus {} {} ({kind}), {}", report.name, report.version, report.digest);
        let strata: Vec<String> = report.strata.iter().map(|(s, n)| format!("{s} {n}")).collect();
        outln!(o, "{} tasks: {}", report.n_tasks, strata.join(", "));
        outln!(o, "oracles agreeing with dispatch: {} of {}", report.oracles_agreeing, report.n_tasks);
        for p in &report.problems {
            outln!(o, "problem [{}] {}: {}", p.rule, p.task.as_deref().unwrap_or("corpus"), p.detail);
        }
        outln!(o, "{}", if report.ok { "ok" } else { "problems found" });
    }
    Ok(if report.ok { ExitCode::SUCCESS } else { ExitCode::from(EXIT_PROBLEMS) })
}

fn keygen(o: &crate::output::Out, key_id: &str, out: &Path, json: bool) -> anyhow::Result<ExitCode> {
    if !envelope::is_key_id(key_id) {
        bail!("[STRATA-E1406] --key-id {key_id:?}: `measurement-key-` and 1–64 of a-z 0-9 . _ -");
    }
    let key = envelope::signing_key_from_seed(crate::system::random_seed()?);
    let public = envelope::public_key_to_pem(&key.verifying_key());
    let pub_path = PathBuf::from(format!("{}.pub", out.display()));
    super::write_new_file(out, envelope::signing_key_to_pem(&key).as_bytes(), 0o600)?;
    super::write_new_file(&pub_path, public.as_bytes(), 0o644)?;
    let entry = serde_json::json!({ key_id: public });
    if json {
        outln!(
            o,
            "{}",
            serde_json::json!({"key_id": key_id, "private_key_file": out.display().to_string(), "public_key_file": pub_path.display().to_string(), "trusted_keys_entry": entry})
        );
    } else {
        outln!(o, "wrote {} (private, mode 0600) and {}", out.display(), pub_path.display());
        outln!(o, "trusted-keys entry: {entry}");
    }
    Ok(ExitCode::SUCCESS)
}

fn print_evaluation(o: &crate::output::Out, doc: &promote::Document) {
    let e = &doc.evaluation;
    let kind = if doc.corpus.synthetic { ", synthetic" } else { "" };
    let basis = doc.cost_basis.map_or("unstated", |b| b.as_str());
    outln!(
        o,
        "evaluation {} on corpus {} {}{kind}: {} pairs, cost basis {basis}",
        e.evaluation_id,
        doc.corpus.name,
        doc.corpus.version,
        e.n_tasks
    );
    let f = |x: Option<f64>| x.map_or_else(|| "—".to_owned(), |v| format!("{v:.4}"));
    let mut table =
        crate::table::Table::new(&["gate", "verdict", "estimate", "lower 95", "upper 95", "threshold", "n", "reason"]);
    for g in &e.gates {
        table.row(vec![
            g.gate.to_owned(),
            format!("{:?}", g.verdict),
            f(g.estimate),
            f(g.lower_95),
            f(g.upper_95),
            format!("{}", g.threshold),
            g.n_used.to_string(),
            g.reason.clone(),
        ]);
    }
    out!(o, "{}", table.render());
    if let (Some(stage), Some(action)) = (doc.stage, doc.action) {
        outln!(o, "stage {}: {:?}", stage.as_str(), action);
    }
    outln!(o, "{}", if e.promote { "promote" } else { "does not promote" });
}
