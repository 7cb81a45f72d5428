//! UB allocation for one tile body: buffers for live tile values, reused as
//! soon as their value dies.

/// 64-byte alignment for every buffer (the UB base is 64-byte aligned).
pub const ALIGN: u32 = 64;

#[derive(Clone, Copy, Debug)]
struct Slot {
    addr: u32,
    bytes: u32,
    free: bool,
}

/// A first-fit allocator over fixed-size slots, reused by size.
#[derive(Clone, Debug, Default)]
pub struct UbAlloc {
    slots: Vec<Slot>,
    top: u32,
}

impl UbAlloc {
    /// Clears for a new kernel (keeps capacity).
    pub fn reset(&mut self) {
        self.slots.clear();
        self.top = 0;
    }

    /// A buffer of `bytes`: a free slot of the same size, or a new one.
    /// Returns `None` when the high-water mark would pass `limit`.
    pub fn alloc(&mut self, bytes: u32, limit: u32) -> Option<u32> {
        let bytes = bytes.max(1).next_multiple_of(ALIGN);
        if let Some(s) = self.slots.iter_mut().find(|s| s.free && s.bytes == bytes) {
            s.free = false;
            return Some(s.addr);
        }
        let addr = self.top;
        let top = addr.checked_add(bytes)?;
        if top > limit {
            return None;
        }
        self.top = top;
        self.slots.push(Slot {
            addr,
            bytes,
            free: false,
        });
        Some(addr)
    }

    /// Returns the buffer at `addr` to the pool.
    pub fn free(&mut self, addr: u32) {
        if let Some(s) = self.slots.iter_mut().find(|s| s.addr == addr) {
            s.free = true;
        }
    }

    /// Bytes used at the high-water mark.
    pub fn high_water(&self) -> u32 {
        self.top
    }
}
