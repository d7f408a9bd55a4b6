//! The statistics the promotion gates stand on, written out so every number is reproducible:
//! the type-7 quantile, exact binomial tails, order-statistic bounds for a median (sign test)
//! and for any quantile (Wilks), Clopper–Pearson intervals, the conditional interval for a ratio
//! of counts, the zero-event bound, Student's t quantiles for paired means, and a seeded,
//! stratified paired bootstrap.
//!
//! Pure and deterministic: no clock, no ambient randomness; the bootstrap draws from ChaCha8
//! seeded by the caller, with its own index sampling (rejection, not a library helper whose
//! algorithm may change between versions).

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// Hyndman–Fan type 7 quantile (NumPy's default) of sorted `x`: `h = (n−1)q`, interpolating
/// between `x[⌊h⌋]` and `x[⌈h⌉]`. `None` for an empty slice or `q` outside [0, 1].
pub fn quantile7(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let h = (sorted.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, nine coefficients; about 15 significant digits).
pub fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection.
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularised incomplete beta function I_x(a, b), by its continued fraction (modified
/// Lentz), using the symmetry I_x(a, b) = 1 − I_{1−x}(b, a) where that converges faster.
pub fn inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x > (a + 1.0) / (a + b + 2.0) {
        return 1.0 - inc_beta(b, a, 1.0 - x);
    }
    const TINY: f64 = 1e-300;
    let mut c = 1.0;
    let mut d = 1.0 - (a + b) * x / (a + 1.0);
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut f = d;
    for m in 1..=10_000 {
        let m = f64::from(m);
        let num = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
        for num in [num, -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0))] {
            d = 1.0 + num * d;
            if d.abs() < TINY {
                d = TINY;
            }
            c = 1.0 + num / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            f *= d * c;
        }
        if (d * c - 1.0).abs() < 1e-15 {
            break;
        }
    }
    ln_front.exp() * f / a
}

/// P(X ≤ k) for X ~ Bin(n, p), exact for the sizes used here (a sum of terms in log space).
pub fn binom_cdf(k: i64, n: u64, p: f64) -> f64 {
    if k < 0 {
        return 0.0;
    }
    let k = k as u64;
    if k >= n || p <= 0.0 {
        return 1.0;
    }
    if p >= 1.0 {
        return 0.0;
    }
    let nf = n as f64;
    let ln_choose = |i: u64| ln_gamma(nf + 1.0) - ln_gamma(i as f64 + 1.0) - ln_gamma((n - i) as f64 + 1.0);
    let sum: f64 = (0..=k).map(|i| (ln_choose(i) + i as f64 * p.ln() + (n - i) as f64 * (1.0 - p).ln()).exp()).sum();
    sum.min(1.0)
}

/// Sign-test order statistics for a median at one-sided level `alpha`: `k` = the largest with
/// P(Bin(n, ½) ≤ k − 1) ≤ α; the lower bound is `x_(k)` and the upper `x_(n−k+1)` (1-based).
/// `None` when no order statistic reaches that level.
pub fn sign_bounds(n: u64, alpha: f64) -> Option<(usize, usize)> {
    let k = (1..=n).take_while(|k| binom_cdf(*k as i64 - 1, n, 0.5) <= alpha).last()?;
    Some((k as usize, (n - k + 1) as usize))
}

/// Wilks: the 1-based order statistic that is a one-sided `1 − alpha` upper bound for the
/// `q`-quantile of `n` draws (the smallest r with P(Bin(n, q) ≤ r − 1) ≥ 1 − α); `None` when
/// even the maximum is not (n < ln α / ln q).
pub fn wilks_upper(n: u64, q: f64, alpha: f64) -> Option<usize> {
    (1..=n).find(|r| binom_cdf(*r as i64 - 1, n, q) >= 1.0 - alpha).map(|r| r as usize)
}

/// The exact one-sided `1 − alpha` upper bound on a rate after zero events in `n` trials,
/// `1 − α^{1/n}` (about 3/n at 95%).
pub fn zero_event_upper(n: u64, alpha: f64) -> f64 {
    if n == 0 { 1.0 } else { 1.0 - alpha.powf(1.0 / n as f64) }
}

/// Solves `f(p) = target` for p in [0, 1] by bisection, `f` increasing.
fn bisect(target: f64, f: impl Fn(f64) -> f64) -> f64 {
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if f(mid) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Clopper–Pearson one-sided bounds for `x` successes in `n` trials, each at level `alpha`:
/// `(lower, upper)` with P(X ≥ x | lower) = α and P(X ≤ x | upper) = α.
pub fn clopper_pearson(x: u64, n: u64, alpha: f64) -> (f64, f64) {
    let lower = if x == 0 { 0.0 } else { bisect(alpha, |p| 1.0 - binom_cdf(x as i64 - 1, n, p)) };
    let upper = if x >= n { 1.0 } else { bisect(1.0 - alpha, |p| 1.0 - binom_cdf(x as i64, n, p)) };
    (lower, upper)
}

/// One-sided `1 − alpha` bounds on the ratio ρ of two Poisson-like counts with equal exposure
/// (candidate `xc`, baseline `xb`): conditional on the total, xc ~ Bin(T, ρ/(1+ρ)), and the
/// Clopper–Pearson bounds map by p/(1−p). `(0, ∞)` with no events at all.
pub fn count_ratio_bounds(xc: u64, xb: u64, alpha: f64) -> (f64, f64) {
    let t = xc + xb;
    if t == 0 {
        return (0.0, f64::INFINITY);
    }
    let (pl, pu) = clopper_pearson(xc, t, alpha);
    let map = |p: f64| if p >= 1.0 { f64::INFINITY } else { p / (1.0 - p) };
    (map(pl), map(pu))
}

/// Student's t distribution: P(T ≤ t) with `df` degrees of freedom.
pub fn t_cdf(t: f64, df: f64) -> f64 {
    let tail = 0.5 * inc_beta(df / 2.0, 0.5, df / (df + t * t));
    if t >= 0.0 { 1.0 - tail } else { tail }
}

/// The `p`-quantile of Student's t with `df` degrees of freedom (bisection on [`t_cdf`]).
pub fn t_quantile(p: f64, df: f64) -> f64 {
    let (mut lo, mut hi) = (-1e3f64, 1e3f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// A uniform index below `n` from `rng`, by rejection (no modulo bias, and no library helper
/// whose algorithm could change between versions).
pub fn index_below(rng: &mut ChaCha8Rng, n: usize) -> usize {
    let n = n as u64;
    let zone = u64::MAX - (u64::MAX % n);
    loop {
        let v = rng.next_u64();
        if v < zone {
            return (v % n) as usize;
        }
    }
}

/// Percentile bounds of a statistic under a stratified paired bootstrap: each resample draws,
/// within every stratum, as many pairs as it has (with replacement), keeping each pair whole;
/// `statistic` maps the resampled pairs to a value (non-finite values are dropped).
/// Returns the one-sided `alpha` lower and upper percentile bounds, `None` if no resample gave
/// a finite value.
pub fn bootstrap_bounds<T: Clone>(
    strata: &[Vec<T>],
    resamples: usize,
    seed: [u8; 32],
    alpha: f64,
    statistic: impl Fn(&[T]) -> f64,
) -> Option<(f64, f64)> {
    let mut rng = ChaCha8Rng::from_seed(seed);
    let mut values = Vec::with_capacity(resamples);
    let total: usize = strata.iter().map(Vec::len).sum();
    let mut sample = Vec::with_capacity(total);
    for _ in 0..resamples {
        sample.clear();
        for s in strata.iter().filter(|s| !s.is_empty()) {
            for _ in 0..s.len() {
                sample.push(s[index_below(&mut rng, s.len())].clone());
            }
        }
        let v = statistic(&sample);
        if v.is_finite() {
            values.push(v);
        }
    }
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let b = values.len() as f64;
    let at = |q: f64| values[((b * q).ceil() as usize).clamp(1, values.len()) - 1];
    Some((at(alpha), at(1.0 - alpha)))
}
