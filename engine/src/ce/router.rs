//! The router: one mode and canonically ordered reason codes for every delegated unit, by the
//! contract's fixed precedence (local → compatible resume → compatible inheritance →
//! fresh capsule → team). Pure: facts in, decision out.

use std::collections::BTreeSet;

use serde::Serialize;

use super::error::{CeError, Code, fail};
use super::paths::{self, Workspace};

/// Default nesting limit (`max_nesting_depth`).
pub const NESTING_DEFAULT: u64 = 2;
/// Default cap on active inherited or resumed writers (`max_active_inherited`).
pub const INHERITED_WRITERS_DEFAULT: u64 = 2;
/// Highest team latency ratio a team may have.
pub const TEAM_LATENCY_RATIO_MAX: f64 = 0.75;
/// Most owned paths one unit (with its lineage and team scopes) may name.
pub const OWNED_PATHS_MAX: usize = 1024;
/// Most active writers a request may list.
pub const ACTIVE_WRITERS_MAX: usize = 1024;

/// The six dispatch modes, in the contract's order (serialised by their wire names, so events
/// hold the same strings as the reference protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The coordinator does it.
    Local,
    /// A compatible prior worker resumes.
    Resume,
    /// A fork of the current conversation.
    InheritFull,
    /// Bounded inheritance of the latest window.
    InheritRecent,
    /// A new worker briefed with a sealed capsule.
    FreshCapsule,
    /// A provider-native team.
    CoordinatedTeam,
}

impl Mode {
    /// Every mode, in order.
    pub const ALL: [Mode; 6] =
        [Mode::Local, Mode::Resume, Mode::InheritFull, Mode::InheritRecent, Mode::FreshCapsule, Mode::CoordinatedTeam];

    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Local => "local",
            Mode::Resume => "resume",
            Mode::InheritFull => "inherit-full",
            Mode::InheritRecent => "inherit-recent",
            Mode::FreshCapsule => "fresh-capsule",
            Mode::CoordinatedTeam => "coordinated-team",
        }
    }

    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

/// The twelve reason codes; the derived order is the canonical output order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Reason {
    /// Trivial or tightly coupled work.
    LocalCheaper,
    /// The work blocks the coordinator.
    Blocking,
    /// A compatible lineage resumes.
    ResumeCompatible,
    /// Full inheritance.
    HighContextAffinity,
    /// Bounded recent inheritance.
    BoundedRecentContext,
    /// A fresh capsule.
    IndependentCapsule,
    /// Restricted or isolated sensitivity, or unsafe inheritance.
    SensitivityIsolation,
    /// An independent reviewer.
    ReviewIndependence,
    /// A team is needed.
    TeamCoordinationRequired,
    /// Another active writer owns an overlapping path.
    WriterOwnershipConflict,
    /// At or beyond the nesting limit.
    NestingLimit,
    /// A wanted mode was unavailable and the router fell back.
    CapabilityFallback,
}

impl Reason {
    /// Every code, canonical order.
    pub const ALL: [Reason; 12] = [
        Reason::LocalCheaper,
        Reason::Blocking,
        Reason::ResumeCompatible,
        Reason::HighContextAffinity,
        Reason::BoundedRecentContext,
        Reason::IndependentCapsule,
        Reason::SensitivityIsolation,
        Reason::ReviewIndependence,
        Reason::TeamCoordinationRequired,
        Reason::WriterOwnershipConflict,
        Reason::NestingLimit,
        Reason::CapabilityFallback,
    ];

    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::LocalCheaper => "LOCAL_CHEAPER",
            Reason::Blocking => "BLOCKING",
            Reason::ResumeCompatible => "RESUME_COMPATIBLE",
            Reason::HighContextAffinity => "HIGH_CONTEXT_AFFINITY",
            Reason::BoundedRecentContext => "BOUNDED_RECENT_CONTEXT",
            Reason::IndependentCapsule => "INDEPENDENT_CAPSULE",
            Reason::SensitivityIsolation => "SENSITIVITY_ISOLATION",
            Reason::ReviewIndependence => "REVIEW_INDEPENDENCE",
            Reason::TeamCoordinationRequired => "TEAM_COORDINATION_REQUIRED",
            Reason::WriterOwnershipConflict => "WRITER_OWNERSHIP_CONFLICT",
            Reason::NestingLimit => "NESTING_LIMIT",
            Reason::CapabilityFallback => "CAPABILITY_FALLBACK",
        }
    }

    /// The code named `s`.
    pub fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// Sensitivity classes; anything else is `Unclassified`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sensitivity {
    /// Ordinary work.
    Normal,
    /// Needs a fresh, narrow context.
    Restricted,
    /// Needs a fresh, isolated context.
    Isolated,
    /// Absent or not one of the three: never authorises a team.
    #[default]
    Unclassified,
}

impl Sensitivity {
    /// The class named `s`.
    pub fn parse(s: Option<&str>) -> Sensitivity {
        match s {
            Some("normal") => Sensitivity::Normal,
            Some("restricted") => Sensitivity::Restricted,
            Some("isolated") => Sensitivity::Isolated,
            _ => Sensitivity::Unclassified,
        }
    }
}

/// An active writer: who and what it owns (canonical paths).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveWriter {
    /// Its lineage, when known (evidence only: a matching id never exempts a conflict).
    pub lineage_id: Option<String>,
    /// Canonical owned paths (at least one).
    pub paths: Vec<String>,
}

/// The routing facts, typed and with every path canonical.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouteFacts {
    /// Role of the unit (`input.role`).
    pub role: Option<String>,
    /// Explicit writer flag.
    pub is_writer: Option<bool>,
    /// Proposed owned paths: the unit's, its lineage's and its team writer scopes', canonical.
    pub proposed: Vec<String>,
    /// Whether a team writer scope has paths.
    pub team_writer_paths: bool,
    /// Active writers (from the caller, or the journal's ownership map).
    pub active_writers: Vec<ActiveWriter>,
    /// Current delegation depth.
    pub nesting_depth: u64,
    /// Nesting limit.
    pub max_nesting_depth: u64,
    /// Trivial work.
    pub trivial: bool,
    /// Blocks the coordinator.
    pub blocking: bool,
    /// `coupling: tight`.
    pub tight: bool,
    /// Sensitivity of the unit.
    pub sensitivity: Sensitivity,
    /// An independent reviewer.
    pub independent_reviewer: bool,
    /// Lineage candidate.
    pub lineage: Option<LineageFacts>,
    /// Active inherited or resumed writers.
    pub active_inherited_writers: u64,
    /// Their cap.
    pub max_active_inherited: u64,
    /// Inheritance facts.
    pub inheritance: Inheritance,
    /// Team facts.
    pub team: Option<Team>,
    /// `capsule_sufficient` (`None` when absent).
    pub capsule_sufficient: Option<bool>,
}

/// The lineage candidate's facts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineageFacts {
    /// Compatible (`=== true`; in `dispatch`, only when the evaluated state is HOT).
    pub compatible: bool,
    /// Resumable (`=== true`).
    pub resumable: bool,
    /// The lineage's role.
    pub role: Option<String>,
    /// Its id.
    pub lineage_id: Option<String>,
}

/// Inheritance facts; an absent affirmative fact never authorises anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inheritance {
    /// `affinity: high`.
    pub affinity_high: bool,
    /// `safe` (`Some(false)` forces isolation).
    pub safe: Option<bool>,
    /// Within budget.
    pub within_budget: bool,
    /// Provider supports a full fork.
    pub full_supported: bool,
    /// Provider supports bounded recent inheritance.
    pub recent_supported: bool,
    /// The recent window suffices.
    pub recent_sufficient: bool,
}

/// Team facts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Team {
    /// Coordination is required.
    pub coordination_required: bool,
    /// Number of peers (`None` unless a whole number).
    pub peers: Option<u64>,
    /// The provider has a real team runtime.
    pub provider_supported: bool,
    /// Safe.
    pub safe: bool,
    /// Sensitivity approved.
    pub sensitivity_approved: bool,
    /// Within budget.
    pub within_budget: bool,
    /// Team latency relative to serial work.
    pub latency_ratio: Option<f64>,
    /// Writer scopes' canonical paths (scopes with `is_writer: false` are left out).
    pub writer_scopes: Vec<Vec<String>>,
}

/// A routing decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Route {
    /// The mode.
    pub mode: Mode,
    /// Reasons, canonical order, no duplicates.
    pub reason_codes: BTreeSet<Reason>,
}

impl Route {
    /// The reason codes' wire names, in canonical order.
    pub fn reason_names(&self) -> Vec<String> {
        self.reason_codes.iter().map(|r| r.as_str().to_owned()).collect()
    }

    fn of(mode: Mode, reasons: impl IntoIterator<Item = Reason>) -> Route {
        Route { mode, reason_codes: reasons.into_iter().collect() }
    }
}

/// `raw` as a canonical owned path under `ws`; a refusal names `field` (`input.owned_files`).
pub fn canonical_owned(ws: &Workspace, raw: &str, field: &str) -> Result<String, CeError> {
    paths::canonical(ws, raw, "").map_err(|e| CeError { detail: format!("{field}{}", e.detail), ..e })
}

/// The role tokens of `role`: lower-cased, split on `-` and `_`.
fn has_token(role: Option<&str>, tokens: &[&str]) -> bool {
    role.is_some_and(|r| r.to_lowercase().split(['-', '_']).any(|t| tokens.contains(&t)))
}

/// A writer role (`builder`, `writer`, `implementer` as a `-`/`_`-delimited token).
pub fn is_writer_role(role: Option<&str>) -> bool {
    has_token(role, &["builder", "writer", "implementer"])
}

/// A reviewer role (`reviewer` as a token).
pub fn is_reviewer_role(role: Option<&str>) -> bool {
    has_token(role, &["reviewer"])
}

/// A lineage marked contaminated (`contaminated` as a token): it never resumes.
pub fn is_contaminated_role(role: Option<&str>) -> bool {
    has_token(role, &["contaminated"])
}

impl RouteFacts {
    /// Facts with every limit at its default and nothing else known.
    pub fn defaults() -> RouteFacts {
        RouteFacts {
            max_nesting_depth: NESTING_DEFAULT,
            max_active_inherited: INHERITED_WRITERS_DEFAULT,
            ..RouteFacts::default()
        }
    }

    /// Sets the proposed paths (already canonical): sorted, without duplicates, at most
    /// [`OWNED_PATHS_MAX`].
    pub fn set_proposed(&mut self, mut proposed: Vec<String>) -> Result<(), CeError> {
        proposed.sort();
        proposed.dedup();
        if proposed.len() > OWNED_PATHS_MAX {
            return fail(Code::InvalidRequest, format!("input: more than {OWNED_PATHS_MAX} owned paths"));
        }
        self.proposed = proposed;
        Ok(())
    }

    /// The unit's role, falling back to its lineage's.
    fn effective_role(&self) -> Option<&str> {
        self.role.as_deref().or(self.lineage.as_ref().and_then(|l| l.role.as_deref()))
    }

    /// Whether the unit writes: explicitly, by owning paths, or by a writer role.
    pub fn is_writer(&self) -> bool {
        self.is_writer == Some(true)
            || !self.proposed.is_empty()
            || is_writer_role(self.effective_role())
            || self.team_writer_paths
    }

    /// The first active writer whose paths overlap the proposed ones, with the two paths.
    pub fn conflict(&self) -> Option<(&ActiveWriter, &str, &str)> {
        self.active_writers.iter().find_map(|w| {
            w.paths
                .iter()
                .find_map(|a| self.proposed.iter().find(|p| paths::overlaps(a, p)).map(|p| (w, a.as_str(), p.as_str())))
        })
    }
}

/// Whether two team writer scopes overlap.
fn scopes_overlap(scopes: &[Vec<String>]) -> bool {
    scopes
        .iter()
        .enumerate()
        .any(|(i, a)| scopes[i + 1..].iter().any(|b| a.iter().any(|x| b.iter().any(|y| paths::overlaps(x, y)))))
}

/// Routes one unit. Total: every valid fact set gives exactly one mode.
pub fn route(f: &RouteFacts) -> Result<Route, CeError> {
    use Reason as R;
    // 0. Writer scope and the global zero-overlap check.
    let writer = f.is_writer();
    if writer && f.proposed.is_empty() {
        return fail(Code::WriterScopeRequired, "input: a writer must own at least one path (owned_files)");
    }
    if f.conflict().is_some() {
        return Ok(Route::of(Mode::Local, [R::WriterOwnershipConflict]));
    }
    // 1. Nesting.
    if f.nesting_depth >= f.max_nesting_depth {
        return Ok(Route::of(Mode::Local, [R::NestingLimit]));
    }
    // 2. Local.
    if f.trivial || f.blocking || f.tight {
        let mut r = BTreeSet::new();
        if f.trivial || f.tight {
            r.insert(R::LocalCheaper);
        }
        if f.blocking {
            r.insert(R::Blocking);
        }
        return Ok(Route { mode: Mode::Local, reason_codes: r });
    }
    // 3. Isolation, ahead of any reuse.
    let sensitive =
        matches!(f.sensitivity, Sensitivity::Restricted | Sensitivity::Isolated) || f.inheritance.safe == Some(false);
    if f.independent_reviewer || sensitive {
        let mut r = BTreeSet::from([R::IndependentCapsule]);
        if sensitive {
            r.insert(R::SensitivityIsolation);
        }
        if f.independent_reviewer {
            r.insert(R::ReviewIndependence);
        }
        return Ok(Route { mode: Mode::FreshCapsule, reason_codes: r });
    }
    // 4. Resume.
    let at_cap = writer && f.active_inherited_writers >= f.max_active_inherited;
    let mut fallback = false;
    if let Some(l) = &f.lineage
        && l.compatible
        && l.resumable
    {
        let lineage_role = l.role.as_deref();
        let reviewer_on_writer = is_reviewer_role(f.role.as_deref()) && is_writer_role(lineage_role);
        if at_cap {
            fallback = true;
        } else if !is_contaminated_role(lineage_role) && !reviewer_on_writer {
            return Ok(Route::of(Mode::Resume, [R::ResumeCompatible]));
        }
    }
    // 5. Inheritance.
    let inh = &f.inheritance;
    if inh.affinity_high {
        let compatible = inh.safe == Some(true) && inh.within_budget && !at_cap;
        if compatible && inh.recent_supported && inh.recent_sufficient {
            return Ok(Route::of(Mode::InheritRecent, [R::BoundedRecentContext]));
        }
        if compatible && inh.full_supported {
            return Ok(Route::of(Mode::InheritFull, [R::HighContextAffinity]));
        }
        fallback = true;
    }
    // 6. Team.
    if let Some(t) = &f.team
        && t.coordination_required
        && t.peers.is_some_and(|p| p >= 2)
    {
        let compatible = t.provider_supported
            && t.safe
            && t.sensitivity_approved
            && t.within_budget
            && f.sensitivity == Sensitivity::Normal
            && t.latency_ratio.is_some_and(|x| x.is_finite() && (0.0..=TEAM_LATENCY_RATIO_MAX).contains(&x))
            && !t.writer_scopes.is_empty()
            && !scopes_overlap(&t.writer_scopes);
        if !compatible {
            fallback = true;
        } else if f.capsule_sufficient == Some(false) {
            return Ok(Route::of(Mode::CoordinatedTeam, [R::TeamCoordinationRequired]));
        }
    }
    // 7. Default.
    let mut r = BTreeSet::from([R::IndependentCapsule]);
    if fallback {
        r.insert(R::CapabilityFallback);
    }
    Ok(Route { mode: Mode::FreshCapsule, reason_codes: r })
}
