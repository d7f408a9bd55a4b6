//! Paired results (`strata.paired-results/v1`): each corpus task measured under the baseline and
//! the candidate policy, with where the measurement came from. The document names the corpus it
//! was measured on by name, version and digest; [`against`] checks that it matches the corpus.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::corpus::Corpus;
use super::gates::{Arm, Finding, PAIRS_MAX, Pair};

/// The document's schema id.
pub const SCHEMA: &str = "strata.paired-results/v1";
/// Most findings per arm.
pub const FINDINGS_MAX: usize = 1_000;
/// Highest cost, micro-units (10⁹ currency units).
pub const COST_MICROS_MAX: u64 = 1_000_000_000_000_000;
/// Longest wall time, ms (31 days).
pub const WALL_MS_MAX: u64 = 2_678_400_000;
/// Most rework rounds.
pub const REWORK_MAX: u32 = 1_000_000;

/// The corpus a pairs document was measured on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorpusRef {
    /// Corpus name.
    pub name: String,
    /// Corpus version.
    pub version: String,
    /// Corpus digest (`sha256:…`).
    pub digest: String,
}

/// Where a pair's numbers came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// `measured` or `synthetic`.
    pub kind: String,
    /// Measured on real runs.
    pub empirical: bool,
    /// The measurer authorises promotion on it.
    pub promotion_authorized: bool,
}

impl Provenance {
    /// Measured, empirical and authorised: the only provenance that can promote.
    pub fn promotes(&self) -> bool {
        self.kind == "measured" && self.empirical && self.promotion_authorized
    }
}

/// A finding as written in the document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FindingDoc {
    /// Stable fingerprint, 1–128 bytes.
    pub fingerprint: String,
    /// `low`, `medium`, `high` or `critical`.
    pub severity: String,
}

/// One arm as written in the document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmDoc {
    /// Billed cost, micro-units, from authoritative accounting.
    pub cost_micros: u64,
    /// Wall time, ms.
    pub wall_ms: u64,
    /// Quality score, points in [0, 100].
    pub quality: f64,
    /// Rework rounds.
    pub rework: u32,
    /// Security findings.
    #[serde(default)]
    pub findings: Vec<FindingDoc>,
    /// What the event telemetry accounted, micro-units (null: no telemetry).
    pub telemetry_cost_micros: Option<u64>,
}

/// One pair as written in the document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairDoc {
    /// Corpus task id.
    pub task_id: String,
    /// The task's stratum.
    pub stratum: String,
    /// Provenance.
    pub provenance: Provenance,
    /// Baseline arm.
    pub baseline: ArmDoc,
    /// Candidate arm.
    pub candidate: ArmDoc,
}

/// A pairs document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairsDoc {
    /// [`SCHEMA`].
    pub schema: String,
    /// The corpus measured.
    pub corpus: CorpusRef,
    /// The pairs.
    pub pairs: Vec<PairDoc>,
}

/// A pairs document that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pairs: {0}")]
pub struct PairsError(pub String);

fn bad<T>(msg: String) -> Result<T, PairsError> {
    Err(PairsError(msg))
}

/// Reads a pairs document and checks every bound.
pub fn parse(doc: &Value) -> Result<PairsDoc, PairsError> {
    let d: PairsDoc = serde_json::from_value(doc.clone()).map_err(|e| PairsError(e.to_string()))?;
    if d.schema != SCHEMA {
        return bad(format!("schema is {:?}; expected {SCHEMA:?}", d.schema));
    }
    if d.pairs.is_empty() || d.pairs.len() > PAIRS_MAX {
        return bad(format!("{} pairs; 1 to {PAIRS_MAX}", d.pairs.len()));
    }
    for p in &d.pairs {
        let at = &p.task_id;
        if !matches!(p.provenance.kind.as_str(), "measured" | "synthetic") {
            return bad(format!("{at}: provenance.kind {:?} is neither measured nor synthetic", p.provenance.kind));
        }
        for (arm, a) in [("baseline", &p.baseline), ("candidate", &p.candidate)] {
            if a.cost_micros == 0 || a.cost_micros > COST_MICROS_MAX {
                return bad(format!("{at}: {arm}.cost_micros must be 1 to {COST_MICROS_MAX}"));
            }
            if a.wall_ms == 0 || a.wall_ms > WALL_MS_MAX {
                return bad(format!("{at}: {arm}.wall_ms must be 1 to {WALL_MS_MAX} (31 days)"));
            }
            if !(a.quality.is_finite() && (0.0..=100.0).contains(&a.quality)) {
                return bad(format!("{at}: {arm}.quality must be a number of points within 0 to 100"));
            }
            if a.rework > REWORK_MAX {
                return bad(format!("{at}: {arm}.rework at most {REWORK_MAX}"));
            }
            if a.telemetry_cost_micros.is_some_and(|t| t > COST_MICROS_MAX) {
                return bad(format!("{at}: {arm}.telemetry_cost_micros at most {COST_MICROS_MAX}"));
            }
            if a.findings.len() > FINDINGS_MAX {
                return bad(format!("{at}: {arm}.findings: at most {FINDINGS_MAX}"));
            }
            for f in &a.findings {
                if f.fingerprint.is_empty() || f.fingerprint.len() > 128 {
                    return bad(format!("{at}: {arm}.findings: a fingerprint is 1 to 128 bytes"));
                }
                if !matches!(f.severity.as_str(), "low" | "medium" | "high" | "critical") {
                    return bad(format!(
                        "{at}: {arm}.findings: severity {:?} is not low|medium|high|critical",
                        f.severity
                    ));
                }
            }
        }
    }
    Ok(d)
}

/// Checks that `d` was measured on `corpus` (its digest `corpus_digest`): same name, version and
/// digest, every pair a corpus task in the task's stratum, no task twice.
pub fn against(d: &PairsDoc, corpus: &Corpus, corpus_digest: &str) -> Result<(), PairsError> {
    if d.corpus.name != corpus.name || d.corpus.version != corpus.version || d.corpus.digest != corpus_digest {
        return bad(format!(
            "measured on corpus {} {} ({}), not on the corpus given ({} {}, {corpus_digest})",
            d.corpus.name, d.corpus.version, d.corpus.digest, corpus.name, corpus.version
        ));
    }
    let tasks: BTreeMap<&str, &str> = corpus.tasks.iter().map(|t| (t.id.as_str(), t.stratum.as_str())).collect();
    let mut seen = BTreeMap::new();
    for p in &d.pairs {
        match tasks.get(p.task_id.as_str()) {
            None => return bad(format!("{}: not a task of the corpus", p.task_id)),
            Some(s) if *s != p.stratum => {
                return bad(format!("{}: stratum {} but the corpus has it in {s}", p.task_id, p.stratum));
            }
            Some(_) => {}
        }
        if seen.insert(p.task_id.as_str(), ()).is_some() {
            return bad(format!("{}: measured twice; one pair per task", p.task_id));
        }
    }
    Ok(())
}

fn arm(a: &ArmDoc) -> Arm {
    Arm {
        cost_micros: a.cost_micros,
        wall_ms: a.wall_ms,
        quality: a.quality,
        rework: a.rework,
        findings: a
            .findings
            .iter()
            .map(|f| Finding { fingerprint: f.fingerprint.clone(), severity: f.severity.clone() })
            .collect(),
        telemetry_cost_micros: a.telemetry_cost_micros,
    }
}

/// The pairs the gates evaluate.
pub fn to_pairs(d: &PairsDoc) -> Vec<Pair> {
    d.pairs
        .iter()
        .map(|p| Pair {
            task_id: p.task_id.clone(),
            stratum: p.stratum.clone(),
            baseline: arm(&p.baseline),
            candidate: arm(&p.candidate),
        })
        .collect()
}
