//! Allocations of the fusion decision for the benchmark's window of 30
//! recorded operations (`host/benches/fusion.rs`, `window30`): the
//! decomposition, the fusion pass, both (`Prepared::with_options`), and
//! each counted on this thread (`DVM_TRACE_LARGE=1`: a backtrace of
//! every allocation of at least 1 KiB).
//!
//! `cargo run --release -p dvm-runtime --example decision_allocs`

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use dvm_fuse::{FuseOptions, FusionPlan};
use dvm_graph::decompose_with_spans;
use dvm_runtime::Prepared;

#[path = "../benches/common/windows.rs"]
mod windows;
use windows::{window30, window30_primitive};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    static LARGE: Cell<u64> = const { Cell::new(0) };
    static TRACE: Cell<bool> = const { Cell::new(false) };
}

/// Counts an allocation of `size` bytes; allocations of at least 1 KiB
/// (glibc's large-bin requests, which consolidate its fast bins) are also
/// counted apart.
fn count(size: usize) {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
    if size >= 1024 {
        let _ = LARGE.try_with(|c| c.set(c.get() + 1));
        if TRACE.try_with(Cell::get).unwrap_or(false) {
            let _ = TRACE.try_with(|t| t.set(false));
            eprintln!(
                "large allocation of {size} bytes:\n{}",
                std::backtrace::Backtrace::force_capture()
            );
            let _ = TRACE.try_with(|t| t.set(true));
        }
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments and
// only adds a counter update, which neither allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            count(new_size);
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations so far, and those of at least 1 KiB.
fn allocs() -> (u64, u64) {
    (ALLOCS.with(Cell::get), LARGE.with(Cell::get))
}

fn main() {
    let opts = FuseOptions {
        reasons: false,
        ..FuseOptions::default()
    };
    for (name, w) in [
        ("30 primitive ops", window30_primitive()),
        ("30 ops with norms", window30()),
    ] {
        // Warm up once (thread-locals, lazily built tables).
        drop(Prepared::with_options(&w, &opts).expect("prepares"));
        TRACE.with(|t| t.set(std::env::var_os("DVM_TRACE_LARGE").is_some()));
        let a0 = allocs();
        let (d, spans) = decompose_with_spans(&w).expect("decomposes");
        let a1 = allocs();
        let plan = FusionPlan::with_composites(&d, &opts, &spans).expect("fuses");
        let a2 = allocs();
        drop(plan);
        drop(d);
        let a3 = allocs();
        let p = Prepared::with_options(&w, &opts).expect("prepares");
        let a4 = allocs();
        drop(p);
        TRACE.with(|t| t.set(false));
        let d = |x: (u64, u64), y: (u64, u64)| format!("{} ({} of ≥ 1 KiB)", y.0 - x.0, y.1 - x.1);
        println!(
            "{name}: allocations: decomposition {}, pass {}, decomposition + pass {}",
            d(a0, a1),
            d(a1, a2),
            d(a3, a4)
        );
    }
}
