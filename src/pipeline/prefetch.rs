//! Prefetch: parsed batches wait for the consumer; with `deterministic`, a small reorder
//! buffer hands them out in order, otherwise as soon as they are ready.
//!
//! The queue is bounded by credits: a worker takes one before it starts a batch and the
//! consumer gives one back for each batch it takes, so at most `limit` batches are ever
//! in flight (raw or parsed). With the automatic setting the limit grows as `tf.data`'s
//! prefetch autotuner grows its buffer: whenever the consumer finds no batch ready (it
//! is input-bound, say after a slow step), the limit doubles, up to a maximum and while
//! that many batches of the largest size seen fit in 16 MiB; when the workers keep
//! ahead, it stays where it is.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::error::Result;
use crate::example::columnar::Batch;
use crate::pipeline::memory::Held;

/// A parsed batch (or the error that stopped the pipeline) and its place in the order.
pub type Ready = (u64, Result<Batch>);

/// Work the consumer's thread can do itself instead of waiting: parse a raw batch that
/// is ready for it (`None` if there is none).
pub type Helper = Box<dyn FnMut() -> Option<Ready> + Send>;

/// The consumer end.
pub struct Prefetch {
    rx: Receiver<Ready>,
    credits: Sender<()>,
    helper: Option<Helper>,
    deterministic: bool,
    next_seq: u64,
    waiting: BTreeMap<u64, Result<Batch>>,
    limit: Arc<AtomicUsize>,
    max_limit: usize,
    delivered: u64,
    /// The most bytes a delivered batch held.
    largest_batch: u64,
    /// A parsed batch stops counting as the pipeline's when the consumer takes it.
    held: Arc<Held>,
}

/// The automatic depth grows only while that many batches of the largest size seen
/// fit in this many bytes.
pub const GROWTH_BUDGET_BYTES: u64 = 16 << 20;

/// How long the consumer polls for a batch before it parks.
const SPIN_WAIT: std::time::Duration = std::time::Duration::from_micros(50);

impl Prefetch {
    /// Reads from the workers' queue, granting `initial` credits; the limit may grow to
    /// `max_limit` (equal to `initial`: fixed). Each batch taken leaves `held`.
    pub fn new(
        rx: Receiver<Ready>,
        credits: Sender<()>,
        deterministic: bool,
        initial: usize,
        max_limit: usize,
        held: Arc<Held>,
    ) -> Prefetch {
        let initial = initial.max(1);
        for _ in 0..initial {
            let _ = credits.send(());
        }
        Prefetch {
            rx,
            credits,
            helper: None,
            deterministic,
            next_seq: 0,
            waiting: BTreeMap::new(),
            limit: Arc::new(AtomicUsize::new(initial)),
            max_limit: max_limit.max(initial),
            delivered: 0,
            largest_batch: 0,
            held,
        }
    }

    /// When no batch is ready, the consumer's thread runs `helper` rather than sleep
    /// until a worker is done.
    pub fn with_helper(mut self, helper: Helper) -> Prefetch {
        self.helper = Some(helper);
        self
    }

    /// Grants `n` more credits, then closes the consumer end (to stop the workers).
    pub fn release(self, n: usize) {
        for _ in 0..n {
            let _ = self.credits.send(());
        }
    }

    /// The current limit, shared (it may still grow).
    pub fn limit(&self) -> Arc<AtomicUsize> {
        self.limit.clone()
    }

    /// The consumer found nothing ready: grow the limit (not for the first batch, which
    /// every pipeline waits for).
    fn starved(&mut self) {
        let limit = self.limit.load(Ordering::Relaxed);
        if self.delivered == 0 || limit >= self.max_limit {
            return;
        }
        // Batches of copied bytes (records read into buffers) cost memory: the depth
        // grows only while its batches fit the budget.
        let affordable = (GROWTH_BUDGET_BYTES / self.largest_batch.max(1)) as usize;
        let grown = (2 * limit).min(self.max_limit).min(affordable.max(limit));
        for _ in limit..grown {
            let _ = self.credits.send(());
        }
        self.limit.store(grown, Ordering::Relaxed);
    }

    /// Hands a batch out; `None` for an empty one (a batch only for the cache), which
    /// is skipped, its credit given back.
    fn deliver(&mut self, batch: Result<Batch>) -> Option<Result<Batch>> {
        if batch.as_ref().is_ok_and(|b| b.rows == 0) {
            let _ = self.credits.send(());
            return None;
        }
        self.delivered += 1;
        if let Ok(b) = &batch {
            self.largest_batch = self.largest_batch.max(b.payload_bytes());
            self.held.sub(b.held_bytes());
        }
        // The credit its worker took comes back.
        let _ = self.credits.send(());
        Some(batch)
    }

    /// Waits for the next parsed batch: polls a short while first (a batch is usually
    /// microseconds away when the workers keep up, sooner than a parked thread wakes),
    /// then parks.
    fn wait(&mut self) -> std::result::Result<Ready, ()> {
        let start = std::time::Instant::now();
        loop {
            for _ in 0..32 {
                match self.rx.try_recv() {
                    Ok(item) => return Ok(item),
                    Err(TryRecvError::Disconnected) => return Err(()),
                    Err(TryRecvError::Empty) => std::hint::spin_loop(),
                }
            }
            if start.elapsed() >= SPIN_WAIT {
                return self.rx.recv().map_err(|_| ());
            }
        }
    }

    /// The next batch; `None` when every worker is done.
    pub fn next_batch(&mut self) -> Option<Result<Batch>> {
        loop {
            if let Some(ready) = self.waiting.remove(&self.next_seq) {
                self.next_seq += 1;
                match self.deliver(ready) {
                    Some(batch) => return Some(batch),
                    None => continue,
                }
            }
            let received = match self.rx.try_recv() {
                Ok(item) => Ok(item),
                Err(TryRecvError::Empty) => {
                    self.starved();
                    match self.helper.as_mut().and_then(|help| help()) {
                        Some(item) => Ok(item),
                        None => self.wait(),
                    }
                }
                Err(TryRecvError::Disconnected) => Err(()),
            };
            match received {
                Ok((seq, batch)) => {
                    // An error is reported at once, whatever the order.
                    if !self.deterministic || seq == self.next_seq || batch.is_err() {
                        self.next_seq += u64::from(seq == self.next_seq);
                        match self.deliver(batch) {
                            Some(batch) => return Some(batch),
                            None => continue,
                        }
                    }
                    self.waiting.insert(seq, batch);
                }
                Err(()) => {
                    // Workers are gone: hand out what waits, in order.
                    let (&seq, _) = self.waiting.iter().next()?;
                    self.next_seq = seq;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::columnar::{Column, Values};
    use crossbeam_channel::unbounded;

    /// A batch whose columns hold `bytes` of copied values.
    fn batch(bytes: usize) -> Result<Batch> {
        let mut values = crate::pipeline::BytesValues::new();
        values.push(&vec![0; bytes]);
        Ok(Batch {
            epoch: 0,
            rows: 1,
            columns: vec![Column {
                name: "b".into(),
                shape: Some(vec![]),
                values: Values::Bytes(values),
                row_splits: None,
                step_splits: None,
            }],
            record_bytes: bytes as u64,
        })
    }

    /// The workers' side of the queue, played by the test: every step is a fact, not a
    /// race. Returns the limit after `takes` batches, each queued before (`ahead`) or
    /// only when the consumer asks for it (through the helper: it found nothing ready).
    fn limit_after(takes: u64, ahead: bool, bytes: usize, initial: usize, max: usize) -> usize {
        let (tx, rx) = unbounded();
        let (credit_tx, credit_rx) = unbounded();
        let held = Arc::new(Held::default());
        let mut seq = 0;
        let mut prefetch = Prefetch::new(rx, credit_tx, true, initial, max, held).with_helper(
            Box::new(move || {
                let item = (seq, batch(bytes));
                seq += 1;
                Some(item)
            }),
        );
        for n in 0..takes {
            if ahead {
                tx.send((n, batch(bytes))).unwrap();
            }
            assert!(prefetch.next_batch().unwrap().is_ok());
        }
        let limit = prefetch.limit().load(Ordering::Relaxed);
        let granted = credit_rx.try_iter().count();
        assert_eq!(
            granted as u64,
            limit as u64 + takes,
            "one credit back per batch"
        );
        limit
    }

    #[test]
    fn a_starved_consumer_doubles_the_depth_up_to_the_maximum() {
        // First batch: no growth (every pipeline waits for it); then 2 → 4 → 8, capped.
        assert_eq!(limit_after(1, false, 10, 2, 8), 2);
        assert_eq!(limit_after(2, false, 10, 2, 8), 4);
        assert_eq!(limit_after(3, false, 10, 2, 8), 8);
        assert_eq!(limit_after(10, false, 10, 2, 8), 8);
    }

    #[test]
    fn workers_ahead_of_the_consumer_leave_the_depth_alone() {
        assert_eq!(limit_after(10, true, 10, 2, 8), 2);
    }

    #[test]
    fn a_depth_set_by_hand_never_moves() {
        assert_eq!(limit_after(10, false, 10, 3, 3), 3);
    }

    #[test]
    fn the_depth_grows_only_while_its_batches_fit_the_budget() {
        // 6 MiB batches: 16 MiB holds two, so 2 stays 2; 3 MiB batches: up to 5.
        assert_eq!(limit_after(10, false, 6 << 20, 2, 8), 2);
        assert_eq!(limit_after(10, false, 3 << 20, 2, 8), 5);
    }

    #[test]
    fn a_batch_taken_by_the_consumer_leaves_the_count() {
        let (tx, rx) = unbounded();
        let (credit_tx, _credits) = unbounded();
        let held = Arc::new(Held::default());
        let mut prefetch = Prefetch::new(rx, credit_tx, true, 2, 2, held.clone());
        let b = batch(1000).unwrap();
        held.add(b.held_bytes());
        tx.send((0, Ok(b))).unwrap();
        assert!(held.now() >= 1000);
        prefetch.next_batch().unwrap().unwrap();
        assert_eq!(held.now(), 0);
    }
}
