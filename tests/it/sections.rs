//! The seed's further prompt sections: design profiles, stack concerns, tech skills,
//! implementation references and modification routes enter a prompt through profile entries at
//! their levels, are budgeted and never-listed like every other item; the continuation status
//! of a retry is read from the journal; `prompt verify` recomputes all of it byte for byte.

use serde_json::{Value, json};
use strata_engine::context::assemble::{Inputs, Manifest, Refusal, Task, TokenCounter, assemble, compliance};
use strata_engine::context::continuation;
use strata_engine::context::profile::{self, Profile};
use strata_engine::context::prompts;
use strata_engine::context::summary::Summaries;
use strata_engine::kb::kind::ArtifactKind;
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::{ExpectedVersion, StreamAppend};
use strata_tests::{apply_tail, event, seed_kb, strata, strata_bin};

/// The five kinds, the template variable that reaches each, the section it fills and the
/// virtual path its items have.
const KINDS: [(ArtifactKind, &str, &str, &str); 5] = [
    (ArtifactKind::DesignProfile, "{designProfile}", "Design profile", "design/"),
    (ArtifactKind::StackConcern, "{stackConcerns}", "Stack concerns", "stack/"),
    (ArtifactKind::TechSkill, "{techSkills}", "Tech skills", "stack/"),
    (ArtifactKind::ImplementationRef, "{implementationRefs}", "Implementation references", "impl/"),
    (ArtifactKind::ModificationRoute, "{modificationRoutes}", "Modification routes", "routes/"),
];

/// A profile with the system summary and, for the current task, each of the five at `levels`.
fn profile_with(levels: [&str; 5], never: &[&str], budget: u32) -> Profile {
    let entries: Vec<Value> =
        KINDS.iter().zip(levels).map(|((_, var, _, _), level)| json!({"path": var, "level": level})).collect();
    let doc = json!({
        "agentId": "sections",
        "tier": "implementation",
        "model": "claude-sonnet",
        "contextProfile": {
            "always": [{"path": "{systemSummary}", "level": "L3"}],
            "forCurrentTask": entries,
            "never": never,
            "maxFullSpecs": 3,
            "tokenBudget": budget,
            "guards": never,
        }
    });
    profile::parse("sections", &doc.to_string()).unwrap_or_else(|e| panic!("{e}"))
}

/// A change request of product entity `billing` whose closure reaches a module and a screen.
fn billing_cr(fx: &strata_engine::kb::fixture::Fixture) -> String {
    fx.of(ArtifactKind::ChangeRequest)
        .find(|d| d.entity() == Some("billing"))
        .map(|d| d.key.id.clone())
        .expect("billing has a change request")
}

/// The seed-scale knowledge base with its summaries, and a task on a billing change request.
fn billing_task(id: &str) -> (strata_journal::Journal, strata_engine::kb::graph::Graph, Summaries, Task) {
    let (j, mut g, fx) = seed_kb(7);
    let s = Summaries::build(&mut g);
    let task = Task { id: id.into(), objective: "Carry it out.".into(), plan: Some(billing_cr(&fx)) };
    (j, g, s, task)
}

fn kind_of(item: &str) -> &str {
    item.split_once(':').map_or("", |(k, _)| k)
}

#[test]
fn each_kind_enters_a_prompt_through_its_entry_at_its_level_and_verify_recomputes_it() {
    let (j, mut g, fx) = seed_kb(7);
    let levels = ["L1", "L2", "L3", "L1", "L2"];
    let p = profile_with(levels, &[], 60_000);
    let mut ids = CountingIds::new(1 << 40);
    let reg = profile::register(&profile::ProfileIndex::default(), &p, &mut ids, &FixedClock(0)).unwrap().unwrap();
    j.append_multi_blocking(vec![reg]).unwrap().unwrap();
    apply_tail(&j, &mut g);
    let s = Summaries::build(&mut g);
    let cr = billing_cr(&fx);
    let task = Task { id: "sections-1".into(), objective: "Carry it out.".into(), plan: Some(cr.clone()) };
    let a = assemble(&Inputs::at_head(&g, &s, &p, 1, &task, &j.head()), &mut TokenCounter::new(1300)).unwrap();
    let m = &a.manifest;
    for ((kind, var, section, prefix), level) in KINDS.iter().zip(levels) {
        let items: Vec<_> = m.included.iter().filter(|i| kind_of(&i.item) == kind.name()).collect();
        assert!(!items.is_empty(), "{kind}: nothing included through {var}: {:?}", m.excluded);
        for i in &items {
            assert_eq!(i.level, level, "{kind}: {}", i.item);
            assert_eq!(i.section, *section, "{kind}");
            assert!(i.path.starts_with(prefix), "{kind}: {}", i.path);
            assert!(i.tokens > 0 && !i.content_hash.is_empty(), "{kind}: counted and hashed");
            assert!(i.reason.starts_with("forCurrentTask: "), "{}", i.reason);
        }
        assert!(m.sections.iter().any(|x| x == section), "{section} in {:?}", m.sections);
        assert!(a.prompt.contains(&format!("\n## {section}\n")), "{section} heading");
    }
    // The design profile is the billing entity's, rendered in full: brand, colours and voice.
    let design = fx.of(ArtifactKind::DesignProfile).find(|d| d.entity() == Some("billing")).unwrap();
    assert!(a.prompt.contains(design.fields["brand"].as_str().unwrap()));
    assert!(a.prompt.contains("colours: {\"accent\":"), "L1 renders the palette");
    // Stack concerns come from billing and from the cross-cutting entity, with the reason.
    let concerns: Vec<_> = m.included.iter().filter(|i| kind_of(&i.item) == "stack-concern").collect();
    assert!(concerns.iter().any(|i| i.path.starts_with("stack/billing/")));
    assert!(concerns.iter().any(|i| i.reason.contains("cross-cutting entity shared-services")), "{concerns:?}");
    // Implementation references are those of the specifications the change request reaches,
    // each with the link path that reached it; their sources are in the prompt.
    let closure: Vec<String> = g
        .impact(g.node_id(&strata_engine::kb::ArtifactKey::new(ArtifactKind::ChangeRequest, &cr)).unwrap())
        .into_iter()
        .filter(|r| r.key.kind == ArtifactKind::ImplementationRef)
        .map(|r| r.key.to_string())
        .collect();
    let refs: Vec<&str> =
        m.included.iter().filter(|i| kind_of(&i.item) == "implementation-ref").map(|i| i.item.as_str()).collect();
    assert_eq!(refs.len(), closure.len(), "{refs:?} vs {closure:?}");
    assert!(m.included.iter().filter(|i| kind_of(&i.item) == "implementation-ref").all(|i| i.reason.contains(" -")));
    assert!(a.prompt.contains("sources: src/billing/") || a.prompt.contains("sources: web/billing/"));
    // The sections appear in the seed's order.
    let order: Vec<usize> =
        ["Design profile", "Stack concerns", "Tech skills", "Implementation references", "Modification routes"]
            .iter()
            .map(|s| a.prompt.find(&format!("\n## {s}\n")).unwrap())
            .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    // Exact count, and `prompt verify` recomputes the prompt and its bill of materials.
    assert_eq!(m.total_tokens, (strata_engine::tokens::count(&a.prompt) * 1300).div_ceil(1000));
    let problems = prompts::verify(&j, m, Some(a.prompt.as_bytes())).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let mut edited = a.prompt.clone();
    edited.push(' ');
    assert!(!prompts::verify(&j, m, Some(edited.as_bytes())).unwrap().is_empty(), "an edit is caught");
}

#[test]
fn the_new_items_are_budgeted_stepped_down_before_the_specifications_and_refused_when_mandatory() {
    let (j, g, s, task) = billing_task("sections-2");
    let run = |p: &Profile| assemble(&Inputs::at_head(&g, &s, p, 1, &task, &j.head()), &mut TokenCounter::new(1000));
    // The change request and its modules in full first, the five after them.
    let with_specs = |budget: u32| {
        let mut p = profile_with(["L1"; 5], &[], budget);
        let specs = [("{crFile}", "L1"), ("{targetModuleSpec}", "L1")]
            .map(|(path, level)| profile::Entry { path: path.into(), level: level.into() });
        p.context_profile.for_current_task.splice(0..0, specs);
        p
    };
    let roomy = run(&with_specs(60_000)).unwrap();
    let section_tokens: usize = roomy
        .manifest
        .included
        .iter()
        .filter(|i| KINDS.iter().any(|(k, ..)| kind_of(&i.item) == k.name()))
        .map(|i| i.tokens)
        .sum();
    assert!(section_tokens > 0);
    // A budget a little under what the prompt takes: the last listed (the modification routes)
    // is stepped down first, the specifications keep their level, and the prompt fits.
    assert!(roomy.manifest.total_tokens > 5_100, "{}", roomy.manifest.total_tokens);
    let budget = u32::try_from(roomy.manifest.total_tokens - 10).unwrap();
    let tight = run(&with_specs(budget)).unwrap();
    assert!(
        tight
            .manifest
            .included
            .iter()
            .filter(|i| i.section == "Modules")
            .all(|i| !i.reason.contains("to fit the budget")),
        "the specifications keep their level"
    );
    assert!(tight.manifest.total_tokens <= budget as usize);
    let stepped: Vec<_> = tight.manifest.included.iter().filter(|i| i.degraded_from.is_some()).collect();
    assert!(!stepped.is_empty(), "something was stepped down");
    assert!(
        tight
            .manifest
            .excluded
            .iter()
            .any(|e| e.reason.starts_with("over budget: included at L2 instead") && e.path.starts_with("routes/")),
        "the last listed (modification routes) is stepped first: {:?}",
        tight.manifest.excluded
    );
    assert!(compliance(&tight.manifest, &[]).is_empty());
    // Always at L1 is mandatory: a budget below it is refused with the shortfall.
    let mut mandatory = profile_with(["L1"; 5], &[], 5_000);
    let cp = &mut mandatory.context_profile;
    cp.always.append(&mut cp.for_current_task);
    // Counted at twenty times their o200k size, they no longer fit.
    let mandatory_run =
        assemble(&Inputs::at_head(&g, &s, &mandatory, 1, &task, &j.head()), &mut TokenCounter::new(20_000));
    match mandatory_run {
        Err(Refusal::OverBudget { shortfall, budget, .. }) => assert!(shortfall > 0 && budget == 5_000),
        other => panic!("expected a refusal, got {:?}", other.map(|a| a.manifest.total_tokens)),
    }
}

#[test]
fn a_never_glob_excludes_each_kind_and_an_implementation_of_a_never_listed_spec() {
    let (j, g, s, task) = billing_task("sections-3");
    let never = ["design/**", "stack/*/concerns/*", "stack/*/skills/*", "routes/**", "specs/*/backend/**"];
    let p = profile_with(["L1"; 5], &never, 60_000);
    let a = assemble(&Inputs::at_head(&g, &s, &p, 1, &task, &j.head()), &mut TokenCounter::new(1000)).unwrap();
    let m = &a.manifest;
    for (kind, ..) in KINDS {
        let excluded: Vec<_> = m.excluded.iter().filter(|e| kind_of(&e.item) == kind.name()).collect();
        assert!(!excluded.is_empty(), "{kind}: nothing excluded");
        assert!(excluded.iter().all(|e| e.reason.starts_with("never: ")), "{kind}: {excluded:?}");
    }
    for (kind, ..) in &KINDS[..3] {
        assert!(!m.included.iter().any(|i| kind_of(&i.item) == kind.name()), "{kind} included despite never");
    }
    // No reference to a backend module survives `specs/*/backend/**`; a screen's does.
    let refs: Vec<_> = m.included.iter().filter(|i| kind_of(&i.item) == "implementation-ref").collect();
    assert!(refs.iter().all(|i| i.item.contains("-screen-")), "{refs:?}");
    assert!(!refs.is_empty(), "screens' implementation references stay");
    assert!(
        m.excluded.iter().any(|e| e.reason.contains("implements specs/billing/backend/")),
        "the withheld reference says why: {:?}",
        m.excluded
    );
    assert!(!a.prompt.contains("## Design profile") && !a.prompt.contains("## Modification routes"));
    assert!(compliance(m, &p.context_profile.never).is_empty());
}

/// Appends to `workgroup/wg` the events the continuation status is read from.
fn record(j: &strata_journal::Journal, n: u128, event_type: &str, payload: Value) {
    let e = event(uuid::Uuid::from_u128((7 << 100) + n), event_type, &payload);
    let a = StreamAppend { stream: "workgroup/wg".into(), expected: ExpectedVersion::Any, events: vec![e] };
    j.append_multi_blocking(vec![a]).unwrap().unwrap();
}

#[test]
fn the_continuation_status_is_read_from_the_journal_at_its_position_and_verifies_byte_for_byte() {
    let (j, mut g, fx) = seed_kb(7);
    let doc = json!({
        "agentId": "retrier", "tier": "implementation", "model": "claude-sonnet",
        "contextProfile": {"always": [{"path": "{systemSummary}", "level": "L3"}],
            "forCurrentTask": [{"path": "{crFile}", "level": "L2"}, {"path": "{continuationStatus}", "level": "L1"}],
            "never": [], "tokenBudget": 20_000}
    });
    let p = profile::parse("retrier", &doc.to_string()).unwrap();
    // Not fetchable later: the status is read when the prompt is assembled.
    let mut on_demand = doc.clone();
    on_demand["contextProfile"]["onDemand"] = json!([{"path": "{continuationStatus}", "level": "L1"}]);
    assert!(profile::parse("x", &on_demand.to_string()).unwrap_err().problems.contains("cannot be fetched later"));
    let reg = profile::register(&profile::ProfileIndex::default(), &p, &mut CountingIds::new(1 << 40), &FixedClock(0))
        .unwrap()
        .unwrap();
    j.append_multi_blocking(vec![reg]).unwrap().unwrap();
    let cr = billing_cr(&fx);
    let dispatched = |attempt: u32| json!({"task": "api", "attempt": attempt, "provider": "sim", "runs_as": "fresh-capsule", "model": {"tier": "standard", "from": "profile"}});
    record(&j, 1, "task.dispatched", dispatched(1));
    record(&j, 2, "task.write-violation", json!({"task": "api", "attempt": 1, "paths": ["src/other.rs"]}));
    record(
        &j,
        3,
        "task.failed",
        json!({"task": "api", "attempt": 1, "reason": "wrote outside its files\nsecond line", "retry": true,
               "capped": {"measure": "turns", "limit": 3, "observed": 3}, "check": {"command": "cargo test"}}),
    );
    record(&j, 4, "task.dispatched", json!({"task": "other", "attempt": 1, "provider": "sim", "runs_as": "local"}));
    record(&j, 5, "task.dispatched", dispatched(2));
    let at = j.head().seq;
    apply_tail(&j, &mut g);
    let c = continuation::read(&j, "wg", "api", at).unwrap().expect("attempt 1 ended");
    assert_eq!(c.attempts.len(), 1, "the running attempt 2 is not listed: {c:?}");
    assert!(continuation::read(&j, "wg", "other", at).unwrap().is_none(), "a first attempt has none");
    assert!(continuation::read(&j, "wg", "api", at - 3).unwrap().is_none(), "before the failure, none");
    let s = Summaries::build(&mut g);
    let task = Task { id: "wg.api".into(), objective: "Try again.".into(), plan: Some(cr) };
    let mut inputs = Inputs::at_head(&g, &s, &p, 1, &task, &j.head());
    let first = assemble(&inputs, &mut TokenCounter::new(1300)).unwrap();
    assert!(!first.prompt.contains("## Continuation status"));
    assert!(
        first.manifest.excluded.iter().any(|e| e.item == "{continuationStatus}" && e.reason.contains("unresolved"))
    );
    inputs.continuation = Some(&c);
    let retry = assemble(&inputs, &mut TokenCounter::new(1300)).unwrap();
    let m: &Manifest = &retry.manifest;
    let item = m.included.iter().find(|i| i.item == "continuation:status").expect("included");
    assert_eq!(
        (item.level.as_str(), item.section.as_str(), item.path.as_str()),
        ("L1", "Continuation status", "continuation/wg.api")
    );
    for text in [
        "## Continuation status",
        "attempt 1 (fresh-capsule on sim, model standard): failed: wrote outside its files",
        "second line; retried",
        "cap: turns: 3 reached the cap of 3",
        "failed check: cargo test",
        "wrote outside its files: src/other.rs",
    ] {
        assert!(retry.prompt.contains(text), "{text:?} in\n{}", retry.prompt);
    }
    let src = m.continuation.as_ref().expect("the source is recorded");
    assert_eq!((src.workgroup.as_str(), src.task.as_str(), src.position), ("wg", "api", at));
    assert_eq!(src.base_prompt_hash, first.manifest.prompt_hash, "without it, the prompt is the first one");
    // `prompt verify` reads the attempts again through the recorded position: byte for byte, even
    // after the journal moved on.
    record(&j, 6, "task.failed", json!({"task": "api", "attempt": 2, "reason": "again", "retry": false}));
    let problems = prompts::verify(&j, m, Some(retry.prompt.as_bytes())).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    // A manifest that claims another position does not verify.
    let mut moved = m.clone();
    moved.continuation.as_mut().unwrap().position = j.head().seq;
    assert!(!prompts::verify(&j, &moved, Some(retry.prompt.as_bytes())).unwrap().is_empty());
    // Levels: L2 is a line per attempt, L3 a line for the task; a never glob excludes it.
    assert!(c.render(strata_engine::context::render::Level::L3).starts_with("- 1 earlier attempt of task api ended"));
    let mut never = p.clone();
    never.context_profile.never = vec!["continuation/**".into()];
    let mut inputs = Inputs::at_head(&g, &s, &never, 1, &task, &j.head());
    inputs.continuation = Some(&c);
    let hidden = assemble(&inputs, &mut TokenCounter::new(1300)).unwrap();
    assert!(!hidden.prompt.contains("## Continuation status"));
    assert!(
        hidden
            .manifest
            .excluded
            .iter()
            .any(|e| e.item == "continuation:status" && e.reason.starts_with("never: continuation/**"))
    );
}

#[test]
fn a_retry_in_strata_run_carries_the_continuation_status_passes_the_planning_gate_and_verifies() {
    // Under seed 6 the example's billing-api fails its first attempt and is retried; its profile
    // (backend-developer) lists {continuationStatus}.
    let tmp = tempfile::tempdir().expect("tempdir");
    let at = tmp.path().join("example");
    let out = strata(
        strata_bin!(),
        tmp.path(),
        &["run", "--example", "--at", at.to_str().expect("utf-8 path"), "--seed", "6", "--time-scale", "0"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("billing-api: failed:"), "{err}");
    let dir = at.join(".strata/prompts/cr-1-rollout");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let first = read("billing-api.1.prompt.md");
    assert!(!first.contains("## Continuation status"), "a first attempt has none");
    let retry = read("billing-api.2.prompt.md");
    assert!(retry.contains("## Continuation status") && retry.contains("- attempt 1 ("), "{retry}");
    assert!(retry.contains(": failed: "), "{retry}");
    let manifest: Manifest = serde_json::from_str(&read("billing-api.2.prompt.manifest.json")).unwrap();
    let planned: Manifest = serde_json::from_str(&read("planned/billing-api.prompt.manifest.json")).unwrap();
    let src = manifest.continuation.as_ref().expect("the continuation's source");
    assert_eq!(src.base_prompt_hash, planned.prompt_hash, "the retry extends the planned prompt");
    assert_eq!((manifest.position, src.task.as_str()), (planned.position, "billing-api"));
    // The planning gate let attempt 2 run: it was dispatched, not held.
    assert!(!err.contains("billing-api: held"), "{err}");
    // `strata prompt verify` recomputes the retry's prompt byte for byte.
    let m = dir.join("billing-api.2.prompt.manifest.json");
    let p = dir.join("billing-api.2.prompt.md");
    let v = strata(strata_bin!(), &at, &["prompt", "verify", m.to_str().unwrap(), "--prompt", p.to_str().unwrap()]);
    assert!(v.status.success(), "{}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));
}

#[test]
fn the_new_kinds_are_taken_in_validated_and_suspected_like_every_other_kind() {
    use strata_engine::kb::intake::{SourceFile, plan};
    let (j, mut g, _) = seed_kb(7);
    let file = |path: &str, text: &str| SourceFile { path: path.into(), bytes: text.as_bytes().to_vec() };
    let take = |g: &strata_engine::kb::graph::Graph, files: &[SourceFile], n: u128| {
        plan(g, files, &mut CountingIds::new((1 << 41) + (n << 20)), &FixedClock(0))
    };
    // The schema: an implementation reference names exactly one specification, a colour is
    // #rrggbb, a source path stays inside the repository; unknown fields are refused.
    let bad = [
        file(
            "a.md",
            "---\nkind: implementation-ref\nid: two-specs\nentity: billing\ntitle: T\nstate: active\nbackendModule: billing-api-1\nuiScreen: billing-screen-1\nsources: [\"src/a.rs\"]\n---\n",
        ),
        file(
            "b.md",
            "---\nkind: design-profile\nid: pale\nentity: billing\ntitle: T\nstate: active\nbrand: B\nvoice: V\ncolours: {\"primary\": \"blue\"}\n---\n",
        ),
        file(
            "c.md",
            "---\nkind: modification-route\nid: out\nentity: billing\ntitle: T\nstate: active\nchange: C\nwhere: [\"../etc\"]\n---\n",
        ),
        file(
            "d.md",
            "---\nkind: tech-skill\nid: x\nentity: billing\ntitle: T\nstate: active\ntechnology: rust\nskill: S\nflavour: 1\n---\n",
        ),
        file(
            "e.md",
            "---\nkind: stack-concern\nid: y\nentity: nowhere\ntitle: T\nstate: active\nstack: rust\nconcern: C\n---\n",
        ),
    ];
    let problems = take(&g, &bad, 0).expect_err("refused");
    for f in ["a.md", "b.md", "c.md", "d.md", "e.md"] {
        assert!(problems.iter().any(|p| p.file == f), "{f}: {problems:#?}");
    }
    assert_eq!(j.head().seq, g.seq(), "a refused intake appends nothing");
    // A reference to a module that does not exist is dangling; created as active it may be
    // deprecated and reactivated, never sent back to draft.
    let dangling = file(
        "impl.md",
        "---\nkind: implementation-ref\nid: ghost-impl\nentity: billing\ntitle: T\nstate: active\nbackendModule: ghost-api\nsources: [\"src/ghost.rs\"]\n---\n",
    );
    let p = take(&g, &[dangling], 1).expect("taken in");
    j.append_multi_blocking(p.appends).unwrap().unwrap();
    apply_tail(&j, &mut g);
    let findings = g.validate();
    assert!(
        findings.iter().any(|f| f.rule == "dangling" && f.artifact.id == "ghost-impl" && f.field == "backendModule"),
        "{findings:#?}"
    );
    assert!(strata_engine::kb::lifecycle::can_transition(ArtifactKind::ImplementationRef, "active", "deprecated"));
    assert!(!strata_engine::kb::lifecycle::can_transition(ArtifactKind::DesignProfile, "active", "draft"));
    // A change to a module makes its implementation reference suspect.
    let module = strata_engine::kb::ArtifactKey::new(ArtifactKind::BackendModule, "billing-api-1");
    let before = g.node(g.node_id(&module).unwrap()).clone();
    let mut d = strata_engine::kb::fixture::generate(&strata_engine::kb::fixture::FixtureSpec::seed_scale(7))
        .drafts
        .into_iter()
        .find(|d| d.key == module)
        .unwrap();
    d.body.push_str("\nChanged.\n");
    let p = take(&g, &[strata_engine::kb::fixture::render(&d)], 2).expect("taken in");
    j.append_multi_blocking(p.appends).unwrap().unwrap();
    apply_tail(&j, &mut g);
    assert_ne!(g.node(g.node_id(&module).unwrap()).hash, before.hash);
    let r =
        g.node_id(&strata_engine::kb::ArtifactKey::new(ArtifactKind::ImplementationRef, "billing-api-1-impl")).unwrap();
    assert!(g.suspects().contains_key(&r), "the module's implementation reference is suspect");
}
