//! Preflight: every check a run can make before it records anything, decided at once. A plan
//! that fails it is refused with the whole list, so nothing is appended, no branch or worktree is
//! made, and the workgroup's name stays free for the fixed plan.
//!
//! [`check`] is a pure decision over typed inputs: the plan as written, the journal's state (the
//! workgroups, the knowledge base, the profiles the run will have) and [`Facts`] an adapter probed
//! (the repository, where owned paths resolve, the provider CLIs). It reads no clock and does no
//! I/O; `strata run` (with or without `--check`) and the simulation both call it. What it checks:
//!
//! * the plan's shape ([`plan::check`], every problem);
//! * the workgroup's name is not taken in this journal (a new run);
//! * each task's profile exists; its change request and specifications exist in the knowledge
//!   base and are not `draft` (the lifecycle's first state: not proposed yet);
//! * owned paths are repository-relative and canonical (the plan's shape) and do not resolve
//!   outside the repository through a symbolic link;
//! * when a task writes: the repository is a git repository with a commit to start from (the
//!   base the run records), and the integration branch `strata/<workgroup>` is not left over from
//!   another run;
//! * every real provider the plan runs on has its CLI (found, and `--version` answers);
//! * every `never` glob and every glob entry of the profiles the plan uses matches at least one
//!   virtual path in the knowledge base, unless the profile lists it in `guards`.
//!
//! * a task's `request` resolved by discovery to at least one specification (the adapter ranks
//!   the knowledge base and fills `specs` with [`super::discovery::choose`] before this check);
//! * budgets: a task's input-token cap holds at least its prompt (as assembled now, strata's own
//!   count, which the provider's system prompt and tools only add to), and the workgroup's
//!   input-token cap, less what a resumed run already spent, holds every unfinished task's
//!   prompt once.
//!
//! Not checked (see [`NOT_CHECKED`]): whether cost, output tokens, wall time and turns suffice
//! (their bounds are checked in the plan check, a cost cap on Codex here).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::plan::{self, Checked, Plan, TaskSpec};
use super::state::Workgroups;
use crate::context::paths::{LAYOUT, any_virtual_path};
use crate::context::profile::{self, Profile, ProfileError, ProfileIndex};
use crate::kb::graph::Graph;
use crate::kb::kind::{ArtifactKey, ArtifactKind};

/// Most problems listed; past it the list ends with one saying how many more there were.
pub const PROBLEMS_MAX: usize = 1_000;

/// Checks the preflight does not make yet, each with the reason.
pub const NOT_CHECKED: &[(&str, &str)] = &[(
    "budgets",
    "input-token caps are checked against each prompt (E2114, E2115), the other caps only against their bounds and providers (E2113): cost, output, wall time and turns are known only by running",
)];

/// One problem: its code, the input it is in, the rule broken and the fix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The stable code, `STRATA-Exxxx`.
    pub code: &'static str,
    /// The input: the plan's field (`task T: field`), a profile's glob, the repository, a CLI.
    pub input: String,
    /// The rule broken.
    pub rule: String,
    /// What to do.
    pub fix: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {}: {}; {}", self.code, self.input, self.rule, self.fix)
    }
}

/// The repository writing tasks change, as probed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RepoFact {
    /// No directory was given for it.
    NotGiven,
    /// The directory is not in a git repository (or git did not run).
    NotGit {
        /// The directory.
        dir: String,
        /// What git said.
        detail: String,
    },
    /// A git repository without a commit: nothing to start the integration branch from.
    NoCommit {
        /// Its top directory.
        top: String,
    },
    /// A repository with a base commit.
    Ready {
        /// Its top directory.
        top: String,
        /// The commit `HEAD` names: the base the run records.
        base: String,
        /// Whether the branch `strata/<workgroup>` exists already.
        branch_taken: bool,
    },
}

/// A provider's CLI, as probed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum CliFact {
    /// Not found.
    Missing {
        /// The program looked for (a name searched on `PATH`, or the path configured).
        program: String,
        /// Where it was looked for.
        searched: String,
    },
    /// Found, but `--version` failed or did not answer in time.
    Broken {
        /// The program run.
        path: String,
        /// What went wrong.
        detail: String,
    },
    /// Found and answering.
    Found {
        /// The program run.
        path: String,
        /// The first line of its `--version`.
        version: String,
        /// Capabilities its `--help` shows (e.g. `fork-session`, `fork`, `resume`).
        capabilities: Vec<String>,
    },
}

/// What an adapter probed for [`check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The repository.
    pub repo: RepoFact,
    /// The CLI of each real provider the plan runs on, by provider name (`claude`, `codex`).
    pub clis: BTreeMap<String, CliFact>,
    /// Owned paths that resolve outside the repository (through a symbolic link), with where
    /// they resolve.
    pub outside: BTreeMap<String, String>,
    /// Each task's prompt tokens as assembled now (strata's own count, the one a dispatch
    /// records), for the tasks whose prompt the adapter could assemble: the budgets' lower bound.
    pub prompt_tokens: BTreeMap<String, u64>,
    /// What discovery found and chose for each task given a `request` (also on the task, as
    /// recorded), for the report.
    pub discovered: BTreeMap<String, super::discovery::Discovered>,
}

/// What [`check`] decides over.
pub struct Inputs<'a> {
    /// The plan as written (or as recorded, for a resumed run: [`as_written`]).
    pub plan: &'a Plan,
    /// The provider every task runs on, when the run names one.
    pub provider: Option<&'a str>,
    /// What `auto` runs on here (`claude`, `codex` or `sim`).
    pub auto: &'a str,
    /// Whether the run continues a recorded workgroup (its name is taken by itself, its branch
    /// is its own).
    pub resuming: bool,
    /// The workgroups in the journal.
    pub groups: &'a Workgroups,
    /// The knowledge base.
    pub graph: &'a Graph,
    /// The profiles the run will have ([`run_profiles`]).
    pub profiles: &'a BTreeMap<String, Profile>,
    /// What the adapter probed.
    pub facts: &'a Facts,
    /// The configuration's caps (`[context_efficiency.caps.*]`), resolved with the plan's as a
    /// run resolves them.
    pub configured: &'a super::caps::PlanCaps,
}

/// The profiles a run has: every registered profile at its latest version, and the shipped ones
/// as shipped (a run registers a shipped profile that is missing or differs before its first
/// task).
pub fn run_profiles(registered: &ProfileIndex) -> Result<BTreeMap<String, Profile>, ProfileError> {
    let mut out: BTreeMap<String, Profile> = registered.all().map(|(k, _, p)| (k.to_owned(), p.clone())).collect();
    for (name, text) in profile::BUILTIN {
        out.insert((*name).to_owned(), profile::parse(name, text)?);
    }
    Ok(out)
}

/// The plan a checked plan was made from, defaults filled in (what a resumed run checks again).
pub fn as_written(c: &Checked) -> Plan {
    Plan {
        workgroup: c.workgroup.clone(),
        parallel: Some(c.parallel),
        provider: None,
        profile: None,
        pipeline: Some(c.pipeline.clone()),
        retries: Some(c.retries),
        retry_backoff_ms: Some(c.retry_backoff_ms),
        caps: c.caps,
        verify_timeout_seconds: Some(c.verify_timeout_ms / 1000),
        suite: c.suite.clone(),
        tasks: c
            .tasks
            .iter()
            .map(|t| {
                let mut spec = t.spec.clone();
                // A sensitivity the plan left out stays left out (inheritance needs a declared one).
                if !t.sensitivity_declared {
                    spec.sensitivity = None;
                }
                spec
            })
            .collect(),
    }
}

/// The provider a task runs on: the run's, else the task's, else the plan's, else `sim`; `auto`
/// resolved to `auto_is`.
pub fn provider_of<'a>(plan: &'a Plan, t: &'a TaskSpec, run: Option<&'a str>, auto_is: &'a str) -> &'a str {
    let p = run.or(t.provider.as_deref()).or(plan.provider.as_deref()).unwrap_or("sim");
    if p == "auto" { auto_is } else { p }
}

/// The real providers (`claude`, `codex`) the plan runs on: the CLIs an adapter probes.
pub fn real_providers(plan: &Plan, run: Option<&str>, auto_is: &str) -> BTreeSet<String> {
    plan.tasks
        .iter()
        .map(|t| provider_of(plan, t, run, auto_is))
        .filter(|p| matches!(*p, "claude" | "codex"))
        .map(str::to_owned)
        .collect()
}

/// Every path the plan's tasks own, trimmed of a trailing `/` (what an adapter resolves).
pub fn owned_paths(plan: &Plan) -> BTreeSet<String> {
    plan.tasks.iter().flat_map(|t| &t.owns).map(|p| p.trim_end_matches('/').to_owned()).collect()
}

struct List {
    problems: Vec<Problem>,
    dropped: usize,
}

impl List {
    fn add(&mut self, code: &'static str, input: impl Into<String>, rule: impl Into<String>, fix: impl Into<String>) {
        if self.problems.len() < PROBLEMS_MAX {
            self.problems.push(Problem { code, input: input.into(), rule: rule.into(), fix: fix.into() });
        } else {
            self.dropped += 1;
        }
    }
}

/// Runs every check: the checked plan, or every problem found (in plan order: the shape, the
/// name, each task, the repository, the providers, then the profiles' globs by profile).
pub fn check(i: &Inputs<'_>) -> Result<Checked, Vec<Problem>> {
    let mut l = List { problems: Vec::new(), dropped: 0 };
    let checked = match plan::check(i.plan) {
        Ok(c) => Some(c),
        Err(problems) => {
            for p in problems {
                let input = match &p.task {
                    Some(t) => format!("task {t}: {}", p.field),
                    None => p.field.clone(),
                };
                l.add("STRATA-E1701", input, p.rule, "change it in the plan, then `strata run PLAN --check`");
            }
            None
        }
    };
    let wg = &i.plan.workgroup;
    if !i.resuming && i.groups.get(wg).is_some() {
        l.add(
            "STRATA-E1702",
            "workgroup",
            format!("workgroup {wg} was planned in this journal before"),
            format!("continue it with `strata run --resume {wg}`, or rename the workgroup"),
        );
    }
    for t in &i.plan.tasks {
        check_task(&mut l, i, t);
    }
    check_repo(&mut l, i);
    check_providers(&mut l, i);
    check_budgets(&mut l, i);
    check_globs(&mut l, i);
    if l.dropped > 0 {
        l.problems.push(Problem {
            code: "STRATA-E2101",
            input: "preflight".into(),
            rule: format!("{} more problem(s) not listed (at most {PROBLEMS_MAX} are)", l.dropped),
            fix: "fix those listed, then check again".into(),
        });
    }
    match checked {
        Some(c) if l.problems.is_empty() => Ok(c),
        _ => Err(l.problems),
    }
}

fn check_task(l: &mut List, i: &Inputs<'_>, t: &TaskSpec) {
    let at = |field: &str| format!("task {}: {field}", t.id);
    // Unknown is never zero: a cost cap on a provider that reports no cost could never fire.
    let cost_capped = t.caps.and_then(|c| c.cost_usd).or(i.plan.caps.task.cost_usd).or(i.plan.caps.workgroup.cost_usd);
    if cost_capped.is_some() && provider_of(i.plan, t, i.provider, i.auto) == "codex" {
        l.add(
            "STRATA-E2113",
            at("caps.cost_usd"),
            "Codex reports no cost, so a cost cap on a task it runs could never be reached",
            "cap its input_tokens or output_tokens instead, or run it on another provider",
        );
    }
    if t.request.is_some() {
        match &t.discovered {
            None if t.specs.is_empty() => l.add(
                "STRATA-E2117",
                at("request"),
                "was not resolved to specifications: discovery did not run for it",
                "name the task's specs instead, or run it where `strata discover` works",
            ),
            Some(d) if d.chosen.is_empty() => l.add(
                "STRATA-E2116",
                at("request"),
                format!(
                    "matched no specification of the knowledge base ({} candidates, none a specification matching its words)",
                    d.candidates.len()
                ),
                "reword it with the words the specifications use (`strata discover \"TEXT\"` shows what ranks), or name specs",
            ),
            _ => {}
        }
    }
    let name = plan::task_profile(i.plan.profile.as_deref(), t);
    if plan::is_name(&name) && !i.profiles.contains_key(&name) {
        let known: Vec<&str> = i.profiles.keys().map(String::as_str).collect();
        l.add(
            "STRATA-E0905",
            at("profile"),
            format!("profile {name} is not registered and not shipped"),
            format!("register it (`strata profile register FILE`) or name one of: {}", known.join(", ")),
        );
    }
    if let Some(cr) = &t.change_request {
        match i.graph.get(&ArtifactKey::new(ArtifactKind::ChangeRequest, cr)) {
            None => {
                let other: Vec<&str> = i.graph.find(cr).iter().map(|n| n.key.kind.name()).collect();
                let rule = if other.is_empty() {
                    format!("no change request {cr} in the knowledge base")
                } else {
                    format!("{cr} is a {} in the knowledge base, not a change request", other.join(", "))
                };
                l.add(
                    "STRATA-E2102",
                    at("change_request"),
                    rule,
                    "name an existing change request (`strata artifact show CR-n`), or take it in first (`strata intake FILE`)",
                );
            }
            Some(n) if n.state == "draft" => l.add(
                "STRATA-E2103",
                at("change_request"),
                format!("change request {cr} is in draft: it was never proposed, so nothing may implement it yet"),
                format!("propose it (`strata artifact transition {cr} --to proposed`), or drop it from the task"),
            ),
            Some(_) => {}
        }
    }
    for s in &t.specs {
        let found = i.graph.find(s);
        if found.is_empty() {
            l.add(
                "STRATA-E2104",
                at("specs"),
                format!("no specification {s} in the knowledge base"),
                "name an existing specification (`strata artifact show ID`), or take it in first (`strata intake FILE`)",
            );
        } else if found.iter().all(|n| n.state == "draft") {
            l.add(
                "STRATA-E2105",
                at("specs"),
                format!("specification {s} is in draft"),
                format!(
                    "approve or activate it first (`strata artifact transition {s} --to …`), or drop it from the task"
                ),
            );
        }
    }
    for p in &t.owns {
        if let Some(real) = i.facts.outside.get(p.trim_end_matches('/')) {
            l.add(
                "STRATA-E2106",
                at("owns"),
                format!("{p} resolves to {real}, outside the repository (through a symbolic link)"),
                "own a path inside the repository; a worker's write never leaves it",
            );
        }
    }
}

fn check_repo(l: &mut List, i: &Inputs<'_>) {
    if !i.plan.tasks.iter().any(|t| !t.owns.is_empty()) {
        return;
    }
    match &i.facts.repo {
        RepoFact::NotGiven => l.add(
            "STRATA-E1722",
            "repository",
            "the plan has writing tasks and no repository was given",
            "pass the git repository they change with --repo DIR",
        ),
        RepoFact::NotGit { dir, detail } => l.add(
            "STRATA-E1722",
            format!("repository {dir}"),
            format!("not in a git repository ({detail}); writing tasks run in git worktrees"),
            "`git init` and commit once there, or pass another directory with --repo DIR",
        ),
        RepoFact::NoCommit { top } => l.add(
            "STRATA-E1722",
            format!("repository {top}"),
            "the repository has no commit: the run has no base to branch from",
            "commit once, then run again",
        ),
        RepoFact::Ready { top, branch_taken: true, .. } if !i.resuming => {
            let wg = &i.plan.workgroup;
            l.add(
                "STRATA-E2107",
                format!("repository {top}"),
                format!(
                    "the branch strata/{wg} exists already, but workgroup {wg} is not in this journal: its integration branch would start from another run's result"
                ),
                format!("rename the workgroup, or delete the branch once nothing on it is needed (`git branch -D strata/{wg}`)"),
            );
        }
        RepoFact::Ready { .. } => {}
    }
}

/// The input-token caps against the prompts they must hold: a prompt is read whole on a task's
/// first turn, so a cap below it is reached before the worker does anything.
fn check_budgets(l: &mut List, i: &Inputs<'_>) {
    let group = i.groups.get(&i.plan.workgroup).filter(|_| i.resuming);
    let finished = |t: &str| group.and_then(|g| g.tasks.get(t)).is_some_and(|s| s.completed.is_some());
    let mut needed = 0u64;
    for t in &i.plan.tasks {
        let Some(&tokens) = i.facts.prompt_tokens.get(&t.id) else { continue };
        if finished(&t.id) {
            continue;
        }
        needed = needed.saturating_add(tokens);
        let caps = t.caps.unwrap_or_default().over(i.plan.caps.task).over(i.configured.task);
        if let Some(cap) = caps.input_tokens.filter(|cap| *cap < tokens) {
            l.add(
                "STRATA-E2114",
                format!("task {}: caps.input_tokens", t.id),
                format!(
                    "its prompt alone is {tokens} tokens, over its input_tokens cap of {cap}: the cap is reached on its first turn"
                ),
                format!(
                    "raise the task's caps.input_tokens above {tokens} (the provider's own system prompt comes on top), or give it a narrower profile"
                ),
            );
        }
    }
    let cap = i.configured.workgroup.over(i.plan.caps.workgroup).input_tokens;
    let spent = group.map_or(Some(0), |g| super::caps::workgroup_spend(g).input_tokens);
    if let (Some(cap), Some(spent)) = (cap, spent)
        && spent.saturating_add(needed) > cap
    {
        let left = cap.saturating_sub(spent);
        let already = if spent > 0 { format!(" ({spent} of it spent already)") } else { String::new() };
        l.add(
            "STRATA-E2115",
            "caps.workgroup.input_tokens",
            format!(
                "the unfinished tasks' prompts come to {needed} tokens, over the {left} the workgroup's input_tokens cap of {cap} leaves{already}: the workgroup would pause before its last task"
            ),
            format!(
                "raise caps.workgroup.input_tokens to at least {} (each prompt is read at least once), in the plan or in [context_efficiency.caps.workgroup]",
                spent.saturating_add(needed)
            ),
        );
    }
}

fn check_providers(l: &mut List, i: &Inputs<'_>) {
    for name in real_providers(i.plan, i.provider, i.auto) {
        let var = format!("STRATA_{}", name.to_ascii_uppercase());
        match i.facts.clis.get(&name) {
            None | Some(CliFact::Missing { .. }) => {
                let (program, searched) = match i.facts.clis.get(&name) {
                    Some(CliFact::Missing { program, searched }) => (program.clone(), searched.clone()),
                    _ => (name.clone(), "nowhere (not probed)".to_owned()),
                };
                l.add(
                    "STRATA-E2108",
                    format!("provider {name}"),
                    format!("its CLI {program} was not found ({searched})"),
                    format!("install it, name it with {var}=PATH, or run on another provider (--provider sim)"),
                );
            }
            Some(CliFact::Broken { path, detail }) => l.add(
                "STRATA-E2109",
                format!("provider {name}"),
                format!("{path} --version did not answer: {detail}"),
                format!("check that {path} runs (its runtime, e.g. node, on PATH), or name another with {var}=PATH"),
            ),
            Some(CliFact::Found { .. }) => {}
        }
    }
}

/// The glob an entry's path stands for over the whole knowledge base (`{docRoot}` and `{entity}`
/// standing for any entity), or `None` when the entry is made of a task variable alone.
fn entry_glob(path: &str) -> Option<String> {
    let glob = path.replace("{docRoot}", "docs/*").replace("{entity}", "*");
    // Any other variable (`{crFile}`, `{systemSummary}`, …) resolves from the task or is always
    // there: not a glob over the base.
    if glob.contains('{') { None } else { Some(glob) }
}

/// A glob of a profile that matches no virtual path in the knowledge base and is not a guard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadGlob {
    /// Where it is written: `never[0]`, `onDemand[1]`, …
    pub at: String,
    /// The glob as written.
    pub glob: String,
    /// Whether it is a `never` glob (else an entry's path).
    pub never: bool,
}

/// The globs of `p` (its `never` globs and its entries that are globs over the base, `{docRoot}`
/// and `{entity}` standing for any entity) that match no virtual path in `g` and are not listed
/// in its `guards`. The preflight refuses a run whose profiles have any; `strata profile
/// register` warns of them.
pub fn dead_globs(p: &Profile, g: &Graph) -> Vec<DeadGlob> {
    let cp = &p.context_profile;
    let guarded = |x: &str| cp.guards.iter().any(|y| y == x);
    let mut out = Vec::new();
    for (k, glob) in cp.never.iter().enumerate() {
        if !guarded(glob) && !any_virtual_path(g, glob) {
            out.push(DeadGlob { at: format!("never[{k}]"), glob: glob.clone(), never: true });
        }
    }
    let classes = [("always", &cp.always), ("forCurrentTask", &cp.for_current_task), ("onDemand", &cp.on_demand)];
    for (class, entries) in classes {
        for (k, e) in entries.iter().enumerate() {
            let Some(glob) = entry_glob(&e.path) else { continue };
            if !guarded(&e.path) && !any_virtual_path(g, &glob) {
                out.push(DeadGlob { at: format!("{class}[{k}]"), glob: e.path.clone(), never: false });
            }
        }
    }
    out
}

fn check_globs(l: &mut List, i: &Inputs<'_>) {
    let used: BTreeSet<String> =
        i.plan.tasks.iter().map(|t| plan::task_profile(i.plan.profile.as_deref(), t)).collect();
    for name in used {
        let Some(p) = i.profiles.get(&name) else { continue };
        for d in dead_globs(p, i.graph) {
            let input = format!("profile {name}: {} {:?}", d.at, d.glob);
            let fix = format!(
                "correct it (`strata prompt paths GLOB` lists what a glob matches; {LAYOUT}), or list it in the profile's guards if the paths may appear later"
            );
            if d.never {
                l.add(
                    "STRATA-E2110",
                    input,
                    "matches no path in the knowledge base: a never rule that cannot apply excludes nothing",
                    fix,
                );
            } else {
                l.add(
                    "STRATA-E2111",
                    input,
                    "matches no path in the knowledge base: the entry can never give the worker anything",
                    fix,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kb::intake::{SourceFile, plan as intake};
    use crate::ports::{CountingIds, FixedClock};

    fn file(name: &str, front: &str) -> SourceFile {
        SourceFile { path: format!("{name}.md"), bytes: format!("---\n{front}---\n").into_bytes() }
    }

    /// A knowledge base: entity billing, BRD-1.1, module billing-api, CR-1 (approved), CR-2
    /// (draft).
    fn graph() -> Graph {
        let mut g = Graph::new();
        let files = [
            file("billing", "kind: entity\nid: billing\nname: Billing\ntier: product\nstate: active\n"),
            file(
                "BRD-1.1",
                "kind: brd-requirement\nid: BRD-1.1\nentity: billing\ntitle: Tax\nstate: approved\nfunctionalDomains: []\nbackendModules: []\nuiScreens: []\nlinkedCrs: [CR-1]\n",
            ),
            file(
                "CR-1",
                "kind: change-request\nid: CR-1\nentity: billing\ntitle: A change\nstate: proposed\nbrdRefs: [BRD-1.1]\n",
            ),
            file("CR-2", "kind: change-request\nid: CR-2\nentity: billing\ntitle: Later\nstate: draft\nbrdRefs: []\n"),
        ];
        let p = intake(&g, &files, &mut CountingIds::new(1), &FixedClock(1)).unwrap_or_else(|e| panic!("{e:#?}"));
        g.apply_appends(&p.appends).unwrap();
        g
    }

    fn plan(text: &str) -> Plan {
        serde_json::from_str(text).unwrap()
    }

    fn ready() -> Facts {
        Facts {
            repo: RepoFact::Ready { top: "/r".into(), base: "0".repeat(40), branch_taken: false },
            clis: BTreeMap::new(),
            outside: BTreeMap::new(),
            prompt_tokens: BTreeMap::new(),
            discovered: BTreeMap::new(),
        }
    }

    fn run(p: &Plan, facts: &Facts, profiles: &BTreeMap<String, Profile>, g: &Graph) -> Result<Checked, Vec<Problem>> {
        run_as(p, facts, profiles, g, "sim", false)
    }

    fn run_as(
        p: &Plan,
        facts: &Facts,
        profiles: &BTreeMap<String, Profile>,
        g: &Graph,
        auto: &str,
        resuming: bool,
    ) -> Result<Checked, Vec<Problem>> {
        let groups = Workgroups::default();
        let configured = super::super::caps::PlanCaps::default();
        let configured = &configured;
        check(&Inputs {
            plan: p,
            provider: None,
            auto,
            resuming,
            groups: &groups,
            graph: g,
            profiles,
            facts,
            configured,
        })
    }

    const GOOD: &str = r#"{"workgroup": "wg", "pipeline": "light", "task": [
        {"id": "a", "role": "backend-builder", "objective": "x", "owns": ["src/a/"], "change_request": "CR-1", "specs": ["BRD-1.1"]}]}"#;

    #[test]
    fn a_good_plan_passes_with_the_shipped_profiles_on_a_small_base() {
        let g = graph();
        let profiles = run_profiles(&ProfileIndex::default()).unwrap();
        let c = run(&plan(GOOD), &ready(), &profiles, &g).unwrap_or_else(|p| panic!("{p:#?}"));
        assert_eq!(c.workgroup, "wg");
    }

    #[test]
    fn every_problem_is_listed_at_once_with_its_code() {
        let g = graph();
        let mut profiles = run_profiles(&ProfileIndex::default()).unwrap();
        let mut own = profiles["backend-developer"].clone();
        own.agent_id = "mine".into();
        own.context_profile.never = vec!["specs/*/modules/**".into(), "specs/*/later/**".into()];
        own.context_profile.on_demand[0].path = "{docRoot}/research/*".into();
        own.context_profile.guards = vec!["specs/*/later/**".into()];
        profiles.insert("mine".into(), own);
        let p = plan(
            r#"{"workgroup": "wg", "provider": "claude", "task": [
            {"id": "a", "role": "backend-builder", "objective": "x", "owns": ["src/a/", "link/x"], "profile": "nope", "change_request": "CR-77"},
            {"id": "b", "role": "backend-builder", "objective": "y", "owns": ["src/b"], "profile": "mine", "change_request": "CR-2", "specs": ["BRD-9.9"]},
            {"id": "r", "role": "reviewer", "phase": "review", "objective": "z"}]}"#,
        );
        let mut facts = ready();
        facts.repo = RepoFact::NotGit { dir: "/tmp/x".into(), detail: "not a git repository".into() };
        facts.clis.insert("claude".into(), CliFact::Missing { program: "claude".into(), searched: "PATH".into() });
        facts.outside.insert("link/x".into(), "/etc/x".into());
        let problems = run(&p, &facts, &profiles, &g).unwrap_err();
        let codes: Vec<(&str, &str)> = problems.iter().map(|p| (p.code, p.input.as_str())).collect();
        assert_eq!(
            codes,
            [
                ("STRATA-E0905", "task a: profile"),
                ("STRATA-E2102", "task a: change_request"),
                ("STRATA-E2106", "task a: owns"),
                ("STRATA-E2103", "task b: change_request"),
                ("STRATA-E2104", "task b: specs"),
                ("STRATA-E1722", "repository /tmp/x"),
                ("STRATA-E2108", "provider claude"),
                ("STRATA-E2110", "profile mine: never[0] \"specs/*/modules/**\""),
                ("STRATA-E2111", "profile mine: onDemand[0] \"{docRoot}/research/*\""),
            ],
            "{problems:#?}"
        );
        assert!(problems.iter().all(|p| !p.rule.is_empty() && !p.fix.is_empty()));
        assert!(problems[7].fix.contains("specs/<entity>/{requirements,domains,backend,screens}/<id>"));
    }

    #[test]
    fn a_taken_name_or_branch_is_a_problem_only_for_a_new_run() {
        let g = graph();
        let profiles = run_profiles(&ProfileIndex::default()).unwrap();
        let mut facts = ready();
        facts.repo = RepoFact::Ready { top: "/r".into(), base: "0".repeat(40), branch_taken: true };
        let p = plan(GOOD);
        let problems = run(&p, &facts, &profiles, &g).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].code, "STRATA-E2107");
        let resumed = run_as(&p, &facts, &profiles, &g, "sim", true);
        assert!(resumed.is_ok(), "{resumed:?}");
    }

    #[test]
    fn a_shape_problem_does_not_hide_the_others_and_auto_is_resolved() {
        let g = graph();
        let profiles = run_profiles(&ProfileIndex::default()).unwrap();
        let p = plan(
            r#"{"workgroup": "Bad", "provider": "auto", "pipeline": "light", "task": [{"id": "a", "role": "analyst", "objective": "x", "change_request": "CR-77"}]}"#,
        );
        let mut facts = ready();
        facts.clis.insert("codex".into(), CliFact::Broken { path: "/bin/codex".into(), detail: "exit 127".into() });
        let problems = run_as(&p, &facts, &profiles, &g, "codex", false).unwrap_err();
        let codes: Vec<&str> = problems.iter().map(|p| p.code).collect();
        assert_eq!(codes, ["STRATA-E1701", "STRATA-E2102", "STRATA-E2109"], "{problems:#?}");
        assert_eq!(real_providers(&p, Some("sim"), "codex"), BTreeSet::new());
    }

    #[test]
    fn an_input_token_cap_below_a_prompt_or_a_workgroup_cap_below_all_prompts_is_a_problem() {
        let g = graph();
        let profiles = run_profiles(&ProfileIndex::default()).unwrap();
        let two = r#"{"workgroup": "wg", "pipeline": "light", "caps": {"workgroup": {"input_tokens": 5000}}, "task": [
            {"id": "a", "role": "analyst", "objective": "x", "caps": {"input_tokens": 1000}},
            {"id": "b", "role": "analyst", "objective": "y"}]}"#;
        let mut facts = ready();
        facts.prompt_tokens = [("a".to_owned(), 1200), ("b".to_owned(), 3000)].into();
        let problems = run(&plan(two), &facts, &profiles, &g).unwrap_err();
        let codes: Vec<(&str, &str)> = problems.iter().map(|p| (p.code, p.input.as_str())).collect();
        assert_eq!(codes, [("STRATA-E2114", "task a: caps.input_tokens")], "{problems:#?}");
        assert!(problems[0].rule.contains("1200 tokens, over its input_tokens cap of 1000"), "{}", problems[0].rule);
        facts.prompt_tokens.insert("b".into(), 4000);
        let problems = run(&plan(two), &facts, &profiles, &g).unwrap_err();
        let codes: Vec<&str> = problems.iter().map(|p| p.code).collect();
        assert_eq!(codes, ["STRATA-E2114", "STRATA-E2115"], "{problems:#?}");
        assert!(problems[1].fix.contains("at least 5200"), "{}", problems[1].fix);
        // The configuration's workgroup cap wins over the plan's, as in a run.
        let raised = super::super::caps::PlanCaps {
            workgroup: super::super::caps::CapsSpec { input_tokens: Some(6000), ..Default::default() },
            ..Default::default()
        };
        let groups = Workgroups::default();
        let p = plan(two);
        let i = Inputs {
            plan: &p,
            provider: None,
            auto: "sim",
            resuming: false,
            groups: &groups,
            graph: &g,
            profiles: &profiles,
            facts: &facts,
            configured: &raised,
        };
        let codes: Vec<&str> = check(&i).unwrap_err().iter().map(|p| p.code).collect();
        assert_eq!(codes, ["STRATA-E2114"]);
        // A prompt the adapter could not assemble is not guessed at.
        facts.prompt_tokens.clear();
        assert!(run(&plan(two), &facts, &profiles, &g).is_ok());
    }

    #[test]
    fn a_recorded_plan_checks_as_it_was_written() {
        let c = plan::check(&plan(GOOD)).unwrap();
        assert_eq!(plan::check(&as_written(&c)).unwrap(), c);
    }
}
