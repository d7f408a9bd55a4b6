//! Module dependencies (`dependsOn` / `dependedOnBy` between backend modules):
//! * property tests: over random graphs of modules and requirements spread over product,
//!   foundation and cross-cutting entities, impact and suspicion agree with a plain reference walk
//!   over the declared edges, and validation reports every one-sided dependency, every cycle and
//!   every dependency across entities that does not point at a foundation or cross-cutting
//!   module, and nothing else about module dependencies;
//! * the seed-scale fixture: a product change reaches the shared modules it calls, a change to a
//!   shared module makes its callers suspect, and the planted module defects are found.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use proptest::prelude::*;
use serde_json::json;
use strata_engine::kb::ArtifactDraft;
use strata_engine::kb::fixture::{FixtureSpec, generate, render};
use strata_engine::kb::graph::Graph;
use strata_engine::kb::intake::{SourceFile, plan};
use strata_engine::kb::kind::{ArtifactKey, ArtifactKind};
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::Journal;

const ENTITIES: [(&str, &str); 4] =
    [("prod-a", "product"), ("prod-b", "product"), ("base", "foundation"), ("shared", "cross-cutting")];
const MODULES: usize = 7;
const REQUIREMENTS: usize = 3;

/// A random knowledge base of modules and requirements.
#[derive(Clone, Debug)]
struct Spec {
    /// Entity index of each module.
    module_entity: Vec<usize>,
    /// Entity index of each requirement.
    brd_entity: Vec<usize>,
    /// `(a, b, declared on a, declared on b)`: a depends on b, written in a's `dependsOn`, in b's
    /// `dependedOnBy`, or both (never neither).
    deps: Vec<(usize, usize, bool, bool)>,
    /// `(requirement, module)`: the requirement is implemented by the module (both sides).
    implements: Vec<(usize, usize)>,
}

fn spec() -> impl Strategy<Value = Spec> {
    let dep = (0..MODULES, 0..MODULES, 0u8..4).prop_map(|(a, b, sides)| match sides {
        0 => (a, b, true, false),
        1 => (a, b, false, true),
        _ => (a, b, true, true),
    });
    (
        proptest::collection::vec(0..ENTITIES.len(), MODULES),
        proptest::collection::vec(0..ENTITIES.len(), REQUIREMENTS),
        proptest::collection::vec(dep, 0..12),
        proptest::collection::vec((0..REQUIREMENTS, 0..MODULES), 0..6),
    )
        .prop_map(|(module_entity, brd_entity, deps, implements)| Spec {
            module_entity,
            brd_entity,
            deps,
            implements,
        })
}

fn module(i: usize) -> ArtifactKey {
    ArtifactKey::new(ArtifactKind::BackendModule, &format!("mod-{i}"))
}

fn brd(i: usize) -> ArtifactKey {
    ArtifactKey::new(ArtifactKind::BrdRequirement, &format!("BRD-1.{}", i + 1))
}

fn push(fields: &mut serde_json::Map<String, serde_json::Value>, field: &str, id: &str) {
    strata_engine::kb::intake::with(fields, field, id);
}

fn drafts(s: &Spec) -> Vec<ArtifactDraft> {
    let draft = |key: ArtifactKey, state: &str, fields: serde_json::Value| ArtifactDraft {
        source: Some(format!("{}.md", key.id)),
        key,
        state: state.into(),
        fields: fields.as_object().cloned().unwrap_or_default(),
        body: "v0".into(),
    };
    let mut out: Vec<ArtifactDraft> = ENTITIES
        .iter()
        .map(|(id, tier)| {
            draft(ArtifactKey::new(ArtifactKind::Entity, id), "active", json!({"name": id, "tier": tier}))
        })
        .collect();
    let mut modules: Vec<ArtifactDraft> = (0..MODULES)
        .map(|i| {
            let e = ENTITIES[s.module_entity[i]].0;
            draft(
                module(i),
                "draft",
                json!({"entity": e, "title": format!("module {i}"), "brdRequirements": [], "apiMethods": []}),
            )
        })
        .collect();
    let mut brds: Vec<ArtifactDraft> = (0..REQUIREMENTS)
        .map(|i| {
            let e = ENTITIES[s.brd_entity[i]].0;
            draft(
                brd(i),
                "draft",
                json!({"entity": e, "title": format!("requirement {i}"), "functionalDomains": [], "backendModules": [], "uiScreens": []}),
            )
        })
        .collect();
    for &(a, b, on_a, on_b) in &s.deps {
        if on_a {
            push(&mut modules[a].fields, "dependsOn", &module(b).id);
        }
        if on_b {
            push(&mut modules[b].fields, "dependedOnBy", &module(a).id);
        }
    }
    for &(r, m) in &s.implements {
        push(&mut brds[r].fields, "backendModules", &module(m).id);
        push(&mut modules[m].fields, "brdRequirements", &brd(r).id);
    }
    out.extend(modules);
    out.extend(brds);
    out
}

/// The dependency edges `a → b` (a depends on b) as declared on either side.
fn dep_edges(s: &Spec) -> BTreeSet<(usize, usize)> {
    s.deps.iter().map(|&(a, b, _, _)| (a, b)).collect()
}

/// The reference walk: keys reachable from `start` along `edges` (start excluded).
fn reach(start: &ArtifactKey, edges: &BTreeSet<(ArtifactKey, ArtifactKey)>) -> BTreeSet<ArtifactKey> {
    let mut seen = BTreeSet::from([start.clone()]);
    let mut queue = VecDeque::from([start.clone()]);
    while let Some(u) = queue.pop_front() {
        for (_, v) in
            edges.range((u.clone(), ArtifactKey::new(ArtifactKind::Entity, ""))..).take_while(|(x, _)| *x == u)
        {
            if seen.insert(v.clone()) {
                queue.push_back(v.clone());
            }
        }
    }
    seen.remove(start);
    seen
}

/// Impact edges: a requirement touches the modules implementing it; a module the modules it
/// depends on.
fn impact_edges(s: &Spec) -> BTreeSet<(ArtifactKey, ArtifactKey)> {
    let mut e: BTreeSet<(ArtifactKey, ArtifactKey)> =
        dep_edges(s).into_iter().map(|(a, b)| (module(a), module(b))).collect();
    e.extend(s.implements.iter().map(|&(r, m)| (brd(r), module(m))));
    e
}

/// Suspicion edges: a requirement's change reaches its implementations; a module's change the
/// modules that depend on it.
fn suspect_edges(s: &Spec) -> BTreeSet<(ArtifactKey, ArtifactKey)> {
    let mut e: BTreeSet<(ArtifactKey, ArtifactKey)> =
        dep_edges(s).into_iter().map(|(a, b)| (module(b), module(a))).collect();
    e.extend(s.implements.iter().map(|&(r, m)| (brd(r), module(m))));
    e
}

fn intake(j: &Journal, g: &mut Graph, files: &[SourceFile], ids: &mut CountingIds, tick: i64) {
    let p = plan(g, files, ids, &FixedClock(tick)).unwrap_or_else(|e| panic!("intake refused: {e:#?}"));
    if !p.appends.is_empty() {
        j.append_multi_blocking(p.appends).unwrap().unwrap();
    }
    j.scan(g.seq() + 1, u64::MAX, |rec, _| g.apply_record(rec).map(|()| true)).unwrap().unwrap();
}

/// Strongly connected sets of the dependency graph that form a cycle (size > 1, or a self-loop).
fn reference_cycles(s: &Spec) -> BTreeSet<BTreeSet<String>> {
    let edges = dep_edges(s);
    let keyed: BTreeSet<(ArtifactKey, ArtifactKey)> = edges.iter().map(|&(a, b)| (module(a), module(b))).collect();
    let mut out = BTreeSet::new();
    for i in 0..MODULES {
        let from_i = reach(&module(i), &keyed);
        let mut scc: BTreeSet<String> = (0..MODULES)
            .filter(|&j| j != i && from_i.contains(&module(j)) && reach(&module(j), &keyed).contains(&module(i)))
            .map(|j| module(j).id)
            .collect();
        if !scc.is_empty() || edges.contains(&(i, i)) {
            scc.insert(module(i).id);
            out.insert(scc);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn impact_suspicion_and_validation_agree_with_a_reference_walk(s in spec()) {
        let j = Journal::in_memory("strata.test/modules").unwrap();
        let mut g = Graph::new();
        let mut ids = CountingIds::new(1);
        let ds = drafts(&s);
        intake(&j, &mut g, &ds.iter().map(render).collect::<Vec<_>>(), &mut ids, 1);

        // Impact from every module and requirement.
        let impact = impact_edges(&s);
        for k in (0..MODULES).map(module).chain((0..REQUIREMENTS).map(brd)) {
            let n = g.node_id(&k).unwrap();
            let got: BTreeSet<ArtifactKey> = g.impact_closure(n).steps.iter().map(|&v| g.key(v).clone()).collect();
            prop_assert_eq!(&got, &reach(&k, &impact), "impact of {}", k);
        }

        // Validation about module dependencies: one-sided ones, cycles, crossings.
        let findings = g.validate();
        let dep_field = |f: &str| f == "dependsOn" || f == "dependedOnBy";
        let one_sided: BTreeSet<(String, String)> = findings
            .iter()
            .filter(|f| f.rule == "missing-inverse" && dep_field(&f.field))
            .map(|f| (f.artifact.id.clone(), f.field.clone()))
            .collect();
        let mut want_one_sided = BTreeSet::new();
        for &(a, b) in &dep_edges(&s) {
            let on_a = s.deps.iter().any(|&(x, y, oa, _)| (x, y) == (a, b) && oa);
            let on_b = s.deps.iter().any(|&(x, y, _, ob)| (x, y) == (a, b) && ob);
            if on_a && !on_b {
                want_one_sided.insert((module(a).id, "dependsOn".to_owned()));
            }
            if on_b && !on_a {
                want_one_sided.insert((module(b).id, "dependedOnBy".to_owned()));
            }
        }
        prop_assert_eq!(one_sided, want_one_sided);
        // A cycle finding names its members and walks a cycle through them.
        let cycles: BTreeSet<BTreeSet<String>> = findings
            .iter()
            .filter(|f| f.rule == "cycle")
            .map(|f| {
                let members: BTreeSet<String> =
                    f.detail.split_once(" depend on").unwrap().0.split(", ").map(str::to_owned).collect();
                let around = f.detail.split_once('(').unwrap().1.split_once(')').unwrap().0;
                let walk: Vec<&str> = around.split(" -> ").collect();
                assert_eq!(walk.first(), walk.last(), "{}", f.detail);
                assert_eq!(walk[0], f.artifact.id, "the walk starts at the finding's artifact");
                for w in walk.windows(2) {
                    let (a, b) = (w[0].trim_start_matches("mod-"), w[1].trim_start_matches("mod-"));
                    let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
                    assert!(dep_edges(&s).contains(&(a, b)), "{} is no dependency in {}", w.join(" -> "), f.detail);
                }
                assert!(walk.iter().all(|w| members.contains(*w)), "{}", f.detail);
                members
            })
            .collect();
        prop_assert_eq!(cycles, reference_cycles(&s));
        let crossings: BTreeSet<(String, String)> = findings
            .iter()
            .filter(|f| f.rule == "cross-entity" && dep_field(&f.field))
            .map(|f| {
                let t = f.target.as_ref().unwrap().id.clone();
                if f.field == "dependsOn" { (f.artifact.id.clone(), t) } else { (t, f.artifact.id.clone()) }
            })
            .collect();
        let want_crossings: BTreeSet<(String, String)> = dep_edges(&s)
            .into_iter()
            .filter(|&(a, b)| {
                let (ea, eb) = (s.module_entity[a], s.module_entity[b]);
                ea != eb && !matches!(ENTITIES[eb].1, "foundation" | "cross-cutting")
            })
            .map(|(a, b)| (module(a).id, module(b).id))
            .collect();
        prop_assert_eq!(crossings, want_crossings);

        // Suspicion: change each module, then each requirement, and compare what it marks.
        let suspect = suspect_edges(&s);
        let mut tick = 1;
        for k in (0..MODULES).map(module).chain((0..REQUIREMENTS).map(brd)) {
            tick += 1;
            let mut d = ds.iter().find(|d| d.key == k).unwrap().clone();
            d.body = format!("v{tick}");
            intake(&j, &mut g, &[render(&d)], &mut ids, tick);
            let cause = g.node_id(&k).unwrap();
            let got: BTreeSet<ArtifactKey> = g
                .suspects()
                .iter()
                .filter(|(_, marks)| marks.iter().any(|m| m.cause == cause && m.seq == g.seq()))
                .map(|(&n, _)| g.key(n).clone())
                .collect();
            prop_assert_eq!(&got, &reach(&k, &suspect), "suspects of a change to {}", k);
        }
    }
}

fn seed_graph() -> (strata_engine::kb::fixture::Fixture, Journal, Graph) {
    let fx = generate(&FixtureSpec::seed_scale(7));
    let j = Journal::in_memory("strata.test/modules").unwrap();
    let mut g = Graph::new();
    intake(&j, &mut g, &fx.files(), &mut CountingIds::new(1), 1);
    (fx, j, g)
}

#[test]
fn on_the_seed_fixture_a_product_change_reaches_the_shared_modules_and_their_change_reaches_back() {
    let (fx, j, mut g) = seed_graph();
    assert!(g.validate().is_empty(), "{:#?}", g.validate());
    // The billing requirement implemented by billing's first module reaches, through its
    // dependencies, a foundation module and a cross-cutting one.
    let billing_api = ArtifactKey::new(ArtifactKind::BackendModule, "billing-api-1");
    let deps: BTreeSet<String> = fx.drafts.iter().find(|d| d.key == billing_api).unwrap().fields["dependsOn"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let tiers: BTreeMap<String, String> = fx
        .of(ArtifactKind::Entity)
        .map(|d| (d.key.id.clone(), d.fields["tier"].as_str().unwrap().to_owned()))
        .collect();
    let dep_tiers: BTreeSet<&str> = deps
        .iter()
        .map(|m| {
            let e = fx.drafts.iter().find(|d| d.key.id == *m).unwrap().entity().unwrap();
            tiers[e].as_str()
        })
        .collect();
    assert_eq!(dep_tiers, BTreeSet::from(["foundation", "cross-cutting"]));
    let cr = fx
        .of(ArtifactKind::ChangeRequest)
        .find(|d| {
            d.entity() == Some("billing") && d.fields["brdRefs"].as_array().unwrap().iter().any(|r| r == "BRD-2.1")
        })
        .unwrap();
    let reached = g.impact(g.node_id(&cr.key).unwrap());
    for m in &deps {
        let r = reached.iter().find(|r| r.key.id == *m).unwrap_or_else(|| panic!("{m} not reached from {}", cr.key));
        // The foundation module only through the dependency (a requirement may list a shared
        // module directly, which is then the shorter path).
        if tiers[fx.drafts.iter().find(|d| d.key.id == *m).unwrap().entity().unwrap()] == "foundation" {
            assert!(r.path.ends_with(&format!("-dependsOn-> {m}")), "{}", r.path);
        }
    }
    // A change to the foundation module makes billing's first module suspect, by its dependency.
    let foundation = deps
        .iter()
        .find(|m| tiers[fx.drafts.iter().find(|d| d.key.id == **m).unwrap().entity().unwrap()] == "foundation")
        .unwrap();
    let mut d = fx.drafts.iter().find(|d| d.key.id == *foundation).unwrap().clone();
    d.body.push_str("\nA changed paragraph.\n");
    intake(&j, &mut g, &[render(&d)], &mut CountingIds::new(100_000), 2);
    let n = g.node_id(&billing_api).unwrap();
    let marks = &g.suspects()[&n];
    assert_eq!(g.key(marks[0].cause).id, *foundation);
    assert_eq!(marks[0].path.len(), 1, "billing-api-1 depends on {foundation} directly");
    // Only modules are suspect, and the implementation references of the changed module and of
    // suspect modules (each derives from the module it implements): nothing else derives from a
    // module.
    let suspects = g.suspects();
    assert!(
        suspects.keys().all(|&s| {
            let k = g.key(s);
            k.kind == ArtifactKind::BackendModule
                || (k.kind == ArtifactKind::ImplementationRef
                    && g.node(s).fields.get("backendModule").and_then(|v| v.as_str()).is_some_and(|m| {
                        m == foundation.as_str()
                            || g.node_id(&ArtifactKey::new(ArtifactKind::BackendModule, m))
                                .is_some_and(|n| suspects.contains_key(&n))
                    }))
        }),
        "{:?}",
        suspects.keys().map(|&s| g.key(s).to_string()).collect::<Vec<_>>()
    );
}
