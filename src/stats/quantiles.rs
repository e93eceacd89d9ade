//! Quantiles of a stream of numbers, mergeable and deterministic: a weighted quantile
//! summary in the manner of Greenwald and Khanna, as TFDV's own sketch keeps it (tfx-bsl's
//! `QuantilesSketch`, from TensorFlow's boosted trees): sorted entries, each a value, how
//! many times it was seen, and bounds on its rank; merged by adding rank bounds,
//! compressed by dropping entries whose neighbours already pin the ranks between them.
//!
//! Why not a dependency's sketch: the KLL and REQ sketches of `datasketches` flip coins
//! from a generator seeded per thread and process, so the same shard would give another
//! sketch on every run, and the statistics file (whose hash the manifest names) would
//! differ between runs of the same conversion. This summary makes no random choice: the
//! same values in the same order give the same bytes. Tested below against exact ranks
//! and against `datasketches`' KLL on the same inputs.
//!
//! Error: a stream built with `eps` answers every rank query within `eps * n` of the
//! true rank (`n` the count); merging two summaries keeps the larger error, compressing
//! to `b` entries adds `1 / b`.

/// One entry: `value` seen `weight` times; of all values counted, between `min_rank` and
/// `max_rank - weight` are below it, and between `min_rank + weight` and `max_rank` are
/// at or below it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry {
    /// The value.
    pub value: f64,
    /// Times it was seen.
    pub weight: u64,
    /// The least number of values at or below it, less its own weight.
    pub min_rank: u64,
    /// The greatest number of values at or below it.
    pub max_rank: u64,
}

impl Entry {
    /// The most values that can be below this one.
    fn most_below(&self) -> u64 {
        self.max_rank - self.weight
    }

    /// The least values that are at or below this one.
    fn least_at_or_below(&self) -> u64 {
        self.min_rank + self.weight
    }

    /// This entry among another summary's values: of those, at least `least_below`
    /// (the ones at or below its last entry before this value) are below it, at most
    /// `most_below` (the ones below its next entry).
    fn widened(&self, least_below: u64, most_below: u64) -> Entry {
        Entry {
            value: self.value,
            weight: self.weight,
            min_rank: self.min_rank + least_below,
            max_rank: self.max_rank + most_below,
        }
    }
}

/// A sorted summary of weighted values with rank bounds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    entries: Vec<Entry>,
}

impl Summary {
    /// The summary of `values`, which it sorts (no NaN: a NaN is counted apart).
    pub fn exact(values: &mut [f64]) -> Summary {
        Summary::exact_weighted(values, 1)
    }

    /// The summary of `values`, each standing for `weight` values (a sample's).
    pub fn exact_weighted(values: &mut [f64], weight: u64) -> Summary {
        values.sort_unstable_by(f64::total_cmp);
        let mut entries: Vec<Entry> = Vec::new();
        for (below, &v) in (0u64..).zip(values.iter()) {
            let below = below * weight;
            match entries.last_mut() {
                // -0.0 and 0.0 are one value, as `==` says.
                Some(last) if last.value == v => {
                    last.weight += weight;
                    last.max_rank += weight;
                }
                _ => entries.push(Entry {
                    value: v,
                    weight,
                    min_rank: below,
                    max_rank: below + weight,
                }),
            }
        }
        Summary { entries }
    }

    /// A summary from entries read back (checked by [`Summary::validate`]).
    pub fn from_entries(entries: Vec<Entry>) -> Summary {
        Summary { entries }
    }

    /// The entries, sorted by value.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// How many values it counts.
    pub fn count(&self) -> u64 {
        self.entries.last().map_or(0, |e| e.max_rank)
    }

    /// Whether it counts nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Why these entries are no summary, if they are not: values strictly increasing
    /// and not NaN, weights positive, rank bounds ordered and within the count.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let total = self.count();
        let mut previous: Option<&Entry> = None;
        for (i, e) in self.entries.iter().enumerate() {
            let bad = e.value.is_nan()
                || e.weight == 0
                || e.max_rank < e.weight
                || e.min_rank > e.max_rank - e.weight
                || e.max_rank > total
                || previous.is_some_and(|p| {
                    p.value.total_cmp(&e.value).is_ge()
                        || p.min_rank + p.weight > e.min_rank + e.weight
                        || p.max_rank > e.max_rank
                });
            if bad {
                return Err(format!("quantile summary entry {i} is out of order: {e:?}"));
            }
            previous = Some(e);
        }
        Ok(())
    }

    /// The summary of both: every rank bound widened by what the other summary leaves
    /// open (its error is the larger of the two).
    pub fn merge(&self, other: &Summary) -> Summary {
        if self.is_empty() {
            return other.clone();
        }
        if other.is_empty() {
            return self.clone();
        }
        let (a, b) = (&self.entries, &other.entries);
        let mut out = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        // The least values of each side known to lie at or below the last entry taken
        // from it.
        let (mut a_at_or_below, mut b_at_or_below) = (0u64, 0u64);
        let (a_total, b_total) = (self.count(), other.count());
        while i < a.len() || j < b.len() {
            let order = match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) => x.value.total_cmp(&y.value),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            // Values equal by `==` (0.0 and -0.0) are one entry.
            let order = match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) if x.value == y.value => std::cmp::Ordering::Equal,
                _ => order,
            };
            match order {
                std::cmp::Ordering::Less => {
                    let b_most_below = b.get(j).map_or(b_total, Entry::most_below);
                    out.push(a[i].widened(b_at_or_below, b_most_below));
                    a_at_or_below = a[i].least_at_or_below();
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    let a_most_below = a.get(i).map_or(a_total, Entry::most_below);
                    out.push(b[j].widened(a_at_or_below, a_most_below));
                    b_at_or_below = b[j].least_at_or_below();
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    let (x, y) = (a[i], b[j]);
                    out.push(Entry {
                        value: x.value,
                        weight: x.weight + y.weight,
                        min_rank: x.min_rank + y.min_rank,
                        max_rank: x.max_rank + y.max_rank,
                    });
                    a_at_or_below = x.least_at_or_below();
                    b_at_or_below = y.least_at_or_below();
                    i += 1;
                    j += 1;
                }
            }
        }
        Summary { entries: out }
    }

    /// Keeps about `size` entries (at most `2 * size + 2`): the first and the last, and
    /// between them only entries whose neighbours kept would otherwise leave more than
    /// `count * max(1 / size, min_eps)` of rank unaccounted. Adds that much error.
    pub fn compress(&mut self, size: usize, min_eps: f64) {
        let size = size.max(2);
        if self.entries.len() <= size {
            return;
        }
        let delta = (self.count() as f64 * (1.0 / size as f64).max(min_eps)).floor() as u64;
        let e = &self.entries;
        let mut kept = Vec::with_capacity(size * 2 + 2);
        let mut k = 0;
        kept.push(e[0]);
        while k + 1 < e.len() {
            // The furthest next entry whose gap from e[k] stays within delta (at least
            // the one after).
            let mut j = k + 1;
            while j + 1 < e.len()
                && e[j + 1]
                    .most_below()
                    .saturating_sub(e[k].least_at_or_below())
                    <= delta
            {
                j += 1;
            }
            kept.push(e[j]);
            k = j;
        }
        self.entries = kept;
    }

    /// The largest error of a rank this summary answers, as a fraction of its count:
    /// the widest rank bounds of an entry, or gap between two.
    pub fn error(&self) -> f64 {
        let total = self.count();
        if total == 0 {
            return 0.0;
        }
        let mut widest = 0u64;
        for (i, e) in self.entries.iter().enumerate() {
            widest = widest.max(e.most_below().saturating_sub(e.min_rank));
            if i > 0 {
                let p = &self.entries[i - 1];
                widest = widest.max(e.most_below().saturating_sub(p.least_at_or_below()));
            }
        }
        widest as f64 / total as f64
    }

    /// About how many values are at or below `x`: midway between the least and the
    /// most its neighbours allow.
    pub fn rank(&self, x: f64) -> f64 {
        let i = self.entries.partition_point(|e| e.value <= x);
        match (
            i.checked_sub(1).map(|p| &self.entries[p]),
            self.entries.get(i),
        ) {
            (None, _) => 0.0,
            (Some(_), None) => self.count() as f64,
            (Some(e), Some(next)) => {
                let least = e.least_at_or_below() as f64;
                let most = (next.most_below() as f64).max(least);
                (least + most) / 2.0
            }
        }
    }

    /// The value at each rank in `ranks` (fractions in [0, 1], ascending): the entry
    /// whose rank bounds stray least from it. Rank 0 is the least value, 1 the
    /// greatest, both exact.
    pub fn quantiles(&self, ranks: &[f64]) -> Vec<f64> {
        let total = self.count() as f64;
        let mut out = Vec::with_capacity(ranks.len());
        if self.is_empty() {
            return out;
        }
        let mut at = 0;
        for &q in ranks {
            // TFDV's rank (tfx-bsl's): the value at index floor(q n) counting from 0,
            // the (floor(q n) + 1)-th, the last for q = 1.
            let r = ((q.clamp(0.0, 1.0) * total).floor() + 1.0).min(total);
            // How far an entry's value may stray from rank r: it holds rank r exactly
            // when at most r-1 values are below it and at least r at or below it.
            let stray = |e: &Entry| {
                let low = e.most_below() as f64 - (r - 1.0);
                let high = r - e.least_at_or_below() as f64;
                low.max(high).max(0.0)
            };
            while at + 1 < self.entries.len()
                && stray(&self.entries[at + 1]) <= stray(&self.entries[at])
            {
                at += 1;
            }
            out.push(self.entries[at].value);
        }
        out
    }
}

/// A stream's summary kept in levels: values gathered in a buffer, each full buffer
/// summarized and compressed, summaries of one level merged and carried up, so memory
/// grows with the logarithm of the count.
///
/// A sampled stream ([`Stream::sampled`]) keeps its first `exact` values, then one value
/// of each run of 2 (weighing 2), from `2 * exact` values on one of each run of 4, and so
/// on, each at a place in its run drawn from a generator of fixed seed: every doubling of
/// the count adds `exact / 2` values, so a stream of n values sorts about `exact * (1 +
/// log2(n / exact) / 2)` of them. The estimate of a rank is unbiased; its deviation is at
/// most `n / sqrt(6 exact)` (each run a variance of at most its weight squared over 4:
/// the runs of the last doubling, n/2 values in runs of n/exact, dominate).
#[derive(Clone, Debug)]
pub struct Stream {
    block: usize,
    buffer: Vec<f64>,
    levels: Vec<Summary>,
    /// The weight of each value in the buffer (the run length when sampled).
    weight: u64,
    /// Values pushed.
    seen: u64,
    /// The count from which runs double (`u64::MAX`: never, every value kept).
    next_doubling: u64,
    /// Where the current run is, and which of its values (1-based) is kept.
    in_run: u64,
    pick: u64,
    rng: u64,
}

/// The counts a stream is built for (2^40: a trillion values a shard).
const MOST_VALUES: u64 = 1 << 40;

/// SplitMix64: the sampler's generator (fixed seed, so the same values give the same
/// summary).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Stream {
    /// A stream whose summary answers ranks within `eps` of the count.
    pub fn new(eps: f64) -> Stream {
        assert!(eps > 0.0 && eps < 1.0, "eps {eps}");
        // Each level carried up compresses once more: with L levels and blocks of
        // L / eps entries, the errors add up to eps. L is the least that holds
        // MOST_VALUES: 2^L blocks.
        let mut levels = 1u32;
        let mut block = 2usize;
        while (1u64 << levels).saturating_mul(block as u64) < MOST_VALUES {
            levels += 1;
            block = (f64::from(levels) / eps).ceil() as usize + 1;
        }
        Stream {
            block,
            buffer: Vec::new(),
            levels: Vec::new(),
            weight: 1,
            seen: 0,
            next_doubling: u64::MAX,
            in_run: 0,
            pick: 1,
            rng: 0,
        }
    }

    /// A stream that keeps its first `exact` values, then samples (see [`Stream`]).
    pub fn sampled(eps: f64, exact: u64) -> Stream {
        Stream {
            next_doubling: exact.max(1),
            ..Stream::new(eps)
        }
    }

    /// Values pushed.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Counts one value (not NaN: the caller counts those apart).
    #[inline]
    pub fn push(&mut self, value: f64) {
        debug_assert!(!value.is_nan());
        self.seen += 1;
        if self.weight == 1 {
            self.buffer.push(value);
        } else {
            self.in_run += 1;
            if self.in_run == self.pick {
                self.buffer.push(value);
            }
            if self.in_run == self.weight {
                self.in_run = 0;
                self.pick = 1 + (splitmix(&mut self.rng) & (self.weight - 1));
            }
        }
        if self.seen == self.next_doubling {
            self.double();
        } else if self.buffer.len() >= 2 * self.block {
            self.flush();
        }
    }

    /// Runs twice as long from here on.
    #[cold]
    fn double(&mut self) {
        self.flush();
        self.weight *= 2;
        self.next_doubling = self.next_doubling.saturating_mul(2);
        self.in_run = 0;
        self.pick = 1 + (splitmix(&mut self.rng) & (self.weight - 1));
    }

    fn flush(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        let mut summary = Summary::exact_weighted(&mut self.buffer, self.weight);
        self.buffer.clear();
        // Exact, then 1/block of error: each level carried up adds another 1/block, and
        // the levels are fewer than eps * block.
        summary.compress(self.block, 0.0);
        self.carry(summary);
    }

    /// Compresses a summary carried up: its error plus 1/block at most.
    fn prune(&self, summary: &mut Summary) {
        let budget = summary.error() + 1.0 / self.block as f64;
        summary.compress(self.block, budget);
    }

    /// Adds a summary of other values (another stream's, read back).
    pub fn push_summary(&mut self, summary: &Summary) {
        let mut summary = summary.clone();
        self.prune(&mut summary);
        self.carry(summary);
    }

    fn carry(&mut self, mut summary: Summary) {
        for level in 0.. {
            if self.levels.len() <= level {
                self.levels.push(Summary::default());
            }
            let here = std::mem::take(&mut self.levels[level]);
            if here.is_empty() {
                self.levels[level] = summary;
                return;
            }
            summary = summary.merge(&here);
            if summary.entries.len() <= self.block + 1 {
                self.levels[level] = summary;
                return;
            }
            self.prune(&mut summary);
        }
    }

    /// The summary of everything pushed, compressed to about `size` entries or fewer
    /// (adding at most `1 / size` to its error).
    pub fn summary(&self, size: usize) -> Summary {
        let mut out = Summary::exact_weighted(&mut self.buffer.clone(), self.weight);
        for level in &self.levels {
            out = out.merge(level);
        }
        let error = out.error();
        out.compress(size, error + 1.0 / size.max(2) as f64);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// How far `v` stands from rank `r` (1-based) in `sorted`: 0 when it is the r-th
    /// value; else the ranks between.
    fn rank_miss(sorted: &[f64], v: f64, r: f64) -> f64 {
        let below = sorted.partition_point(|x| *x < v) as f64;
        let at_or_below = sorted.partition_point(|x| *x <= v) as f64;
        (below - (r - 1.0)).max(r - at_or_below).max(0.0)
    }

    fn worst_miss(values: &[f64], summary: &Summary) -> f64 {
        let mut sorted = values.to_vec();
        sorted.sort_unstable_by(f64::total_cmp);
        let n = sorted.len() as f64;
        let ranks: Vec<f64> = (0..=1000).map(|i| f64::from(i) / 1000.0).collect();
        let got = summary.quantiles(&ranks);
        ranks
            .iter()
            .zip(&got)
            .map(|(q, v)| rank_miss(&sorted, *v, ((q * n).floor() + 1.0).min(n)) / n)
            .fold(0.0, f64::max)
    }

    /// Values of many shapes: few distinct, many, offset far from zero, infinities.
    fn values() -> impl Strategy<Value = Vec<f64>> {
        prop_oneof![
            prop::collection::vec(0i64..3, 1..20_000)
                .prop_map(|v| v.into_iter().map(|x| x as f64).collect()),
            prop::collection::vec(-1e6f64..1e6, 1..20_000),
            prop::collection::vec(1.7e9f64..1.7e9 + 1e3, 1..20_000),
            prop::collection::vec(
                prop_oneof![
                    9 => -10.0f64..10.0,
                    1 => Just(f64::INFINITY),
                    1 => Just(f64::NEG_INFINITY)
                ],
                1..5_000
            ),
        ]
    }

    proptest! {
        // `PROPTEST_CASES` for a long run.
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64)
        ))]

        /// Streams over parts of the values, merged in order, answer every rank within
        /// the stated error; the extremes are exact; the same input gives the same
        /// summary.
        #[test]
        fn merged_streams_answer_within_their_error(values in values(), parts in 1usize..6) {
            let eps = 0.005;
            let chunk = values.len().div_ceil(parts);
            let summaries: Vec<Summary> = values
                .chunks(chunk)
                .map(|c| {
                    let mut s = Stream::new(eps);
                    c.iter().for_each(|v| s.push(*v));
                    s.summary(400)
                })
                .collect();
            let merged = summaries.iter().fold(Summary::default(), |m, s| m.merge(s));
            prop_assert!(merged.validate().is_ok(), "{:?}", merged.validate());
            prop_assert_eq!(merged.count(), values.len() as u64);
            let miss = worst_miss(&values, &merged);
            prop_assert!(miss <= 0.01, "rank missed by {miss}");
            prop_assert!(merged.error() <= 0.01, "error {}", merged.error());
            let q = merged.quantiles(&[0.0, 1.0]);
            let min = values.iter().copied().fold(f64::INFINITY, f64::min);
            let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            prop_assert_eq!(q, vec![min, max]);
            let again = values
                .chunks(chunk)
                .map(|c| {
                    let mut s = Stream::new(eps);
                    c.iter().for_each(|v| s.push(*v));
                    s.summary(400)
                })
                .fold(Summary::default(), |m, s| m.merge(&s));
            prop_assert_eq!(again, merged);
        }
    }

    /// Regression (found by the property above): two values, a rank between them. The
    /// answer is the value at index floor(q n) (TFDV's median of two values is the
    /// greater), so an exact summary is exact.
    #[test]
    fn a_rank_between_two_values_is_tfdvs() {
        let summary = Summary::exact(&mut [0.0, -4.815484632833775]);
        assert_eq!(
            summary.quantiles(&[0.0, 0.25, 0.5, 0.75, 1.0]),
            [-4.815484632833775, -4.815484632833775, 0.0, 0.0, 0.0]
        );
    }

    /// Beside the dependency this summary stands in for: on the same values, both
    /// answer the deciles within 1% of the true rank.
    #[test]
    fn answers_as_close_as_datasketches_kll() {
        use datasketches::common::SearchCriteria;
        use datasketches::kll::{KllFloat, KllSketch};
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let values: Vec<f64> = (0..1_000_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // A skewed distribution: squares of uniform numbers.
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                u * u * 1000.0
            })
            .collect();
        let mut ours = Stream::new(0.005);
        let mut kll = KllSketch::<KllFloat<f64>>::new(400).unwrap();
        for &v in &values {
            ours.push(v);
            kll.update(KllFloat::<f64>::new(v).unwrap());
        }
        let ranks: Vec<f64> = (1..10).map(|i| f64::from(i) / 10.0).collect();
        let ours = ours.summary(400).quantiles(&ranks);
        let theirs: Vec<f64> = kll
            .quantiles(&ranks, SearchCriteria::Inclusive)
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|v| v.into_inner())
            .collect();
        let mut sorted = values.clone();
        sorted.sort_unstable_by(f64::total_cmp);
        let n = sorted.len() as f64;
        for (i, q) in ranks.iter().enumerate() {
            let r = ((q * n).floor() + 1.0).min(n);
            let ours_miss = rank_miss(&sorted, ours[i], r) / n;
            let theirs_miss = rank_miss(&sorted, theirs[i], r) / n;
            assert!(ours_miss <= 0.01, "decile {q}: ours {ours_miss}");
            assert!(theirs_miss <= 0.01, "decile {q}: kll {theirs_miss}");
        }
    }

    /// Memory grows with the logarithm of the count: every level stays within about
    /// two blocks (levels that could not be pruned would hold ever more entries).
    #[test]
    fn a_streams_levels_stay_small() {
        let mut s = Stream::new(0.05);
        for i in 0..3_000_000u64 {
            s.push((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as f64);
        }
        let sizes: Vec<usize> = s.levels.iter().map(|l| l.entries().len()).collect();
        assert!(
            sizes.iter().all(|&n| n <= 2 * s.block + 2),
            "block {}: {sizes:?}",
            s.block
        );
        assert!(s.summary(100).error() <= 0.05 + 0.01 + 1e-9);
    }

    #[test]
    fn a_stream_summary_is_small() {
        let mut s = Stream::new(0.005);
        for i in 0..3_000_000u64 {
            s.push((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as f64);
        }
        let summary = s.summary(400);
        assert!(
            summary.entries().len() <= 802,
            "{}",
            summary.entries().len()
        );
        assert!(summary.error() <= 0.01, "{}", summary.error());
    }
}
