//! Shuffle: a buffer of `buffer_size` elements; each new element takes the place of a
//! uniformly chosen one, which goes out (`tf.data.Dataset.shuffle`'s algorithm). At the
//! end of an epoch the rest leaves in random order. Seeded, so the order repeats.

pub use crate::hash::Rng;

/// The shuffle buffer.
#[derive(Debug)]
pub struct ShuffleBuffer<T> {
    items: Vec<T>,
    capacity: usize,
    rng: Rng,
}

impl<T> ShuffleBuffer<T> {
    /// A buffer of `capacity` elements (0 or 1: no shuffling).
    pub fn new(capacity: usize, seed: u64) -> ShuffleBuffer<T> {
        ShuffleBuffer {
            items: Vec::with_capacity(capacity.min(1 << 20)),
            capacity: capacity.max(1),
            rng: Rng::new(seed),
        }
    }

    /// Bytes of the slots allocated (the elements' own buffers not counted).
    pub fn slot_bytes(&self) -> usize {
        self.items.capacity() * std::mem::size_of::<T>()
    }

    /// Adds an element; once the buffer is full, returns a random one.
    pub fn push(&mut self, item: T) -> Option<T> {
        if self.capacity == 1 {
            // No shuffling: the element goes straight out (what the draw from one would
            // give), the buffer and its generator untouched.
            return Some(item);
        }
        self.items.push(item);
        if self.items.len() < self.capacity {
            return None;
        }
        let i = self.rng.below(self.items.len());
        let out = self.items.swap_remove(i);
        // The next push draws from a copy of this state: fetch its slot now, so the
        // random access into a buffer larger than the cache overlaps other work.
        if let Some(next) = self.items.get(self.rng.clone().below(self.capacity)) {
            crate::tfrecord::frame::prefetch(next);
        }
        Some(out)
    }

    /// Removes one random element (at the end of an epoch).
    pub fn pop(&mut self) -> Option<T> {
        if self.items.is_empty() {
            return None;
        }
        let i = self.rng.below(self.items.len());
        Some(self.items.swap_remove(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_once_and_seeded() {
        let run = |seed| {
            let mut buf = ShuffleBuffer::new(100, seed);
            let mut out = Vec::new();
            for i in 0..1000 {
                out.extend(buf.push(i));
            }
            while let Some(x) = buf.pop() {
                out.push(x);
            }
            out
        };
        let a = run(1);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_eq!(a, run(1));
        assert_ne!(a, run(2));
        assert_ne!(a, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn a_buffer_of_one_or_none_keeps_the_order() {
        for capacity in [0, 1] {
            let mut buf = ShuffleBuffer::new(capacity, 3);
            let out: Vec<u32> = (0..100).filter_map(|i| buf.push(i)).collect();
            assert_eq!(out, (0..100).collect::<Vec<_>>(), "capacity {capacity}");
            assert_eq!(buf.pop(), None);
        }
    }

    #[test]
    fn below_is_in_range() {
        let mut rng = Rng::new(7);
        for n in 1..100 {
            assert!(rng.below(n) < n);
        }
    }
}
