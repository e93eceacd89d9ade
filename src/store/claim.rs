//! Claims: an output (or a prefix of it) held by one run at a time, through the
//! [`Destination`] it publishes to. A claim is an object written only where none is (a
//! conditional put), saying who holds it (run, host, process) and when it was last
//! refreshed; the holder refreshes it while it runs. A claim not refreshed for
//! [`CLAIM_STALE_AFTER`], or held by a process of this host that is gone, is stale: the
//! next run takes it over. `finalize` and every writer of a set claim this way.
//!
//! Every change of a claim that exists is a compare and swap
//! ([`Destination::replace`]: a conditional put pinned to the ETag read in a store, a
//! locked replace on disk): a takeover replaces only the stale note it judged, so of two
//! runs taking one claim over, one wins; a refresh replaces only the holder's own note,
//! so a holder taken for dead never writes over its successor's claim, and learns that
//! it lost it. A holder confirms its claims right before it writes a manifest
//! ([`Claims::confirm`]).

use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::destination::Destination;
use crate::error::{Error, ErrorKind, Result};

use super::storage::is_not_found;

/// How long a claim may go without a refresh before the next run takes it over (its
/// holder was killed).
pub const CLAIM_STALE_AFTER: Duration = Duration::from_secs(60);

/// How often a running claim holder refreshes its claims.
const CLAIM_REFRESH_EVERY: Duration = Duration::from_secs(10);

/// How many times a claim is put again when it went between our put and our read (its
/// holder released it): a run racing a stream of short holders gives up as held.
const CLAIM_ATTEMPTS: usize = 4;

/// How long a run watches a claim that its holder's clock says is stale before it takes
/// it over (longer than a refresh interval, by the taker's own clock): two hosts' clocks
/// may disagree, and a live holder's refresh shows within it.
const CLAIM_WATCH: Duration = Duration::from_secs(15);

/// What a claim object holds: who holds it (a run id, its host and process), and when
/// it last said it was alive (seconds since the Unix epoch, by the holder's clock).
#[derive(Debug, Serialize, Deserialize)]
struct ClaimNote {
    holder: String,
    refreshed: u64,
    #[serde(default)]
    host: String,
    #[serde(default)]
    pid: u32,
    /// The holder's boot and PID namespace: its pid means something here only if both
    /// are ours (a container with the host's name has pids of its own).
    #[serde(default)]
    pids: String,
    /// When the holder's process started (clock ticks since boot, `/proc/PID/stat`): a
    /// process that reused its pid since is not the holder.
    #[serde(default)]
    started: u64,
}

impl ClaimNote {
    /// Whether the holder is gone: not refreshed for [`CLAIM_STALE_AFTER`] by its own
    /// clock (see [`CLAIM_WATCH`]), or a process of this host that no longer exists (a
    /// rerun after a kill need not wait).
    fn is_stale(&self) -> bool {
        now_secs().saturating_sub(self.refreshed) >= CLAIM_STALE_AFTER.as_secs()
            || self.is_dead_here()
    }

    /// Whether the holder is a process of this host that no longer exists (its pid gone,
    /// or another process's now: started at another time).
    fn is_dead_here(&self) -> bool {
        let here = !self.host.is_empty()
            && self.host == host_name()
            && !self.pids.is_empty()
            && self.pids == pid_space()
            && self.pid != 0;
        here && (!process_exists(self.pid)
            || (self.started != 0 && start_time(self.pid).is_some_and(|s| s != self.started)))
    }
}

/// This machine's host name ("" if it has none).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer and its length are valid; the name is NUL-terminated within it.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// This boot's id and this process's PID namespace ("" if either is unknown).
fn pid_space() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap_or_default();
    let (boot, ns) = (boot.trim(), ns.to_string_lossy());
    if boot.is_empty() || ns.is_empty() {
        return String::new();
    }
    format!("{boot}/{ns}")
}

/// When process `pid` started, in clock ticks since boot (`/proc/PID/stat`'s 22nd field),
/// where Linux says.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (2nd field) is in parentheses and may hold spaces: count from
    // after its closing one (field 3 on).
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether process `pid` exists on this host (one we may not signal exists too).
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    // SAFETY: signal 0 checks for existence and permission, and sends nothing.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    alive || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn already_exists(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::OutputExists)
        || super::is_problem(e, super::StoreProblem::AlreadyExists)
}

/// The claims of one run, refreshed by a thread until dropped; dropped before the run
/// completes (it failed), they are released at once.
pub(crate) struct Claims {
    out: Arc<dyn Destination>,
    files: Vec<String>,
    holder: String,
    stop: Option<mpsc::Sender<()>>,
    refresher: Option<std::thread::JoinHandle<()>>,
    /// The parts folders (claims with them) were deleted: nothing to release.
    done: bool,
    /// The refresher found a claim held by another run (this one was taken for dead).
    lost: Arc<std::sync::atomic::AtomicBool>,
}

/// A claim is held by a live run (it was refreshed lately, or its process is alive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held;

impl Claims {
    /// No claim yet, of a holder unique to this run.
    pub(crate) fn new(out: Arc<dyn Destination>) -> Claims {
        Claims {
            out,
            files: Vec::new(),
            holder: super::attempt_id(),
            stop: None,
            refresher: None,
            done: false,
            lost: Arc::default(),
        }
    }

    /// Whether another run has taken a claim of this one over (this run was silent too
    /// long): it must not publish.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The claims went with their folder (the run completed): nothing to release.
    pub(crate) fn forget(&mut self) {
        self.done = true;
    }

    fn note(holder: &str) -> Vec<u8> {
        serde_json::to_vec(&ClaimNote {
            holder: holder.to_owned(),
            refreshed: now_secs(),
            host: host_name(),
            pid: std::process::id(),
            pids: pid_space(),
            started: start_time(std::process::id()).unwrap_or(0),
        })
        .expect("a claim note serializes")
    }

    /// Claims the object `file` of the destination: a conditional put, or, over a stale
    /// claim (its holder killed), a takeover that replaces only that stale note.
    /// `Ok(Err(Held))`: a live run holds it (or another run took the stale one over).
    ///
    /// # Errors
    ///
    /// A store or I/O error.
    pub(crate) fn claim(&mut self, file: &str) -> Result<std::result::Result<(), Held>> {
        let out = &*self.out;
        // (Released between our put and our read: put again, a few times at most.)
        for _ in 0..CLAIM_ATTEMPTS {
            match out.write(file, Self::note(&self.holder), true) {
                Ok(()) => {
                    self.files.push(file.to_owned());
                    return Ok(Ok(()));
                }
                Err(e) if already_exists(&e) => {}
                Err(e) => return Err(e),
            }
            let bytes = match out.read(file) {
                Ok(bytes) => bytes,
                Err(e) if is_not_found(&e) => continue,
                Err(e) => return Err(e),
            };
            let held = serde_json::from_slice::<ClaimNote>(&bytes).ok();
            if !held.as_ref().is_none_or(ClaimNote::is_stale) {
                return Ok(Err(Held));
            }
            if held.as_ref().is_some_and(|h| !h.is_dead_here()) {
                // Stale by the holder's clock: watched by ours before it is taken (the
                // claims this run holds already refreshed first, so that they do not go
                // stale while it watches).
                for f in &self.files {
                    refresh(out, f, &self.holder);
                }
                std::thread::sleep(CLAIM_WATCH);
            }
            // Taken over only if it still holds the note judged stale: of two takers,
            // one replaces it, the other finds the first's note.
            if out.replace(file, &bytes, Self::note(&self.holder))? {
                self.files.push(file.to_owned());
                return Ok(Ok(()));
            }
            // Released meanwhile (its holder ended): put it again.
            match out.exists(file) {
                Ok(false) => continue,
                Ok(true) => return Ok(Err(Held)),
                Err(e) => return Err(e),
            }
        }
        Ok(Err(Held))
    }

    /// Checks, right before a manifest is written, that every claim is still this run's
    /// (none was taken over while it was silent).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::ClaimLost`] naming the claim another run holds now; a store or I/O
    /// error reading it.
    pub(crate) fn confirm(&self) -> Result<()> {
        for f in &self.files {
            let bytes = match self.out.read(f) {
                Ok(bytes) => Some(bytes),
                Err(e) if is_not_found(&e) => None,
                Err(e) => return Err(e),
            };
            let ours = bytes
                .and_then(|b| serde_json::from_slice::<ClaimNote>(&b).ok())
                .is_some_and(|n| n.holder == self.holder);
            if self.is_lost() || !ours {
                self.lost.store(true, std::sync::atomic::Ordering::SeqCst);
                return Err(Error::new(ErrorKind::ClaimLost).with_file(self.out.display(f)));
            }
        }
        Ok(())
    }

    /// Stops the refreshing (before the claims are deleted with their folder).
    pub(crate) fn stop_refreshing(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.refresher.take() {
            let _ = t.join();
        }
    }

    /// Starts refreshing the claims taken, every [`CLAIM_REFRESH_EVERY`].
    pub(crate) fn keep_alive(&mut self) {
        let (tx, rx) = mpsc::channel::<()>();
        let (out, files, holder) = (self.out.clone(), self.files.clone(), self.holder.clone());
        let lost = self.lost.clone();
        self.stop = Some(tx);
        self.refresher = Some(std::thread::spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(CLAIM_REFRESH_EVERY) {
                for f in &files {
                    if refresh(&*out, f, &holder) == Refreshed::Lost {
                        lost.store(true, std::sync::atomic::Ordering::SeqCst);
                        return;
                    }
                }
            }
        }));
    }
}

/// What one refresh of a claim found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refreshed {
    /// Refreshed, or not this time (a store error, a concurrent change of our own note):
    /// a missed refresh is retried at the next tick, and a claim goes stale only after
    /// several.
    Kept,
    /// Another run holds it, or it is gone: this run was taken for dead.
    Lost,
}

/// Refreshes `holder`'s claim `file`: its own note replaced by a fresh one, never
/// another's.
fn refresh(out: &dyn Destination, file: &str, holder: &str) -> Refreshed {
    let bytes = match out.read(file) {
        Ok(bytes) => bytes,
        Err(e) if is_not_found(&e) => return Refreshed::Lost,
        Err(_) => return Refreshed::Kept,
    };
    let ours = serde_json::from_slice::<ClaimNote>(&bytes).is_ok_and(|n| n.holder == holder);
    if !ours {
        return Refreshed::Lost;
    }
    match out.replace(file, &bytes, Claims::note(holder)) {
        Ok(false) => match out.read(file) {
            // Replaced between our read and our swap: by whom?
            Ok(now)
                if serde_json::from_slice::<ClaimNote>(&now).is_ok_and(|n| n.holder == holder) =>
            {
                Refreshed::Kept
            }
            Ok(_) => Refreshed::Lost,
            Err(e) if is_not_found(&e) => Refreshed::Lost,
            Err(_) => Refreshed::Kept,
        },
        Ok(true) | Err(_) => Refreshed::Kept,
    }
}

impl Drop for Claims {
    fn drop(&mut self) {
        self.stop_refreshing();
        // A claim taken over is its new holder's: only our own note goes (a holder cut
        // off from the store long enough to be taken for dead learns it here).
        if !self.done && !self.is_lost() {
            for f in &self.files {
                if let Ok(bytes) = self.out.read(f) {
                    let ours = serde_json::from_slice::<ClaimNote>(&bytes)
                        .is_ok_and(|n| n.holder == self.holder);
                    if ours {
                        let _ = self.out.delete_if(f, &bytes);
                    }
                }
            }
        }
    }
}

/// Claims against a back-end, run once per [`Destination`] (on disk and in moto's S3) by
/// its conformance suite: the races a claim must win or lose cleanly.
#[cfg(test)]
pub(super) mod conformance {
    use super::*;
    use std::sync::Barrier;

    /// A note of a holder that is gone: this host's, its process ended.
    fn dead_note(holder: &str) -> Vec<u8> {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("run true");
        let pid = child.id();
        child.wait().expect("true ends");
        serde_json::to_vec(&ClaimNote {
            holder: holder.to_owned(),
            refreshed: 0,
            host: host_name(),
            pid,
            pids: pid_space(),
            started: 0,
        })
        .expect("a note")
    }

    fn holder_of(out: &dyn Destination, file: &str) -> Option<String> {
        let bytes = out.read(file).ok()?;
        serde_json::from_slice::<ClaimNote>(&bytes)
            .ok()
            .map(|n| n.holder)
    }

    /// Of many runs that take one stale claim over at once, exactly one wins, and the
    /// claim is then its. (With the takeover of before, a delete and a create, two
    /// could win: the second deleted the first's new claim.)
    fn a_stale_claim_is_taken_over_once(out: &Arc<dyn Destination>) {
        let file = "race/.claim";
        for round in 0..12 {
            out.write(file, dead_note(&format!("dead-{round}")), false)
                .expect("the stale claim");
            let takers = 6;
            let barrier = Arc::new(Barrier::new(takers));
            let handles: Vec<_> = (0..takers)
                .map(|_| {
                    let (out, barrier) = (out.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        let mut claims = Claims::new(out);
                        barrier.wait();
                        let won = claims.claim(file).expect("no store error").is_ok();
                        let holder = claims.holder.clone();
                        // Won: keep it from being released until counted.
                        claims.forget();
                        (won, holder)
                    })
                })
                .collect();
            let results: Vec<(bool, String)> = handles
                .into_iter()
                .map(|h| h.join().expect("a taker"))
                .collect();
            let winners: Vec<&String> = results.iter().filter(|r| r.0).map(|r| &r.1).collect();
            assert_eq!(winners.len(), 1, "round {round}: {results:?}");
            assert_eq!(
                holder_of(&**out, file).as_ref(),
                Some(winners[0]),
                "round {round}"
            );
            out.delete(file).unwrap();
        }
    }

    /// A holder's refresh never writes over another holder's note: a refresher racing
    /// takeovers of its claim (each a compare and swap of the note it read) either
    /// refreshes its own note or finds it lost; once taken over, the claim stays the
    /// taker's, and the refresher says it lost it.
    fn a_refresh_never_writes_over_another_holder(out: &Arc<dyn Destination>) {
        let file = "race/.refreshed";
        for round in 0..8 {
            let holder = format!("holder-{round}");
            out.write(file, Claims::note(&holder), false).unwrap();
            let barrier = Arc::new(Barrier::new(2));
            let refresher = {
                let (out, barrier, holder) = (out.clone(), barrier.clone(), holder.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    (0..40)
                        .map(|_| refresh(&*out, file, &holder))
                        .collect::<Vec<Refreshed>>()
                })
            };
            let taker = {
                let (out, barrier) = (out.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    for k in 0..40 {
                        let Ok(bytes) = out.read(file) else { continue };
                        let mine = format!("taker-{k}");
                        if out.replace(file, &bytes, Claims::note(&mine)).unwrap() {
                            return Some(mine);
                        }
                    }
                    None
                })
            };
            let seen = refresher.join().unwrap();
            let took = taker.join().unwrap();
            let now = holder_of(&**out, file);
            match took {
                Some(taker) => {
                    assert_eq!(now, Some(taker), "round {round}: the taker's claim stays");
                    assert_eq!(
                        seen.last(),
                        Some(&Refreshed::Lost),
                        "round {round}: {seen:?}"
                    );
                    // Once lost, never kept again.
                    let first = seen.iter().position(|r| *r == Refreshed::Lost).unwrap();
                    assert!(
                        seen[first..].iter().all(|r| *r == Refreshed::Lost),
                        "{seen:?}"
                    );
                }
                None => assert_eq!(now, Some(holder), "round {round}"),
            }
            out.delete(file).unwrap();
        }
    }

    /// A claim taken over meanwhile fails the holder's confirmation; its own passes.
    fn confirm_finds_a_claim_taken_over(out: &Arc<dyn Destination>) {
        let mut claims = Claims::new(out.clone());
        assert!(claims.claim("race/.confirmed").unwrap().is_ok());
        claims.confirm().expect("its own claim");
        out.write("race/.confirmed", Claims::note("another"), false)
            .unwrap();
        let lost = claims.confirm().unwrap_err();
        assert!(matches!(lost.kind(), ErrorKind::ClaimLost), "{lost}");
        assert!(claims.is_lost());
        drop(claims);
        assert_eq!(
            holder_of(&**out, "race/.confirmed").as_deref(),
            Some("another"),
            "not released"
        );
        out.delete("race/.confirmed").unwrap();
    }

    /// A holder dropped after another run took its claim over (it never refreshed in
    /// between, so it does not know) leaves the other's claim: it deletes only its own.
    fn a_dropped_holder_leaves_its_successors_claim(out: &Arc<dyn Destination>) {
        let mut claims = Claims::new(out.clone());
        assert!(claims.claim("race/.dropped").unwrap().is_ok());
        out.write("race/.dropped", Claims::note("successor"), false)
            .unwrap();
        drop(claims);
        assert_eq!(
            holder_of(&**out, "race/.dropped").as_deref(),
            Some("successor")
        );
        out.delete("race/.dropped").unwrap();
        let mut claims = Claims::new(out.clone());
        assert!(claims.claim("race/.dropped").unwrap().is_ok());
        drop(claims);
        assert!(!out.exists("race/.dropped").unwrap(), "its own goes");
    }

    /// A pid another process took since is not the holder: its start time says so.
    #[test]
    fn a_reused_pid_is_not_the_holder() {
        let me = std::process::id();
        let started = start_time(me).expect("Linux says when this process started");
        let mut note = ClaimNote {
            holder: "h".into(),
            refreshed: now_secs(),
            host: host_name(),
            pid: me,
            pids: pid_space(),
            started,
        };
        assert!(!note.is_dead_here(), "this process, alive");
        note.started = started + 1;
        assert!(note.is_dead_here(), "another process with this pid");
        note.started = 0;
        assert!(
            !note.is_dead_here(),
            "a note without a start time: the pid alone"
        );
    }

    pub(crate) fn all(out: &Arc<dyn Destination>) {
        a_dropped_holder_leaves_its_successors_claim(out);
        a_stale_claim_is_taken_over_once(out);
        a_refresh_never_writes_over_another_holder(out);
        confirm_finds_a_claim_taken_over(out);
    }
}
