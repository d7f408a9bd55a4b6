//! The promotion gates: boundaries at exactly each threshold, the p75 counterexample, paired
//! quality and rework, reconciliation of both arms, vetoes, corpus size and determinism.

use strata_engine::promotion::gates::{Arm, Evaluation, Finding, Pair, STRATA, Thresholds, Verdict, evaluate};

const RESAMPLES: usize = 2_000;

fn arm(cost: u64, wall: u64, quality: f64) -> Arm {
    Arm { cost_micros: cost, wall_ms: wall, quality, rework: 0, findings: vec![], telemetry_cost_micros: Some(cost) }
}

/// `n` pairs spread evenly over the five strata; `f(i)` gives (baseline, candidate).
fn corpus(n: usize, f: impl Fn(usize) -> (Arm, Arm)) -> Vec<Pair> {
    (0..n)
        .map(|i| {
            let (baseline, candidate) = f(i);
            Pair { task_id: format!("task-{i:03}"), stratum: STRATA[i % 5].to_owned(), baseline, candidate }
        })
        .collect()
}

/// A candidate at `cost_ratio` and `wall_ratio` of a varied baseline, same quality.
fn scaled(n: usize, cost_num: u64, wall_num: u64) -> Vec<Pair> {
    corpus(n, |i| {
        let b = 1_000_000 * (1 + i as u64 % 7);
        let w = 10_000 * (1 + i as u64 % 5);
        (arm(b, w, 90.0), arm(b * cost_num / 10_000, w * wall_num / 10_000, 90.0))
    })
}

fn run(pairs: &[Pair]) -> Evaluation {
    evaluate(pairs, &Thresholds::default(), "eval-1", RESAMPLES).unwrap()
}

fn verdict(e: &Evaluation, gate: &str) -> Verdict {
    e.gates.iter().find(|g| g.gate == gate).unwrap_or_else(|| panic!("no gate {gate}")).verdict
}

#[test]
fn cost_and_wall_time_reductions_pass_at_exactly_their_thresholds() {
    // Exactly 25% cheaper and 15% faster on every task.
    let e = run(&scaled(40, 7_500, 8_500));
    assert_eq!(verdict(&e, "median_cost"), Verdict::Pass, "{:#?}", e.gates[1]);
    assert_eq!(verdict(&e, "median_wall_time"), Verdict::Pass);
    assert_eq!(verdict(&e, "p75_cost"), Verdict::Pass, "85% ratio is 15% saved at p75 too");
    assert!(e.promote, "{e:#?}");
    // A hair short of each threshold fails it.
    let e = run(&scaled(40, 7_501, 8_501));
    assert_eq!(verdict(&e, "median_cost"), Verdict::Fail);
    assert_eq!(verdict(&e, "median_wall_time"), Verdict::Fail);
    let e = run(&scaled(40, 8_501, 8_500));
    assert_eq!(verdict(&e, "p75_cost"), Verdict::Fail);
    assert!(!e.promote);
}

#[test]
fn the_p75_counterexample_fails_the_p75_gate_though_the_median_passes() {
    // The reference's counterexample (6 tasks at -40%, 4 at 0%), eight times over: the upper
    // quartile of reductions is 40%, so the reference passes; only 60% of tasks save anything.
    let pairs = corpus(80, |i| {
        let b = 2_000_000 + 1_000 * i as u64;
        let c = if i % 10 < 6 { b * 6 / 10 } else { b };
        (arm(b, 1_000, 90.0), arm(c, 800, 90.0))
    });
    let e = run(&pairs);
    assert_eq!(verdict(&e, "median_cost"), Verdict::Pass);
    let p75 = e.gates.iter().find(|g| g.gate == "p75_cost").unwrap();
    assert_eq!(p75.verdict, Verdict::Fail, "{p75:#?}");
    assert_eq!(p75.estimate, Some(0.0));
    assert!(!e.promote);
}

#[test]
fn p95_cost_may_be_exactly_ten_percent_worse() {
    // Every task exactly 10% dearer: the ratio of p95s is exactly 1.10 (the median gate fails,
    // which is not what this checks).
    let at = |num: u64| {
        corpus(60, |i| {
            let b = 1_000_000 * (1 + i as u64);
            (arm(b, 1_000, 90.0), arm(b * num / 10_000, 700, 90.0))
        })
    };
    assert_eq!(verdict(&run(&at(11_000)), "p95_cost"), Verdict::Pass);
    assert_eq!(verdict(&run(&at(11_001)), "p95_cost"), Verdict::Fail);
}

#[test]
fn quality_is_paired_and_may_drop_exactly_two_points() {
    let with_drop = |drop: f64| {
        corpus(40, |i| {
            let q = 80.0 + (i % 10) as f64;
            (arm(1_000_000, 1_000, q), arm(700_000, 800, q - drop))
        })
    };
    assert_eq!(verdict(&run(&with_drop(2.0)), "quality"), Verdict::Pass);
    assert_eq!(verdict(&run(&with_drop(2.01)), "quality"), Verdict::Fail);
    // Unpaired medians would hide this: half the tasks lose 10 points.
    let half = corpus(40, |i| {
        let q = 80.0 + (i % 2) as f64 * 10.0;
        (arm(1_000_000, 1_000, q), arm(700_000, 800, if i % 2 == 0 { q - 10.0 } else { q }))
    });
    assert_eq!(verdict(&run(&half), "quality"), Verdict::Fail);
}

#[test]
fn rework_at_five_percent_is_inconclusive_and_a_zero_baseline_with_five_events_fails() {
    let rework = |b: u32, c: u32| {
        corpus(40, |i| {
            let mut base = arm(1_000_000, 1_000, 90.0);
            let mut cand = arm(700_000, 800, 90.0);
            base.rework = if i == 0 { b } else { 0 };
            cand.rework = if i == 0 { c } else { 0 };
            (base, cand)
        })
    };
    assert_eq!(verdict(&run(&rework(0, 0)), "rework"), Verdict::Pass);
    assert_eq!(verdict(&run(&rework(100_000, 105_000)), "rework"), Verdict::Inconclusive, "exactly 5% worse");
    assert_eq!(verdict(&run(&rework(100_000, 90_000)), "rework"), Verdict::Pass);
    assert_eq!(verdict(&run(&rework(100_000, 110_000)), "rework"), Verdict::Fail);
    assert_eq!(verdict(&run(&rework(0, 4)), "rework"), Verdict::Inconclusive);
    assert_eq!(verdict(&run(&rework(0, 5)), "rework"), Verdict::Fail);
}

#[test]
fn reconciliation_holds_at_exactly_two_percent_in_both_arms() {
    let off = |arm_is_baseline: bool, tel_num: u64| {
        corpus(40, |_| {
            let mut base = arm(1_000_000, 1_000, 90.0);
            let mut cand = arm(700_000, 800, 90.0);
            let target = if arm_is_baseline { &mut base } else { &mut cand };
            target.telemetry_cost_micros = Some(target.cost_micros * tel_num / 10_000);
            (base, cand)
        })
    };
    assert_eq!(verdict(&run(&off(false, 10_200)), "reconciliation"), Verdict::Pass);
    assert_eq!(verdict(&run(&off(false, 10_201)), "reconciliation"), Verdict::Fail);
    assert_eq!(verdict(&run(&off(true, 10_201)), "reconciliation"), Verdict::Fail, "the baseline is checked too");
    let mut missing = off(false, 10_000);
    missing[3].baseline.telemetry_cost_micros = None;
    assert_eq!(verdict(&run(&missing), "reconciliation"), Verdict::Fail);
    // Offsetting errors reconcile in the sum; the largest single task is still reported.
    let mut offsetting = off(false, 10_000);
    offsetting[4].candidate.telemetry_cost_micros = Some(700_000 + 70_000);
    offsetting[5].candidate.telemetry_cost_micros = Some(700_000 - 70_000);
    let e = run(&offsetting);
    let g = e.gates.iter().find(|g| g.gate == "reconciliation").unwrap();
    assert_eq!(g.verdict, Verdict::Pass);
    assert!(g.reason.ends_with("largest single task: 10.00% (candidate of task-004)"), "{}", g.reason);
}

#[test]
fn a_new_high_or_critical_finding_vetoes_promotion() {
    let mut pairs = scaled(40, 7_000, 8_000);
    let f = |fp: &str, sev: &str| Finding { fingerprint: fp.to_owned(), severity: sev.to_owned() };
    pairs[0].baseline.findings = vec![f("sqli-1", "high")];
    pairs[1].candidate.findings = vec![f("sqli-1", "high"), f("xss-2", "medium")];
    let e = run(&pairs);
    assert_eq!(verdict(&e, "security"), Verdict::Pass, "known and medium findings are not new escapes");
    assert!(e.promote);
    pairs[2].candidate.findings = vec![f("rce-3", "Critical")];
    let e = run(&pairs);
    assert_eq!(verdict(&e, "security"), Verdict::Fail);
    assert!(!e.promote);
}

#[test]
fn a_small_corpus_cannot_promote_and_its_statistics_are_errors() {
    let e = run(&scaled(39, 5_000, 5_000));
    assert_eq!(verdict(&e, "sample_size"), Verdict::Fail);
    for g in ["median_cost", "p75_cost", "p95_cost", "median_wall_time", "quality", "rework"] {
        assert_eq!(verdict(&e, g), Verdict::Error, "{g}");
    }
    assert!(!e.promote);
}

#[test]
fn the_same_input_gives_byte_identical_json_in_any_order() {
    let pairs = corpus(50, |i| {
        let b = 1_000_000 + 37_000 * (i as u64 % 11);
        let c = b * (6_000 + 300 * (i as u64 % 9)) / 10_000;
        (arm(b, 1_000 + i as u64, 85.0), arm(c, 700 + i as u64, 84.0 + (i % 3) as f64))
    });
    let a = serde_json::to_string(&run(&pairs)).unwrap();
    let b = serde_json::to_string(&run(&pairs)).unwrap();
    assert_eq!(a, b);
    let mut reversed = pairs.clone();
    reversed.reverse();
    assert_eq!(serde_json::to_string(&run(&reversed)).unwrap(), a);
    let other_id =
        serde_json::to_string(&evaluate(&pairs, &Thresholds::default(), "eval-2", RESAMPLES).unwrap()).unwrap();
    assert_ne!(other_id, a, "the evaluation id seeds the bootstrap and is recorded");
}

#[test]
fn callers_can_only_tighten_thresholds_and_bad_input_is_named() {
    let loose =
        Thresholds { median_cost_bp: 1_000, quality_points: 10, reconciliation_bp: 500, ..Thresholds::default() };
    let t = Thresholds::stricter(&loose);
    assert_eq!((t.median_cost_bp, t.quality_points, t.reconciliation_bp), (2_500, 2, 200));
    let tight = Thresholds { median_cost_bp: 3_000, p95_cost_worse_bp: 500, ..Thresholds::default() };
    assert_eq!(Thresholds::stricter(&tight).median_cost_bp, 3_000);
    assert_eq!(Thresholds::stricter(&tight).p95_cost_worse_bp, 500);
    let mut pairs = scaled(40, 7_000, 8_000);
    pairs[5].candidate.cost_micros = 0;
    let err = evaluate(&pairs, &Thresholds::default(), "e", 10).unwrap_err();
    assert_eq!(err.to_string(), "pair task-005: candidate.cost_micros must be > 0 (a ratio needs it)");
    pairs[5].candidate.cost_micros = 1;
    pairs[6].task_id = "task-005".to_owned();
    assert!(evaluate(&pairs, &Thresholds::default(), "e", 10).unwrap_err().to_string().contains("unique"));
    assert!(evaluate(&[], &Thresholds::default(), "e", 10).is_err());
}
