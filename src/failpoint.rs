//! Deterministic failure points for tests: named places in a run where a test can make
//! the process stop, fail or wait, switched on by the `TFSHARD_FAILPOINTS` environment
//! variable. Unset (always, outside tests), every point is one relaxed load.
//!
//! `TFSHARD_FAILPOINTS="NAME=ACTION;NAME=ACTION"`, where ACTION is
//!
//! - `exit`: the process ends at once with code 137, as if killed (no cleanup runs);
//! - `exit@N`: the same, the Nth time the run passes the point (a kill part way);
//! - `error`: the run fails there with an injected I/O error;
//! - `wait:PATH`: the first time the run passes the point, it creates `PATH.reached`,
//!   then waits until `PATH` exists (the test does something at exactly this point, then
//!   lets the run go on); later passes go straight on.
//!
//! The points: `convert:planned` (every input opened, nothing written yet),
//! `shard:journaled` (a shard complete and journaled, with `--resume`),
//! `publish:moved` (one staged file placed, one at a time: on disk, and by `finalize`),
//! `publish:placed` (every shard under its final name and the staging retired, no
//! manifest yet: on disk, in a store, and by `finalize`), `publish:pinned` (an append's
//! pinned manifest written), `publish:manifest` (a set's manifest written: with
//! `exit@1`, a split set killed between its splits' manifests), `publish:published`
//! (an append's manifests written, its retired shards not yet deleted),
//! `finalize:planned` (the output claimed, the plan recorded), `finalize:published` (the
//! manifests written, the parts not yet deleted),
//! `shuffle:scattered` (with `--shuffle`, every record read and scattered, none written),
//! `convert:written` (every shard written, nothing published), `store:created` (a
//! multipart upload started, its id not yet recorded), `store:uploading` (a multipart
//! upload started and recorded, no part sent), `store:uploaded` (every
//! shard uploaded to a store, nothing copied), `store:parts-copied` (every part of a
//! multipart copy copied, the upload not completed), `verify:opened` (a shard opened and its size taken, no record read).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use crate::error::{Error, Result};

#[derive(Debug, Clone)]
enum Action {
    Exit,
    ExitAt(u64),
    Error,
    Wait(PathBuf),
}

fn points() -> &'static [(String, Action)] {
    static POINTS: OnceLock<Vec<(String, Action)>> = OnceLock::new();
    POINTS.get_or_init(|| {
        let Ok(spec) = std::env::var("TFSHARD_FAILPOINTS") else {
            return Vec::new();
        };
        spec.split(';')
            .filter_map(|entry| {
                let (name, action) = entry.split_once('=')?;
                let action = match action {
                    "exit" => Action::Exit,
                    "error" => Action::Error,
                    a if a.starts_with("exit@") => Action::ExitAt(a[5..].parse().ok()?),
                    a => Action::Wait(PathBuf::from(a.strip_prefix("wait:")?)),
                };
                Some((name.trim().to_owned(), action))
            })
            .collect()
    })
}

/// Passes the failure point `name`.
///
/// # Errors
///
/// An injected error, when the point's action is `error`.
pub fn hit(name: &str) -> Result<()> {
    let Some((_, action)) = points().iter().find(|(n, _)| n == name) else {
        return Ok(());
    };
    match action {
        Action::Exit => std::process::exit(137),
        Action::ExitAt(n) => {
            static PASSES: std::sync::Mutex<Vec<(String, u64)>> = std::sync::Mutex::new(Vec::new());
            let mut passes = PASSES.lock().unwrap_or_else(|p| p.into_inner());
            let count = match passes.iter_mut().find(|(p, _)| p == name) {
                Some((_, c)) => c,
                None => {
                    passes.push((name.to_owned(), 0));
                    &mut passes.last_mut().expect("pushed just above").1
                }
            };
            *count += 1;
            if *count >= *n {
                std::process::exit(137);
            }
            Ok(())
        }
        Action::Error => Err(Error::from(std::io::Error::other(format!(
            "injected failure at {name}"
        )))),
        Action::Wait(path) => {
            static WAITED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
            {
                let mut waited = WAITED.lock().unwrap_or_else(|p| p.into_inner());
                if waited.iter().any(|n| n == name) {
                    return Ok(());
                }
                waited.push(name.to_owned());
            }
            let mut reached = path.clone().into_os_string();
            reached.push(".reached");
            let _ = std::fs::write(&reached, name);
            while !path.exists() {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(())
        }
    }
}
