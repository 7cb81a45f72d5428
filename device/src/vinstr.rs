//! Virtual instructions: what predecode lowers a verified kernel's code to
//! and the executor runs, and the UB liveness questions the plans ask of a
//! body (which ranges an instruction reads or overwrites).

use dvm_isa::GmPattern;

use crate::gm::StoreMap;
use crate::ops::{overlaps, UbOp};

/// One virtual instruction.
#[derive(Clone, Copy, Debug)]
pub enum VInstr {
    /// A UB-only instruction resolved to its handler.
    Ub(UbOp),
    /// Global memory → UB.
    Load {
        /// The tile's box.
        pattern: GmPattern,
        /// `pad=fill`: the pad element's bits (see [`pad_bits`](crate::gm::pad_bits)).
        pad: Option<u32>,
    },
    /// Global memory → UB by index ([`gather_tile`](crate::gm::gather_tile)).
    Gather {
        /// The tile's table, as the `gather` instruction's access (its
        /// `rows` is the table's row count).
        table: GmPattern,
        /// UB byte offset of the `rows` i32 indices.
        idx: u32,
        /// Rows of the UB box.
        rows: u32,
    },
    /// UB → global memory.
    Store {
        /// The tile's box.
        pattern: GmPattern,
        /// Whether the parameter is large enough (at least
        /// [`STREAM_MIN_BYTES`](crate::gm::STREAM_MIN_BYTES)) for non-temporal stores.
        stream: bool,
        /// What the elements become on their way out: [`StoreMap::Copy`]
        /// from the decoder, a row scale or a norm's tail fused with the
        /// store by `crate::peephole`.
        map: StoreMap,
    },
    /// UB → global memory, adding atomically per element.
    StoreAdd(GmPattern),
    /// Waits for every pipe; a no-op on the in-order executor.
    Barrier,
}

/// What `v` does to the range `t`: reads some of it (`Some(true)`), writes
/// all of it before reading any (`Some(false)`), or neither.
fn touches(v: &VInstr, t: (u32, u32)) -> Option<bool> {
    let boxed = |p: &dvm_isa::GmPattern| {
        let len = p.rows as u64 * p.pitch as u64 * p.dtype.size() as u64;
        (p.ub, (p.ub as u64 + len).min(u32::MAX as u64) as u32)
    };
    match v {
        VInstr::Ub(op) => {
            if op.foot.reads_from(t) {
                Some(true)
            } else {
                // A write of part of it leaves the rest live: keep scanning.
                (op.foot.write.0 <= t.0 && t.1 <= op.foot.write.1).then_some(false)
            }
        }
        VInstr::Load { pattern, pad } => {
            let b = boxed(pattern);
            // Only a padded load writes its whole box on every tile.
            (pad.is_some() && b.0 <= t.0 && t.1 <= b.1).then_some(false)
        }
        VInstr::Store { pattern, map, .. } => {
            let operands = map.operands(pattern.rows, pattern.pitch);
            let read = overlaps(boxed(pattern), t) || operands.iter().any(|&o| overlaps(o, t));
            read.then_some(true)
        }
        VInstr::StoreAdd(pattern) => overlaps(boxed(pattern), t).then_some(true),
        // It reads its indices; the columns past a tail are left as they
        // were, so it never counts as overwriting a range.
        VInstr::Gather { idx, rows, .. } => {
            let end = (*idx as u64 + *rows as u64 * 4).min(u32::MAX as u64) as u32;
            overlaps((*idx, end), t).then_some(true)
        }
        VInstr::Barrier => None,
    }
}

/// Whether body `code` writes all of range `t` before it reads any of it
/// (or never touches it): what another body of the kernel left there
/// cannot reach its results.
pub(crate) fn written_first(code: &[VInstr], t: (u32, u32)) -> bool {
    for v in code {
        match touches(v, t) {
            Some(read) => return !read,
            None => continue,
        }
    }
    true
}

/// Whether range `t` is dead after the pair: scanning `after` (the rest of
/// the body) and then `before` (the body's start, up to the pair), an
/// instruction overwrites it before any reads it. Reaching the pair again
/// means its broadcast overwrites it.
pub(crate) fn dead(t: (u32, u32), after: &[VInstr], before: &[VInstr]) -> bool {
    for v in after.iter().chain(before) {
        match touches(v, t) {
            Some(read) => return !read,
            None => continue,
        }
    }
    true
}
