//! The statistics the benches compute from their samples: quantiles and medians, the median's
//! distribution-free confidence interval, the noise of a difference of medians, and percentages.
//! Pure functions of their arguments; the bench modules that measure and report import this one,
//! never the other way.

/// The `q` quantile (0..=1) of `v`, interpolating between neighbours (`q` = 0.5: the median);
/// NaN for an empty `v`.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (s.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

/// The median of `v` (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

/// The first quartile, the median and the third quartile of `v` (NaN when empty).
pub fn quartiles(v: &[f64]) -> [f64; 3] {
    [0.25, 0.5, 0.75].map(|q| quantile(v, q))
}

/// A distribution-free 95% confidence interval of the median of `v`: the order statistics whose
/// ranks a binomial(n, ½) count puts outside with at most 2.5% on each side (coverage ≥ 95%).
/// `None` with fewer than 6 values, where no such interval exists.
pub fn median_ci95(v: &[f64]) -> Option<(f64, f64)> {
    let n = v.len();
    if n < 6 {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    // P(X < k) for X ~ Bin(n, 1/2), summed until it would exceed 2.5%.
    let mut k = 0;
    let mut below = 0.0;
    let mut term = 0.5f64.powi(n as i32); // P(X = 0)
    while k < n / 2 && below + term <= 0.025 {
        below += term;
        term *= (n - k) as f64 / (k + 1) as f64;
        k += 1;
    }
    // k values lie below the interval on each side; k ≥ 1 for n ≥ 6.
    Some((s[k.max(1) - 1], s[n - k.max(1)]))
}

/// The median of the distances of `v`'s values from its median: a spread that a few wild values
/// do not move (NaN when empty).
pub fn median_abs_deviation(v: &[f64]) -> f64 {
    let m = median(v);
    median(&v.iter().map(|x| (x - m).abs()).collect::<Vec<_>>())
}

/// Two standard errors of the difference of two medians of `reps` runs each, with the deviation
/// of a single run estimated from the runs `v` (1.4826 × their median absolute deviation, which
/// is the standard deviation for normal values). `None` with fewer than 3 values.
pub fn median_difference_noise(v: &[f64], reps: usize) -> Option<f64> {
    if v.len() < 3 {
        return None;
    }
    let sigma_run = 1.4826 * median_abs_deviation(v);
    // The median of n normal values has a standard error of about 1.2533 σ / √n.
    let sigma_median = 1.2533 * sigma_run / (reps.max(1) as f64).sqrt();
    Some(2.0 * std::f64::consts::SQRT_2 * sigma_median)
}

/// `part` as a percentage of `whole`; a `whole` of zero counts as a nanosecond's worth, so that
/// an empty span gives a large number rather than a division by zero.
pub fn percent(part: f64, whole: f64) -> f64 {
    100.0 * part / whole.max(1e-9)
}

/// The change from `before` to `after`, in percent of `before`'s size.
pub fn percent_change(before: f64, after: f64) -> f64 {
    100.0 * (after - before) / before.abs().max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_to(n: usize) -> Vec<f64> {
        (1..=n).map(|i| i as f64).collect()
    }

    #[test]
    fn quantiles_interpolate_between_neighbours_in_any_order() {
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 4.0);
        assert_eq!(quantile(&v, 0.5), 2.5);
        assert_eq!(quantile(&v, 0.25), 1.75);
        // Out-of-range quantiles are the extremes.
        assert_eq!(quantile(&v, -1.0), 1.0);
        assert_eq!(quantile(&v, 2.0), 4.0);
    }

    #[test]
    fn the_median_of_odd_even_single_and_empty_samples() {
        assert_eq!(median(&[5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&[5.0, 1.0, 3.0, 7.0]), 4.0);
        assert_eq!(median(&[-2.5]), -2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn quartiles_of_one_to_nine() {
        assert_eq!(quartiles(&one_to(9)), [3.0, 5.0, 7.0]);
        assert_eq!(quartiles(&[2.0]), [2.0; 3]);
        assert!(quartiles(&[]).iter().all(|q| q.is_nan()));
    }

    /// The ranks of the interval are those of the binomial tables: 1 and n for n = 6, 6 and 15
    /// for n = 20, 40 and 61 for n = 100.
    #[test]
    fn the_median_interval_has_the_binomial_ranks() {
        assert_eq!(median_ci95(&[]), None);
        assert_eq!(median_ci95(&[1.0]), None);
        assert_eq!(median_ci95(&one_to(5)), None);
        assert_eq!(median_ci95(&one_to(6)), Some((1.0, 6.0)));
        assert_eq!(median_ci95(&one_to(20)), Some((6.0, 15.0)));
        assert_eq!(median_ci95(&one_to(100)), Some((40.0, 61.0)));
    }

    #[test]
    fn the_median_interval_is_taken_from_the_sorted_values() {
        let v = [0.9, -0.2, 0.4, 1.5, 0.1, 0.7, 0.3];
        // n = 7: one value below and one above the interval, as for n = 6.
        assert_eq!(median_ci95(&v), Some((-0.2, 1.5)));
        let v: Vec<f64> = one_to(20).into_iter().rev().map(|x| x / 10.0).collect();
        assert_eq!(median_ci95(&v), Some((0.6, 1.5)));
    }

    #[test]
    fn the_median_absolute_deviation_ignores_one_wild_value() {
        // Median 3, distances 2, 1, 0, 1, 97: their median is 1.
        assert_eq!(median_abs_deviation(&[1.0, 2.0, 3.0, 4.0, 100.0]), 1.0);
        assert_eq!(median_abs_deviation(&[7.0]), 0.0);
        assert!(median_abs_deviation(&[]).is_nan());
    }

    #[test]
    fn the_noise_of_a_median_difference_shrinks_with_the_root_of_the_runs() {
        assert_eq!(median_difference_noise(&[1.0, 2.0], 6), None);
        let v = [-1.0, 0.0, 1.0];
        // MAD 1: σ of a run 1.4826, of a median of one run 1.2533 × that, two SEs of a
        // difference 2√2 × that.
        let one = 2.0 * std::f64::consts::SQRT_2 * 1.2533 * 1.4826;
        let at = |reps| median_difference_noise(&v, reps).expect("three values");
        assert!((at(1) - one).abs() < 1e-12, "{}", at(1));
        assert!((at(0) - one).abs() < 1e-12, "no runs counts as one");
        assert!((at(4) - one / 2.0).abs() < 1e-12, "{}", at(4));
        assert_eq!(median_difference_noise(&[2.0, 2.0, 2.0], 6), Some(0.0));
    }

    #[test]
    fn percentages_and_changes() {
        assert_eq!(percent(0.5, 2.0), 25.0);
        assert_eq!(percent(0.0, 0.0), 0.0);
        assert!(
            percent(1.0, 0.0) > 1e10,
            "an empty span: large, not infinite"
        );
        assert_eq!(percent_change(4.0, 5.0), 25.0);
        assert_eq!(percent_change(-4.0, -5.0), -25.0);
        assert_eq!(percent_change(0.0, 0.0), 0.0);
    }
}
