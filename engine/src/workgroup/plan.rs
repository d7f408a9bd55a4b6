//! A workgroup plan: the tasks a coordinator runs, who does each, what each may write and what
//! must finish first. The adapter reads it from TOML; [`check`] turns it into a [`Checked`] plan
//! (every problem at once, each naming the task, the field, the rule and the fix) with a
//! deterministic schedule order.
//!
//! Rules beyond the field shapes:
//!
//! * dependencies name tasks of the plan, never the task itself, and form no cycle;
//! * a dependency never runs in a later phase than its dependant (phases are gates: every task of
//!   a phase finishes before a task of the next phase starts);
//! * two tasks whose owned files overlap (same path, or one inside the other) are ordered by
//!   their dependencies, so at no point do two workers of the plan own one file;
//! * a writer role owns at least one file, and a task that owns files is a writer;
//! * the `full` pipeline has a `review` task whenever some task writes; the `light` pipeline is
//!   for a change confined to one layer (every owned file under one top-level directory) and
//!   skips the phases that change does not touch, keeping ownership, capsules and audit.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ce::capsule::is_safe_relative;

/// Most tasks in one plan.
pub const TASKS_MAX: usize = 10_000;
/// Most files one task owns (what a sealed capsule's `owned_files` holds).
pub const OWNS_MAX: usize = 64;
/// Most dependencies and spec references of one task, each (a change request and the spec
/// references become a capsule's `node_ids`, at most 64).
pub const REFS_MAX: usize = 63;
/// Longest objective, bytes (what a sealed capsule's `objective` holds).
pub const OBJECTIVE_BYTES_MAX: usize = 4 * 1024;
/// Longest name (workgroup, task, role, profile), bytes: a lineage id `<workgroup>.<task>` fits
/// the ledger's 128.
pub const NAME_BYTES_MAX: usize = 63;
/// Most workers running at once.
pub const PARALLEL_MAX: u32 = 64;
/// Workers running at once when the plan does not say.
pub const PARALLEL_DEFAULT: u32 = 4;
/// Most retries of a task.
pub const RETRIES_MAX: u32 = 5;
/// Retries when the plan does not say.
pub const RETRIES_DEFAULT: u32 = 1;
/// The wait before a task's first retry when the plan does not say, milliseconds; each further
/// retry of the task waits twice as long as the one before.
pub const RETRY_BACKOFF_MS_DEFAULT: u64 = 10_000;
/// Longest wait before a retry (first or later), milliseconds: ten minutes.
pub const RETRY_BACKOFF_MS_MAX: u64 = 600_000;
/// The phases, in gate order.
pub const PHASES: [&str; 5] = ["discover", "plan", "build", "verify", "review"];
/// The context-capsule phase of each of [`PHASES`] (the reference protocol's 1A … 3).
pub const CAPSULE_PHASES: [&str; 5] = ["1A", "1B", "2A", "2B", "3"];
/// A task's phase when the plan does not say.
pub const PHASE_DEFAULT: &str = "build";
/// Couplings a task may declare.
pub const COUPLINGS: [&str; 3] = ["tight", "moderate", "independent"];
/// Sensitivities, as the router reads them.
pub const SENSITIVITIES: [&str; 3] = ["normal", "restricted", "isolated"];
/// Providers a task may name.
pub const PROVIDERS: [&str; 4] = ["sim", "claude", "codex", "auto"];

/// The plan as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The workgroup's name: lower-case letters, digits and `-`, starting with a letter or digit.
    pub workgroup: String,
    /// Workers running at once (1–64, default 4).
    #[serde(default)]
    pub parallel: Option<u32>,
    /// Provider for tasks that do not name one (`sim`, `claude`, `codex`, `auto`; default `sim`).
    #[serde(default)]
    pub provider: Option<String>,
    /// `full` (default) or `light`.
    #[serde(default)]
    pub pipeline: Option<String>,
    /// Context profile for tasks that name none (default: each task's role's).
    #[serde(default)]
    pub profile: Option<String>,
    /// Attempts after a failed one, per task (0–5, default 1). A write violation or a conflict
    /// is never retried.
    #[serde(default)]
    pub retries: Option<u32>,
    /// Milliseconds before a task's first retry (0–600,000, default 10,000); each further retry
    /// of the task waits twice as long, at most ten minutes. A worker abandoned by a stopped run
    /// is not the task's failure and runs again at once.
    #[serde(default)]
    pub retry_backoff_ms: Option<u64>,
    /// Caps: `[caps.task]` for every task, `[caps.workgroup]` for the whole run
    /// ([`super::caps`]).
    #[serde(default)]
    pub caps: super::caps::PlanCaps,
    /// Time limit of each `verify` command, seconds (1–7,200, default 600).
    #[serde(default)]
    pub verify_timeout_seconds: Option<u64>,
    /// The consolidated suite (tests, static analysis, build): commands run on the integration
    /// branch once every build task completed, before the first review-phase task starts, and
    /// again after any later change lands ([`super::verify::suite_due`]).
    #[serde(default)]
    pub suite: Vec<String>,
    /// The tasks (TOML `[[task]]`).
    #[serde(rename = "task", default)]
    pub tasks: Vec<TaskSpec>,
}

/// One task as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Unique within the plan; same characters as the workgroup name.
    pub id: String,
    /// The role, one of [`super::roles::ROLES`] (`backend-builder`, `reviewer`, …): whether the
    /// task writes and its default profile follow from it.
    pub role: String,
    /// What the worker is asked to do.
    pub objective: String,
    /// Repository-relative files (or directories) the worker may write.
    #[serde(default)]
    pub owns: Vec<String>,
    /// Tasks that must complete first.
    #[serde(default)]
    pub after: Vec<String>,
    /// One of [`PHASES`] (default `build`).
    #[serde(default)]
    pub phase: Option<String>,
    /// `normal` (default), `restricted` or `isolated`.
    #[serde(default)]
    pub sensitivity: Option<String>,
    /// The change request whose impact closure fills the profile's templates.
    #[serde(default)]
    pub change_request: Option<String>,
    /// Further specification ids the worker is pointed at.
    #[serde(default)]
    pub specs: Vec<String>,
    /// Context profile (default: the plan's `profile`, else the role's).
    #[serde(default)]
    pub profile: Option<String>,
    /// Provider for this task (overrides the plan's).
    #[serde(default)]
    pub provider: Option<String>,
    /// Trivial work the coordinator does itself (`local`) when the provider can.
    #[serde(default)]
    pub trivial: bool,
    /// A task (listed in `after`, same role) whose warm session this one resumes.
    #[serde(default)]
    pub continues: Option<String>,
    /// A task (listed in `after`) whose context this one needs whole: the router may fork that
    /// task's session (`inherit-full`) when inheritance is safe and approved.
    #[serde(default)]
    pub affinity: Option<String>,
    /// The cost of inheriting the `affinity` task's whole context is approved (inheritance needs
    /// it, with `sensitivity = "normal"` written out, as a team does).
    #[serde(default)]
    pub affinity_approved: bool,
    /// How tightly the task is coupled to the coordinator's own work: `tight` (done locally),
    /// `moderate` or `independent` (default).
    #[serde(default)]
    pub coupling: Option<String>,
    /// The task's own caps, over the plan's `[caps.task]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caps: Option<super::caps::CapsSpec>,
    /// Shell commands that prove the task's criterion, run by strata in the worker's worktree
    /// after a successful turn; the first that fails fails the attempt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify: Vec<String>,
    /// The model tier the task runs on (`strong`, `standard` or `fast`), over the one its
    /// profile gives its role ([`super::models`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What the task is about, in words, instead of `specs`: the run's preflight resolves it to
    /// specifications by discovery ([`super::discovery`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// Filled by the preflight, never written: what discovery found for `request` and chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovered: Option<super::discovery::Discovered>,
}

/// One problem with a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The task, when the problem is in one.
    pub task: Option<String>,
    /// The field.
    pub field: String,
    /// The rule broken and the fix.
    pub rule: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.task {
            Some(t) => write!(f, "task {t}: {}: {}", self.field, self.rule),
            None => write!(f, "{}: {}", self.field, self.rule),
        }
    }
}

/// A task after checking: defaults filled in, its position in the schedule order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// The task as written, defaults filled in (`phase`, `sensitivity`, `profile`, `provider`).
    pub spec: TaskSpec,
    /// Index of the phase in [`PHASES`].
    pub phase: usize,
    /// Whether it writes.
    pub writer: bool,
    /// Whether the plan wrote the task's sensitivity out (inheritance needs a declared one).
    #[serde(default)]
    pub sensitivity_declared: bool,
}

impl Task {
    /// The task's id.
    pub fn id(&self) -> &str {
        &self.spec.id
    }
}

/// A checked plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checked {
    /// The workgroup.
    pub workgroup: String,
    /// Workers at once.
    pub parallel: u32,
    /// `full` or `light`.
    pub pipeline: String,
    /// Attempts after a failed one.
    pub retries: u32,
    /// Milliseconds before a task's first retry (doubling for each further one). Plans recorded
    /// before it existed read as the default.
    #[serde(default = "retry_backoff_default")]
    pub retry_backoff_ms: u64,
    /// Caps for every task and for the workgroup.
    #[serde(default, skip_serializing_if = "super::caps::PlanCaps::is_empty")]
    pub caps: super::caps::PlanCaps,
    /// Time limit of each `verify` command, milliseconds.
    #[serde(default = "verify_timeout_default")]
    pub verify_timeout_ms: u64,
    /// The consolidated suite's commands (plans recorded before it existed have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suite: Vec<String>,
    /// Tasks in schedule order: by phase, then dependencies first, then as written.
    pub tasks: Vec<Task>,
}

fn verify_timeout_default() -> u64 {
    super::verify::TIMEOUT_SECONDS_DEFAULT * 1000
}

fn retry_backoff_default() -> u64 {
    RETRY_BACKOFF_MS_DEFAULT
}

impl Checked {
    /// The task named `id`.
    pub fn task(&self, id: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.id() == id)
    }
}

/// Whether `s` is a name: 1–63 bytes of `a-z`, `0-9` and `-`, not starting with `-`.
pub fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= NAME_BYTES_MAX
        && !s.starts_with('-')
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Whether two repository-relative paths overlap: equal, or one a directory holding the other.
/// The one overlap rule ([`crate::ce::paths::overlaps`], which the write guard and the ledger
/// use), for paths written with or without a trailing `/`.
pub fn overlaps(a: &str, b: &str) -> bool {
    crate::ce::paths::overlaps(a.trim_end_matches('/'), b.trim_end_matches('/'))
}

struct Checker {
    problems: Vec<Problem>,
}

impl Checker {
    fn at(&mut self, task: Option<&str>, field: &str, rule: impl Into<String>) {
        self.problems.push(Problem { task: task.map(str::to_owned), field: field.to_owned(), rule: rule.into() });
    }
}

/// Checks `plan`: the checked plan, or every problem found.
pub fn check(plan: &Plan) -> Result<Checked, Vec<Problem>> {
    let mut c = Checker { problems: Vec::new() };
    if !is_name(&plan.workgroup) {
        c.at(None, "workgroup", "1–63 of a-z, 0-9 and -, not starting with -; rename it");
    }
    let parallel = plan.parallel.unwrap_or(PARALLEL_DEFAULT);
    if !(1..=PARALLEL_MAX).contains(&parallel) {
        c.at(None, "parallel", format!("{parallel} is outside 1–{PARALLEL_MAX}"));
    }
    let default_provider = plan.provider.clone().unwrap_or_else(|| "sim".to_owned());
    if !PROVIDERS.contains(&default_provider.as_str()) {
        c.at(None, "provider", format!("{default_provider:?} is not one of {}", PROVIDERS.join(", ")));
    }
    let retries = plan.retries.unwrap_or(RETRIES_DEFAULT);
    if retries > RETRIES_MAX {
        c.at(None, "retries", format!("{retries} is above {RETRIES_MAX}"));
    }
    let retry_backoff_ms = plan.retry_backoff_ms.unwrap_or(RETRY_BACKOFF_MS_DEFAULT);
    if retry_backoff_ms > RETRY_BACKOFF_MS_MAX {
        c.at(None, "retry_backoff_ms", format!("{retry_backoff_ms} is above {RETRY_BACKOFF_MS_MAX} (ten minutes)"));
    }
    let pipeline = plan.pipeline.clone().unwrap_or_else(|| "full".to_owned());
    if !matches!(pipeline.as_str(), "full" | "light") {
        c.at(None, "pipeline", format!("{pipeline:?} is neither full nor light"));
    }
    if plan.tasks.is_empty() {
        c.at(None, "task", "a plan has at least one [[task]]");
    }
    if plan.tasks.len() > TASKS_MAX {
        c.at(None, "task", format!("{} tasks; a plan has at most {TASKS_MAX}; split it", plan.tasks.len()));
        return Err(c.problems);
    }
    for (scope, caps) in [("caps.task", &plan.caps.task), ("caps.workgroup", &plan.caps.workgroup)] {
        for (field, rule) in caps.problems() {
            c.at(None, &format!("{scope}.{field}"), rule);
        }
    }
    let verify_s = plan.verify_timeout_seconds.unwrap_or(super::verify::TIMEOUT_SECONDS_DEFAULT);
    if !(1..=super::verify::TIMEOUT_SECONDS_MAX).contains(&verify_s) {
        c.at(
            None,
            "verify_timeout_seconds",
            format!("{verify_s}: between 1 and {}", super::verify::TIMEOUT_SECONDS_MAX),
        );
    }
    for (field, rule) in super::verify::problems("suite", &plan.suite) {
        c.at(None, field, rule);
    }
    let mut seen = BTreeSet::new();
    let mut tasks = Vec::with_capacity(plan.tasks.len());
    for t in &plan.tasks {
        tasks.push(check_task(&mut c, t, &default_provider, plan.profile.as_deref()));
        if is_name(&t.id) && !seen.insert(t.id.as_str()) {
            c.at(Some(&t.id), "id", "another task has this id; ids are unique within a plan");
        }
    }
    check_dependencies(&mut c, &tasks);
    check_ownership(&mut c, &tasks, &pipeline);
    if !c.problems.is_empty() {
        return Err(c.problems);
    }
    let order = schedule_order(&tasks);
    let tasks = order.into_iter().map(|i| tasks[i].clone()).collect();
    Ok(Checked {
        workgroup: plan.workgroup.clone(),
        parallel,
        pipeline,
        retries,
        retry_backoff_ms,
        caps: plan.caps,
        verify_timeout_ms: verify_s * 1000,
        suite: plan.suite.clone(),
        tasks,
    })
}

/// The profile task `t` runs with: its own, else the plan's `profile`, else its role's (an
/// unknown role, refused by the check, falls back to `backend-developer`).
pub fn task_profile(plan_profile: Option<&str>, t: &TaskSpec) -> String {
    let by_role = || super::roles::role(&t.role).map_or("backend-developer", |r| r.profile);
    t.profile.clone().or_else(|| plan_profile.map(str::to_owned)).unwrap_or_else(|| by_role().to_owned())
}

fn check_task(c: &mut Checker, t: &TaskSpec, default_provider: &str, default_profile: Option<&str>) -> Task {
    let id = Some(t.id.as_str());
    if !is_name(&t.id) {
        c.at(id, "id", "1–63 of a-z, 0-9 and -, not starting with -");
    }
    let role = super::roles::role(&t.role);
    if role.is_none() {
        c.at(id, "role", super::roles::unknown(&t.role));
    }
    if t.objective.trim().is_empty() || t.objective.len() > OBJECTIVE_BYTES_MAX {
        c.at(id, "objective", format!("say what to do, in 1–{OBJECTIVE_BYTES_MAX} bytes"));
    }
    if t.objective.chars().any(|ch| ch.is_control() && ch != '\n' && ch != '\t') {
        c.at(id, "objective", "no control characters other than newline and tab");
    }
    if t.owns.len() > OWNS_MAX {
        c.at(id, "owns", format!("{} files; at most {OWNS_MAX}; own a directory instead", t.owns.len()));
    }
    for p in &t.owns {
        if !is_safe_relative(p.trim_end_matches('/')) {
            c.at(id, "owns", format!("{p:?} is not a repository-relative path (no leading /, no . or .., no \\ or :)"));
        }
        if p.split('/').any(|s| s == ".strata" || s == ".git") {
            c.at(id, "owns", format!("{p:?} lies in .strata or .git, which workers never write"));
        }
    }
    for (field, list) in [("after", &t.after), ("specs", &t.specs)] {
        if list.len() > REFS_MAX {
            c.at(id, field, format!("{} entries; at most {REFS_MAX}", list.len()));
        }
    }
    for s in t.specs.iter().chain(&t.change_request) {
        if s.is_empty() || s.len() > NAME_BYTES_MAX * 2 || s.chars().any(|ch| ch.is_control() || ch == '/') {
            c.at(id, "specs", format!("{s:?} is not a specification id (e.g. CR-3, BRD-2.1)"));
        }
    }
    let phase = t.phase.as_deref().unwrap_or(PHASE_DEFAULT);
    let phase_index = PHASES.iter().position(|p| *p == phase).unwrap_or_else(|| {
        c.at(id, "phase", format!("{phase:?} is not one of {}", PHASES.join(", ")));
        0
    });
    let sensitivity = t.sensitivity.as_deref().unwrap_or("normal");
    if !SENSITIVITIES.contains(&sensitivity) {
        c.at(id, "sensitivity", format!("{sensitivity:?} is not one of {}", SENSITIVITIES.join(", ")));
    }
    let profile = task_profile(default_profile, t);
    if !is_name(&profile) {
        c.at(id, "profile", "1–63 of a-z, 0-9 and -");
    }
    let provider = t.provider.clone().unwrap_or_else(|| default_provider.to_owned());
    if !PROVIDERS.contains(&provider.as_str()) {
        c.at(id, "provider", format!("{provider:?} is not one of {}", PROVIDERS.join(", ")));
    }
    let writer = !t.owns.is_empty();
    match role {
        Some(r) if r.writes && !writer => {
            c.at(id, "owns", "a writer role owns at least one file; list what it may write")
        }
        Some(r) if !r.writes && writer => {
            c.at(id, "owns", format!("role {} writes nothing; give the task a builder role, or drop owns", r.name))
        }
        _ => {}
    }
    if let Some(coupling) = t.coupling.as_deref().filter(|c| !COUPLINGS.contains(c)) {
        c.at(id, "coupling", format!("{coupling:?} is not one of {}", COUPLINGS.join(", ")));
    }
    for (field, rule) in t.caps.unwrap_or_default().problems() {
        c.at(id, &format!("caps.{field}"), rule);
    }
    for (field, rule) in super::verify::problems("verify", &t.verify) {
        c.at(id, field, rule);
    }
    if let Some(r) = &t.request {
        let max = super::discovery::REQUEST_BYTES_MAX;
        if r.trim().is_empty() || r.len() > max || r.chars().any(|ch| ch.is_control() && ch != '\n') {
            c.at(id, "request", format!("say what the task is about in 1–{max} bytes, no control characters"));
        }
        if t.discovered.is_none() && !t.specs.is_empty() {
            c.at(id, "request", "give specs or a request, not both");
        }
    }
    match &t.discovered {
        Some(_) if t.request.is_none() => c.at(id, "discovered", "is filled by the run from a request; remove it"),
        Some(d) if d.chosen != t.specs => c.at(id, "discovered", "does not match the task's specs; remove it"),
        _ => {}
    }
    if let Some(m) = t.model.as_deref().filter(|m| super::models::Tier::parse(m).is_none()) {
        let tiers: Vec<&str> = super::models::Tier::ALL.iter().map(|t| t.as_str()).collect();
        c.at(id, "model", format!("{m:?} is not a model tier; name one of {}", tiers.join(", ")));
    }
    if t.affinity_approved && t.affinity.is_none() {
        c.at(id, "affinity_approved", "approves inheriting a context, but the task names no affinity");
    }
    let mut spec = t.clone();
    spec.phase = Some(phase.to_owned());
    spec.sensitivity = Some(sensitivity.to_owned());
    spec.profile = Some(profile);
    spec.provider = Some(provider);
    Task { spec, phase: phase_index, writer, sensitivity_declared: t.sensitivity.is_some() }
}

fn check_dependencies(c: &mut Checker, tasks: &[Task]) {
    let index: BTreeMap<&str, &Task> = tasks.iter().map(|t| (t.id(), t)).collect();
    for t in tasks {
        for d in &t.spec.after {
            match index.get(d.as_str()) {
                None => c.at(Some(t.id()), "after", format!("{d:?} is not a task of this plan")),
                Some(_) if d == t.id() => c.at(Some(t.id()), "after", "a task cannot wait for itself"),
                Some(dep) if dep.phase > t.phase => c.at(
                    Some(t.id()),
                    "after",
                    format!(
                        "{d} runs in phase {}, after this task's phase {}; phases are gates, so move one of them",
                        PHASES[dep.phase], PHASES[t.phase]
                    ),
                ),
                Some(_) => {}
            }
        }
    }
    for t in tasks {
        let Some(prior) = &t.spec.continues else { continue };
        if !t.spec.after.contains(prior) {
            c.at(
                Some(t.id()),
                "continues",
                format!("{prior} must also be in after: a session is resumed once its turn ended"),
            );
        } else if index.get(prior.as_str()).is_some_and(|p| p.spec.role != t.spec.role) {
            c.at(
                Some(t.id()),
                "continues",
                format!("{prior} has another role; a session is resumed only by its own role"),
            );
        }
    }
    for t in tasks {
        let Some(source) = &t.spec.affinity else { continue };
        if !t.spec.after.contains(source) {
            c.at(
                Some(t.id()),
                "affinity",
                format!("{source} must also be in after: a context is inherited once its turn ended"),
            );
        } else if t.spec.continues.is_some() {
            c.at(Some(t.id()), "affinity", "a task either continues a session or inherits one, not both; drop one");
        }
    }
    // One session, one worker at a time: tasks continuing the same task must wait for each other.
    let deps: BTreeMap<&str, BTreeSet<&str>> =
        tasks.iter().map(|t| (t.id(), t.spec.after.iter().map(String::as_str).collect())).collect();
    let mut continuers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for t in tasks {
        if let Some(prior) = &t.spec.continues {
            continuers.entry(prior.as_str()).or_default().push(t.id());
        }
    }
    for (prior, ids) in &continuers {
        for (i, a) in ids.iter().enumerate() {
            if let Some(b) = ids[i + 1..].iter().find(|b| !ordered(&deps, a, b)) {
                c.at(
                    Some(b),
                    "continues",
                    format!(
                        "{a} continues {prior} too, and neither waits for the other; one session cannot run two workers at once: order them with after, or let one start fresh"
                    ),
                );
            }
        }
    }
    if let Some(cycle) = find_cycle(tasks) {
        c.at(Some(&cycle[0]), "after", format!("dependency cycle: {}; break it", cycle.join(" → ")));
    }
}

/// A dependency cycle, as task ids from one task back to itself.
fn find_cycle(tasks: &[Task]) -> Option<Vec<String>> {
    let index: BTreeMap<&str, usize> = tasks.iter().enumerate().map(|(i, t)| (t.id(), i)).collect();
    // 0 unvisited, 1 on the stack, 2 done; iterative depth-first search.
    let mut mark = vec![0u8; tasks.len()];
    for start in 0..tasks.len() {
        if mark[start] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        mark[start] = 1;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let deps = &tasks[node].spec.after;
            if *next < deps.len() {
                let dep = index.get(deps[*next].as_str()).copied();
                *next += 1;
                let Some(dep) = dep.filter(|d| *d != node) else { continue };
                match mark[dep] {
                    0 => {
                        mark[dep] = 1;
                        stack.push((dep, 0));
                    }
                    1 => {
                        let from = stack.iter().position(|(n, _)| *n == dep).unwrap_or(0);
                        let mut cycle: Vec<String> =
                            stack[from..].iter().map(|(n, _)| tasks[*n].id().to_owned()).collect();
                        cycle.push(tasks[dep].id().to_owned());
                        return Some(cycle);
                    }
                    _ => {}
                }
            } else {
                mark[node] = 2;
                stack.pop();
            }
        }
    }
    None
}

/// Whether `a` transitively waits for `b` (or `b` for `a`).
fn ordered(deps: &BTreeMap<&str, BTreeSet<&str>>, a: &str, b: &str) -> bool {
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(x) = todo.pop() {
            for d in deps.get(x).into_iter().flatten() {
                if *d == to {
                    return true;
                }
                if seen.insert(*d) {
                    todo.push(d);
                }
            }
        }
        false
    };
    reaches(a, b) || reaches(b, a)
}

fn check_ownership(c: &mut Checker, tasks: &[Task], pipeline: &str) {
    let deps: BTreeMap<&str, BTreeSet<&str>> =
        tasks.iter().map(|t| (t.id(), t.spec.after.iter().map(String::as_str).collect())).collect();
    // Owners of each path, sorted, so overlapping pairs are found by a scan of neighbours' prefixes.
    let mut owned: Vec<(&str, usize)> = tasks
        .iter()
        .enumerate()
        .flat_map(|(i, t)| t.spec.owns.iter().map(move |p| (p.trim_end_matches('/'), i)))
        .collect();
    owned.sort_unstable();
    let mut reported = BTreeSet::new();
    for (k, (p, i)) in owned.iter().enumerate() {
        for (q, j) in owned[k + 1..].iter().take_while(|(q, _)| overlaps(p, q) || q.starts_with(p)) {
            let (a, b) = (&tasks[*i], &tasks[*j]);
            // Tasks in different phases are ordered by the phase gate.
            if i == j || !overlaps(p, q) || a.phase != b.phase {
                continue;
            }
            if !ordered(&deps, a.id(), b.id()) && reported.insert((a.id(), b.id())) {
                c.at(
                    Some(b.id()),
                    "owns",
                    format!("{q} overlaps {p}, owned by {}; make one wait for the other (after = [...])", a.id()),
                );
            }
        }
    }
    let writers = tasks.iter().any(|t| t.writer);
    match pipeline {
        "full" if writers && !tasks.iter().any(|t| PHASES[t.phase] == "review") => {
            c.at(None, "task", "the full pipeline reviews what it writes: add a task in phase review (or use pipeline = \"light\" for a one-layer change)");
        }
        "light" => {
            let layers: BTreeSet<&str> = owned.iter().map(|(p, _)| p.split('/').next().unwrap_or_default()).collect();
            if layers.len() > 1 {
                let names: Vec<&str> = layers.into_iter().collect();
                c.at(
                    None,
                    "pipeline",
                    format!(
                        "light is for a change confined to one layer; this plan writes under {}; use full",
                        names.join(", ")
                    ),
                );
            }
        }
        _ => {}
    }
}

/// Task indexes in schedule order: phase first, then a stable topological order (as written
/// among tasks that are ready together).
fn schedule_order(tasks: &[Task]) -> Vec<usize> {
    let index: BTreeMap<&str, usize> = tasks.iter().enumerate().map(|(i, t)| (t.id(), i)).collect();
    let mut waiting: Vec<usize> = tasks.iter().map(|t| t.spec.after.len()).collect();
    let mut dependants: Vec<Vec<usize>> = vec![Vec::new(); tasks.len()];
    for (i, t) in tasks.iter().enumerate() {
        for d in &t.spec.after {
            if let Some(&j) = index.get(d.as_str()) {
                dependants[j].push(i);
            }
        }
    }
    let mut ready: BTreeSet<(usize, usize)> =
        (0..tasks.len()).filter(|&i| waiting[i] == 0).map(|i| (tasks[i].phase, i)).collect();
    let mut order = Vec::with_capacity(tasks.len());
    while let Some((_, i)) = ready.pop_first() {
        order.push(i);
        for &j in &dependants[i] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                ready.insert((tasks[j].phase, j));
            }
        }
    }
    order
}
