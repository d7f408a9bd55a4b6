//! Paired results (`strata.paired-results/v1`): each corpus task measured under the baseline and
//! the candidate policy, with where the measurement came from. The document names the corpus it
//! was measured on by name, version and digest; [`against`] checks that it matches the corpus.
//! It states what every `cost_micros` counts ([`CostBasis`]: billed tokens or billed amounts);
//! a document written before strata stated it has none, and reads as before.

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

/// What every `cost_micros` of a pairs document counts (`strata eval run --cost-basis`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CostBasis {
    /// Billed tokens: the four classes (uncached input, cache creation, cache read, output).
    Tokens,
    /// Billed cost, micro-units of the provider's currency.
    Amount,
}

impl CostBasis {
    /// The values the field takes.
    pub const NAMES: [&'static str; 2] = ["tokens", "amount"];

    /// The basis named `s`.
    pub fn parse(s: &str) -> Option<CostBasis> {
        match s {
            "tokens" => Some(CostBasis::Tokens),
            "amount" => Some(CostBasis::Amount),
            _ => None,
        }
    }

    /// Its name in the document.
    pub fn as_str(self) -> &'static str {
        match self {
            CostBasis::Tokens => "tokens",
            CostBasis::Amount => "amount",
        }
    }
}

impl<'de> Deserialize<'de> for CostBasis {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<CostBasis, D::Error> {
        let s = String::deserialize(d)?;
        CostBasis::parse(&s)
            .ok_or_else(|| serde::de::Error::invalid_value(serde::de::Unexpected::Str(&s), &"\"tokens\" or \"amount\""))
    }
}

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
    /// Billed cost from authoritative accounting, in the document's [`CostBasis`] (billed tokens
    /// or micro-units; the name is the format's).
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
    /// What the event telemetry accounted, on the same basis (null: no telemetry).
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
    /// What every `cost_micros` counts; `None`: the document does not say (written before strata
    /// stated it), and the arms are compared in whatever unit they share, as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_basis: Option<CostBasis>,
    /// The pairs.
    pub pairs: Vec<PairDoc>,
}

/// A pairs document that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PairsError {
    /// Malformed, out of bounds, or not measured on the corpus given.
    #[error("pairs: {0}")]
    Invalid(String),
    /// `cost_basis` is not one of [`CostBasis::NAMES`].
    #[error(
        "pairs: cost_basis {given}: one of \"tokens\" (billed tokens) or \"amount\" (billed micro-units); write what `strata eval run --cost-basis` measured, or leave the field out if it is not known"
    )]
    CostBasis {
        /// The value given, as JSON.
        given: String,
    },
}

impl PairsError {
    /// The `[STRATA-E…]` code this error is reported under.
    pub fn code(&self) -> &'static str {
        match self {
            PairsError::Invalid(_) => "STRATA-E1405",
            PairsError::CostBasis { .. } => "STRATA-E2206",
        }
    }
}

fn bad<T>(msg: String) -> Result<T, PairsError> {
    Err(PairsError::Invalid(msg))
}

/// Reads a pairs document and checks every bound.
pub fn parse(doc: &Value) -> Result<PairsDoc, PairsError> {
    if let Some(b) = doc.get("cost_basis")
        && b.as_str().and_then(CostBasis::parse).is_none()
    {
        let mut given = b.to_string();
        if given.len() > 64 {
            given = format!("{}…", given.chars().take(60).collect::<String>());
        }
        return Err(PairsError::CostBasis { given });
    }
    let d: PairsDoc = serde_json::from_value(doc.clone()).map_err(|e| PairsError::Invalid(e.to_string()))?;
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn doc(cost_basis: Option<Value>) -> Value {
        let arm = json!({"cost_micros": 10, "wall_ms": 5, "quality": 90, "rework": 0, "telemetry_cost_micros": null});
        let mut d = json!({
            "schema": SCHEMA,
            "corpus": {"name": "c", "version": "1", "digest": format!("sha256:{}", "a".repeat(64))},
            "pairs": [{"task_id": "small-tier2-01", "stratum": "small-tier2",
                "provenance": {"kind": "measured", "empirical": true, "promotion_authorized": true},
                "baseline": arm, "candidate": arm}],
        });
        if let Some(b) = cost_basis {
            d["cost_basis"] = b;
        }
        d
    }

    #[test]
    fn the_cost_basis_is_read_written_back_and_may_be_absent() {
        for (name, basis) in [("tokens", CostBasis::Tokens), ("amount", CostBasis::Amount)] {
            let d = parse(&doc(Some(json!(name)))).unwrap();
            assert_eq!(d.cost_basis, Some(basis));
            assert_eq!(serde_json::to_value(&d).unwrap()["cost_basis"], name);
            assert_eq!(CostBasis::parse(basis.as_str()), Some(basis));
        }
        // A document written before strata stated the basis reads as it did, and is written
        // back without one.
        let d = parse(&doc(None)).unwrap();
        assert_eq!(d.cost_basis, None);
        assert!(serde_json::to_value(&d).unwrap().get("cost_basis").is_none());
    }

    #[test]
    fn an_unknown_cost_basis_is_refused_naming_the_field_and_the_choices() {
        for bad in [json!("dollars"), json!("Tokens"), json!(null), json!(3), json!(["tokens"])] {
            let e = parse(&doc(Some(bad.clone()))).unwrap_err();
            assert_eq!(e.code(), "STRATA-E2206", "{bad}");
            let msg = e.to_string();
            assert!(msg.contains("cost_basis") && msg.contains(&bad.to_string()), "{msg}");
            assert!(msg.contains("\"tokens\"") && msg.contains("\"amount\""), "{msg}");
        }
        let long = json!("x".repeat(500));
        assert!(parse(&doc(Some(long))).unwrap_err().to_string().len() < 400, "the value is cut short");
        // Other problems keep their code.
        let mut d = doc(Some(json!("tokens")));
        d["pairs"][0]["baseline"]["cost_micros"] = json!(0);
        assert_eq!(parse(&d).unwrap_err().code(), "STRATA-E1405");
    }
}
