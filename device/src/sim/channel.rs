//! Global-memory bandwidth shared by the cores: a fluid model over time
//! slots.
//!
//! Time is cut into slots of [`SLOT_CYCLES`] cycles; each slot carries at
//! most the spec's shared bytes per cycle times its length. A transfer
//! starts at a cycle and fills the slots from there at no more than its
//! core's rate, taking what earlier transfers left of each slot; the
//! cycles it loses to full slots are its bandwidth stall. Only a
//! window of [`SLOTS`] slots is remembered: the window slides forward as
//! transfers reach past it, and a transfer that starts before the window
//! (long in the past of the others) runs at its core's rate.

/// Cycles per slot.
pub const SLOT_CYCLES: u64 = 64;
/// Slots remembered.
pub const SLOTS: usize = 1024;

/// The shared channel's state.
#[derive(Clone, Debug)]
pub struct Channel {
    /// Bytes one slot carries.
    cap: f64,
    /// The first remembered slot.
    base: u64,
    /// Bytes taken of slot `s` at `used[s % SLOTS]`, for `base <= s < base + SLOTS`.
    used: [f64; SLOTS],
}

impl Channel {
    /// An idle channel carrying `bytes_per_cycle` over all cores.
    pub fn new(bytes_per_cycle: f64) -> Channel {
        Channel {
            cap: bytes_per_cycle * SLOT_CYCLES as f64,
            base: 0,
            used: [0.0; SLOTS],
        }
    }

    /// Forgets every transfer and sets the rate.
    pub fn reset(&mut self, bytes_per_cycle: f64) {
        self.cap = bytes_per_cycle * SLOT_CYCLES as f64;
        self.base = 0;
        self.used = [0.0; SLOTS];
    }

    /// Slides the window so that slot `s` is its last.
    fn reach(&mut self, s: u64) {
        let last = self.base + SLOTS as u64 - 1;
        if s <= last {
            return;
        }
        let shift = s - last;
        if shift >= SLOTS as u64 {
            self.used = [0.0; SLOTS];
        } else {
            for k in 0..shift {
                self.used[((self.base + k) % SLOTS as u64) as usize] = 0.0;
            }
        }
        self.base += shift;
    }

    /// Moves `bytes` starting at cycle `t0` at most `rate` bytes per cycle;
    /// returns the cycle the last byte moved and the cycles lost to other
    /// transfers (0 when the channel had room throughout).
    pub fn transfer(&mut self, t0: u64, bytes: u64, rate: f64) -> (u64, u64) {
        if bytes == 0 {
            return (t0, 0);
        }
        let ideal = t0 + ceil(bytes as f64 / rate);
        if t0 / SLOT_CYCLES < self.base {
            return (ideal, 0);
        }
        let mut t = t0 as f64;
        let mut left = bytes as f64;
        loop {
            let s = t as u64 / SLOT_CYCLES;
            self.reach(s);
            let i = (s % SLOTS as u64) as usize;
            let slot_end = ((s + 1) * SLOT_CYCLES) as f64;
            let core_can = rate * (slot_end - t);
            let free = (self.cap - self.used[i]).max(0.0);
            let moved = left.min(core_can).min(free);
            self.used[i] += moved;
            left -= moved;
            if left <= 1e-6 {
                // Earlier slots were full or ran at the core's pace; in
                // this one the rest moved at the core's pace.
                let end = ceil(t + moved / rate).max(ideal);
                return (end, end - ideal);
            }
            t = slot_end;
        }
    }
}

/// `x` rounded up to a whole cycle (`x >= 0`).
pub(crate) fn ceil(x: f64) -> u64 {
    let c = x as u64;
    if (c as f64) < x {
        c + 1
    } else {
        c
    }
}
