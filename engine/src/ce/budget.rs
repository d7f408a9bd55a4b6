//! Budget levels, the verification plan and the MCP health time-to-live: small pure rules of the
//! contract that the coordinator consults between dispatches.

use super::error::{CeError, Code, fail};

/// Default MCP health time-to-live (`mcp_health_ttl_minutes: 15`).
pub const MCP_HEALTH_TTL_MINUTES_DEFAULT: u64 = 15;

/// Budget levels by the ratio of used to limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum BudgetLevel {
    /// No limit.
    Unbounded,
    /// Below 70%.
    Normal,
    /// From 70%: stop speculative fan-out, prefer a smaller mode.
    Soft,
    /// From 90%: stop discretionary fan-out, persist the capsule.
    Checkpoint,
    /// At or over 100%: finish the atomic step, persist, pause if mandatory work remains.
    Hard,
}

/// A budget evaluation.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    /// Level.
    pub level: BudgetLevel,
    /// used / limit, when there is a limit.
    pub ratio: Option<f64>,
    /// What to do.
    pub actions: &'static [&'static str],
}

/// The budget level of `used` against `limit` (`None`: unbounded).
pub fn budget(used: f64, limit: Option<f64>) -> Result<Budget, CeError> {
    let Some(limit) = limit else {
        return Ok(Budget { level: BudgetLevel::Unbounded, ratio: None, actions: &[] });
    };
    if !(used.is_finite() && used >= 0.0 && limit.is_finite() && limit > 0.0) {
        return fail(Code::InvalidFact, "budget: used must be ≥ 0 and the limit > 0, both finite");
    }
    let ratio = used / limit;
    let (level, actions): (BudgetLevel, &'static [&'static str]) = if ratio >= 1.0 {
        (
            BudgetLevel::Hard,
            &[
                "STOP_DISCRETIONARY_WORK",
                "FINISH_ATOMIC_SAFE_STEP",
                "PERSIST_CAPSULE",
                "PAUSE_IF_MANDATORY_WORK_REMAINS",
            ],
        )
    } else if ratio >= 0.9 {
        (BudgetLevel::Checkpoint, &["STOP_DISCRETIONARY_FANOUT", "PERSIST_CAPSULE"])
    } else if ratio >= 0.7 {
        (BudgetLevel::Soft, &["STOP_SPECULATIVE_FANOUT", "PREFER_SMALLER_MODE"])
    } else {
        (BudgetLevel::Normal, &[])
    };
    Ok(Budget { level, ratio: Some(ratio), actions })
}

/// Where in the workflow a verification runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// Inside a red-green-refactor loop.
    Tdd,
    /// At microtask completion.
    Microtask,
    /// Before Gate 3.
    Gate3,
    /// During an audit/fix round.
    AuditFix,
}

impl Tier {
    /// The tier named `s`.
    pub fn parse(s: &str) -> Result<Tier, CeError> {
        Ok(match s {
            "tdd" => Tier::Tdd,
            "microtask" => Tier::Microtask,
            "gate3" => Tier::Gate3,
            "audit-fix" => Tier::AuditFix,
            _ => return fail(Code::InvalidFact, "tier: tdd, microtask, gate3 or audit-fix"),
        })
    }
}

const CONSOLIDATED: [&str; 5] = ["full-tests", "static-analysis", "build", "package", "install-smoke"];

/// What to verify at a tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerificationPlan {
    /// The checks, in order.
    pub checks: Vec<&'static str>,
    /// Whether they are the consolidated suite.
    pub consolidated: bool,
    /// Raw logs go to artifacts (always).
    pub artifact_logs: bool,
}

/// The checks to run: the narrowest deterministic test in a fix loop, the affected surface at a
/// microtask, and the consolidated suite before Gate 3 and after production changes in an audit
/// fix. Raw logs always go to artifacts.
pub fn verification_plan(tier: Tier, production_changed_after_full_green: bool) -> VerificationPlan {
    let (checks, consolidated): (Vec<&'static str>, bool) = match tier {
        Tier::Tdd => (vec!["targeted"], false),
        Tier::Microtask => (vec!["affected-surface"], false),
        Tier::Gate3 => (CONSOLIDATED.to_vec(), true),
        Tier::AuditFix if production_changed_after_full_green => {
            (std::iter::once("targeted").chain(CONSOLIDATED).collect(), true)
        }
        Tier::AuditFix => (vec!["targeted"], false),
    };
    VerificationPlan { checks, consolidated, artifact_logs: true }
}

/// Whether an MCP health result observed at `checked_ns` may be reused at `now_ns`: a healthy
/// one within the TTL; a failure never (it is retried at a later phase boundary).
pub fn health_reusable(healthy: bool, checked_ns: i128, now_ns: i128, ttl_minutes: u64) -> bool {
    let ttl = i128::from(ttl_minutes) * 60 * 1_000_000_000;
    healthy && now_ns >= checked_ns && now_ns - checked_ns < ttl
}
