//! Rollout stages: the transition table, nested deterministic bucketing pinned by golden
//! vectors, stratified exposure for small corpora, and the advance / hold / rollback policy.

use strata_engine::promotion::gates::{Arm, Pair, STRATA, Thresholds, evaluate};
use strata_engine::promotion::stages::{
    Action, Stage, TRANSITIONS, bucket_bps, decide, exposed, next, stratified_exposure,
};

#[test]
fn golden_bucket_vectors_are_pinned() {
    // SHA-256("rollout:demo.task-001")[0..8] big-endian mod 10,000, computed independently.
    let golden = [("task-001", 3691), ("task-002", 3370), ("task-003", 9880), ("task-004", 945), ("task-005", 8087)];
    for (unit, bucket) in golden {
        assert_eq!(bucket_bps("rollout:demo", unit), bucket, "{unit}");
    }
    assert_eq!(bucket_bps("rollout-7f3a", "unit-42"), 3624);
    assert_eq!(bucket_bps("policy-v2", "small-tier2/017"), 4005);
}

#[test]
fn exposure_sets_are_nested_and_near_their_share() {
    let units: Vec<String> = (0..10_000).map(|i| format!("unit-{i}")).collect();
    let mut counts = Vec::new();
    for pair in Stage::ALL.windows(2) {
        for u in &units {
            assert!(!exposed("rollout/r1", u, pair[0]) || exposed("rollout/r1", u, pair[1]), "{u} {pair:?}");
        }
    }
    for stage in [Stage::Shadow, Stage::Canary10, Stage::Canary25, Stage::Canary50, Stage::On] {
        counts.push(units.iter().filter(|u| exposed("rollout/r1", u, stage)).count());
    }
    assert_eq!(counts[0], 0, "shadow runs the baseline for everyone");
    assert_eq!(counts[4], 10_000);
    for (got, want) in counts[1..4].iter().zip([1_000, 2_500, 5_000]) {
        assert!(got.abs_diff(want) < 150, "{got} vs {want}");
    }
    // Another rollout's salt picks other units.
    let same = units
        .iter()
        .filter(|u| exposed("rollout/r1", u, Stage::Canary10) && exposed("rollout/r2", u, Stage::Canary10))
        .count();
    assert!(same < 200, "{same}");
}

#[test]
fn stratified_exposure_is_exact_per_stratum_and_nested() {
    let units: Vec<(String, String)> = (0..40).map(|i| (format!("task-{i:03}"), STRATA[i % 5].to_owned())).collect();
    let at = |s| stratified_exposure("rollout:demo", &units, s);
    assert_eq!(at(Stage::Canary10).len(), 5, "one of each stratum's eight (rounded up)");
    assert_eq!(at(Stage::Canary25).len(), 10);
    assert_eq!(at(Stage::Canary50).len(), 20);
    assert_eq!(at(Stage::On).len(), 40);
    assert!(at(Stage::Shadow).is_empty());
    for pair in [Stage::Canary10, Stage::Canary25, Stage::Canary50, Stage::On].windows(2) {
        let (small, big) = (at(pair[0]), at(pair[1]));
        assert!(small.iter().all(|u| big.contains(u)), "{pair:?}");
    }
}

#[test]
fn the_transition_table_is_complete_and_only_moves_one_step() {
    for (i, s) in Stage::ALL.iter().enumerate() {
        assert_eq!(next(*s, Action::Hold), Some(*s));
        assert_eq!(next(*s, Action::Advance), Stage::ALL.get(i + 1).copied());
        assert_eq!(next(*s, Action::Rollback), if *s == Stage::Off { None } else { Some(Stage::Off) });
        assert_eq!(Stage::parse(s.as_str()), Some(*s));
    }
    assert_eq!(TRANSITIONS.len(), 19);
}

fn corpus(cost_num: u64, quality_drop: f64, n: usize) -> Vec<Pair> {
    (0..n)
        .map(|i| {
            let b = 1_000_000 * (1 + i as u64 % 7);
            let arm = |cost: u64, wall: u64, q: f64| Arm {
                cost_micros: cost,
                wall_ms: wall,
                quality: q,
                rework: 0,
                findings: vec![],
                telemetry_cost_micros: Some(cost),
            };
            Pair {
                task_id: format!("task-{i:03}"),
                stratum: STRATA[i % 5].to_owned(),
                baseline: arm(b, 1_000, 90.0),
                candidate: arm(b * cost_num / 10_000, 700, 90.0 - quality_drop * (i % 2) as f64),
            }
        })
        .collect()
}

#[test]
fn the_policy_advances_on_pass_holds_on_doubt_and_rolls_back_on_fail() {
    let eval = |pairs: &[Pair]| evaluate(pairs, &Thresholds::default(), "e", 1_000).unwrap();
    let pass = eval(&corpus(6_000, 0.0, 40));
    assert!(pass.promote);
    assert_eq!(decide(Stage::Canary50, &pass), Action::Advance);
    assert_eq!(decide(Stage::On, &pass), Action::Hold, "nothing beyond on");
    // Quality differs on half the tasks by 4 points: the mean drop is 2 with spread, so the
    // interval straddles the threshold.
    let doubtful = eval(&corpus(6_000, 4.0, 40));
    assert!(!doubtful.promote);
    assert_eq!(decide(Stage::Canary50, &doubtful), Action::Hold, "Inconclusive never promotes");
    assert_eq!(decide(Stage::Shadow, &doubtful), Action::Advance, "early stages need no Fail");
    let failing = eval(&corpus(9_500, 0.0, 40));
    assert_eq!(decide(Stage::Canary10, &failing), Action::Rollback);
    let small = eval(&corpus(6_000, 0.0, 20));
    assert_eq!(decide(Stage::Shadow, &small), Action::Rollback, "a small corpus fails its sample-size gate");
}
