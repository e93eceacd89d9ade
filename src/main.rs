//! The `tfshard` binary: parses the command line, runs one command, maps the outcome to
//! an exit code. The only place that exits.

use tfshard::cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    if std::env::args_os().nth(1).is_some_and(|c| c == "bench")
        && std::env::var_os("TFSHARD_SYSTEM_ALLOCATOR").is_none()
    {
        // Before any thread starts; see `Allocator`.
        tfshard::alloc::use_mimalloc();
    }
    tune_allocator();
    match cli::run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => ExitCode::from(err.report()),
    }
}

/// Batches of a few MB are allocated and freed all the time; glibc serves blocks above
/// 128 KiB with a fresh mmap (page faults, zeroing, munmap) each time. Keeping them in
/// the heap for reuse measured 12% of a conversion's CPU and more of a JPEG read. Blocks
/// above 16 MiB (a Parquet page of images can be 46 MB) still get their own mmap, so
/// they go back to the system when freed: at 64 MiB, peak RSS converting a table of
/// images was 330 MiB, at 16 MiB 239 MiB, at no cost on the standard table.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const MMAP_THRESHOLD: libc::c_int = 16 << 20;
        // SAFETY: mallopt only changes allocator parameters; called before any thread.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD);
        }
    }
}

/// glibc, or mimalloc for `bench` (see [`tfshard::alloc::Allocator`]). With the `python`
/// feature the library declares it, for the module.
#[cfg(not(feature = "python"))]
#[global_allocator]
static GLOBAL: tfshard::alloc::Allocator = tfshard::alloc::Allocator;
