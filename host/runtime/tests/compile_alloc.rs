//! Issue #3: steady-state compilation does not allocate beyond the output.
//!
//! "Compile" is [`dvm_compile::kernel::build`], the path the kernel cache takes
//! on a miss: group → bytecode → module bytes → parse + verify → predecode.
//! Its output is one `Arc<ReadyKernel>`, and the output buffers are exactly
//! what that value owns:
//!
//! 1. the `Arc` allocation holding the [`ReadyKernel`] itself,
//! 2. the module bytes (`ReadyKernel::module`, one `Vec<u8>` allocated at
//!    its final size),
//! 3. the predecoded program (`ReadyKernel::program`, one `Box<Program>`).
//!
//! Everything else a compile needs (operand strides, the tiling, UB slots,
//! code words, the module's tables and metadata) lives in scratch reused
//! from one compile to the next, so after a warm-up a compile makes at most
//! [`OUTPUT_ALLOCS`] allocations, whatever the shape.
//!
//! The counter is a `#[global_allocator]` wrapper around [`System`] counting
//! allocations (`alloc`, `alloc_zeroed` and growing `realloc`) of the current
//! thread only, so the test harness's other threads do not disturb it.
//!
//! [`ReadyKernel`]: dvm_compile::kernel::ReadyKernel

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use dvm_compile::codegen::Target;
use dvm_compile::kernel::build;
use dvm_compile::samples::groups;

/// Allocations one compile's output needs (see the module docs).
const OUTPUT_ALLOCS: u64 = 3;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: the thread-local may be gone while the thread exits.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every method forwards to `System` with the caller's arguments and
// only adds a counter update, which neither allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            count();
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn steady_state_compile_allocates_only_its_output() {
    let target = Target {
        cores: 2,
        ..Target::default()
    };
    // Build the groups before counting: they are the compiler's input.
    let warm = groups(17);
    let shapes: Vec<_> = [17u64, 1, 64, 512, 4096]
        .iter()
        .map(|&s| (s, groups(s)))
        .collect();

    // Warm-up: one compile of every op at one shape.
    for (name, g) in &warm {
        drop(build(g, name, &target).expect("builds"));
    }

    // Steady state: the same shape again, then other shapes.
    let mut counts = Vec::new();
    for (s, gs) in &shapes {
        for (name, g) in gs {
            let before = allocs();
            let k = build(g, name, &target).expect("builds");
            let n = allocs() - before;
            drop(k);
            counts.push((*name, *s, n));
        }
    }
    let report: Vec<String> = counts
        .iter()
        .map(|(name, s, n)| format!("{name} S={s}: {n} allocation(s)"))
        .collect();
    eprintln!("{}", report.join("\n"));
    let worst = counts.iter().map(|c| c.2).max().unwrap_or(0);
    assert!(
        worst <= OUTPUT_ALLOCS,
        "up to {worst} allocations per compile, the output needs {OUTPUT_ALLOCS}:\n{}",
        report.join("\n")
    );
}
