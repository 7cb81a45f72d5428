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

/// Logs a value whose formatting reads this core's stack guard page, so the
/// data abort comes while `defmt` holds the logger. The exception handler
/// must still end the run with [`dvm_isa::job::Status::StackOverflow`]
/// (without a log line: the logger cannot be entered again).
pub fn fault_while_logging() -> ! {
    defmt::info!("selftest: faulting while logging");
    defmt::info!(
        "{}",
        GuardRead(crate::layout::stack_guard(crate::boot::core_index()))
    );
    // Unreachable while the guard page works.
    defmt::error!("selftest: reading the guard page did not fault");
    crate::report::exit(dvm_isa::job::Status::Panic)
}

/// Formats as the byte at its address, read when the frame is written.
struct GuardRead(usize);

impl defmt::Format for GuardRead {
    fn format(&self, f: defmt::Formatter<'_>) {
        // SAFETY: a read of the guard page, which is mapped without access:
        // it faults (the point of the self-test) and never returns a value
        // or touches memory.
        let byte = unsafe { core::ptr::read_volatile(self.0 as *const u8) };
        defmt::write!(f, "{=u8}", byte);
    }
}
