//! Assembly keeps the summaries it makes without never-listed artifacts (issue 27: assembly in
//! proportion to the task); they must never be stale. After every edit, deletion and creation,
//! assembling with the long-lived, refreshed `Summaries` gives byte for byte the prompt and bill
//! of materials that a `Summaries` built from scratch gives, for every shipped profile and many
//! tasks.

use strata_engine::context::assemble::{Assembly, Inputs, Task, TokenCounter, assemble};
use strata_engine::context::profile::{self, BUILTIN, Profile};
use strata_engine::context::summary::Summaries;
use strata_engine::kb::commands::{self, Ctx};
use strata_engine::kb::fixture::render;
use strata_engine::kb::graph::Graph;
use strata_engine::kb::intake::plan;
use strata_engine::kb::kind::{ArtifactKey, ArtifactKind};
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::Journal;
use strata_tests::{apply_tail, seed_kb};

fn assemble_all(
    g: &Graph,
    s: &Summaries,
    profiles: &[Profile],
    crs: &[String],
    tc: &mut TokenCounter,
) -> Vec<Assembly> {
    let mut out = Vec::new();
    for p in profiles {
        for cr in crs {
            let task = Task { id: format!("{cr}-{}", p.agent_id), objective: "Do it.".into(), plan: Some(cr.clone()) };
            let inputs = Inputs {
                graph: g,
                summaries: s,
                profile: p,
                profile_version: 1,
                task: &task,
                position: g.seq(),
                position_hash: strata_journal::Hash::ZERO,
                continuation: None,
            };
            out.push(assemble(&inputs, tc).expect("assembles"));
        }
    }
    out
}

fn append(j: &Journal, g: &mut Graph, appends: Vec<strata_journal::StreamAppend>) {
    j.append_multi_blocking(appends).unwrap().unwrap();
    apply_tail(j, g);
}

#[test]
fn kept_summaries_after_edits_equal_summaries_built_from_scratch() {
    let (j, mut g, mut fx) = seed_kb(11);
    let profiles: Vec<Profile> = BUILTIN.iter().map(|(n, t)| profile::parse(n, t).unwrap()).collect();
    assert!(profiles.iter().any(|p| !p.context_profile.never.is_empty()), "a shipped profile never-lists something");
    let crs: Vec<String> = fx.of(ArtifactKind::ChangeRequest).take(12).map(|d| d.key.id.clone()).collect();
    let mut kept = Summaries::build(&mut g);
    let mut tc = TokenCounter::new(1300);
    assemble_all(&g, &kept, &profiles, &crs, &mut tc);
    let mut ids = CountingIds::new(1 << 40);
    let screens: Vec<ArtifactKey> = fx.of(ArtifactKind::UiScreen).map(|d| d.key.clone()).collect();
    let modules: Vec<ArtifactKey> = fx.of(ArtifactKind::BackendModule).map(|d| d.key.clone()).collect();
    for round in 0..6 {
        // A never-listed screen and a module edited, one screen deleted every other round.
        for key in [&screens[round * 3], &modules[round * 2]] {
            let d = fx.get_mut(key).unwrap();
            d.body.push_str(&format!("\nRound {round}.\n"));
            let p = plan(&g, &[render(d)], &mut ids, &FixedClock(0)).unwrap();
            append(&j, &mut g, p.appends);
        }
        if round % 2 == 1 {
            let a = commands::delete(&g, &screens[round * 3 + 1], &mut Ctx { ids: &mut ids, clock: &FixedClock(0) })
                .unwrap();
            append(&j, &mut g, a);
        }
        kept.refresh(&mut g);
        let mut scratch_graph = g.clone();
        let fresh = Summaries::build(&mut scratch_graph);
        let a = assemble_all(&g, &kept, &profiles, &crs, &mut tc);
        let b = assemble_all(&g, &fresh, &profiles, &crs, &mut tc);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.prompt, y.prompt, "round {round}");
            assert_eq!(x.manifest, y.manifest, "round {round}");
        }
    }
}

/// The impact closure assembly starts from is kept per change request while the graph stands
/// still, and walked again once it moves: after a deletion in the closure the kept one is the
/// fresh walk, not the one from before.
#[test]
fn a_kept_closure_is_the_walk_at_the_graph_s_position() {
    let (j, mut g, fx) = seed_kb(12);
    let kept = Summaries::build(&mut g);
    let cr = fx.of(ArtifactKind::ChangeRequest).next().unwrap().key.clone();
    let start = g.node_id(&cr).unwrap();
    let before = kept.closure(&g, start);
    assert!(std::sync::Arc::ptr_eq(&before, &kept.closure(&g, start)), "kept while the graph stands still");
    assert_eq!(before.steps, g.impact_closure(start).steps);
    let gone = g.node(*before.steps.last().expect("the closure reaches something")).key.clone();
    let mut ids = CountingIds::new(1 << 41);
    let a = commands::delete(&g, &gone, &mut Ctx { ids: &mut ids, clock: &FixedClock(0) }).unwrap();
    append(&j, &mut g, a);
    let after = kept.closure(&g, start);
    assert_eq!(after.steps, g.impact_closure(start).steps);
    assert_ne!(after.steps, before.steps, "the deleted artifact is no longer reached");
}
