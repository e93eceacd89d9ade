//! Reads of a store's windows of blocks, planned a few windows ahead: a window's runs
//! (near records of one shard, one request each) are requested with the runs of the next
//! windows that meet them, and each request is used by every window whose runs it holds.
//! An epoch then makes fewer, larger requests: a store answers a request in about the
//! time it answers a larger one (moto reads the whole object for each). What a window's
//! runs were found from (its records, where its positions go) is kept for its reader.

use std::collections::{BTreeMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};

use crate::error::{Error, Result};
use crate::tfrecord::mapped::SharedBytes;

/// Bytes of later windows' runs a store's window reads with its own (at most): adjoining
/// runs of the next windows come in the same request, so an epoch of blocks makes fewer,
/// larger requests (a store answers a request in about the time it answers a larger one).
pub const AHEAD_BYTES: u64 = 64 << 20;

/// Windows ahead whose runs a window's requests may take in.
pub const AHEAD_WINDOWS: u64 = 4;

/// A request for bytes of a store's shard: made by the reader of one window, its bytes
/// used by the windows whose runs it covers.
#[derive(Debug)]
pub(crate) struct Pending {
    file: usize,
    range: Range<u64>,
    got: Mutex<Option<Result<SharedBytes>>>,
    done: Condvar,
}

impl Pending {
    fn new(file: usize, range: Range<u64>) -> Pending {
        Pending {
            file,
            range,
            got: Mutex::new(None),
            done: Condvar::new(),
        }
    }

    /// Its shard.
    pub(crate) fn file(&self) -> usize {
        self.file
    }

    /// The bytes it asks for.
    pub(crate) fn range(&self) -> Range<u64> {
        self.range.clone()
    }

    /// Its answer (the first given; a later one is ignored), for the windows that wait.
    pub(crate) fn fill(&self, got: Result<SharedBytes>) {
        let mut slot = self.got.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(got);
            self.done.notify_all();
        }
    }

    /// Bytes `range` of its file, once read (`None`: it does not hold them); its error
    /// again for each window that reads it.
    pub(crate) fn bytes(&self, file: usize, range: &Range<u64>) -> Option<Result<SharedBytes>> {
        if file != self.file || range.start < self.range.start || range.end > self.range.end {
            return None;
        }
        let mut got = self.got.lock().unwrap_or_else(|e| e.into_inner());
        while got.is_none() {
            got = self.done.wait(got).unwrap_or_else(|e| e.into_inner());
        }
        let from = (range.start - self.range.start) as usize;
        let to = (range.end - self.range.start) as usize;
        Some(match got.as_ref().expect("filled") {
            Ok(bytes) if to <= bytes.len() => Ok(bytes.slice(from..to)),
            // (A store that answered short: the frame checks name what is missing.)
            Ok(bytes) => Ok(bytes.slice(from.min(bytes.len())..)),
            Err(e) => Err(e.again()),
        })
    }
}

/// The requests one window's reader makes ([`ReadAhead::plan`]): filled, each with an
/// error if not with bytes, when dropped (a window waiting for one never waits for ever).
#[derive(Debug, Default)]
struct Own(Vec<Arc<Pending>>);

impl Drop for Own {
    fn drop(&mut self) {
        for p in &self.0 {
            p.fill(Err(Error::from(std::io::Error::other(
                "not read: an earlier error stopped its reader",
            ))));
        }
    }
}

/// What one window reads: the requests it makes, and those (its own and earlier
/// windows') that hold its runs.
#[derive(Debug, Default)]
pub struct Planned {
    own: Own,
    reads: Vec<Arc<Pending>>,
}

impl Planned {
    /// The requests this window makes.
    pub(crate) fn own(&self) -> &[Arc<Pending>] {
        &self.own.0
    }

    /// The requests that hold its runs.
    pub(crate) fn reads(&self) -> &[Arc<Pending>] {
        &self.reads
    }
}

/// A run of one window's records: shard `file`'s bytes `range`, and the request that
/// reads it once one does.
#[derive(Debug)]
struct PlannedRun {
    file: usize,
    range: Range<u64>,
    read: Option<Arc<Pending>>,
    /// Whether an earlier window's request reads it (its bytes counted in `held`).
    ahead: bool,
}

/// A window found and not yet read: what its runs were found from, and its runs.
#[derive(Debug)]
struct Found<T> {
    found: T,
    runs: Vec<PlannedRun>,
}

#[derive(Debug)]
struct AheadState<T> {
    /// The windows found and not yet read.
    runs: BTreeMap<u64, Found<T>>,
    /// Windows planned (their runs read or being read). Threads plan in the order they
    /// claim, not always the windows': a window planned is not found again.
    planned: HashSet<u64>,
    /// Bytes of runs in `runs` already in a request.
    held: u64,
}

impl<T> Default for AheadState<T> {
    fn default() -> Self {
        AheadState {
            runs: BTreeMap::new(),
            planned: HashSet::new(),
            held: 0,
        }
    }
}

/// A store's windows of blocks read a few windows ahead ([`AHEAD_WINDOWS`],
/// [`AHEAD_BYTES`]): a window's runs are requested with the runs of the next windows that
/// adjoin them, each request then used by every window it covers. `T`: what a window's
/// runs are found from, kept until its reader plans it (not found again; two readers
/// planning at once may both find a window ahead, and one is kept).
#[derive(Debug)]
pub struct ReadAhead<T> {
    state: Mutex<AheadState<T>>,
    windows: u64,
    bytes: u64,
}

impl<T> ReadAhead<T> {
    /// Requests that take in runs up to `windows` windows ahead, at most `bytes` of them
    /// read before their window.
    pub fn new(windows: u64, bytes: u64) -> ReadAhead<T> {
        ReadAhead {
            state: Mutex::default(),
            windows,
            bytes,
        }
    }

    /// Window `w`'s reads, and what its runs were found from: each run (`find(v)`:
    /// window v's runs and what they were found from, asked for each window from `w` to
    /// `windows` ahead not found before) read by a request an earlier window made, or by
    /// one of its own, which takes in the runs of the windows ahead (and its own) that
    /// adjoin it while their bytes fit `bytes`. A window ahead that cannot be found is
    /// not read ahead (its own reader meets the error).
    ///
    /// # Errors
    ///
    /// Window `w` cannot be found (`find`'s error).
    pub fn plan(
        &self,
        w: u64,
        find: impl Fn(u64) -> Result<(T, Vec<(usize, Range<u64>)>)>,
    ) -> Result<(T, Planned)> {
        let lock = || self.state.lock().unwrap_or_else(|e| e.into_inner());
        let last = w.saturating_add(self.windows);
        let missing: Vec<u64> = {
            let state = lock();
            let known = |v: &u64| state.runs.contains_key(v) || state.planned.contains(v);
            (w..=last).filter(|v| !known(v)).collect()
        };
        // (Found outside the lock: a shard opened for it is a read of the store.)
        let mut found = Vec::with_capacity(missing.len());
        for v in missing {
            match find(v) {
                Ok(f) => found.push((v, f)),
                Err(e) if v == w => return Err(e),
                Err(_) => break,
            }
        }
        let mut state = lock();
        let state = &mut *state;
        for (v, (found, runs)) in found {
            if state.planned.contains(&v) {
                continue;
            }
            state.runs.entry(v).or_insert_with(|| Found {
                found,
                runs: (runs.into_iter())
                    .map(|(file, range)| PlannedRun {
                        file,
                        range,
                        read: None,
                        ahead: false,
                    })
                    .collect(),
            });
        }
        // (Windows this reader has no positions in keep an empty entry: never planned.)
        state.planned.insert(w);
        let mut planned = Planned::default();
        let count = state.runs.get(&w).map_or(0, |f| f.runs.len());
        for i in 0..count {
            let run = &state.runs[&w].runs[i];
            if let Some(read) = &run.read {
                if !planned.reads.iter().any(|p| Arc::ptr_eq(p, read)) {
                    planned.reads.push(read.clone());
                }
                continue;
            }
            let (file, mut range) = (run.file, run.range.clone());
            let mut taken = vec![(w, i)];
            let mut more = 0;
            loop {
                let before = taken.len();
                for (&v, found) in state.runs.range(w..=last) {
                    for (j, r) in found.runs.iter().enumerate() {
                        // (Runs that meet: a gap would be read for nothing, and
                        // perhaps again for a window past the bound.)
                        let near = r.range.start <= range.end && r.range.end >= range.start;
                        if r.read.is_some() || r.file != file || !near || taken.contains(&(v, j)) {
                            continue;
                        }
                        let len = r.range.end - r.range.start;
                        if v > w && state.held + more + len > self.bytes {
                            continue;
                        }
                        if v > w {
                            more += len;
                        }
                        range = range.start.min(r.range.start)..range.end.max(r.range.end);
                        taken.push((v, j));
                    }
                }
                if taken.len() == before {
                    break;
                }
            }
            let read = Arc::new(Pending::new(file, range));
            for (v, j) in taken {
                let r = &mut state.runs.get_mut(&v).expect("a planned window").runs[j];
                r.read = Some(read.clone());
                r.ahead = v > w;
            }
            state.held += more;
            planned.own.0.push(read.clone());
            planned.reads.push(read);
        }
        // (Found above if not before: only its reader plans a window, once.)
        let found = state.runs.remove(&w).expect("window w found");
        for run in found.runs {
            if run.ahead {
                state.held -= run.range.end - run.range.start;
            }
        }
        Ok((found.found, planned))
    }

    /// Bytes of later windows' runs read ahead of their window now.
    #[cfg(test)]
    fn held(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Windows of 8 blocks (1,000 bytes each, 8 to a shard of 13) in a shuffled order, a
    /// block's bytes a run.
    fn shuffled_windows() -> Vec<Vec<(usize, Range<u64>)>> {
        let mut blocks: Vec<u64> = (0..104).collect();
        let mut x = 7u64;
        for i in (1..blocks.len()).rev() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            blocks.swap(i, (x >> 33) as usize % (i + 1));
        }
        (blocks.chunks(8))
            .map(|w| {
                let mut runs: Vec<_> = (w.iter())
                    .map(|&b| ((b / 8) as usize, (b % 8) * 1000..(b % 8 + 1) * 1000))
                    .collect();
                runs.sort_by_key(|(f, r)| (*f, r.start));
                runs
            })
            .collect()
    }

    #[test]
    fn read_ahead_reads_each_run_once_within_its_bound() {
        let windows = shuffled_windows();
        let runs: usize = windows.iter().map(Vec::len).sum();
        let mut made = Vec::new();
        for bound in [0, 3000, 16_000, 1 << 20] {
            let ahead = ReadAhead::new(4, bound);
            let mut requests: Vec<(usize, Range<u64>)> = Vec::new();
            // (Each window found once, what it was found from handed to its reader.)
            let finds = std::cell::RefCell::new(vec![0; windows.len() + 5]);
            for (w, mine) in windows.iter().enumerate() {
                let (found, planned) = ahead
                    .plan(w as u64, |v| {
                        finds.borrow_mut()[v as usize] += 1;
                        Ok((v, windows.get(v as usize).cloned().unwrap_or_default()))
                    })
                    .unwrap();
                assert_eq!(found, w as u64);
                assert!(ahead.held() <= bound, "{} over {bound}", ahead.held());
                fill(&planned, &mut requests);
                // Every run of the window is in a request it reads, read by then.
                for (file, range) in mine {
                    let got = planned.reads.iter().find_map(|p| p.bytes(*file, range));
                    let got = got.expect("a request holds the run").unwrap();
                    assert_eq!(got.len() as u64, range.end - range.start);
                    assert!(got.iter().all(|&b| b == *file as u8));
                }
            }
            assert_eq!(ahead.held(), 0, "every byte read ahead was read");
            assert!(
                finds.borrow().iter().all(|&n| n <= 1),
                "{:?}",
                finds.borrow()
            );
            // No byte is requested twice.
            each_byte_once(&mut requests);
            made.push(requests.len());
        }
        // Without a bound only a window's own adjoining runs share a request; each more
        // bytes ahead makes fewer requests.
        assert!(
            made[0] <= runs && made.windows(2).all(|m| m[1] <= m[0]),
            "{made:?}"
        );
        assert!(made[3] < made[0] * 3 / 4, "{made:?}");
    }

    #[test]
    fn windows_planned_out_of_order_read_each_byte_once() {
        // Two threads: the one that claims a window may plan it after the next one's.
        let windows = shuffled_windows();
        let ahead = ReadAhead::new(4, 1 << 20);
        let runs_of = |v: u64| Ok((v, windows.get(v as usize).cloned().unwrap_or_default()));
        let mut requests: Vec<(usize, Range<u64>)> = Vec::new();
        let mut order: Vec<u64> = (0..windows.len() as u64).collect();
        for pair in order.chunks_mut(2) {
            pair.reverse();
        }
        for w in order {
            let (found, planned) = ahead.plan(w, runs_of).unwrap();
            assert_eq!(found, w);
            fill(&planned, &mut requests);
            for (file, range) in &windows[w as usize] {
                assert!(planned
                    .reads
                    .iter()
                    .any(|p| p.bytes(*file, range).is_some()));
            }
        }
        assert_eq!(ahead.held(), 0);
        each_byte_once(&mut requests);
    }

    /// No byte of a file in two of `requests`.
    fn each_byte_once(requests: &mut [(usize, Range<u64>)]) {
        requests.sort_by_key(|(f, r)| (*f, r.start));
        for pair in requests.windows(2) {
            assert!(
                pair[0].0 != pair[1].0 || pair[0].1.end <= pair[1].1.start,
                "{pair:?}"
            );
        }
    }

    /// Requests of `planned` (its own) filled, each byte with its file's number.
    fn fill(planned: &Planned, requests: &mut Vec<(usize, Range<u64>)>) {
        for p in &planned.own.0 {
            requests.push((p.file, p.range.clone()));
            let bytes = vec![p.file as u8; (p.range.end - p.range.start) as usize];
            p.fill(Ok(SharedBytes::from(bytes)));
        }
    }

    #[test]
    fn windows_planned_at_once_each_get_their_own_and_read_each_byte_once() {
        // A window's whole plan between another's finding and its planning (threads
        // find outside the lock): window 4 inside 5's, then 7 inside 6's.
        let windows = shuffled_windows();
        let ahead = ReadAhead::new(4, 1 << 20);
        let runs_of = |v: u64| Ok((v, windows.get(v as usize).cloned().unwrap_or_default()));
        let mut plans = Vec::new();
        for w in 0..4 {
            plans.push(ahead.plan(w, runs_of).unwrap());
        }
        for (outer, inner) in [(5, 4), (6, 7)] {
            let nested = std::cell::RefCell::new(None);
            let plan = ahead
                .plan(outer, |v| {
                    if nested.borrow().is_none() {
                        let got = ahead.plan(inner, runs_of).unwrap();
                        *nested.borrow_mut() = Some(got);
                    }
                    runs_of(v)
                })
                .unwrap();
            plans.push(nested.into_inner().unwrap());
            plans.push(plan);
        }
        for w in 8..windows.len() as u64 {
            plans.push(ahead.plan(w, runs_of).unwrap());
        }
        let mut requests = Vec::new();
        for (_, planned) in &plans {
            fill(planned, &mut requests);
        }
        let mut seen: Vec<u64> = plans.iter().map(|(w, _)| *w).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..windows.len() as u64).collect::<Vec<_>>());
        for (w, planned) in &plans {
            for (file, range) in &windows[*w as usize] {
                let got = planned.reads.iter().find_map(|p| p.bytes(*file, range));
                assert!(got.unwrap().unwrap().iter().all(|&b| b == *file as u8));
            }
        }
        assert_eq!(ahead.held(), 0);
        each_byte_once(&mut requests);
    }

    #[test]
    fn a_window_ahead_that_cannot_be_found_fails_only_its_own_reader() {
        let windows = shuffled_windows();
        let ahead = ReadAhead::new(4, 1 << 20);
        let find = |v: u64| match v {
            2 => Err(Error::from(std::io::Error::other("shard 2 is gone"))),
            v => Ok((v, windows.get(v as usize).cloned().unwrap_or_default())),
        };
        let mut requests = Vec::new();
        for w in 0..2 {
            let (found, planned) = ahead.plan(w, find).unwrap();
            assert_eq!(found, w);
            fill(&planned, &mut requests);
        }
        let failed = ahead.plan(2, find).unwrap_err();
        assert!(failed.to_string().contains("shard 2 is gone"), "{failed}");
        // (Nothing was read ahead past the window that cannot be found.)
        assert_eq!(ahead.held(), 0);
    }

    #[test]
    fn each_window_waiting_for_a_failed_request_gets_its_error_as_it_was() {
        use crate::error::{ErrorFamily, ErrorKind, StoreProblem};
        let p = Pending::new(0, 0..100);
        let shard = "s3://bucket/data-00000-of-00002.tfrecord";
        let failed = Error::new(ErrorKind::Store {
            problem: StoreProblem::Unreachable,
            detail: "connection refused".into(),
        })
        .with_file(shard);
        let said = failed.to_string();
        p.fill(Err(failed));
        for range in [0..10, 10..100] {
            // (As the read names a run's shard: not a second time.)
            let got = p.bytes(0, &range).unwrap().unwrap_err().with_file(shard);
            assert_eq!(got.to_string(), said);
            assert_eq!(got.kind().family(), ErrorFamily::Store);
        }
    }

    #[test]
    fn a_request_its_reader_never_made_fails_the_windows_that_wait_for_it() {
        let windows = shuffled_windows();
        let ahead = ReadAhead::new(4, 1 << 20);
        let runs_of = |v: u64| Ok((v, windows.get(v as usize).cloned().unwrap_or_default()));
        let first = ahead.plan(0, runs_of).unwrap().1;
        let mut later = Vec::new();
        for w in 1..=4 {
            later.push(ahead.plan(w, runs_of).unwrap().1);
        }
        // A later window that reads a run the first window's requests took in.
        let (w, (file, range)) = (0..later.len())
            .find_map(|k| {
                let run =
                    windows[k + 1].iter().find(|(f, r)| {
                        first.own.0.iter().any(|o| {
                            o.file == *f && o.range.start <= r.start && r.end <= o.range.end
                        })
                    })?;
                Some((k, run.clone()))
            })
            .expect("the first window reads ahead");
        drop(first); // (its reader stopped before making its requests)
        let got = later[w]
            .reads
            .iter()
            .find_map(|p| p.bytes(file, &range))
            .unwrap();
        assert!(got.unwrap_err().to_string().contains("not read"));
    }
}
