//! A whole promotion evaluation: corpus, pairs and signed envelope in; the evaluation document
//! out, with a provenance gate ahead of the nine statistical and veto gates.
//!
//! Provenance passes only when every pair is measured, empirical and authorised, the corpus is
//! not synthetic, the envelope is trusted ([`envelope::verify`]) and its run has not been
//! consumed before. Recording the consumption is the caller's next step (one journal append
//! expecting the ledger's version); until that append succeeds the evaluation must not be used.
//! Evaluating the same inputs against the same ledger gives byte-identical JSON.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::corpus::{self, CorpusError};
use super::envelope::{self, Expected, Trusted};
use super::gates::{self, Evaluation, Gate, InputError, Thresholds, Verdict};
use super::pairs::{self, CostBasis, PairsError};
use super::stages::{self, Action, Stage};

/// The document's schema id.
pub const SCHEMA: &str = "strata.promotion-evaluation/v1";

/// Inputs that cannot be evaluated at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PromoteError {
    /// The corpus is unreadable or fails its check.
    #[error(transparent)]
    Corpus(#[from] CorpusError),
    /// The pairs are unreadable or do not belong to the corpus.
    #[error(transparent)]
    Pairs(#[from] PairsError),
    /// The gates refused the pairs.
    #[error("pairs: {0}")]
    Input(#[from] InputError),
    /// An evaluation id that is empty, too long or holds control characters.
    #[error("evaluation id: 1 to 128 bytes, no control characters")]
    EvaluationId,
}

impl PromoteError {
    /// The `[STRATA-E…]` code this error is reported under: the pairs' own code for a pairs
    /// error ([`PairsError::code`]), else `STRATA-E1405`.
    pub fn code(&self) -> &'static str {
        match self {
            PromoteError::Pairs(e) => e.code(),
            _ => "STRATA-E1405",
        }
    }
}

/// The corpus as the evaluation names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CorpusId {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Digest of the corpus document.
    pub digest: String,
    /// Synthetic corpus.
    pub synthetic: bool,
}

/// The evaluation document (schema `schemas/promotion-evaluation.schema.json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Document {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The strata version that evaluated.
    pub engine_version: String,
    /// The corpus.
    pub corpus: CorpusId,
    /// Digest of the pairs array (what the envelope signs as `corpus_digest`).
    pub pairs_digest: String,
    /// What the pairs' costs count, as the pairs document states it (left out when it does not
    /// say, so such an evaluation is the document it always was).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_basis: Option<CostBasis>,
    /// The envelope's run, when it was trusted.
    pub measurement_run_id: Option<String>,
    /// The rollout stage evaluated for, if any.
    pub stage: Option<Stage>,
    /// What the stage policy does with this evaluation, if a stage was given.
    pub action: Option<Action>,
    /// The gates and the verdict.
    #[serde(flatten)]
    pub evaluation: Evaluation,
}

/// Everything an evaluation takes besides the documents.
#[derive(Clone, Copy)]
pub struct Options<'a> {
    /// Thresholds asked for (only ever tightened).
    pub thresholds: Thresholds,
    /// Bootstrap resamples.
    pub resamples: usize,
    /// Evaluation id; default derived from the corpus and pairs digests.
    pub evaluation_id: Option<&'a str>,
    /// Stage evaluated for.
    pub stage: Option<Stage>,
    /// What the envelope must match.
    pub expected: Expected<'a>,
    /// The strata version evaluating (recorded in the document).
    pub engine_version: &'a str,
    /// Whether consumption can be recorded (a journal is open); without it nothing is trusted.
    pub recordable: bool,
}

/// Evaluates. `consumed` answers from the journal whether a run id was used before.
pub fn evaluate(
    corpus_doc: &Value,
    pairs_doc: &Value,
    envelope: Option<&Value>,
    opts: &Options<'_>,
    consumed: &dyn Fn(&str) -> Option<u64>,
) -> Result<(Document, Option<Trusted>), PromoteError> {
    let report = corpus::check(corpus_doc)?;
    if !report.ok {
        let first = report.problems.first().map(|p| format!("{}: {}", p.rule, p.detail)).unwrap_or_default();
        return Err(CorpusError(format!(
            "{} problem(s), first {first}; run `strata eval corpus check` for all",
            report.problems.len()
        ))
        .into());
    }
    let corpus = corpus::parse(corpus_doc)?;
    let doc = pairs::parse(pairs_doc)?;
    pairs::against(&doc, &corpus, &report.digest)?;
    let pairs_value = &pairs_doc["pairs"];
    let pairs_digest = envelope::pairs_digest(pairs_value);
    let evaluation_id = match opts.evaluation_id {
        Some(id) if id.is_empty() || id.len() > 128 || id.chars().any(char::is_control) => {
            return Err(PromoteError::EvaluationId);
        }
        Some(id) => id.to_owned(),
        None => {
            let h = Sha256::digest(format!("{}\u{0}{pairs_digest}", report.digest));
            format!("eval-{}", h.iter().take(8).map(|b| format!("{b:02x}")).collect::<String>())
        }
    };
    let mut evaluation = gates::evaluate(&pairs::to_pairs(&doc), &opts.thresholds, &evaluation_id, opts.resamples)?;

    let bound_version = corpus::envelope_version(&corpus.version, &report.digest);
    let expected = Expected { corpus_version: &bound_version, ..opts.expected };
    let mut why: Vec<String> = Vec::new();
    if report.synthetic {
        why.push("the corpus is synthetic; synthetic pairs never promote".to_owned());
    }
    let unmeasured = doc.pairs.iter().filter(|p| !p.provenance.promotes()).count();
    if unmeasured > 0 {
        why.push(format!("{unmeasured} pair(s) are not measured, empirical and promotion-authorised"));
    }
    if !opts.recordable {
        why.push("no journal to record the run's consumption in (pass --journal)".to_owned());
    }
    let trusted = match envelope {
        None => {
            why.push("no signed measurement envelope".to_owned());
            None
        }
        Some(env) => match envelope::verify(env, pairs_value, &expected, consumed) {
            Ok(t) => Some(t),
            Err(reasons) => {
                why.extend(reasons);
                None
            }
        },
    };
    let pass = why.is_empty();
    let n = doc.pairs.len();
    evaluation.gates.insert(
        0,
        Gate {
            gate: "provenance",
            estimate: Some((n - unmeasured) as f64),
            lower_95: None,
            upper_95: None,
            threshold: n as f64,
            n_used: n,
            method: "measured pairs, ed25519 envelope v2, journal replay ledger",
            verdict: if pass { Verdict::Pass } else { Verdict::Fail },
            reason: if pass {
                format!("{n} measured pairs under a trusted envelope, first use of its run")
            } else {
                why.join("; ")
            },
        },
    );
    evaluation.promote = evaluation.gates.iter().all(|g| g.verdict == Verdict::Pass);
    let measurement_run_id = if pass { trusted.as_ref().map(|t| t.measurement_run_id.clone()) } else { None };
    let document = Document {
        schema: SCHEMA,
        engine_version: opts.engine_version.to_owned(),
        corpus: CorpusId {
            name: report.name,
            version: report.version,
            digest: report.digest,
            synthetic: report.synthetic,
        },
        pairs_digest,
        cost_basis: doc.cost_basis,
        measurement_run_id,
        stage: opts.stage,
        action: opts.stage.map(|s| stages::decide(s, &evaluation)),
        evaluation,
    };
    Ok((document, if pass { trusted } else { None }))
}
