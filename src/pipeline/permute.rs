//! A keyed bijection of `[0, N)`: the order in which a global shuffle visits an epoch's
//! records (or blocks of them), from (seed, epoch), in O(1) memory whatever N.
//!
//! A Feistel network over pairs `(l, r)` of `[0, a) × [0, b)` (`a = ⌈√N⌉`, `b =
//! ⌈N / a⌉`: position `x` is `l·b + r`), whose rounds add a keyed 64-bit mix of one
//! half to the other modulo its size (the halves' sizes alternate, Black and Rogaway's
//! generalised Feistel), is a bijection of `[0, a·b)`; **cycle walking** (applying it
//! again while the value is `>= N`) restricts it to `[0, N)`, still a bijection, since
//! the walk from any `i < N` returns below N before it could meet another start. The
//! domain is under `N + a`, so a position costs one network pass but for about one in
//! `√N`. [`Permutation::invert`] walks the inverse network.

use crate::hash::mix64;

/// Feistel rounds (even: the pair comes out as it went in, `[0, a) × [0, b)`): enough
/// for a mix whose outputs look independent of the inputs' order (three are a
/// pseudo-random permutation in theory; six leave a margin).
const ROUNDS: usize = 6;

/// A permutation of `[0, n)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permutation {
    n: u64,
    /// The sizes of the halves: the network permutes `[0, a·b)`, `a·b >= n`.
    a: u64,
    b: u64,
    keys: [u64; ROUNDS],
}

impl Permutation {
    /// The permutation of `[0, n)` that `(seed, epoch)` names: the same for the same
    /// three, another for another seed or epoch. `n` is under `2^64 - 2^32` (the
    /// network's domain, under `n + 2^32`, fits 64 bits).
    pub fn new(n: u64, seed: u64, epoch: u64) -> Permutation {
        debug_assert!(n < u64::MAX - u64::from(u32::MAX), "{n} positions");
        let a = n.isqrt() + u64::from(n.isqrt() * n.isqrt() < n);
        let b = n.div_ceil(a.max(1)).max(1);
        let base = mix64(seed ^ mix64(epoch.wrapping_add(0x6a09_e667_f3bc_c909)));
        let mut keys = [0; ROUNDS];
        for (r, key) in keys.iter_mut().enumerate() {
            *key = mix64(base.wrapping_add((r as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        }
        Permutation {
            n,
            a: a.max(1),
            b,
            keys,
        }
    }

    /// N.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether N is 0.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// A round's keyed value of half `half`, in `[0, m)` (`m` the size of the half it
    /// is added to): the mix's high bits scaled (a multiply, not a division).
    #[inline(always)]
    fn round(half: u64, key: u64, m: u64) -> u64 {
        ((u128::from(mix64(half ^ key)) * u128::from(m)) >> 64) as u64
    }

    /// The size of the half round `k` adds to (`a` and `b` in turn).
    #[inline(always)]
    fn size(&self, k: usize) -> u64 {
        if k.is_multiple_of(2) {
            self.a
        } else {
            self.b
        }
    }

    #[inline(always)]
    fn forward(&self, x: u64) -> u64 {
        let (mut l, mut r) = div_rem(x, self.b);
        for (k, &key) in self.keys.iter().enumerate() {
            // (l, r) in [0, m) × [0, o) → (r, l + F(r) mod m) in [0, o) × [0, m).
            let m = self.size(k);
            let sum = l + Self::round(r, key, m);
            (l, r) = (r, if sum >= m { sum - m } else { sum });
        }
        l * self.b + r
    }

    fn backward(&self, x: u64) -> u64 {
        let (mut l, mut r) = div_rem(x, self.b);
        for (k, &key) in self.keys.iter().enumerate().rev() {
            // Round k's output (r', l' + F(r') mod m) back to (l', r').
            let m = self.size(k);
            let f = Self::round(l, key, m);
            (l, r) = (if r >= f { r - f } else { r + m - f }, l);
        }
        l * self.b + r
    }

    /// The element at position `i` (`i < N`).
    pub fn apply(&self, i: u64) -> u64 {
        debug_assert!(i < self.n, "position {i} of {}", self.n);
        if self.n <= 1 {
            return i;
        }
        let mut x = self.forward(i);
        while x >= self.n {
            x = self.forward(x);
        }
        x
    }

    /// `apply` of each of `positions`, in place (each `< N`). Positions go through the
    /// network `LANES` at a time, round by round: their mixes, independent of each
    /// other, overlap in the CPU (one position's rounds wait on each other). The few
    /// that walk again are passed again afterwards.
    pub fn apply_all(&self, positions: &mut [u64]) {
        debug_assert!(positions.iter().all(|&i| i < self.n));
        if self.n <= 1 {
            return;
        }
        const LANES: usize = 8;
        let mut again = false;
        for chunk in positions.chunks_mut(LANES) {
            let (mut l, mut r) = ([0u64; LANES], [0u64; LANES]);
            for (x, (l, r)) in chunk.iter().zip(l.iter_mut().zip(&mut r)) {
                (*l, *r) = div_rem(*x, self.b);
            }
            for (k, &key) in self.keys.iter().enumerate() {
                let m = self.size(k);
                for (l, r) in l.iter_mut().zip(&mut r) {
                    let sum = *l + Self::round(*r, key, m);
                    (*l, *r) = (*r, if sum >= m { sum - m } else { sum });
                }
            }
            for (x, (l, r)) in chunk.iter_mut().zip(l.iter().zip(&r)) {
                *x = l * self.b + r;
                again |= *x >= self.n;
            }
        }
        if again {
            for x in positions.iter_mut() {
                while *x >= self.n {
                    *x = self.forward(*x);
                }
            }
        }
    }

    /// The position of element `j` (`j < N`): `apply(invert(j)) == j`.
    pub fn invert(&self, j: u64) -> u64 {
        debug_assert!(j < self.n, "element {j} of {}", self.n);
        if self.n <= 1 {
            return j;
        }
        let mut x = self.backward(j);
        while x >= self.n {
            x = self.backward(x);
        }
        x
    }
}

/// `(a / b, a % b)`, by a 32-bit division where both fit (a fraction of a 64-bit one's
/// time on many CPUs; every position takes one).
#[inline(always)]
pub(crate) fn div_rem(a: u64, b: u64) -> (u64, u64) {
    match (u32::try_from(a), u32::try_from(b)) {
        (Ok(a), Ok(b)) => ((a / b) as u64, (a % b) as u64),
        _ => (a / b, a % b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_n_to_10000_is_a_bijection() {
        let mut seen = Vec::new();
        for n in 1..=10_000u64 {
            let p = Permutation::new(n, 7, n % 3);
            seen.clear();
            seen.resize(n as usize, false);
            for i in 0..n {
                let j = p.apply(i);
                assert!(j < n, "n {n}: {i} -> {j}");
                assert!(!seen[j as usize], "n {n}: {j} twice");
                seen[j as usize] = true;
            }
        }
    }

    /// Near 2^40 a full check is out of reach: sampled positions land in range, and the
    /// inverse takes each back (an injective map on them).
    #[test]
    fn n_near_2_to_the_40_is_invertible_where_sampled() {
        for n in [(1u64 << 40) - 3, 1 << 40, (1 << 40) + 12_345] {
            let p = Permutation::new(n, 3, 1);
            let mut outputs = std::collections::HashSet::new();
            for k in 0..20_000u64 {
                let i = mix64(k) % n;
                let j = p.apply(i);
                assert!(j < n);
                assert_eq!(p.invert(j), i, "n {n}: position {i}");
                outputs.insert((i, j));
            }
            // Spread: outputs of consecutive positions are not consecutive.
            let near = (0..1000u64).filter(|&i| p.apply(i).abs_diff(p.apply(i + 1)) < 1000);
            assert!(near.count() < 10);
        }
    }

    #[test]
    fn seeds_and_epochs_give_other_orders() {
        let n = 1000;
        let order = |seed, epoch| {
            let p = Permutation::new(n, seed, epoch);
            (0..n).map(|i| p.apply(i)).collect::<Vec<u64>>()
        };
        assert_eq!(
            order(1, 0),
            order(1, 0),
            "the same (seed, epoch), the same order"
        );
        assert_ne!(order(1, 0), order(2, 0));
        assert_ne!(order(1, 0), order(1, 1));
        // Not the identity, and no long runs of consecutive records.
        let o = order(1, 0);
        let runs = o.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(runs < 10, "{runs} consecutive pairs");
    }

    /// Many positions at once give what each gives alone, in their order (those that
    /// walk again among those that do not), small and near 2^40.
    #[test]
    fn all_at_once_is_each_alone() {
        for n in [1u64, 2, 3, 255, 256, 257, 1000, 168_000, (1 << 40) + 12_345] {
            let p = Permutation::new(n, 11, 2);
            let positions: Vec<u64> = (0..2000u64).map(|k| mix64(k) % n).collect();
            let mut all = positions.clone();
            p.apply_all(&mut all);
            let each: Vec<u64> = positions.iter().map(|&i| p.apply(i)).collect();
            assert_eq!(all, each, "n {n}");
        }
        let mut none: [u64; 0] = [];
        Permutation::new(5, 1, 1).apply_all(&mut none);
    }

    /// Over seeds, where a position's record lands is spread evenly over the set (a
    /// network whose rounds mixed poorly would favour some of it), for a square N and
    /// for one just above (the halves of unequal size, positions walked again).
    #[test]
    fn a_position_lands_anywhere_alike() {
        for n in [1024u64, 1025, 2_000_000] {
            for position in [0, n / 2, n - 1] {
                let mut tenths = [0u32; 10];
                for seed in 0..4000 {
                    let j = Permutation::new(n, seed, 1).apply(position);
                    tenths[(j * 10 / n) as usize] += 1;
                }
                // 400 each; a binomial's deviation is 19.
                assert!(
                    tenths.iter().all(|&c| (320..480).contains(&c)),
                    "n {n}, position {position}: {tenths:?}"
                );
            }
        }
    }

    #[test]
    fn tiny_sets() {
        assert!(Permutation::new(0, 1, 1).is_empty());
        assert_eq!(Permutation::new(1, 1, 1).apply(0), 0);
        let p = Permutation::new(2, 5, 0);
        let mut two = [p.apply(0), p.apply(1)];
        two.sort_unstable();
        assert_eq!(two, [0, 1]);
    }
}
