//! The `tfshard` binary: parses the command line, runs one command, maps the outcome to
//! an exit code. The only place that exits.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
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
