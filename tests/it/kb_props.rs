//! Property tests of the spec graph:
//! * random sequences of create / link / unlink / update / transition / review / delete leave
//!   the incrementally maintained graph equal to a from-scratch replay (state hash, validation
//!   findings, suspects, every impact closure), and equal to its own snapshot restored;
//! * the validator finds every defect planted in the seed-scale fixture at a random place, and
//!   nothing else.

use std::collections::BTreeMap;

use proptest::prelude::*;
use strata_engine::kb::ArtifactDraft;
use strata_engine::kb::commands::{self, Ctx};
use strata_engine::kb::fixture::{Defect, FixtureSpec, generate, plant, render};
use strata_engine::kb::graph::Graph;
use strata_engine::kb::intake::{plan, with, without};
use strata_engine::kb::kind::{ArtifactKey, ArtifactKind};
use strata_engine::kb::lifecycle::states;
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::projection::Projection;
use strata_journal::{Journal, StreamAppend};

#[derive(Debug, Clone)]
enum Op {
    Create(u8, u8, bool),
    LinkCr(u8, u8, bool),
    UnlinkCr(u8, u8),
    LinkScreen(u8, u8, bool),
    UnlinkScreen(u8, u8),
    Edit(u8, u8),
    Transition(u8, u8, u8),
    Review(u8, u8),
    Delete(u8, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3, 0u8..5, any::<bool>()).prop_map(|(k, i, e)| Op::Create(k, i, e)),
        2 => (0u8..5, 0u8..6, any::<bool>()).prop_map(|(a, b, inv)| Op::LinkCr(a, b, inv)),
        1 => (0u8..5, 0u8..6).prop_map(|(a, b)| Op::UnlinkCr(a, b)),
        2 => (0u8..6, 0u8..5, any::<bool>()).prop_map(|(a, b, inv)| Op::LinkScreen(a, b, inv)),
        1 => (0u8..6, 0u8..5).prop_map(|(a, b)| Op::UnlinkScreen(a, b)),
        3 => (0u8..3, 0u8..6).prop_map(|(k, i)| Op::Edit(k, i)),
        2 => (0u8..3, 0u8..6, 0u8..8).prop_map(|(k, i, s)| Op::Transition(k, i, s)),
        1 => (0u8..3, 0u8..6).prop_map(|(k, i)| Op::Review(k, i)),
        1 => (0u8..3, 0u8..6).prop_map(|(k, i)| Op::Delete(k, i)),
    ]
}

fn key(kind: u8, i: u8) -> ArtifactKey {
    match kind % 3 {
        0 => ArtifactKey::new(ArtifactKind::ChangeRequest, &format!("CR-{}", i + 1)),
        1 => ArtifactKey::new(ArtifactKind::BrdRequirement, &format!("BRD-1.{}", i + 1)),
        _ => ArtifactKey::new(ArtifactKind::UiScreen, &format!("screen-{}", i + 1)),
    }
}

fn new_draft(k: &ArtifactKey, cross: bool) -> ArtifactDraft {
    let entity = if cross { "shared" } else { "product" };
    let mut f = serde_json::Map::new();
    f.insert("entity".into(), entity.into());
    f.insert("title".into(), format!("{} title", k.id).into());
    match k.kind {
        ArtifactKind::ChangeRequest => {
            f.insert("brdRefs".into(), serde_json::json!([]));
        }
        ArtifactKind::BrdRequirement => {
            for field in ["functionalDomains", "backendModules", "uiScreens"] {
                f.insert(field.into(), serde_json::json!([]));
            }
        }
        _ => {
            f.insert("components".into(), serde_json::json!([]));
            f.insert("brdRequirements".into(), serde_json::json!([]));
        }
    }
    ArtifactDraft {
        key: k.clone(),
        state: states(k.kind)[0].into(),
        fields: f,
        body: "v0".into(),
        source: Some(format!("{}.md", k.id)),
    }
}

struct World {
    j: Journal,
    live: Graph,
    drafts: BTreeMap<ArtifactKey, ArtifactDraft>,
    ids: CountingIds,
    tick: i64,
}

impl World {
    fn append(&mut self, appends: Vec<StreamAppend>) {
        if appends.is_empty() {
            return;
        }
        self.j.append_multi_blocking(appends).unwrap().unwrap();
        let from = self.live.seq() + 1;
        let r = self.j.scan(from, u64::MAX, |rec, _| self.live.apply_record(rec).map(|()| true)).unwrap();
        r.unwrap();
    }

    fn intake(&mut self, d: &ArtifactDraft) {
        self.tick += 1;
        let p =
            plan(&self.live, &[render(d)], &mut self.ids, &FixedClock(self.tick)).unwrap_or_else(|e| panic!("{e:#?}"));
        self.append(p.appends);
        self.drafts.insert(d.key.clone(), d.clone());
    }

    fn existing(&self, k: &ArtifactKey) -> Option<ArtifactDraft> {
        self.live.get(k)?;
        self.drafts.get(k).cloned()
    }

    /// The draft as the graph has it now (commands may have moved state).
    fn current(&self, k: &ArtifactKey) -> Option<ArtifactDraft> {
        let n = self.live.get(k)?;
        let mut d = self.drafts.get(k)?.clone();
        d.state = n.state.clone();
        d.fields = n.fields.clone();
        Some(d)
    }
}

fn run(ops: &[Op]) -> World {
    let mut w = World {
        j: Journal::in_memory("strata.test/props").unwrap(),
        live: Graph::new(),
        drafts: BTreeMap::new(),
        ids: CountingIds::new(1),
        tick: 0,
    };
    for (id, tier) in [("product", "product"), ("shared", "cross-cutting")] {
        let mut f = serde_json::Map::new();
        f.insert("name".into(), id.into());
        f.insert("tier".into(), tier.into());
        let d = ArtifactDraft {
            key: ArtifactKey::new(ArtifactKind::Entity, id),
            state: "active".into(),
            fields: f,
            body: String::new(),
            source: Some(format!("{id}.json")),
        };
        w.intake(&d);
    }
    for op in ops {
        match op {
            Op::Create(k, i, cross) => {
                let key = key(*k, *i);
                if w.live.get(&key).is_none() {
                    w.intake(&new_draft(&key, *cross));
                }
            }
            Op::LinkCr(a, b, inverse) => link_cr(&mut w, key(0, *a), key(1, *b), true, *inverse),
            Op::UnlinkCr(a, b) => link_cr(&mut w, key(0, *a), key(1, *b), false, true),
            Op::LinkScreen(a, b, inv) => {
                let (brd, screen) = (key(1, *a), key(2, *b));
                if let Some(mut d) = w.current(&brd) {
                    with(&mut d.fields, "uiScreens", &screen.id);
                    w.intake(&d);
                    if *inv && let Some(mut s) = w.current(&screen) {
                        with(&mut s.fields, "brdRequirements", &brd.id);
                        w.intake(&s);
                    }
                }
            }
            Op::UnlinkScreen(a, b) => {
                let (brd, screen) = (key(1, *a), key(2, *b));
                if let Some(mut d) = w.current(&brd) {
                    let v = without(&d.fields["uiScreens"], &screen.id);
                    d.fields.insert("uiScreens".into(), v);
                    w.intake(&d);
                }
            }
            Op::Edit(k, i) => {
                if let Some(mut d) = w.current(&key(*k, *i)) {
                    d.body.push_str(" edited");
                    w.intake(&d);
                }
            }
            Op::Transition(k, i, s) => {
                let key = key(*k, *i);
                if w.existing(&key).is_some() {
                    let to = states(key.kind)[usize::from(*s) % states(key.kind).len()];
                    w.tick += 1;
                    let clock = FixedClock(w.tick);
                    let mut ctx = Ctx { ids: &mut w.ids, clock: &clock };
                    if let Ok(appends) = commands::transition(&w.live, &key, to, None, &mut ctx) {
                        w.append(appends);
                    }
                }
            }
            Op::Review(k, i) => {
                let key = key(*k, *i);
                w.tick += 1;
                let clock = FixedClock(w.tick);
                let mut ctx = Ctx { ids: &mut w.ids, clock: &clock };
                if let Ok(appends) = commands::review(&w.live, &key, &mut ctx) {
                    w.append(appends);
                }
            }
            Op::Delete(k, i) => {
                let key = key(*k, *i);
                w.tick += 1;
                let clock = FixedClock(w.tick);
                let mut ctx = Ctx { ids: &mut w.ids, clock: &clock };
                if let Ok(appends) = commands::delete(&w.live, &key, &mut ctx) {
                    w.append(appends);
                    w.drafts.remove(&key);
                }
            }
        }
    }
    w
}

/// Adds or removes `cr.brdRefs → brd`, and (if `inverse`) the back-link `brd.linkedCrs → cr`.
fn link_cr(w: &mut World, cr: ArtifactKey, brd: ArtifactKey, link: bool, inverse: bool) {
    let Some(mut d) = w.current(&cr) else { return };
    if link {
        with(&mut d.fields, "brdRefs", &brd.id);
    } else {
        let v = without(&d.fields["brdRefs"], &brd.id);
        d.fields.insert("brdRefs".into(), v);
    }
    w.intake(&d);
    if inverse && let Some(mut t) = w.current(&brd) {
        if link {
            with(&mut t.fields, "linkedCrs", &cr.id);
        } else if let Some(v) = t.fields.get("linkedCrs").map(|v| without(v, &cr.id)) {
            t.fields.insert("linkedCrs".into(), v);
        }
        w.intake(&t);
    }
}

/// State hash, validation findings, and each artifact's impact.
type Observed = (String, Vec<String>, Vec<(String, Vec<String>)>);

fn observe(g: &Graph) -> Observed {
    let findings = g.validate().iter().map(|f| format!("{} {} {}", f.rule, f.artifact, f.detail)).collect();
    let impacts = g
        .artifacts()
        .into_iter()
        .map(|n| {
            let id = g.node_id(&n.key).unwrap();
            (n.key.to_string(), g.impact(id).into_iter().map(|r| r.path).collect())
        })
        .collect();
    (g.state_hash().to_hex(), findings, impacts)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn incremental_graph_equals_replay_and_its_snapshot(ops in proptest::collection::vec(op(), 1..40)) {
        let w = run(&ops);
        let replayed = Graph::at(&w.j, w.j.head().seq).unwrap();
        prop_assert_eq!(observe(&w.live), observe(&replayed));
        let mut restored = Graph::new();
        restored.restore_snapshot(&w.live.encode_snapshot().unwrap()).unwrap();
        prop_assert_eq!(observe(&restored), observe(&w.live));
        prop_assert_eq!(restored.suspects().len(), w.live.suspects().len());
    }

    #[test]
    fn every_planted_missing_inverse_and_dangling_reference_is_found(choice in any::<u64>(), dangling in any::<bool>()) {
        let mut fx = generate(&FixtureSpec::seed_scale(3));
        let defect = if dangling { Defect::Dangling } else { Defect::MissingInverse };
        let planted = plant(&mut fx, defect, choice).unwrap();
        let j = Journal::in_memory("strata.test/props").unwrap();
        let mut g = Graph::new();
        let p = plan(&g, &fx.files(), &mut CountingIds::new(1), &FixedClock(0)).unwrap();
        j.append_multi_blocking(p.appends).unwrap().unwrap();
        let r = j.scan(1, u64::MAX, |rec, _| g.apply_record(rec).map(|()| true)).unwrap();
        r.unwrap();
        let findings = g.validate();
        prop_assert_eq!(findings.len(), 1);
        prop_assert_eq!(findings[0].rule, planted.rule);
        prop_assert_eq!(&findings[0].artifact, &planted.artifact);
    }
}
