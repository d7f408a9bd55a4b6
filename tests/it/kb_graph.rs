//! The spec graph over the seed-scale fixture: intake, validation, impact, suspicion.

use strata_engine::kb::fixture::{Defect, FixtureSpec, generate, plant};
use strata_engine::kb::graph::Graph;
use strata_engine::kb::intake::{SourceFile, plan};
use strata_engine::kb::kind::{ArtifactKey, ArtifactKind};
use strata_engine::ports::{CountingIds, FixedClock};
use strata_journal::Journal;

fn intake(j: &Journal, g: &mut Graph, files: &[SourceFile], ids: &mut CountingIds) {
    let p = plan(g, files, ids, &FixedClock(1_795_000_000_000_000_000))
        .unwrap_or_else(|e| panic!("intake refused: {:#?}", &e[..e.len().min(5)]));
    if !p.appends.is_empty() {
        j.append_multi_blocking(p.appends).unwrap().unwrap();
    }
    let r = j.scan(g.seq() + 1, u64::MAX, |rec, _| g.apply_record(rec).map(|()| true)).unwrap();
    r.unwrap();
}

#[test]
fn the_clean_fixture_validates_and_impact_crosses_entities() {
    let fx = generate(&FixtureSpec::seed_scale(7));
    let j = Journal::in_memory("strata.test/kb").unwrap();
    let mut g = Graph::new();
    let mut ids = CountingIds::new(1);
    intake(&j, &mut g, &fx.files(), &mut ids);
    assert_eq!(g.len(), fx.drafts.len());
    let findings = g.validate();
    assert!(findings.is_empty(), "clean fixture has findings: {:#?}", &findings[..findings.len().min(10)]);
    // Re-intake of unchanged files appends nothing.
    let head = j.head().seq;
    let p = plan(&g, &fx.files(), &mut ids, &FixedClock(0)).unwrap();
    assert!(p.appends.is_empty());
    assert_eq!(p.unchanged.len(), fx.drafts.len());
    assert_eq!(j.head().seq, head);
    // Impact of a product change request reaches requirements, domains, modules, screens and,
    // through a requirement that uses a shared module, the cross-cutting entity.
    let mut crossed = false;
    for cr in fx.of(ArtifactKind::ChangeRequest) {
        let n = g.node_id(&cr.key).unwrap();
        let reached = g.impact(n);
        let kinds: std::collections::BTreeSet<_> = reached.iter().map(|r| r.key.kind).collect();
        assert!(kinds.contains(&ArtifactKind::BrdRequirement), "{}", cr.key);
        assert!(kinds.contains(&ArtifactKind::FunctionalDomain), "{}", cr.key);
        assert!(kinds.contains(&ArtifactKind::BackendModule));
        assert!(kinds.contains(&ArtifactKind::UiScreen));
        assert!(kinds.contains(&ArtifactKind::Entity));
        if reached.iter().any(|r| r.key == ArtifactKey::new(ArtifactKind::Entity, "shared-services"))
            && cr.entity() != Some("shared-services")
        {
            crossed = true;
            let via =
                reached.iter().find(|r| r.key.kind == ArtifactKind::Entity && r.key.id == "shared-services").unwrap();
            assert!(via.path.starts_with(&cr.key.id) && via.path.contains("-brdRefs->"), "{}", via.path);
        }
    }
    assert!(crossed, "no change request's impact reached the cross-cutting entity");
}

#[test]
fn every_planted_defect_is_found_and_nothing_else() {
    for (i, defect) in [
        Defect::MissingInverse,
        Defect::Dangling,
        Defect::Cycle,
        Defect::CrossEntity,
        Defect::ModuleCycle,
        Defect::ModuleCrossEntity,
        Defect::UnresolvedCall,
    ]
    .into_iter()
    .enumerate()
    {
        for choice in 0..5u64 {
            let mut fx = generate(&FixtureSpec::seed_scale(11));
            let Some(planted) = plant(&mut fx, defect, choice * 31 + i as u64) else { continue };
            let j = Journal::in_memory("strata.test/kb").unwrap();
            let mut g = Graph::new();
            intake(&j, &mut g, &fx.files(), &mut CountingIds::new(1));
            let findings = g.validate();
            assert_eq!(findings.len(), 1, "{defect:?}/{choice}: {findings:#?}");
            assert_eq!(findings[0].rule, planted.rule, "{defect:?}");
            assert_eq!(findings[0].artifact, planted.artifact, "{defect:?}: {findings:#?}");
        }
    }
}

#[test]
fn impact_never_reaches_an_artifact_that_does_not_exist() {
    for choice in 0..5u64 {
        let mut fx = generate(&FixtureSpec::seed_scale(11));
        let planted = plant(&mut fx, Defect::Dangling, choice).unwrap();
        let j = Journal::in_memory("strata.test/kb").unwrap();
        let mut g = Graph::new();
        intake(&j, &mut g, &fx.files(), &mut CountingIds::new(1));
        let n = g.node_id(&planted.artifact).unwrap();
        let closure = g.impact_closure(n);
        let reached = g.reached(&closure);
        assert!(!reached.is_empty(), "{choice}: the rest of the change request's impact is still reached");
        for r in &reached {
            assert!(g.get(&r.key).is_some(), "{choice}: {} is reached but does not exist ({})", r.key, r.path);
        }
        assert!(closure.steps.iter().all(|&v| g.node(v).exists), "{choice}: the closure walks a missing artifact");
        // The missing requirement is reported as dangling, exactly as `graph validate` reports it.
        let dangling = g.dangling(&closure);
        let validated: Vec<_> = g.validate().into_iter().filter(|f| f.rule == "dangling").collect();
        assert_eq!(dangling, validated, "{choice}");
        assert_eq!(dangling.len(), 1, "{choice}: {dangling:#?}");
        assert_eq!((&dangling[0].artifact, dangling[0].field.as_str()), (&planted.artifact, "brdRefs"));
    }
}

/// The graph of `fx` built by two intakes: first the drafts `first` picks, then all of them.
fn graph_in_two_intakes(fx: &strata_engine::kb::fixture::Fixture, first: impl Fn(&ArtifactKey) -> bool) -> Graph {
    let j = Journal::in_memory("strata.test/kb").unwrap();
    let mut g = Graph::new();
    let mut ids = CountingIds::new(1);
    let early: Vec<SourceFile> = fx
        .drafts
        .iter()
        .filter(|d| d.key.kind == ArtifactKind::Entity || first(&d.key))
        .map(strata_engine::kb::fixture::render)
        .collect();
    intake(&j, &mut g, &early, &mut ids);
    intake(&j, &mut g, &fx.files(), &mut ids);
    g
}

#[test]
fn a_cross_entity_finding_names_the_link_holder_whatever_the_intake_order() {
    let mut checked = 0;
    for choice in 0..8u64 {
        let mut fx = generate(&FixtureSpec::seed_scale(11));
        let Some(planted) = plant(&mut fx, Defect::CrossEntity, choice) else { continue };
        let cr = planted.artifact.clone();
        let brd = ArtifactKey::new(
            ArtifactKind::BrdRequirement,
            fx.drafts.iter().find(|d| d.key == cr).unwrap().fields["brdRefs"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()
                .as_str()
                .unwrap(),
        );
        // Linked both ways: about the change request (the smaller key), with its own field, whether
        // the change request or the requirement entered the graph first.
        let cr_first = graph_in_two_intakes(&fx, |k| *k == cr).validate();
        let brd_first = graph_in_two_intakes(&fx, |k| *k == brd).validate();
        assert_eq!(cr_first, brd_first, "{choice}");
        let crossed: Vec<_> = cr_first.iter().filter(|f| f.rule == "cross-entity").collect();
        assert_eq!(crossed.len(), 1, "{choice}: {cr_first:#?}");
        assert_eq!((&crossed[0].artifact, crossed[0].field.as_str()), (&cr, "brdRefs"), "{choice}");
        assert_eq!(crossed[0].target.as_ref(), Some(&brd));
        assert_eq!(planted.field, "brdRefs");
        // Linked one way, by the requirement only: about the requirement and its own field, never
        // the change request's.
        let d = fx.get_mut(&cr).unwrap();
        let refs = strata_engine::kb::intake::without(&d.fields["brdRefs"], &brd.id);
        d.fields.insert("brdRefs".into(), refs);
        let cr_first = graph_in_two_intakes(&fx, |k| *k == cr).validate();
        let brd_first = graph_in_two_intakes(&fx, |k| *k == brd).validate();
        assert_eq!(cr_first, brd_first, "{choice}");
        let crossed: Vec<_> = cr_first.iter().filter(|f| f.rule == "cross-entity").collect();
        assert_eq!(crossed.len(), 1, "{choice}: {cr_first:#?}");
        assert_eq!((&crossed[0].artifact, crossed[0].field.as_str()), (&brd, "linkedCrs"), "{choice}");
        assert_eq!(crossed[0].target.as_ref(), Some(&cr));
        assert!(crossed[0].detail.starts_with(&format!("{}.linkedCrs links", brd.id)), "{}", crossed[0].detail);
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} placements checked");
}

#[test]
fn an_initiative_becomes_suspect_when_a_change_request_or_requirement_it_links_changes() {
    use strata_engine::kb::commands::{Ctx, review};
    let fx = generate(&FixtureSpec::seed_scale(7));
    let j = Journal::in_memory("strata.test/kb").unwrap();
    let mut g = Graph::new();
    let mut ids = CountingIds::new(1);
    intake(&j, &mut g, &fx.files(), &mut ids);
    let bi = fx.of(ArtifactKind::BacklogItem).find(|d| d.entity() == Some("billing")).unwrap().clone();
    let bi_node = g.node_id(&bi.key).unwrap();
    let list = |field: &str| -> Vec<String> {
        bi.fields[field].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
    };
    let (crs, brds) = (list("linkedCrIds"), list("linkedBrdRefs"));
    assert!(!crs.is_empty() && !brds.is_empty());
    assert!(!g.is_suspect(bi_node));
    let render_path = |g: &Graph| {
        let m = &g.suspects()[&bi_node][0];
        (g.key(m.cause).clone(), g.render_path(m.cause, &m.path))
    };
    // A changed requirement: the initiative is suspect, directly (one link), as its change
    // requests are.
    let brd_key = ArtifactKey::new(ArtifactKind::BrdRequirement, &brds[0]);
    let mut d = fx.drafts.iter().find(|d| d.key == brd_key).unwrap().clone();
    d.body.push_str("\nThe rounding rule changed.\n");
    intake(&j, &mut g, &[strata_engine::kb::fixture::render(&d)], &mut ids);
    assert!(g.is_suspect(bi_node), "a changed requirement leaves its initiative looking sound");
    let (cause, path) = render_path(&g);
    assert_eq!(cause, brd_key);
    assert_eq!(g.suspects()[&bi_node][0].path.len(), 1, "{path}");
    // Reviewed, it is sound again; then a changed change request makes it suspect once more.
    let appends = review(&g, &bi.key, &mut Ctx { ids: &mut ids, clock: &FixedClock(2) }).unwrap();
    j.append_multi_blocking(appends).unwrap().unwrap();
    j.scan(g.seq() + 1, u64::MAX, |rec, _| g.apply_record(rec).map(|()| true)).unwrap().unwrap();
    assert!(!g.is_suspect(bi_node));
    let cr_key = ArtifactKey::new(ArtifactKind::ChangeRequest, &crs[0]);
    let mut d = g.get(&cr_key).map(|n| {
        let mut d = fx.drafts.iter().find(|d| d.key == cr_key).unwrap().clone();
        d.state = n.state.clone();
        d
    });
    let d = d.as_mut().unwrap();
    d.body.push_str("\nScope widened to credit notes.\n");
    intake(&j, &mut g, &[strata_engine::kb::fixture::render(d)], &mut ids);
    let (cause, path) = render_path(&g);
    assert_eq!(cause, cr_key, "{path}");
    assert!(path.contains("linkedBacklogItem") || path.contains("linkedCrIds"), "{path}");
}
