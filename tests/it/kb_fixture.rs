//! The seed-scale fixture: shape, size in real tokens, determinism, and a clean validation.

use strata_engine::kb::fixture::{FixtureSpec, generate};
use strata_engine::kb::intake::parse_file;
use strata_engine::kb::kind::ArtifactKind;

#[test]
fn seed_scale_fixture_has_the_seed_shape() {
    let fx = generate(&FixtureSpec::seed_scale(7));
    let entities = fx.of(ArtifactKind::Entity).count();
    let specs: Vec<_> = fx.drafts.iter().filter(|d| d.key.kind.is_spec()).collect();
    let tokens: usize = specs
        .iter()
        .map(|d| strata_engine::tokens::count(&String::from_utf8_lossy(&strata_engine::kb::fixture::render(d).bytes)))
        .sum();
    let mut tiers = std::collections::BTreeMap::new();
    for e in fx.of(ArtifactKind::Entity) {
        *tiers.entry(e.fields["tier"].as_str().unwrap().to_owned()).or_insert(0) += 1;
    }
    println!(
        "entities {entities}, spec files {}, spec tokens {tokens}, tiers {tiers:?}, artifacts {}",
        specs.len(),
        fx.drafts.len()
    );
    assert_eq!(entities, 15);
    assert_eq!(tiers.len(), 4);
    assert_eq!(specs.len(), 164);
    assert!((585_000..=645_000).contains(&tokens), "spec files total {tokens} tokens, about 615,000 expected");
    // Deterministic: same seed, same bytes; another seed, other bytes.
    let again = generate(&FixtureSpec::seed_scale(7));
    assert_eq!(fx.files(), again.files());
    assert_ne!(fx.files(), generate(&FixtureSpec::seed_scale(8)).files());
    // Every rendered file parses and validates against its schema.
    for f in fx.files() {
        parse_file(&f).unwrap_or_else(|p| panic!("{}: {p:?}", f.path));
    }
}
