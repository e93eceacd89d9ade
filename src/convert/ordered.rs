//! Units of work done in parallel, written in order: the shape every source that reads
//! files shares (Parquet row groups, TFRecord files).
//!
//! Work is cut into units numbered in input order. `threads` workers take units in that
//! order, each within a decoding budget ([`DECODING_BYTES`]), and send the framed
//! batches they make down a channel per unit, all channels together within a byte
//! budget. The run's thread drains the channels in unit order and writes (and, for
//! gzip/zlib, compresses) the records. So the output is the same at any thread count,
//! memory stays at a few batches per worker whatever the input's size, and the first
//! error in input order is the one reported. With one thread there are no workers: the
//! run's thread does each unit's work and writes it in turn.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::error::{Error, ErrorKind, Result};
use crate::example::encode::EncodedBatch;
use crate::tfrecord::Compression;

/// Encoded bytes queued for the writer, across every unit, at most about this much
/// (plus one batch for the unit the writer is draining, which must never wait). Bytes,
/// not a batch count: the standard table's batches are ~1.4 MB, an image table's ~4 MiB,
/// and a worker ahead of the writer should get through a whole unit of small batches
/// (with 2 batches per unit it idled: 1.59 of 2 cores busy).
const QUEUED_BYTES: u64 = 16 << 20;

/// [`QUEUED_BYTES`] when the output is compressed: deflate makes the writer the slowest
/// stage, so the workers stay ahead with any queue and a larger one only holds memory
/// (16 MiB made the standard table's gzip run 70 MiB at peak, against 59 plain).
const QUEUED_BYTES_COMPRESSED: u64 = 4 << 20;

/// The queue budget for an output of this compression.
pub(crate) fn queued_bytes(compression: Compression) -> u64 {
    match compression {
        Compression::None => QUEUED_BYTES,
        _ => QUEUED_BYTES_COMPRESSED,
    }
}

/// Bytes the units being decoded may take together (a Parquet unit's column chunks,
/// compressed plus uncompressed: a page is decoded whole, and a writer that puts a row
/// group of 500 images in one 46 MB page makes each decoding unit hold ~92 MB). A unit
/// larger than this decodes alone. The standard table's units take ~22 MB.
pub(crate) const DECODING_BYTES: u64 = 128 << 20;

/// A hard cap on batches per unit's channel, under the byte budget.
const CHANNEL_BATCHES: usize = 64;

/// Where the units' batches go, on the run's thread, in unit order.
pub(crate) trait InOrder<M> {
    /// Writes one batch of unit `unit` (units in order, batches as they were made).
    ///
    /// # Errors
    ///
    /// A write that fails, or a cancelled run: the pass stops.
    fn write(&mut self, unit: usize, batch: &EncodedBatch, meta: M) -> Result<()>;

    /// Unit `unit`'s last batch is written.
    fn unit_done(&mut self, unit: usize);
}

/// A unit's way to the writer: [`Emit::buffer`] gives an empty batch (reusing a written
/// one's buffers), [`Emit::send`] hands it over, waiting within the queue budget.
pub(crate) struct Emit<'a, M> {
    unit: usize,
    to: EmitTo<'a, M>,
}

enum EmitTo<'a, M> {
    Inline {
        writer: &'a mut dyn InOrder<M>,
        spare: EncodedBatch,
    },
    Queued {
        tx: &'a Sender<Message<M>>,
        budget: &'a Budget,
        recycle: &'a Receiver<EncodedBatch>,
    },
}

type Message<M> = Result<(EncodedBatch, M)>;

impl<M> Emit<'_, M> {
    /// An empty batch to fill.
    pub(crate) fn buffer(&mut self) -> EncodedBatch {
        let mut batch = match &mut self.to {
            EmitTo::Inline { spare, .. } => std::mem::take(spare),
            EmitTo::Queued { recycle, .. } => recycle.try_recv().unwrap_or_default(),
        };
        batch.clear();
        batch
    }

    /// Hands a batch to the writer.
    ///
    /// # Errors
    ///
    /// The writer's error (inline), or [`ErrorKind::Interrupted`] when the writer has
    /// stopped and this unit's work is no longer wanted.
    pub(crate) fn send(&mut self, batch: EncodedBatch, meta: M) -> Result<()> {
        match &mut self.to {
            EmitTo::Inline { writer, spare } => {
                writer.write(self.unit, &batch, meta)?;
                *spare = batch;
                Ok(())
            }
            EmitTo::Queued { tx, budget, .. } => {
                budget.acquire(self.unit, queued_cost(&batch), tx);
                tx.send(Ok((batch, meta)))
                    .map_err(|_| Error::new(ErrorKind::Interrupted))
            }
        }
    }
}

/// What a queued batch counts against the budget: its records' framed bytes, which a
/// batch of mapped records (`convert tfrecord --shuffle`) stands for without holding
/// them, so that its readers run no further ahead than others.
fn queued_cost(batch: &EncodedBatch) -> u64 {
    (batch.data.len() as u64).max(batch.sizes.iter().sum())
}

/// Runs `work` over every unit on `threads` workers and hands its batches to `writer`
/// in unit order (see the module docs). `cost` is what a unit holds while it is worked
/// on (against [`DECODING_BYTES`]); `queued` the queue budget ([`queued_bytes`]).
///
/// # Errors
///
/// The first error in unit order: a unit's, or the writer's.
pub(crate) fn run<U: Sync, M: Send>(
    threads: usize,
    queued: u64,
    units: &[U],
    cost: impl Fn(&U) -> u64 + Sync,
    work: impl Fn(&U, &mut Emit<'_, M>) -> Result<()> + Sync,
    writer: &mut dyn InOrder<M>,
) -> Result<()> {
    if threads <= 1 {
        let mut spare = EncodedBatch::default();
        for (u, unit) in units.iter().enumerate() {
            let mut emit = Emit {
                unit: u,
                to: EmitTo::Inline {
                    writer: &mut *writer,
                    spare,
                },
            };
            work(unit, &mut emit)?;
            spare = match emit.to {
                EmitTo::Inline { spare, .. } => spare,
                EmitTo::Queued { .. } => EncodedBatch::default(),
            };
            writer.unit_done(u);
        }
        return Ok(());
    }
    let (senders, receivers): (Vec<_>, Vec<Receiver<Message<M>>>) =
        units.iter().map(|_| bounded(CHANNEL_BATCHES)).unzip();
    let senders: Vec<Mutex<Option<Sender<Message<M>>>>> =
        senders.into_iter().map(|s| Mutex::new(Some(s))).collect();
    let dispatch = Dispatch::new();
    let stop = AtomicBool::new(false);
    let (recycle_tx, recycle_rx) = crossbeam_channel::unbounded::<EncodedBatch>();
    let workers = threads.min(units.len().max(1));
    let budget = Budget::new(queued, recycle_tx);

    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let Some((u, held)) = dispatch.take(units.len(), |u| cost(&units[u])) else {
                        break;
                    };
                    let Some(tx) = senders[u].lock().ok().and_then(|mut s| s.take()) else {
                        dispatch.done(held);
                        break;
                    };
                    let mut emit = Emit {
                        unit: u,
                        to: EmitTo::Queued {
                            tx: &tx,
                            budget: &budget,
                            recycle: &recycle_rx,
                        },
                    };
                    let result = work(&units[u], &mut emit);
                    dispatch.done(held);
                    if let Err(e) = result {
                        let _ = tx.send(Err(e));
                        stop.store(true, Ordering::Relaxed);
                        dispatch.stop();
                    }
                }
            });
        }
        // The writer: drains the units in order. Dropping `receivers` when it returns
        // unblocks any worker still sending, so the scope can end.
        let result = write_in_order(receivers, writer, &budget);
        stop.store(true, Ordering::Relaxed);
        budget.update(|q| q.stopped = true);
        dispatch.stop();
        result
    })
}

fn write_in_order<M>(
    receivers: Vec<Receiver<Message<M>>>,
    writer: &mut dyn InOrder<M>,
    budget: &Budget,
) -> Result<()> {
    for (u, rx) in receivers.into_iter().enumerate() {
        budget.update(|q| q.writer_unit = u);
        for message in rx {
            let (batch, meta) = message?;
            writer.write(u, &batch, meta)?;
            budget.written(batch);
        }
        writer.unit_done(u);
    }
    Ok(())
}

/// Hands out units in order, each once its decoding fits [`DECODING_BYTES`] beside the
/// units already decoding (or nothing else decodes). In order, so a unit never waits for
/// budget that a later unit holds.
struct Dispatch {
    state: Mutex<Dispatched>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Dispatched {
    next: usize,
    decoding: u64,
    stopped: bool,
}

impl Dispatch {
    fn new() -> Dispatch {
        Dispatch {
            state: Mutex::new(Dispatched::default()),
            changed: Condvar::new(),
        }
    }

    /// The next unit and the bytes it was given; `None` when none is left or the run
    /// stopped.
    fn take(&self, units: usize, cost: impl Fn(usize) -> u64) -> Option<(usize, u64)> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if st.stopped || st.next >= units {
                return None;
            }
            let bytes = cost(st.next);
            if st.decoding == 0 || st.decoding + bytes <= DECODING_BYTES {
                let u = st.next;
                st.next += 1;
                st.decoding += bytes;
                return Some((u, bytes));
            }
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn done(&self, bytes: u64) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .decoding -= bytes;
        self.changed.notify_all();
    }

    fn stop(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).stopped = true;
        self.changed.notify_all();
    }
}

/// The byte budget of the batches queued between the workers and the writer; written
/// batches go back to the workers through it.
struct Budget {
    state: Mutex<Queued>,
    changed: Condvar,
    /// Reusing a written batch's buffers saves a fresh mmap, page faults and zeroing per
    /// batch (measured: 12% of the run).
    recycle: crossbeam_channel::Sender<EncodedBatch>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Queued {
    /// The budget: [`QUEUED_BYTES`] or [`QUEUED_BYTES_COMPRESSED`].
    limit: u64,
    /// Encoded bytes sent and not yet written.
    bytes: u64,
    /// The unit the writer is draining.
    writer_unit: usize,
    /// The writer has stopped: nobody waits any more.
    stopped: bool,
}

impl Queued {
    /// Whether `bytes` more may be queued for `unit`, whose channel is `empty` or not:
    /// within the budget, or the writer's own unit with nothing queued (so the writer
    /// always gets its next batch).
    fn admits(&self, unit: usize, bytes: u64, empty: bool) -> bool {
        self.stopped || self.bytes + bytes <= self.limit || (unit == self.writer_unit && empty)
    }
}

impl Budget {
    fn new(limit: u64, recycle: crossbeam_channel::Sender<EncodedBatch>) -> Budget {
        Budget {
            state: Mutex::new(Queued {
                limit,
                ..Queued::default()
            }),
            changed: Condvar::new(),
            recycle,
        }
    }

    /// A batch was written: its bytes leave the budget, its buffers go back.
    fn written(&self, batch: EncodedBatch) {
        let bytes = queued_cost(&batch);
        self.update(|q| q.bytes -= bytes);
        let _ = self.recycle.send(batch);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `bytes` may be queued for `unit`, then counts them.
    fn acquire<T>(&self, unit: usize, bytes: u64, tx: &Sender<T>) {
        let mut queued = self.lock();
        while !queued.admits(unit, bytes, tx.is_empty()) {
            queued = self.changed.wait(queued).unwrap_or_else(|p| p.into_inner());
        }
        queued.bytes += bytes;
    }

    fn update(&self, f: impl FnOnce(&mut Queued)) {
        f(&mut self.lock());
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_budget_counts_bytes_and_never_starves_the_writers_unit() {
        let q = Queued {
            limit: QUEUED_BYTES,
            bytes: QUEUED_BYTES - 10,
            writer_unit: 3,
            stopped: false,
        };
        assert!(q.admits(4, 10, false), "within the budget");
        assert!(!q.admits(4, 11, true), "over it, and not the writer's unit");
        assert!(
            !q.admits(3, 11, false),
            "the writer's unit still has a batch queued"
        );
        assert!(
            q.admits(3, 11, true),
            "the writer's unit with nothing queued"
        );
        let stopped = Queued { stopped: true, ..q };
        assert!(
            stopped.admits(4, u64::MAX / 2, false),
            "a stopped run waits for nothing"
        );
    }

    #[test]
    fn units_are_dispatched_in_order_within_the_decoding_budget() {
        let d = std::sync::Arc::new(Dispatch::new());
        let big = DECODING_BYTES * 3 / 4;
        // A unit larger than the whole budget still runs, alone.
        assert_eq!(
            d.take(3, |_| DECODING_BYTES * 2),
            Some((0, DECODING_BYTES * 2))
        );
        d.done(DECODING_BYTES * 2);
        assert_eq!(d.take(3, |_| big), Some((1, big)));
        // Unit 2 does not fit beside unit 1: its taker waits until unit 1 is done.
        let waiter = {
            let d = d.clone();
            std::thread::spawn(move || d.take(3, |_| big))
        };
        assert_eq!(d.state.lock().unwrap().next, 2, "unit 2 not handed out yet");
        d.done(big);
        assert_eq!(waiter.join().unwrap(), Some((2, big)));
        assert_eq!(d.take(3, |_| big), None, "every unit taken");
        d.stop();
        assert_eq!(Dispatch::new().take(0, |_| 0), None);
    }

    /// Batches reach the writer in unit order whatever order the workers finish in,
    /// and the first error in unit order is the one returned.
    #[test]
    fn batches_are_written_in_unit_order_and_the_first_error_wins() {
        struct Log(Vec<(usize, u64)>, Vec<usize>);
        impl InOrder<u64> for Log {
            fn write(&mut self, unit: usize, _: &EncodedBatch, meta: u64) -> Result<()> {
                self.0.push((unit, meta));
                Ok(())
            }
            fn unit_done(&mut self, unit: usize) {
                self.1.push(unit);
            }
        }
        let units: Vec<u64> = (0..20).collect();
        for threads in [1, 2, 4] {
            let mut log = Log(Vec::new(), Vec::new());
            run(
                threads,
                QUEUED_BYTES,
                &units,
                |_| 1,
                |&u, emit: &mut Emit<'_, u64>| {
                    for b in 0..3 {
                        // Later units finish first.
                        std::thread::yield_now();
                        let mut batch = emit.buffer();
                        batch.data.push(b as u8);
                        emit.send(batch, u * 10 + b)?;
                    }
                    Ok(())
                },
                &mut log,
            )
            .unwrap();
            let want: Vec<(usize, u64)> = (0..20)
                .flat_map(|u| (0..3).map(move |b| (u as usize, u * 10 + b)))
                .collect();
            assert_eq!(log.0, want, "{threads} threads");
            assert_eq!(log.1, (0..20).collect::<Vec<usize>>());
            let failed = run(
                threads,
                QUEUED_BYTES,
                &units,
                |_| 1,
                |&u, _: &mut Emit<'_, u64>| {
                    if u >= 7 {
                        Err(Error::new(ErrorKind::Interrupted).with_record(u))
                    } else {
                        Ok(())
                    }
                },
                &mut Log(Vec::new(), Vec::new()),
            )
            .unwrap_err();
            assert_eq!(failed.location().record, Some(7), "{threads} threads");
        }
    }
}
