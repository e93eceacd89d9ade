//! What the pipeline's own buffers hold, in bytes: the record buffers (pool, shuffle
//! buffer, raw batches in flight, buffers on their way back to the pool), the open
//! readers' block buffers and the parsed batches not yet handed to the consumer.
//!
//! The count is exact (capacities, not lengths) and cheap: the producer's thread changes
//! it only when a buffer is allocated, grows or is dropped, and a parsed batch adds once
//! when it is made and subtracts once when the consumer takes it. Memory is bounded by
//! the options, whatever the consumer's speed ([`Pipeline::memory_bound`]); the tests
//! assert that bound on this count, which the scheduler cannot move, rather than on the
//! process's RSS, which the allocator's caching can.
//!
//! [`Pipeline::memory_bound`]: super::Pipeline::memory_bound

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Bytes held now and at most, shared by the pipeline's threads, and the largest of the
/// things the bound is made of.
#[derive(Debug, Default)]
pub struct Held {
    now: AtomicU64,
    peak: AtomicU64,
    largest_record: AtomicU64,
    largest_batch: AtomicU64,
    streamed: AtomicBool,
}

impl Held {
    /// A record of `bytes` was copied into a buffer of its own.
    pub fn note_record(&self, bytes: usize) {
        self.largest_record
            .fetch_max(bytes as u64, Ordering::Relaxed);
    }

    /// A parsed batch holding `bytes` was made.
    pub fn note_batch(&self, bytes: u64) {
        self.largest_batch.fetch_max(bytes, Ordering::Relaxed);
    }

    /// A file is read through a block buffer (not mapped).
    pub fn note_stream(&self) {
        self.streamed.store(true, Ordering::Relaxed);
    }

    /// The largest record copied so far (0 when every record was mapped).
    pub fn largest_record(&self) -> u64 {
        self.largest_record.load(Ordering::Relaxed)
    }

    /// The most bytes a parsed batch has held.
    pub fn largest_batch(&self) -> u64 {
        self.largest_batch.load(Ordering::Relaxed)
    }

    /// Whether any file was read through a block buffer.
    pub fn streamed(&self) -> bool {
        self.streamed.load(Ordering::Relaxed)
    }

    /// `bytes` more are held.
    pub fn add(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let now = self.now.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// `bytes` fewer are held (every subtraction follows the addition it undoes).
    pub fn sub(&self, bytes: u64) {
        if bytes != 0 {
            self.now.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// A buffer went from `before` to `after` bytes of capacity.
    pub fn resize(&self, before: usize, after: usize) {
        if after > before {
            self.add((after - before) as u64);
        } else {
            self.sub((before - after) as u64);
        }
    }

    /// Bytes held now.
    #[cfg(test)]
    pub fn now(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }

    /// The most bytes held at once so far.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

/// Record buffers to reuse (copied records: compressed shards, or mapping off), at most
/// `room` of them; a buffer beyond that is dropped.
#[derive(Debug)]
pub struct Pool {
    buffers: Vec<Vec<u8>>,
    room: usize,
}

impl Pool {
    /// A pool keeping at most `room` buffers.
    pub fn new(room: usize) -> Pool {
        Pool {
            buffers: Vec::new(),
            room,
        }
    }

    /// A buffer holding a copy of `bytes` (reused when the pool has one). Its capacity is
    /// exactly what it has held at most, so no buffer exceeds the largest record.
    pub fn copy(&mut self, bytes: &[u8], held: &Held) -> Vec<u8> {
        let mut buffer = self.buffers.pop().unwrap_or_default();
        let before = buffer.capacity();
        buffer.clear();
        buffer.reserve_exact(bytes.len());
        buffer.extend_from_slice(bytes);
        held.resize(before, buffer.capacity());
        held.note_record(buffer.capacity());
        buffer
    }

    /// Takes a buffer back, or drops it when the pool is full.
    pub fn put_back(&mut self, buffer: Vec<u8>, held: &Held) {
        if self.buffers.len() < self.room {
            self.buffers.push(buffer);
        } else {
            held.sub(buffer.capacity() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_counts_now_and_peak() {
        let held = Held::default();
        held.add(10);
        held.add(5);
        held.sub(12);
        held.resize(0, 4);
        held.resize(4, 1);
        assert_eq!((held.now(), held.peak()), (4, 15));
    }

    #[test]
    fn the_pool_counts_every_buffer_it_makes_keeps_or_drops() {
        let held = Held::default();
        let mut pool = Pool::new(1);
        let a = pool.copy(&[1; 100], &held);
        let b = pool.copy(&[2; 50], &held);
        assert_eq!(held.now(), 150);
        pool.put_back(a, &held);
        pool.put_back(b, &held);
        assert_eq!(held.now(), 100, "the second buffer did not fit the pool");
        let c = pool.copy(&[3; 20], &held);
        assert_eq!((c.len(), held.now()), (20, 100), "reused: no new bytes");
        let d = pool.copy(&[4; 200], &held);
        assert_eq!(held.now(), 300);
        assert_eq!(d.capacity(), 200, "exact capacity");
        assert_eq!(held.peak(), 300);
    }
}
