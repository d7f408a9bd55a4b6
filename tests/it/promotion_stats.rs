//! The statistics under the promotion gates, pinned to values computed independently (the
//! canary-and-promotion reference's tables, and textbook values).

use strata_engine::promotion::stats::*;

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn type_7_quantiles_interpolate_between_order_statistics() {
    let x = [1.0, 2.0, 3.0, 4.0];
    assert_eq!(quantile7(&x, 0.75), Some(3.25));
    assert_eq!(quantile7(&x, 0.0), Some(1.0));
    assert_eq!(quantile7(&x, 1.0), Some(4.0));
    assert_eq!(quantile7(&[], 0.5), None);
    assert_eq!(quantile7(&x, 1.5), None);
    // n = 40: p95 sits at h = 38.05 (1-based), essentially the third-largest value.
    let forty: Vec<f64> = (1..=40).map(f64::from).collect();
    assert!(close(quantile7(&forty, 0.95).unwrap(), 38.05, 1e-12));
}

#[test]
fn the_sign_test_and_wilks_bounds_match_the_reference_tables() {
    assert_eq!(sign_bounds(40, 0.05), Some((15, 26)));
    assert_eq!(sign_bounds(8, 0.05), Some((2, 7)));
    assert_eq!(sign_bounds(3, 0.05), None, "three pairs cannot bound a median at 95%");
    assert_eq!(wilks_upper(40, 0.50, 0.05), Some(26));
    assert_eq!(wilks_upper(40, 0.75, 0.05), Some(35));
    assert_eq!(wilks_upper(40, 0.95, 0.05), None, "p95 needs 59 observations");
    assert_eq!(wilks_upper(59, 0.95, 0.05), Some(59));
    assert_eq!(wilks_upper(80, 0.50, 0.05), Some(48));
    assert_eq!(wilks_upper(80, 0.75, 0.05), Some(67));
    assert_eq!(wilks_upper(80, 0.95, 0.05), Some(80));
}

#[test]
fn binomial_tails_and_the_zero_event_bound() {
    assert!(close(binom_cdf(14, 40, 0.5), 0.0403, 1e-4));
    assert!(close(binom_cdf(15, 40, 0.5), 0.0769, 1e-4));
    assert_eq!(binom_cdf(-1, 10, 0.5), 0.0);
    assert_eq!(binom_cdf(10, 10, 0.3), 1.0);
    assert!(close(zero_event_upper(40, 0.05), 0.072, 1e-3));
    assert!(close(zero_event_upper(80, 0.05), 0.037, 1e-3));
    assert!(close(zero_event_upper(150, 0.05), 0.0198, 1e-4));
}

#[test]
fn clopper_pearson_and_the_ratio_of_counts() {
    // x = n: the lower bound solves p^n = alpha.
    let (l, u) = clopper_pearson(5, 5, 0.05);
    assert!(close(l, 0.05f64.powf(0.2), 1e-9) && u == 1.0);
    let (l, u) = clopper_pearson(0, 40, 0.05);
    assert!(l == 0.0 && close(u, zero_event_upper(40, 0.05), 1e-9));
    // Textbook: 3 of 10, one-sided 95% bounds 0.0873 and 0.6066.
    let (l, u) = clopper_pearson(3, 10, 0.05);
    assert!(close(l, 0.0873, 1e-4) && close(u, 0.6066, 1e-4), "{l} {u}");
    // Rework with a zero baseline: 4 candidate events give L = 0.90 (Inconclusive against
    // 1.05), 5 give L = 1.22 (Fail).
    assert!(close(count_ratio_bounds(4, 0, 0.05).0, 0.90, 0.01));
    assert!(close(count_ratio_bounds(5, 0, 0.05).0, 1.22, 0.01));
    assert_eq!(count_ratio_bounds(0, 0, 0.05), (0.0, f64::INFINITY));
    assert_eq!(count_ratio_bounds(3, 0, 0.05).1, f64::INFINITY);
}

#[test]
fn special_functions_and_student_t() {
    assert!(close(ln_gamma(5.0), 24f64.ln(), 1e-12));
    assert!(close(ln_gamma(0.5), std::f64::consts::PI.sqrt().ln(), 1e-12));
    assert!(close(inc_beta(2.0, 3.0, 0.5), 0.6875, 1e-12));
    assert!(close(t_cdf(0.0, 7.0), 0.5, 1e-12));
    assert!(close(t_quantile(0.95, 39.0), 1.6849, 1e-4));
    assert!(close(t_quantile(0.975, 10.0), 2.2281, 1e-4));
    assert!(close(t_quantile(0.05, 39.0), -1.6849, 1e-4));
}

#[test]
fn the_stratified_bootstrap_is_seeded_deterministic_and_keeps_pairs_whole() {
    // Five strata of eight pairs; the candidate costs 60–105% of the baseline, varying by task.
    let strata: Vec<Vec<(f64, f64)>> = (0..5)
        .map(|s| {
            (0..8)
                .map(|i| {
                    let b = f64::from(10 + s * 8 + i);
                    (b, b * (0.6 + f64::from((i * 7 + s * 3) % 10) / 20.0))
                })
                .collect()
        })
        .collect();
    let ratio = |pairs: &[(f64, f64)]| {
        let mut b: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let mut c: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        b.sort_by(f64::total_cmp);
        c.sort_by(f64::total_cmp);
        quantile7(&c, 0.75).unwrap() / quantile7(&b, 0.75).unwrap()
    };
    let a = bootstrap_bounds(&strata, 2_000, [7; 32], 0.05, ratio).unwrap();
    let again = bootstrap_bounds(&strata, 2_000, [7; 32], 0.05, ratio).unwrap();
    assert_eq!(a.0.to_bits(), again.0.to_bits());
    assert_eq!(a.1.to_bits(), again.1.to_bits());
    let other = bootstrap_bounds(&strata, 2_000, [8; 32], 0.05, ratio).unwrap();
    assert_ne!(a, other, "another seed, another resample");
    assert!(a.0 < a.1 && a.1 < 1.0, "{a:?}");
    // Pairs stay whole: a pair-level statistic only ever sees pairs that exist.
    let worst = |pairs: &[(f64, f64)]| pairs.iter().map(|p| p.1 / p.0).fold(0.0, f64::max);
    let max_ratio = strata.iter().flatten().map(|p| p.1 / p.0).fold(0.0, f64::max);
    let (lo, hi) = bootstrap_bounds(&strata, 200, [1; 32], 0.05, worst).unwrap();
    assert!(hi <= max_ratio && lo > 0.6, "{lo} {hi} {max_ratio}");
    assert_eq!(bootstrap_bounds(&strata, 10, [1; 32], 0.05, |_| f64::NAN), None);
}
