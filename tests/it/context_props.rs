//! Property test: 1,000 generated profiles and tasks on the seed-scale fixture. For every one:
//! the budget holds, nothing never-listed is included (also not inside a summary), maxFullSpecs
//! holds, assembling twice gives identical bytes, the manifest's total is the prompt's exact
//! count, `prompt verify` accepts the manifest from the journal and rejects an edited prompt;
//! a refusal names an exact, positive shortfall.

use std::cell::{Cell, RefCell};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use strata_engine::context::assemble::{Inputs, Refusal, Task, TokenCounter, assemble, compliance};
use strata_engine::context::paths::{artifact_path, glob_match};
use strata_engine::context::profile::{self, ContextProfile, Entry, Profile, ProfileIndex};
use strata_engine::context::prompts;
use strata_engine::context::summary::{self, Summaries};
use strata_engine::kb::graph::Node;
use strata_engine::kb::kind::{ArtifactKey, ArtifactKind};
use strata_engine::ports::{CountingIds, FixedClock};
use strata_tests::seed_kb;

const PATHS: &[&str] = &[
    "{systemSummary}",
    "{entitySummary}",
    "{pipelineRules}",
    "{crFile}",
    "{targetRequirements}",
    "{functionalDomainSpec}",
    "{targetModuleSpec}",
    "{targetScreenSpec}",
    "{docRoot}/research/*",
    "specs/{entity}/**",
    "specs/*/screens/*",
    "specs/**",
    "changes/*",
    "summaries/L2/*",
    "summaries/**",
    "issues/*",
    "backlog/*",
    "entities/*",
];

const NEVER: &[&str] = &[
    "specs/*/backend/**",
    "specs/*/screens/*",
    "specs/billing/**",
    "changes/*",
    "summaries/**",
    "summaries/L2/*",
    "specs/*/requirements/BRD-2.*",
    "issues/*",
    "specs/*/domains/*",
    "rules/*",
    "specs/crm/screens/crm-screen-?",
];

const LEVELS: &[&str] = &["L1", "L2", "L3"];
const MODELS: &[&str] = &["claude-opus", "gpt-5-codex", "local-model"];

fn entry() -> impl Strategy<Value = Entry> {
    (0..PATHS.len(), 0..LEVELS.len()).prop_map(|(p, l)| Entry { path: PATHS[p].into(), level: LEVELS[l].into() })
}

fn generated_profile() -> impl Strategy<Value = Profile> {
    (
        prop::collection::vec(entry(), 0..4),
        prop::collection::vec(entry(), 0..5),
        prop::collection::vec(entry(), 0..5),
        prop::collection::btree_set(0..NEVER.len(), 0..4),
        0u32..7,
        prop_oneof![5_000u32..9_000, 5_000u32..=100_000],
        0..MODELS.len(),
    )
        .prop_map(|(always, for_current_task, on_demand, never, max_full_specs, token_budget, model)| Profile {
            agent_id: "generated".into(),
            tier: "implementation".into(),
            model: MODELS[model].into(),
            description: None,
            context_profile: ContextProfile {
                always,
                for_current_task,
                on_demand,
                never: never.into_iter().map(|i| NEVER[i].to_owned()).collect(),
                max_full_specs,
                token_budget,
                guards: Vec::new(),
            },
        })
}

#[test]
fn a_thousand_generated_profiles_and_tasks_hold_every_guarantee() {
    let (j, mut g, fx) = seed_kb(7);
    let s = Summaries::build(&mut g);
    let crs: Vec<String> = fx.of(ArtifactKind::ChangeRequest).map(|d| d.key.id.clone()).collect();
    let ids = RefCell::new(CountingIds::new(1 << 50));
    let (index, seen) = (RefCell::new(ProfileIndex::default()), Cell::new(0u64));
    let (ok, refused, degraded, never_hit, verified) =
        (Cell::new(0), Cell::new(0), Cell::new(0), Cell::new(0), Cell::new(0));
    let mut runner = TestRunner::new(Config { cases: 1000, failure_persistence: None, ..Config::default() });
    let strategy = (generated_profile(), prop::option::weighted(0.85, 0..crs.len()), "[A-Za-z0-9._-]{1,24}");
    runner
        .run(&strategy, |(p, plan, task_id)| {
            // The generated profile is a valid document, and registers as a version.
            let text = serde_json::to_string(&p).unwrap();
            let p = profile::parse("generated", &text).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut index = index.borrow_mut();
            let from = seen.get() + 1;
            j.scan(from, u64::MAX, |r, _| index.apply(r).map(|()| true)).unwrap().unwrap();
            seen.set(j.head().seq);
            if let Some(a) = profile::register(&index, &p, &mut *ids.borrow_mut(), &FixedClock(0)).unwrap() {
                j.append_multi_blocking(vec![a]).unwrap().unwrap();
            }
            let version = j.stream_version(&profile::stream("generated"));
            let head = j.head();
            let task = Task { id: task_id, objective: "Generated task.".into(), plan: plan.map(|i| crs[i].clone()) };
            let factor = if p.model.starts_with("claude") { 1300 } else { 1000 };
            let inp = Inputs::at_head(&g, &s, &p, version, &task, &head);
            let cp = &p.context_profile;
            match assemble(&inp, &mut TokenCounter::new(factor)) {
                Err(Refusal::OverBudget { needed, budget, shortfall, .. }) => {
                    prop_assert_eq!(budget, cp.token_budget as usize);
                    prop_assert!(needed > budget);
                    prop_assert_eq!(shortfall, needed - budget);
                    refused.set(refused.get() + 1);
                }
                Err(other) => return Err(TestCaseError::fail(format!("unexpected refusal: {other}"))),
                Ok(a) => {
                    let m = &a.manifest;
                    ok.set(ok.get() + 1);
                    // Budget, on the exact count of the bytes.
                    prop_assert!(m.total_tokens <= cp.token_budget as usize);
                    prop_assert_eq!(
                        m.total_tokens,
                        (strata_engine::tokens::count(&a.prompt) * factor as usize).div_ceil(1000)
                    );
                    // Never: no included path, and no source of an included summary.
                    let never = |path: &str| cp.never.iter().any(|n| glob_match(n, path));
                    prop_assert!(m.included.iter().all(|i| !never(&i.path)), "never-listed item included");
                    let keep = |n: &Node| !never(&artifact_path(n));
                    for i in &m.included {
                        let made = if i.item == "summary:L3" {
                            Some(summary::system_with(&g, &keep))
                        } else if let Some(e) = i.item.strip_prefix("summary:L2/") {
                            let node = g.get(&ArtifactKey::new(ArtifactKind::Entity, e)).unwrap();
                            Some(if i.level == "L3" {
                                summary::l3_line_with(&g, node, &keep)
                            } else {
                                summary::l2_with(&g, node, &keep)
                            })
                        } else {
                            None
                        };
                        if let Some(sum) = made {
                            prop_assert_eq!(
                                &sum.hash.to_hex(),
                                &i.content_hash,
                                "summary {} was not made without the never-list",
                                &i.item
                            );
                            for src in &sum.sources {
                                let node = g
                                    .get(&ArtifactKey::new(ArtifactKind::from_name(&src.kind).unwrap(), &src.id))
                                    .unwrap();
                                prop_assert!(!never(&artifact_path(node)));
                            }
                        }
                    }
                    if m.excluded.iter().any(|e| e.reason.starts_with("never:")) {
                        never_hit.set(never_hit.get() + 1);
                    }
                    // maxFullSpecs.
                    let full = m.included.iter().filter(|i| i.level == "L1" && i.path.starts_with("specs/")).count();
                    prop_assert!(full <= cp.max_full_specs as usize, "{} L1 specs > {}", full, cp.max_full_specs);
                    prop_assert!(compliance(m, &cp.never).is_empty());
                    if m.included.iter().any(|i| i.degraded_from.is_some()) {
                        degraded.set(degraded.get() + 1);
                    }
                    // Determinism: a second assembly with a cold token cache gives the same bytes.
                    let again = assemble(&inp, &mut TokenCounter::new(factor)).unwrap();
                    prop_assert_eq!(&again.prompt, &a.prompt);
                    prop_assert_eq!(&again.manifest, m);
                    // Verify: accepted from the journal; an edited prompt is rejected.
                    let problems = prompts::verify(&j, m, Some(a.prompt.as_bytes())).unwrap();
                    prop_assert!(problems.is_empty(), "verify rejected a true manifest: {:?}", problems);
                    let mut edited = a.prompt.clone().into_bytes();
                    let at = edited.len() / 2;
                    edited[at] = if edited[at] == b'x' { b'y' } else { b'x' };
                    prop_assert!(
                        prompts::prompt_problem(m, &edited).is_some_and(|p| p.contains("the prompt was edited"))
                    );
                    // (The whole verification again, with the edited prompt, on every 20th case:
                    // it runs the same check after the same re-assembly.)
                    if verified.get() % 20 == 0 {
                        let problems = prompts::verify(&j, m, Some(&edited)).unwrap();
                        prop_assert!(problems.iter().any(|p| p.contains("the prompt was edited")), "{:?}", problems);
                    }
                    verified.set(verified.get() + 1);
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    println!(
        "assembled {}, refused {}, with degradation {}, with never-list exclusions {}, verified {}",
        ok.get(),
        refused.get(),
        degraded.get(),
        never_hit.get(),
        verified.get()
    );
    // The generator reaches every branch: not a vacuous pass.
    assert_eq!(ok.get() + refused.get(), 1000);
    assert!(ok.get() >= 500, "too few assemblies succeeded: {}", ok.get());
    assert!(refused.get() > 0 && degraded.get() > 0 && never_hit.get() > 0);
    assert_eq!(verified.get(), ok.get());
}
