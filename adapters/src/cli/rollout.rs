//! `strata rollout`: start a rollout of a candidate routing policy, show it, move it by hand
//! (advance up to shadow, hold, roll back), and route units under it. Every change is an event
//! on the rollout's stream, appended expecting the version the decision was made on.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use serde_json::{Value, json};
use strata_engine::promotion::rollout::{self, RolloutError, Rollouts};
use strata_engine::promotion::stages::Action;
use strata_journal::projection::catch_up_one;
use strata_journal::{ExpectedVersion, Journal, StreamAppend};

use crate::app::append;
use crate::system::{SystemClock, V7Ids};

/// Largest routing-facts request on stdin.
const FACTS_BYTES_MAX: u64 = 1 << 20;

/// `strata rollout …`
#[derive(Subcommand, Debug)]
pub enum RolloutCommand {
    /// Start a rollout at `off`.
    Start {
        /// Rollout name (1–64 of a-z 0-9 . _ -).
        name: String,
        /// Bucketing salt, fixed for the rollout's life (default: the name).
        #[arg(long)]
        salt: Option<String>,
        /// Baseline policy: JSON object of `max_nesting_depth`, `max_active_inherited`.
        #[arg(long, default_value = "{}")]
        baseline: String,
        /// Candidate policy, same keys.
        #[arg(long)]
        candidate: String,
        /// The candidate's version: only measurements signed for it move the rollout.
        #[arg(long)]
        candidate_version: String,
        /// The runtime the candidate runs on (`sha256:…`): only measurements signed for it count.
        #[arg(long)]
        runtime_digest: String,
    },
    /// Show one rollout or all of them.
    Status {
        /// Rollout name (default: all).
        name: Option<String>,
    },
    /// Advance by hand (off → observe → shadow; later stages need `strata eval promote --rollout`).
    Advance {
        /// Rollout name.
        name: String,
        /// Why.
        #[arg(long, default_value = "operator advanced")]
        reason: String,
    },
    /// Hold at the current stage.
    Hold {
        /// Rollout name.
        name: String,
        /// Why.
        #[arg(long, default_value = "operator held")]
        reason: String,
    },
    /// Roll back to off.
    Rollback {
        /// Rollout name.
        name: String,
        /// Why.
        #[arg(long, default_value = "operator rolled back")]
        reason: String,
    },
    /// Decide one unit (routing facts as JSON on stdin) under the rollout's stage: both policies
    /// from shadow on, both recorded; prints which decision runs.
    Route {
        /// Rollout name.
        name: String,
        /// The unit (task) id; its bucket decides canary exposure.
        #[arg(long)]
        unit: String,
    },
}

fn refused(e: RolloutError) -> anyhow::Error {
    anyhow::anyhow!("[STRATA-E1601] {e}")
}

/// Decides with `decide` and appends the events on the rollout's stream expecting the version
/// decided on, through the one decide-and-append.
fn decide_and_append<T>(
    journal: &Journal,
    state: &mut Rollouts,
    name: &str,
    mut decide: impl FnMut(&Rollouts) -> Result<(T, rollout::Decided), RolloutError>,
) -> anyhow::Result<T> {
    let decided = append::decide_and_append(journal, state, |s| {
        let (answer, events) = decide(s)?;
        let appends = if events.is_empty() {
            Vec::new()
        } else {
            vec![StreamAppend {
                stream: rollout::stream(name),
                expected: ExpectedVersion::Exact(s.version(name)),
                events: rollout::stamp(events, &mut V7Ids, &SystemClock)?,
            }]
        };
        Ok(append::Decided { appends, answer })
    });
    match decided {
        Err(append::AppendError::Contended { .. }) => {
            bail!("[STRATA-E1602] rollout {name} kept moving under this command; run it again")
        }
        r => Ok(super::appended(r, refused)?.answer),
    }
}

fn open(dir: &Path) -> anyhow::Result<Journal> {
    super::ce::open_journal(dir).map_err(|e| anyhow::anyhow!("[STRATA-E1602] {}", e.detail))
}

/// Runs `strata rollout …` against the journal at `dir` (a journal directory or a workspace).
pub fn run(o: &crate::output::Out, dir: &Path, cmd: RolloutCommand, json: bool) -> anyhow::Result<ExitCode> {
    let journal = open(dir)?;
    let result = run_on(o, &journal, cmd, json);
    journal.close_blocking()?;
    result
}

fn run_on(o: &crate::output::Out, journal: &Journal, cmd: RolloutCommand, json: bool) -> anyhow::Result<ExitCode> {
    let mut state = Rollouts::default();
    match cmd {
        RolloutCommand::Start { name, salt, baseline, candidate, candidate_version, runtime_digest } => {
            let parse = |which: &str, text: &str| -> anyhow::Result<_> {
                let v: Value = serde_json::from_str(text).with_context(|| {
                    format!("[STRATA-E1601] --{which}: not JSON; e.g. '{{\"max_nesting_depth\": 3}}'")
                })?;
                rollout::policy(&v).map_err(|e| anyhow::anyhow!("[STRATA-E1601] --{which}: {e}"))
            };
            let (b, c) = (parse("baseline", &baseline)?, parse("candidate", &candidate)?);
            let salt = salt.unwrap_or_else(|| name.clone());
            let started = rollout::Started {
                rollout: name.clone(),
                salt,
                baseline: b,
                candidate: c,
                candidate_version,
                runtime_digest,
            };
            decide_and_append(journal, &mut state, &name, |s| Ok(((), rollout::start(s, started.clone())?)))?;
            show(o, &state, Some(&name), json)
        }
        RolloutCommand::Status { name } => {
            catch_up_one(&mut state, journal)?;
            show(o, &state, name.as_deref(), json)
        }
        RolloutCommand::Advance { name, reason } => {
            operate(o, journal, &mut state, &name, Action::Advance, &reason, json)
        }
        RolloutCommand::Hold { name, reason } => operate(o, journal, &mut state, &name, Action::Hold, &reason, json),
        RolloutCommand::Rollback { name, reason } => {
            operate(o, journal, &mut state, &name, Action::Rollback, &reason, json)
        }
        RolloutCommand::Route { name, unit } => {
            let mut text = String::new();
            std::io::stdin().take(FACTS_BYTES_MAX + 1).read_to_string(&mut text)?;
            if text.len() as u64 > FACTS_BYTES_MAX {
                bail!("[STRATA-E1601] routing facts on stdin: at most {FACTS_BYTES_MAX} bytes");
            }
            let facts: Value = serde_json::from_str(&text)
                .context("[STRATA-E1601] routing facts on stdin: not JSON; send the `strata ce route` input object")?;
            let routed = decide_and_append(journal, &mut state, &name, |s| rollout::route(s, &name, &unit, &facts))?;
            let chosen =
                if routed.executed == "candidate" { routed.candidate.as_ref() } else { Some(&routed.baseline) };
            let mode = chosen.map_or("", |d| d.mode.as_str());
            if json {
                outln!(o, "{}", json!({"routed": routed, "selected_mode": mode}));
            } else {
                outln!(
                    o,
                    "unit {} (bucket {}) at {}: runs the {} decision: {mode}",
                    routed.unit,
                    routed.bucket_bps,
                    routed.stage.as_str(),
                    routed.executed
                );
                outln!(o, "baseline: {} {:?}", routed.baseline.mode, routed.baseline.reason_codes);
                if let Some(c) = &routed.candidate {
                    outln!(o, "candidate: {} {:?}", c.mode, c.reason_codes);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn operate(
    o: &crate::output::Out,
    journal: &Journal,
    state: &mut Rollouts,
    name: &str,
    action: Action,
    reason: &str,
    json: bool,
) -> anyhow::Result<ExitCode> {
    decide_and_append(journal, state, name, |s| Ok(((), rollout::operate(s, name, action, reason)?)))?;
    show(o, state, Some(name), json)
}

fn show(o: &crate::output::Out, state: &Rollouts, name: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let list: Vec<&rollout::Rollout> = match name {
        Some(n) => vec![state.get(n).ok_or_else(|| refused(RolloutError::Unknown(n.to_owned())))?],
        None => state.all().values().collect(),
    };
    if json {
        outln!(o, "{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        outln!(o, "no rollouts; start one with `strata rollout start NAME --candidate '{{…}}'`");
    }
    let mut table = crate::table::Table::new(&[
        "rollout",
        "stage",
        "exposure",
        "extensions",
        "errors",
        "changes",
        "units",
        "disagree",
        "last reason",
    ]);
    for r in list {
        table.row(vec![
            r.start.rollout.clone(),
            r.stage.as_str().to_owned(),
            format!("{}%", r.stage.exposure_bps() / 100),
            format!("{}/{}", r.extensions, rollout::EXTENSIONS_MAX),
            format!("{}/{}", r.consecutive_errors, rollout::CONSECUTIVE_ERRORS_MAX),
            r.changes.to_string(),
            r.units_routed.to_string(),
            r.disagreements.to_string(),
            r.last_reason.clone().unwrap_or_default(),
        ]);
    }
    out!(o, "{}", table.render());
    Ok(ExitCode::SUCCESS)
}

/// Where `--journal` points for rollout commands: the given directory or the workspace.
pub fn journal_dir(journal: Option<PathBuf>, workspace: &Path) -> PathBuf {
    journal.unwrap_or_else(|| workspace.to_path_buf())
}
