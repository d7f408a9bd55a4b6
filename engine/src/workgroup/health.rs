//! The knowledge server's health in a run (`mcp_health_ttl_minutes`). A worker that gets the
//! Knowledge API starts its own `strata mcp` against the workspace; before such a worker is
//! dispatched the run needs a probe of that server that answered. A healthy probe is reused for
//! the policy's `mcp_health_ttl_minutes` of journal time (0: probed before every such dispatch).
//! A failed probe is not retried until a later phase boundary (a dispatch in another phase), and
//! until then workers are dispatched without the Knowledge API, rather than handed a server that
//! does not answer: their prompt and capsule carry what they need. Each probe is recorded
//! (`workgroup.knowledge-probed`), and each dispatch says whether its worker gets the API
//! (`task.dispatched.knowledge`), so `audit` shows what an agent could reach.

use serde::{Deserialize, Serialize};

use super::state::Workgroup;

/// Longest detail a probe records, bytes.
pub const DETAIL_BYTES_MAX: usize = 512;

/// `workgroup.knowledge-probed` v1: one probe of the knowledge server workers start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Probed {
    /// It answered as a knowledge server (its tools include `get_knowledge`).
    pub healthy: bool,
    /// What it answered, or why it failed (at most [`DETAIL_BYTES_MAX`] bytes).
    pub detail: String,
    /// The phase of the dispatch it was probed for.
    pub phase: String,
    /// When, by the coordinator's clock, nanoseconds since the Unix epoch.
    pub at_ns: i64,
    /// The time-to-live it was probed under, minutes.
    pub ttl_minutes: u64,
}

/// What a dispatch of a worker that would get the Knowledge API needs first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// A probe: none yet, the healthy one is older than the TTL, or a failed one was for another
    /// phase.
    Probe,
    /// Nothing: the last probe is healthy and fresh; the worker gets the API.
    Attach,
    /// Nothing: the last probe, in this phase, failed; the worker runs without the API.
    Without,
}

/// What a dispatch in `phase` at `now_ns` needs, from the last recorded probe.
pub fn need(g: &Workgroup, phase: &str, now_ns: i64) -> Need {
    let ttl = g.policy.mcp_health_ttl_minutes;
    match &g.knowledge {
        None => Need::Probe,
        Some(p) if p.healthy => {
            if crate::ce::budget::health_reusable(true, i128::from(p.at_ns), i128::from(now_ns), ttl) {
                Need::Attach
            } else {
                Need::Probe
            }
        }
        Some(p) if p.phase == phase => Need::Without,
        Some(_) => Need::Probe,
    }
}

/// Whether a dispatch in `phase` at `now_ns` gives its worker the Knowledge API, once any probe
/// [`need`] asked for is recorded: only on a healthy, fresh probe.
pub fn attached(g: &Workgroup, phase: &str, now_ns: i64) -> bool {
    need(g, phase, now_ns) == Need::Attach
}

/// `detail` cut to [`DETAIL_BYTES_MAX`] bytes at a character boundary.
pub fn bounded(detail: &str) -> String {
    super::events::bounded_to(detail, DETAIL_BYTES_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000_000_000;

    fn group(probe: Option<Probed>, ttl: u64) -> Workgroup {
        let plan: super::super::plan::Plan = serde_json::from_value(serde_json::json!({
            "workgroup": "wg", "pipeline": "light",
            "task": [{"id": "a", "role": "analyst", "objective": "x"}]
        }))
        .expect("plan");
        let plan = super::super::plan::check(&plan).expect("checks");
        let mut g = Workgroup {
            plan,
            plan_digest: String::new(),
            seed: 0,
            started: Default::default(),
            version: 0,
            tasks: Default::default(),
            task_count: 0,
            finished: false,
            policy: Default::default(),
            paused: None,
            suite: None,
            knowledge: probe,
            planned: Default::default(),
        };
        g.policy.mcp_health_ttl_minutes = ttl;
        g
    }

    fn probed(healthy: bool, phase: &str, at_ns: i64) -> Probed {
        Probed { healthy, detail: String::new(), phase: phase.into(), at_ns, ttl_minutes: 15 }
    }

    #[test]
    fn a_healthy_probe_is_reused_within_the_ttl_and_a_failed_one_is_retried_at_the_next_phase() {
        assert_eq!(need(&group(None, 15), "build", 0), Need::Probe);
        let healthy = group(Some(probed(true, "build", 10 * MIN)), 15);
        assert_eq!(need(&healthy, "build", 24 * MIN), Need::Attach, "fresh");
        assert_eq!(need(&healthy, "review", 24 * MIN), Need::Attach, "fresh in any phase");
        assert_eq!(need(&healthy, "build", 25 * MIN), Need::Probe, "15 minutes old");
        assert_eq!(need(&group(Some(probed(true, "build", 10 * MIN)), 0), "build", 10 * MIN), Need::Probe, "ttl 0");
        let failed = group(Some(probed(false, "build", 10 * MIN)), 15);
        assert_eq!(need(&failed, "build", 11 * MIN), Need::Without, "not again in the same phase");
        assert_eq!(need(&failed, "build", 90 * MIN), Need::Without, "however long ago");
        assert_eq!(need(&failed, "review", 11 * MIN), Need::Probe, "at the next phase boundary");
        assert!(!attached(&failed, "build", 11 * MIN) && attached(&healthy, "build", 11 * MIN));
    }

    #[test]
    fn a_detail_is_bounded_at_a_character_boundary() {
        let d = "é".repeat(DETAIL_BYTES_MAX);
        let b = bounded(&d);
        assert!(b.len() <= DETAIL_BYTES_MAX && b.ends_with('…') && b.trim_end_matches('…').chars().all(|c| c == 'é'));
    }
}
