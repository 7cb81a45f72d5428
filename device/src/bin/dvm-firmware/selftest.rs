//! Self-tests run on request (the semihosting command line), to prove the
//! firmware's protections on the real target.

/// Recurses with a 1 KiB frame until the stack runs into its guard page. The
/// data abort there must be reported as a stack overflow; returning from
/// here would mean the guard does not work.
pub fn overflow_the_stack() -> ! {
    defmt::info!("selftest: overflowing the stack");
    let depth = recurse(0);
    // Unreachable while the guard page works.
    defmt::error!("selftest: the stack did not overflow (depth {=u64})", depth);
    crate::report::exit(dvm_isa::job::Status::Panic)
}

#[inline(never)]
fn recurse(depth: u64) -> u64 {
    let mut frame = [0u8; 1024];
    frame[(depth % 1024) as usize] = depth as u8;
    let frame = core::hint::black_box(frame);
    if depth == u64::MAX {
        return u64::from(frame[0]);
    }
    recurse(depth + 1).wrapping_add(u64::from(frame[(depth % 7) as usize]))
}
