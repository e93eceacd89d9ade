//! Prefetch: parsed batches wait in a bounded queue for the consumer; with
//! `deterministic`, a small reorder buffer hands them out in order (at most one batch
//! per parse worker waits there), otherwise as soon as they are ready.

use std::collections::BTreeMap;

use crossbeam_channel::Receiver;

use crate::error::Result;
use crate::pipeline::parse::Batch;

/// A parsed batch (or the error that stopped the pipeline) and its place in the order.
pub type Ready = (u64, Result<Batch>);

/// The consumer end.
pub struct Prefetch {
    rx: Receiver<Ready>,
    deterministic: bool,
    next_seq: u64,
    waiting: BTreeMap<u64, Result<Batch>>,
}

impl Prefetch {
    /// Reads from the parse workers' queue.
    pub fn new(rx: Receiver<Ready>, deterministic: bool) -> Prefetch {
        Prefetch {
            rx,
            deterministic,
            next_seq: 0,
            waiting: BTreeMap::new(),
        }
    }

    /// The next batch; `None` when every worker is done.
    pub fn next_batch(&mut self) -> Option<Result<Batch>> {
        loop {
            if let Some(ready) = self.waiting.remove(&self.next_seq) {
                self.next_seq += 1;
                return Some(ready);
            }
            match self.rx.recv() {
                Ok((seq, batch)) => {
                    // An error is reported at once, whatever the order.
                    if !self.deterministic || seq == self.next_seq || batch.is_err() {
                        self.next_seq += u64::from(seq == self.next_seq);
                        return Some(batch);
                    }
                    self.waiting.insert(seq, batch);
                }
                Err(_) => {
                    // Workers are gone: hand out what waits, in order.
                    let (&seq, _) = self.waiting.iter().next()?;
                    self.next_seq = seq;
                }
            }
        }
    }
}
