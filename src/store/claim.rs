//! Claims: an output (or a prefix of it) held by one run at a time, through the
//! [`Destination`] it publishes to. A claim is an object written only where none is (a
//! conditional put), saying who holds it (run, host, process) and when it was last
//! refreshed; the holder refreshes it while it runs. A claim not refreshed for
//! [`CLAIM_STALE_AFTER`], or held by a process of this host that is gone, is stale: the
//! next run takes it over. `finalize` claims each prefix it publishes this way.

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
}

impl ClaimNote {
    /// Whether the holder is gone: not refreshed for [`CLAIM_STALE_AFTER`] by its own
    /// clock (see [`CLAIM_WATCH`]), or a process of this host that no longer exists (a
    /// rerun after a kill need not wait).
    fn is_stale(&self) -> bool {
        now_secs().saturating_sub(self.refreshed) >= CLAIM_STALE_AFTER.as_secs()
            || self.is_dead_here()
    }

    /// Whether the holder is a process of this host that no longer exists.
    fn is_dead_here(&self) -> bool {
        !self.host.is_empty()
            && self.host == host_name()
            && !self.pids.is_empty()
            && self.pids == pid_space()
            && self.pid != 0
            && !process_exists(self.pid)
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
        })
        .expect("a claim note serializes")
    }

    /// Claims the object `file` of the destination: a conditional put, or, over a stale
    /// claim (its holder killed), a takeover. `Ok(Err(Held))`: a live run holds it.
    ///
    /// # Errors
    ///
    /// A store or I/O error.
    pub(crate) fn claim(&mut self, file: &str) -> Result<std::result::Result<(), Held>> {
        let out = &*self.out;
        match out.write(file, Self::note(&self.holder), true) {
            Ok(()) => {}
            Err(e) if already_exists(&e) => {
                let (held, bytes) = match out.read(file) {
                    Ok(bytes) => (serde_json::from_slice::<ClaimNote>(&bytes).ok(), bytes),
                    // Released meanwhile: its holder finished or failed.
                    Err(e) if is_not_found(&e) => (None, Vec::new()),
                    Err(e) => return Err(e),
                };
                if !held.as_ref().is_none_or(ClaimNote::is_stale) {
                    return Ok(Err(Held));
                }
                if held.as_ref().is_some_and(|h| !h.is_dead_here()) {
                    // Stale by the holder's clock: watched by ours before it is taken.
                    std::thread::sleep(CLAIM_WATCH);
                    match out.read(file) {
                        Ok(again) if again != bytes => return Ok(Err(Held)),
                        Ok(_) => {}
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(e),
                    }
                }
                // Taken over: of two takers, the second put finds the first's claim.
                out.delete(file)?;
                match out.write(file, Self::note(&self.holder), true) {
                    Ok(()) => {}
                    Err(e) if already_exists(&e) => return Ok(Err(Held)),
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
        self.files.push(file.to_owned());
        Ok(Ok(()))
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
                    // Another holder now: this run was taken for dead, and stops.
                    let taken = out
                        .read(f)
                        .ok()
                        .and_then(|b| serde_json::from_slice::<ClaimNote>(&b).ok());
                    if taken.is_some_and(|n| n.holder != holder) {
                        lost.store(true, std::sync::atomic::Ordering::SeqCst);
                        return;
                    }
                    // A missed refresh is retried at the next tick; the claim goes stale
                    // only after several.
                    let _ = out.write(f, Claims::note(&holder), false);
                }
            }
        }));
    }
}

impl Drop for Claims {
    fn drop(&mut self) {
        self.stop_refreshing();
        // A claim taken over is its new holder's.
        if !self.done && !self.is_lost() {
            for f in &self.files {
                let _ = self.out.delete(f);
            }
        }
    }
}
