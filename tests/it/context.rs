//! Context assembly on the seed-scale fixture: summaries (incremental, stale after edit, delete
//! and rename), the shipped profiles, degradation and refusal, supersession, verification.

use strata_engine::context::assemble::{Inputs, Refusal, Task, TokenCounter, assemble, compliance};
use strata_engine::context::profile::{self, BUILTIN, Profile};
use strata_engine::context::prompts::{self, PromptIndex};
use strata_engine::context::summary::{self, Problem, PublishedIndex, Summaries};
use strata_engine::kb::commands::{self, Ctx};
use strata_engine::kb::fixture::{Fixture, render};
use strata_engine::kb::graph::Graph;
use strata_engine::kb::intake::plan;
use strata_engine::kb::kind::{ArtifactKey, ArtifactKind};
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::{Journal, StreamAppend};
use strata_tests::{apply_tail, seed_kb};

struct Kb {
    j: Journal,
    g: Graph,
    fx: Fixture,
    ids: CountingIds,
}

impl Kb {
    fn new() -> Kb {
        let (j, g, fx) = seed_kb(7);
        Kb { j, g, fx, ids: CountingIds::new(1 << 40) }
    }

    fn append(&mut self, appends: Vec<StreamAppend>) {
        if !appends.is_empty() {
            self.j.append_multi_blocking(appends).unwrap().unwrap();
        }
        apply_tail(&self.j, &mut self.g);
    }

    fn edit(&mut self, key: &ArtifactKey, f: impl FnOnce(&mut strata_engine::kb::artifact::ArtifactDraft)) {
        let d = self.fx.get_mut(key).unwrap();
        f(d);
        let file = render(d);
        let p = plan(&self.g, &[file], &mut self.ids, &FixedClock(0)).unwrap();
        self.append(p.appends);
    }

    fn delete(&mut self, key: &ArtifactKey) {
        let a = commands::delete(&self.g, key, &mut Ctx { ids: &mut self.ids, clock: &FixedClock(0) }).unwrap();
        self.append(a);
    }

    fn published(&self) -> PublishedIndex {
        let mut p = PublishedIndex::default();
        self.j.scan(1, u64::MAX, |r, _| p.apply(r).map(|()| true)).unwrap().unwrap();
        p
    }

    fn publish(&mut self, s: &Summaries) {
        let a = summary::publish(s, &self.published(), &mut self.ids, &FixedClock(0)).unwrap();
        self.append(a);
    }
}

fn key(kind: ArtifactKind, id: &str) -> ArtifactKey {
    ArtifactKey::new(kind, id)
}

fn stale_entities(findings: &[summary::Finding]) -> Vec<(String, String)> {
    findings.iter().map(|f| (f.level.clone(), f.entity.clone())).collect()
}

#[test]
fn one_edit_regenerates_one_entity_and_published_summaries_go_stale_after_edit_delete_and_rename() {
    let mut kb = Kb::new();
    let mut s = Summaries::build(&mut kb.g);
    assert_eq!(s.regenerated, 30, "15 entities, an L3 line and an L2 each");
    // Never published: every summary is reported missing.
    let findings = summary::check(&s, &kb.published());
    assert_eq!(findings.len(), 30);
    assert!(findings.iter().all(|f| f.problem == Problem::Missing));
    kb.publish(&s);
    assert!(summary::check(&s, &kb.published()).is_empty());
    // Publishing again with nothing changed appends nothing.
    assert!(summary::publish(&s, &kb.published(), &mut kb.ids, &FixedClock(0)).unwrap().is_empty());

    // Edit one screen's body: only billing's two summaries are regenerated, and the published
    // ones of billing (and only those) are stale, naming the screen.
    let screen = key(ArtifactKind::UiScreen, "billing-screen-2");
    kb.edit(&screen, |d| d.body.push_str("\nOne more paragraph.\n"));
    let before = s.regenerated;
    s.refresh(&mut kb.g);
    assert_eq!(s.regenerated - before, 2, "one entity's L2 and L3 line");
    let f = summary::check(&s, &kb.published());
    assert_eq!(stale_entities(&f), vec![("L2".into(), "billing".into()), ("L3".into(), "billing".into())]);
    assert_eq!(f[0].problem, Problem::Stale { changed: vec![screen.to_string()], removed: vec![], added: vec![] });
    kb.publish(&s);
    assert!(summary::check(&s, &kb.published()).is_empty());

    // Delete a module: crm's summaries are stale with the module gone.
    let module = key(ArtifactKind::BackendModule, "crm-api-2");
    kb.delete(&module);
    s.refresh(&mut kb.g);
    let f = summary::check(&s, &kb.published());
    assert_eq!(stale_entities(&f), vec![("L2".into(), "crm".into()), ("L3".into(), "crm".into())]);
    match &f[0].problem {
        Problem::Stale { removed, .. } => assert_eq!(removed, &vec![module.to_string()]),
        other => panic!("{other:?}"),
    }
    assert!(!s.entity("crm").unwrap().text.contains("crm-api-2"), "the regenerated L2 no longer lists it");
    kb.publish(&s);

    // Rename a requirement (a new id with the same content, the old one deleted): gone and new.
    let old = key(ArtifactKind::BrdRequirement, "BRD-3.5");
    let mut renamed = kb.fx.drafts.iter().find(|d| d.key == old).unwrap().clone();
    renamed.key = key(ArtifactKind::BrdRequirement, "BRD-3.50");
    let p = plan(&kb.g, &[render(&renamed)], &mut kb.ids, &FixedClock(0)).unwrap();
    kb.append(p.appends);
    kb.delete(&old);
    s.refresh(&mut kb.g);
    let f = summary::check(&s, &kb.published());
    let entity = kb.g.get(&renamed.key).unwrap().fields["entity"].as_str().unwrap().to_owned();
    assert_eq!(stale_entities(&f), vec![("L2".into(), entity.clone()), ("L3".into(), entity)]);
    assert_eq!(
        f[0].problem,
        Problem::Stale { changed: vec![], removed: vec![old.to_string()], added: vec![renamed.key.to_string()] }
    );

    // Move a screen to another entity (its entity field renamed): both entities are stale.
    kb.publish(&s);
    let moved = key(ArtifactKind::UiScreen, "crm-screen-1");
    kb.edit(&moved, |d| {
        d.fields.insert("entity".into(), "billing".into());
    });
    s.refresh(&mut kb.g);
    let f = summary::check(&s, &kb.published());
    assert_eq!(
        stale_entities(&f),
        vec![
            ("L2".into(), "billing".into()),
            ("L2".into(), "crm".into()),
            ("L3".into(), "billing".into()),
            ("L3".into(), "crm".into())
        ]
    );
    kb.publish(&s);

    // Delete an entity: its published summaries are orphaned, then retracted by publish.
    let entity = key(ArtifactKind::Entity, "qa-practice");
    kb.delete(&entity);
    s.refresh(&mut kb.g);
    let f = summary::check(&s, &kb.published());
    assert_eq!(f.iter().filter(|f| f.problem == Problem::Orphaned).count(), 2, "{f:?}");
    kb.publish(&s);
    assert!(summary::check(&s, &kb.published()).is_empty());
    assert!(kb.published().get("L2", "qa-practice").is_none());

    // Incremental summaries equal a rebuild from the journal at every step.
    let mut fresh = Graph::at(&kb.j, kb.j.head().seq).unwrap();
    let rebuilt = Summaries::build(&mut fresh);
    let a: Vec<_> = s.all().map(|(l, e)| (l.text.clone(), e.text.clone(), e.sources.clone())).collect();
    let b: Vec<_> = rebuilt.all().map(|(l, e)| (l.text.clone(), e.text.clone(), e.sources.clone())).collect();
    assert_eq!(a, b);
}

fn builtin(name: &str) -> Profile {
    let (n, t) = BUILTIN.iter().find(|(n, _)| *n == name).unwrap();
    profile::parse(n, t).unwrap()
}

fn register(kb: &mut Kb, p: &Profile) -> u64 {
    let mut ix = profile::ProfileIndex::default();
    kb.j.scan(1, u64::MAX, |r, _| ix.apply(r).map(|()| true)).unwrap().unwrap();
    if let Some(a) = profile::register(&ix, p, &mut kb.ids, &FixedClock(0)).unwrap() {
        kb.append(vec![a]);
    }
    kb.j.stream_version(&profile::stream(&p.agent_id))
}

#[test]
fn shipped_profiles_fit_every_change_request_and_verify() {
    let mut kb = Kb::new();
    for (name, _) in BUILTIN {
        let p = builtin(name);
        let version = register(&mut kb, &p);
        assert_eq!(version, 1);
        let s = Summaries::build(&mut kb.g);
        let head = kb.j.head();
        let crs: Vec<String> = kb.fx.of(ArtifactKind::ChangeRequest).map(|d| d.key.id.clone()).collect();
        for cr in crs.iter().take(12) {
            let task = Task { id: format!("{cr}-{name}"), objective: "Do it.".into(), plan: Some(cr.clone()) };
            let inp = Inputs::at_head(&kb.g, &s, &p, version, &task, &head);
            let a = assemble(&inp, &mut TokenCounter::new(1300)).unwrap_or_else(|e| panic!("{name} {cr}: {e}"));
            assert!(a.manifest.total_tokens <= a.manifest.token_budget as usize);
            assert!(compliance(&a.manifest, &p.context_profile.never).is_empty());
            // The manifest's total is the exact scaled count of the prompt.
            assert_eq!(a.manifest.total_tokens, (strata_engine::tokens::count(&a.prompt) * 1300).div_ceil(1000));
            // Every reason of an impact-derived item names the link path from the plan.
            for i in a.manifest.included.iter().filter(|i| i.reason.starts_with("forCurrentTask: CR-")) {
                assert!(i.reason.contains(" -"), "{}", i.reason);
            }
            let problems = prompts::verify(&kb.j, &a.manifest, Some(a.prompt.as_bytes())).unwrap();
            assert!(problems.is_empty(), "{name} {cr}: {problems:?}");
        }
    }
}

#[test]
fn over_budget_degrades_in_the_documented_order_then_refuses_with_the_shortfall() {
    let kb = Kb::new();
    let mut g = kb.g;
    let s = Summaries::build(&mut g);
    let head = kb.j.head();
    let mut p = builtin("ui-developer");
    let task = Task { id: "T-1".into(), objective: "Build it.".into(), plan: Some("CR-4".into()) };
    let run = |p: &Profile| {
        let inp = Inputs::at_head(&g, &s, p, 1, &task, &head);
        assemble(&inp, &mut TokenCounter::new(1000))
    };
    let full = run(&p).unwrap();
    let total = full.manifest.total_tokens;
    // maxFullSpecs 1: every specification after the first is stepped to L2, and the L1 given up
    // is listed as an exclusion.
    let mut capped = p.clone();
    capped.context_profile.max_full_specs = 1;
    let c = run(&capped).unwrap();
    let stepped: Vec<_> = c.manifest.included.iter().filter(|i| i.degraded_from.is_some()).collect();
    assert!(stepped.len() >= 2, "{:#?}", c.manifest.included);
    assert_eq!(c.manifest.included.iter().filter(|i| i.level == "L1" && i.path.starts_with("specs/")).count(), 1);
    for i in stepped {
        assert!(
            c.manifest
                .excluded
                .iter()
                .any(|e| e.item == i.item && e.level == "L1" && e.reason.starts_with("maxFullSpecs 1")),
            "{} was stepped down without an exclusion entry",
            i.item
        );
    }
    assert!(full.manifest.included.iter().all(|i| i.degraded_from.is_none() || i.reason.contains("maxFullSpecs")));
    // A budget just under the full size: onDemand goes first.
    p.context_profile.token_budget = (total - 1) as u32;
    let a = run(&p).unwrap();
    assert!(a.manifest.total_tokens < total);
    assert!(
        a.manifest.excluded.iter().any(|e| e.reason.starts_with("over budget: onDemand dropped")),
        "{:#?}",
        a.manifest.excluded
    );
    assert!(!a.manifest.included.iter().any(|i| i.reason.starts_with("onDemand")));
    // Tighter: forCurrentTask items step down from L1 to L2, and L2 to L3, with the reason.
    p.context_profile.token_budget = 5000;
    let a = run(&p).unwrap();
    assert!(a.manifest.total_tokens <= 5000);
    assert!(a.manifest.included.iter().any(|i| i.degraded_from.as_deref() == Some("L1")), "{:#?}", a.manifest.included);
    assert!(!a.manifest.included.iter().any(|i| i.level == "L1" && i.section == "Screens"));
    // Each level given up is in the bill of materials as an exclusion, with its size.
    let given_up: Vec<_> =
        a.manifest.excluded.iter().filter(|e| e.reason.starts_with("over budget: included at")).collect();
    assert!(!given_up.is_empty() && given_up.iter().all(|e| e.tokens > 0), "{:#?}", a.manifest.excluded);
    // Mandatory content that cannot fit: a refusal naming the exact shortfall.
    p.context_profile.always.push(profile::Entry { path: "specs/**".into(), level: "L2".into() });
    match run(&p) {
        Err(Refusal::OverBudget { needed, budget, shortfall, .. }) => {
            assert_eq!(budget, 5000);
            assert!(needed > budget);
            assert_eq!(shortfall, needed - budget);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn never_list_holds_through_templates_globs_and_summaries() {
    let kb = Kb::new();
    let mut g = kb.g;
    let s = Summaries::build(&mut g);
    let head = kb.j.head();
    let mut p = builtin("ui-developer");
    // Everything of billing's backend, reached by a glob, a template and the entity summary.
    p.context_profile.on_demand.push(profile::Entry { path: "specs/billing/**".into(), level: "L2".into() });
    p.context_profile.for_current_task.push(profile::Entry { path: "{targetModuleSpec}".into(), level: "L1".into() });
    p.context_profile.token_budget = 100_000;
    let task = Task { id: "T-2".into(), objective: "Build it.".into(), plan: Some("CR-4".into()) };
    let inp = Inputs::at_head(&g, &s, &p, 1, &task, &head);
    let a = assemble(&inp, &mut TokenCounter::new(1000)).unwrap();
    assert!(a.manifest.included.iter().all(|i| !i.path.contains("/backend/")), "{:#?}", a.manifest.included);
    assert!(a.manifest.excluded.iter().any(|e| e.reason.starts_with("never: specs/*/backend/**")));
    // The summaries are made without the modules: the entity summary does not list them, and the
    // system summary counts none (other artifacts may still name them in their link fields; a
    // reference is not the content).
    let section = |name: &str| {
        let start = a.prompt.find(&format!("## {name}\n")).unwrap();
        let rest = &a.prompt[start + 3..];
        rest[..rest.find("\n## ").unwrap_or(rest.len())].to_owned()
    };
    assert!(!section("Entity summary").contains("billing-api-1"), "{}", section("Entity summary"));
    assert!(
        section("System summary").contains("billing (product, active): 1 dom, 0 mod, 7 scr"),
        "{}",
        section("System summary")
    );
    let l2 = a.manifest.included.iter().find(|i| i.item == "summary:L2/billing").unwrap();
    assert!(l2.reason.contains("made without the never-listed artifacts"));
    assert!(s.entity("billing").unwrap().text.contains("billing-api-1"), "the unfiltered summary does list them");
}

/// One heading per section: a prompt is `# Task` over `##` sections, and no block repeats its
/// section's heading or opens with a heading above it (the system summary's and the pipeline
/// rules' own titles are dropped, an entity summary's title is a `###` like an artifact's).
#[test]
fn every_prompt_section_has_one_heading_and_no_block_heads_above_it() {
    let kb = Kb::new();
    let mut g = kb.g;
    let s = Summaries::build(&mut g);
    let head = kb.j.head();
    let task = Task { id: "T-3".into(), objective: "Change it.".into(), plan: Some("CR-4".into()) };
    for name in ["orchestrator", "ui-developer", "backend-developer", "reviewer"] {
        let mut p = builtin(name);
        p.context_profile.token_budget = 200_000;
        let inp = Inputs::at_head(&g, &s, &p, 1, &task, &head);
        let a = assemble(&inp, &mut TokenCounter::new(1000)).unwrap();
        let lines: Vec<&str> = a.prompt.lines().collect();
        let tops: Vec<&&str> = lines.iter().filter(|l| l.starts_with("# ")).collect();
        assert_eq!(tops, [&"# Task T-3"], "{name}: one top heading, the task's");
        let sections: Vec<&str> = lines.iter().filter(|l| l.starts_with("## ")).copied().collect();
        let unique: std::collections::BTreeSet<&str> = sections.iter().copied().collect();
        assert_eq!(unique.len(), sections.len(), "{name}: a section heading repeated: {sections:?}");
        assert!(
            sections.iter().any(|h| *h == "## System summary" || *h == "## Entity summary"),
            "{name}: {sections:?}"
        );
        for (i, l) in lines.iter().enumerate().filter(|(_, l)| l.starts_with("## ")) {
            let next = lines[i + 1..].iter().find(|x| !x.is_empty()).copied().unwrap_or("");
            assert!(
                !next.starts_with("# ") && !next.starts_with("## "),
                "{name}: under {l:?} the block opens with {next:?}"
            );
            assert_ne!(next.trim_start_matches('#').trim(), l[3..].trim(), "{name}: {l:?} repeated by its block");
        }
    }
}

#[test]
fn changed_context_supersedes_exactly_the_prompts_that_included_it() {
    let mut kb = Kb::new();
    let p = builtin("ui-developer");
    let version = register(&mut kb, &p);
    let s = Summaries::build(&mut kb.g);
    let head = kb.j.head();
    let task = Task { id: "T-3".into(), objective: "Build it.".into(), plan: Some("CR-4".into()) };
    let inp = Inputs::at_head(&kb.g, &s, &p, version, &task, &head);
    let a = assemble(&inp, &mut TokenCounter::new(1000)).unwrap();
    let rec = prompts::record(&a.manifest, &mut kb.ids, &FixedClock(0)).unwrap();
    kb.append(vec![rec]);
    let index = |j: &Journal| {
        let mut ix = PromptIndex::default();
        j.scan(1, u64::MAX, |r, _| ix.apply(r).map(|()| true)).unwrap().unwrap();
        ix
    };
    // An edit to something the prompt did not include flags nothing.
    let unrelated = key(ArtifactKind::UiScreen, "crm-screen-1");
    kb.edit(&unrelated, |d| d.body.push_str("\nMore.\n"));
    assert!(prompts::supersede(&index(&kb.j), &kb.g, &mut kb.ids, &FixedClock(0)).unwrap().is_empty());
    // An edit to an included screen flags this prompt, naming the screen, once.
    let included = a.manifest.included.iter().find(|i| i.section == "Screens").unwrap().item.clone();
    let (_, id) = included.split_once(':').unwrap();
    kb.edit(&key(ArtifactKind::UiScreen, id), |d| d.body.push_str("\nChanged after assembly.\n"));
    let sup = prompts::supersede(&index(&kb.j), &kb.g, &mut kb.ids, &FixedClock(0)).unwrap();
    assert_eq!(sup.len(), 1);
    assert_eq!(sup[0].stream, "prompt/T-3");
    let body: prompts::Superseded = serde_json::from_slice(&sup[0].events[0].payload).unwrap();
    assert_eq!(body.items.len(), 1);
    assert_eq!(body.items[0].item, included);
    kb.append(sup);
    assert!(prompts::supersede(&index(&kb.j), &kb.g, &mut kb.ids, &FixedClock(0)).unwrap().is_empty(), "flagged once");
    // The prompt still verifies: the journal at its position has not changed.
    assert!(prompts::verify(&kb.j, &a.manifest, Some(a.prompt.as_bytes())).unwrap().is_empty());
}

#[test]
fn the_context_efficiency_report_in_docs_is_what_the_command_produces() {
    let report = strata_adapters::measure::measure(7).unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/context-efficiency.md");
    let on_disk = std::fs::read_to_string(&path).unwrap();
    assert!(
        on_disk == report.markdown,
        "docs/context-efficiency.md is out of date: rerun `cargo run --release -- context measure`"
    );
    let f = &report.figures;
    assert!(f["orchestrator_orientation"]["total"].as_u64().unwrap() <= 2_500);
    assert!(f["agent_orientation"]["max"].as_u64().unwrap() <= 1_200);
    assert!(f["added_entity_20_specs"]["tokens"].as_u64().unwrap() <= 50);
}
