//! The allocator of the binary and of the Python module: glibc's malloc, or mimalloc
//! once [`use_mimalloc`] is called. Not a stable API.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether new blocks come from mimalloc (set once, never unset: see [`use_mimalloc`]).
static FAST: AtomicBool = AtomicBool::new(false);

/// glibc's malloc for every command but `bench`, mimalloc for `bench` and the Python
/// module's reader. The reader's batches are allocated on worker threads and freed on
/// the consumer's; glibc locks the
/// worker's arena for each such free, and at ~60,000 batches a second the two threads
/// sleep on that lock (measured: 54,000 context switches in a 2 s run, 1.1 of 2 cores
/// busy). mimalloc frees across threads without a lock: the same run made 500, and the
/// pipeline read 1.4x the records per second. The converter keeps glibc: with mimalloc
/// its peak memory on the standard table went from 60 to 124 MiB (purging sooner brought
/// it back at 1.35x the time). A block is freed by the allocator it came from (mimalloc
/// answers whether it owns a pointer), so the switch needs no care about blocks made
/// before it. `TFSHARD_SYSTEM_ALLOCATOR=1` keeps `bench` on glibc, to compare.
pub struct Allocator;

fn from_mimalloc(ptr: *mut u8) -> bool {
    // SAFETY: mi_is_in_heap_region only compares the address with mimalloc's regions.
    FAST.load(Ordering::Relaxed) && unsafe { libmimalloc_sys::mi_is_in_heap_region(ptr.cast()) }
}

// SAFETY: every call goes to one allocator, and a block is always freed or grown by the
// allocator that made it.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if FAST.load(Ordering::Relaxed) {
            // SAFETY: the caller's contract, passed on.
            unsafe { mimalloc::MiMalloc.alloc(layout) }
        } else {
            // SAFETY: as above.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if FAST.load(Ordering::Relaxed) {
            // SAFETY: the caller's contract, passed on.
            unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
        } else {
            // SAFETY: as above.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if from_mimalloc(ptr) {
            // SAFETY: mimalloc made this block.
            unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
        } else {
            // SAFETY: the system allocator made this block.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if from_mimalloc(ptr) {
            // SAFETY: mimalloc made this block.
            unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
        } else {
            // SAFETY: the system allocator made this block.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }
}

/// New blocks come from mimalloc from now on (blocks made before are still freed by
/// glibc). Call it before the threads that would benefit start; never undone, since a
/// block is freed by mimalloc only while the switch is on.
pub fn use_mimalloc() {
    FAST.store(true, Ordering::Relaxed);
}

/// Batches of a few MB are allocated and freed all the time; glibc serves blocks above
/// 128 KiB with a fresh mmap (page faults, zeroing, munmap) each time. Keeping them in
/// the heap for reuse measured 12% of a conversion's CPU and more of a JPEG read. Blocks
/// above 16 MiB (a Parquet page of images can be 46 MB) still get their own mmap, so
/// they go back to the system when freed: at 64 MiB, peak RSS converting a table of
/// images was 330 MiB, at 16 MiB 239 MiB, at no cost on the standard table.
pub fn tune_glibc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const MMAP_THRESHOLD: libc::c_int = 16 << 20;
        // SAFETY: mallopt only changes allocator parameters; called before the run's threads.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD);
        }
    }
}
