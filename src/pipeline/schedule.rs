//! The epoch's schedule of the trainer's reader: which positions of an epoch each rank
//! reads at each step, and inside a rank, which DataLoader worker reads which step. Pure
//! arithmetic over counts: no records, no I/O (an [`super::order::EpochOrder`] turns a
//! position into a record).
//!
//! - **In a global order** (`shuffle="global"` and `"blocks"`), [`Schedule`]: from a
//!   global position `start` on, step `s` is the positions `[start + s·B·R, start +
//!   (s + 1)·B·R)` (batch `B`, ranks `R`); rank `r` reads the `r`-th batch of each step,
//!   and DataLoader worker `w` of `W` the steps `w, w + W, …`. The last, short step of
//!   `m < B·R` positions is spread over the ranks, rank `r` the positions `[m·r/R, m·(r +
//!   1)/R)` of it (or dropped, with `drop_remainder`).
//! - **In file order** (the buffer shuffle), [`rank_range`]: each rank a contiguous range
//!   of the records, whole batches of `B` first, then its share of the rest spread as
//!   above.
//!
//! **Ranks stay even** (`even`, the default): every rank yields the same number of
//! batches in every epoch, as DDP's all-reduce needs. Where the last step leaves a rank
//! no position (fewer than `R` remain), it reads the position its share would start at
//! again, a repeat of one of the epoch's records: at most `R − 1` an epoch, none
//! elsewhere. Without `even`, every position is read exactly once and a rank's count may
//! be one short.

/// Where one reader (a rank, or a DataLoader worker of one) is in an epoch read in a
/// global order (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Positions in the epoch (its records).
    pub n: u64,
    /// The global position the reading starts from (an epoch's start, or a resumed
    /// state's position).
    pub start: u64,
    /// Records a batch.
    pub batch: u64,
    /// Ranks.
    pub ranks: u64,
    /// This rank.
    pub rank: u64,
    /// DataLoader workers of this rank (1: none).
    pub workers: u64,
    /// This worker.
    pub worker: u64,
    /// The last, short step is dropped.
    pub drop_remainder: bool,
    /// Ranks stay even (see the module docs).
    pub even: bool,
}

impl Schedule {
    /// Records of one step, over every rank.
    fn span(&self) -> u64 {
        self.batch.saturating_mul(self.ranks)
    }

    /// The steps of the whole epoch from `start` on, over every rank and worker.
    pub fn steps(&self) -> u64 {
        let left = self.n.saturating_sub(self.start);
        let span = self.span().max(1);
        if self.drop_remainder {
            left / span
        } else {
            left.div_ceil(span)
        }
    }

    /// The positions `[from, to)` this rank reads at step `s` (of the whole epoch, from
    /// `start`), if any.
    pub fn step_positions(&self, s: u64) -> Option<[u64; 2]> {
        if s >= self.steps() {
            return None;
        }
        let span = self.span();
        let first = self.start + s * span;
        if first + span <= self.n {
            let from = first + self.rank * self.batch;
            return Some([from, from + self.batch]);
        }
        // The last, short step (never with drop_remainder: `steps` leaves it out).
        let m = self.n - first;
        let (from, to) = spread(m, self.ranks, self.rank);
        let to = if self.even { to.max(from + 1) } else { to };
        (from < to).then_some([first + from, first + to])
    }

    /// The positions `[from, to)` of this reader's `k`-th batch, if it has one: step
    /// `worker + k · workers`.
    pub fn positions(&self, k: u64) -> Option<[u64; 2]> {
        let s = k.checked_mul(self.workers)?.checked_add(self.worker)?;
        self.step_positions(s)
    }

    /// The steps this rank has a batch in (every worker's together).
    pub fn rank_batches(&self) -> u64 {
        let steps = self.steps();
        match steps.checked_sub(1).map(|last| self.step_positions(last)) {
            Some(None) => steps - 1,
            _ => steps,
        }
    }

    /// This reader's batches: the rank's steps that are this worker's.
    pub fn batches(&self) -> u64 {
        let steps = self.rank_batches();
        steps
            .saturating_sub(self.worker)
            .div_ceil(self.workers.max(1))
    }
}

/// Rank `rank`'s part of `m` positions spread over `ranks`: `[m·r/R, m·(r + 1)/R)`.
fn spread(m: u64, ranks: u64, rank: u64) -> (u64, u64) {
    let at = |r: u64| (u128::from(m) * u128::from(r) / u128::from(ranks)) as u64;
    (at(rank), at(rank + 1))
}

/// The records `[start, end)` (in file order) rank `rank` of `ranks` reads in an epoch
/// of `n` records read in batches of `batch` (the buffer shuffle). With
/// `drop_remainder`, every rank the whole batches of the smallest share; with `even`,
/// whole batches first, then the share of the rest spread over the ranks, a rank left
/// none reading the record after its range again (see the module docs); without either,
/// `[n·r/R, n·(r + 1)/R)`.
pub fn rank_range(
    n: u64,
    batch: u64,
    ranks: u64,
    rank: u64,
    drop_remainder: bool,
    even: bool,
) -> [u64; 2] {
    let (batch, ranks) = (batch.max(1), ranks.max(1));
    if drop_remainder {
        let start = spread(n, ranks, rank).0;
        let per = n / ranks / batch * batch;
        return [start, start + per];
    }
    if !even {
        let (start, end) = spread(n, ranks, rank);
        return [start, end];
    }
    let span = batch.saturating_mul(ranks);
    let (full, m) = (n / span, n % span);
    let whole = full * batch;
    let (from, to) = spread(m, ranks, rank);
    // (A rank left none of the rest reads its next record again, the next rank's first:
    // never past the end, as the last rank's share of a non-empty rest is never empty.)
    let share = (to - from).max(u64::from(m > 0));
    let start = rank * whole + from;
    [start, (start + whole + share).min(n)]
}

/// The batches of a rank's range (see [`rank_range`]).
pub fn range_batches(records: u64, batch: u64, drop_remainder: bool) -> u64 {
    let batch = batch.max(1);
    if drop_remainder {
        records / batch
    } else {
        records.div_ceil(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Cases a property: `PROPTEST_CASES` (a long run), else 4,000.
    fn cases() -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(4000)
    }

    /// Record counts that find edges: 0, 1, primes, 2^k ± 1, and any.
    fn counts() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            Just(1),
            prop::sample::select(vec![2u64, 3, 5, 7, 11, 13, 97, 101, 1009, 4099]),
            (1u32..14).prop_flat_map(|k| prop::sample::select(vec![
                (1u64 << k) - 1,
                1 << k,
                (1 << k) + 1
            ])),
            0u64..5000,
        ]
    }

    #[derive(Debug, Clone, Copy)]
    struct Config {
        batch: u64,
        ranks: u64,
        workers: u64,
        drop_remainder: bool,
        even: bool,
    }

    fn configs() -> impl Strategy<Value = Config> {
        (1u64..70, 1u64..9, 1u64..5, any::<bool>(), any::<bool>()).prop_map(
            |(batch, ranks, workers, drop_remainder, even)| Config {
                batch,
                ranks,
                workers,
                drop_remainder,
                even,
            },
        )
    }

    fn schedule(n: u64, start: u64, c: Config, rank: u64, worker: u64) -> Schedule {
        Schedule {
            n,
            start,
            batch: c.batch,
            ranks: c.ranks,
            rank,
            workers: c.workers,
            worker,
            drop_remainder: c.drop_remainder,
            even: c.even,
        }
    }

    /// Every batch every reader of configuration `c` reads from `start` on, as (rank,
    /// worker, k, from, to).
    fn every_batch(n: u64, start: u64, c: Config) -> Vec<(u64, u64, u64, u64, u64)> {
        let mut out = Vec::new();
        for rank in 0..c.ranks {
            for worker in 0..c.workers {
                let s = schedule(n, start, c, rank, worker);
                let mut k = 0;
                while let Some([from, to]) = s.positions(k) {
                    out.push((rank, worker, k, from, to));
                    k += 1;
                }
                assert_eq!(k, s.batches(), "{s:?}: batches() counts them");
            }
        }
        out
    }

    /// How often each position of `[0, n)` is read.
    fn reads(n: u64, batches: &[(u64, u64, u64, u64, u64)]) -> Vec<u32> {
        let mut seen = vec![0u32; n as usize];
        for &(_, _, _, from, to) in batches {
            assert!(from < to && to <= n, "[{from}, {to}) of {n}");
            for p in from..to {
                seen[p as usize] += 1;
            }
        }
        seen
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        /// Every position from `start` on is read exactly once, but for the last step:
        /// dropped with drop_remainder, its repeats (at most ranks − 1, only where fewer
        /// positions than ranks remain) with even ranks; every batch is whole but the
        /// last step's; batch counts are even across ranks unless asked otherwise.
        #[test]
        fn every_position_once_and_ranks_even(n in counts(), c in configs(), at in 0u64..100) {
            let start = if n == 0 { 0 } else { at * n / 100 };
            let batches = every_batch(n, start, c);
            let seen = reads(n, &batches);
            let span = c.batch * c.ranks;
            let left = n - start;
            let m = left % span;
            let last_first = start + left / span * span;
            for p in 0..n {
                let dropped = p >= last_first && c.drop_remainder;
                let expected = u32::from(p >= start && !dropped);
                let got = seen[p as usize];
                if c.even && !c.drop_remainder && m > 0 && m < c.ranks && p >= last_first {
                    prop_assert!(got >= 1, "position {p} not read");
                } else {
                    prop_assert_eq!(got, expected, "position {} of {} from {}", p, n, start);
                }
            }
            let repeats: u32 = seen.iter().map(|&r| r.saturating_sub(1)).sum();
            let allowed = if c.even && !c.drop_remainder && m > 0 { c.ranks.saturating_sub(m) } else { 0 };
            prop_assert_eq!(u64::from(repeats), allowed);
            // Whole batches but in the last step.
            for &(_, _, _, from, to) in &batches {
                prop_assert!(to - from == c.batch || from >= last_first);
            }
            // Every rank the same count (even or dropped), else within one.
            let per_rank: Vec<u64> = (0..c.ranks)
                .map(|r| batches.iter().filter(|b| b.0 == r).count() as u64)
                .collect();
            let (lo, hi) = (per_rank.iter().min().copied().unwrap_or(0), per_rank.iter().max().copied().unwrap_or(0));
            if c.even || c.drop_remainder {
                prop_assert_eq!(lo, hi, "{:?}", per_rank);
            } else {
                prop_assert!(hi - lo <= 1);
            }
            for r in 0..c.ranks {
                prop_assert_eq!(schedule(n, start, c, r, 0).rank_batches(), per_rank[r as usize]);
            }
        }

        /// A run that stops after any number of whole steps and resumes at their global
        /// position under another batch size, ranks and workers reads the rest: over the
        /// two, every position once (but the last step's, as above).
        #[test]
        fn resuming_at_a_step_under_another_configuration_reads_the_rest(
            n in counts(), a in configs(), b in configs(), done in 0u64..50,
        ) {
            let a = Config { drop_remainder: false, even: false, ..a };
            let b = Config { drop_remainder: false, even: false, ..b };
            let steps = schedule(n, 0, a, 0, 0).steps();
            let done = done.min(steps);
            let position = (done * a.batch * a.ranks).min(n);
            let first: Vec<_> = every_batch(n, 0, a)
                .into_iter()
                .filter(|&(_, w, k, _, _)| w + k * a.workers < done)
                .collect();
            let rest = every_batch(n, position, b);
            let mut seen = reads(n, &first);
            for (p, r) in reads(n, &rest).into_iter().enumerate() {
                seen[p] += r;
            }
            prop_assert!(seen.iter().all(|&r| r == 1), "{:?}", seen.iter().position(|&r| r != 1));
        }

        /// Buffer-shuffle ranges: contiguous and in rank order; every record once but
        /// the repeats of even ranks (a rank left none of the rest reads the next
        /// record), and even batch counts.
        #[test]
        fn rank_ranges_cover_the_records(n in counts(), c in configs()) {
            let ranges: Vec<[u64; 2]> = (0..c.ranks)
                .map(|r| rank_range(n, c.batch, c.ranks, r, c.drop_remainder, c.even))
                .collect();
            let mut seen = vec![0u32; n as usize];
            for &[start, end] in &ranges {
                prop_assert!(start <= end && end <= n);
                for p in start..end {
                    seen[p as usize] += 1;
                }
            }
            let counts: Vec<u64> = ranges
                .iter()
                .map(|[s, e]| range_batches(e - s, c.batch, c.drop_remainder))
                .collect();
            let same = counts.windows(2).all(|w| w[0] == w[1]);
            if c.drop_remainder {
                prop_assert!(same && seen.iter().all(|&r| r <= 1));
            } else if c.even {
                prop_assert!(same, "{:?}", counts);
                prop_assert!(seen.iter().all(|&r| r >= 1));
                let repeats: u32 = seen.iter().map(|&r| r - 1).sum();
                prop_assert!(u64::from(repeats) < c.ranks);
            } else {
                prop_assert!(seen.iter().all(|&r| r == 1));
            }
        }
    }

    /// The case: 1,001 records, batches of 10, 4 ranks read 25, 25, 25, 26
    /// batches before ranks were kept even (a rank's all-reduce then waits forever).
    #[test]
    fn a_thousand_and_one_records_over_four_ranks_are_even() {
        let c = Config {
            batch: 10,
            ranks: 4,
            workers: 1,
            drop_remainder: false,
            even: true,
        };
        let counts: Vec<u64> = (0..4)
            .map(|r| schedule(1001, 0, c, r, 0).rank_batches())
            .collect();
        assert_eq!(counts, [26, 26, 26, 26]);
        let ranges: Vec<u64> = (0..4)
            .map(|r| {
                let [s, e] = rank_range(1001, 10, 4, r, false, true);
                range_batches(e - s, 10, false)
            })
            .collect();
        assert_eq!(ranges, [26, 26, 26, 26]);
        let uneven = Config { even: false, ..c };
        let before: Vec<u64> = (0..4)
            .map(|r| schedule(1001, 0, uneven, r, 0).rank_batches())
            .collect();
        assert_eq!(before, [25, 25, 25, 26]);
    }
}
