//! Load-forwarded bodies: one element-wise instruction, or one fold along
//! the columns, run straight over global memory.
//!
//! The compiler's kernel for a lone element-wise operator (an unfused
//! `add`, `exp`, `muls`, …) is `load a; [load b;] op; store`, and for a
//! row reduction `load x; rsum; store`: the tile goes to UB and back for
//! one pass of arithmetic. On a CPU that staging costs
//! more than the arithmetic when the tensors come from DRAM: the loads, the
//! op and the store run one after the other, so the core has only one
//! memory stream in flight at a time. When a body has exactly that form,
//! [`plan`] records it, and for every full tile (no tail, no padding)
//! `Forward::run_tile` calls the op's [`GmHandler`](crate::ops::GmHandler) on the
//! global-memory boxes themselves: the same arithmetic on the same bytes,
//! so the same result, with every stream in flight at once. Tail tiles run
//! through UB as usual. The UB is left untouched by forwarded tiles, so a
//! body is forwarded only when nothing reads what they would have left
//! there: its loads pad their boxes (or never have a tail), and the
//! kernel's other bodies write those ranges before they read them
//! (`Forward::independent`).
//!
//! A body is forwarded only when the buffer it stores to is not one it
//! loads from, and, at launch ([`Forward::fits`]), overlaps none of them.

use crate::gm::{Geom, GmBuf, GmFault, StoreMap};
use crate::vinstr::{written_first, VInstr};

/// A forwarded body: the indices of its instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forward {
    /// The load of the op's first source.
    a: u8,
    /// The load of the op's second source, for binary ops.
    b: Option<u8>,
    /// The element-wise op.
    op: u8,
    /// The store of its result.
    store: u8,
}

/// The forwarding plan of a body, or `None` when it is not `load a;
/// [load b;] op; store` with each box exactly the op's operand (see the
/// module docs).
pub fn plan(code: &[VInstr]) -> Option<Forward> {
    if !(3..=4).contains(&code.len()) {
        return None;
    }
    let op_at = code.len() - 2;
    let store_at = code.len() - 1;
    let VInstr::Ub(op) = &code[op_at] else {
        return None;
    };
    let gm = op.gm?;
    let VInstr::Store {
        pattern: st,
        map: StoreMap::Copy,
        ..
    } = &code[store_at]
    else {
        return None;
    };
    let (n_src, n_dst) = gm.shape.elems(&op.args);
    // The box is exactly `n` of the op's elements at UB `ub`.
    let covers = |p: &dvm_isa::GmPattern, ub: u32, n: u64| {
        p.ub == ub && p.rows as u64 * p.pitch as u64 == n && p.dtype.size() == gm.size as u32
    };
    if !covers(st, op.args.dst, n_dst) {
        return None;
    }
    // The loads before the op, each feeding one of its sources.
    let mut loads = [None::<(u8, &dvm_isa::GmPattern)>; 2];
    for (i, v) in code[..op_at].iter().enumerate() {
        let VInstr::Load { pattern, pad } = v else {
            return None;
        };
        // A tail tile runs through UB, where a load without padding leaves
        // its padding lanes as the previous tile left them, and the
        // previous tile may have been forwarded (not through UB): only a
        // padded load, or one that never has a tail, keeps the bytes.
        if pad.is_none() && has_tail(pattern) {
            return None;
        }
        *loads.get_mut(i)? = Some((i as u8, pattern));
    }
    // The last load into a source's range is what the op reads.
    let find = |ub: u32| {
        loads
            .iter()
            .flatten()
            .rev()
            .find(|(_, p)| covers(p, ub, n_src))
            .map(|&(i, p)| (i, p))
    };
    let (a, pa) = find(op.args.a)?;
    let b = match gm.sources {
        1 => None,
        _ => Some(find(op.args.b)?),
    };
    // Every load feeds the op, and the stored buffer is not loaded.
    let used = 1 + b.is_some_and(|(i, _)| i != a) as usize;
    if used != op_at || pa.buf == st.buf || b.is_some_and(|(_, p)| p.buf == st.buf) {
        return None;
    }
    Some(Forward {
        a,
        b: b.map(|(i, _)| i),
        op: op_at as u8,
        store: store_at as u8,
    })
}

/// Whether some tile of `p`'s grid is shorter than a full one.
fn has_tail(p: &dvm_isa::GmPattern) -> bool {
    let short = |dim: dvm_isa::GridDim, full: u32, total: u32| {
        dim.index().is_some() && (full == 0 || !total.is_multiple_of(full))
    };
    short(p.row_dim, p.rows, p.row_total) || short(p.col_dim, p.cols, p.col_total)
}

/// The pattern of the load or store at `i`.
fn pattern(code: &[VInstr], i: u8) -> Option<&dvm_isa::GmPattern> {
    match code.get(i as usize)? {
        VInstr::Load { pattern, .. } | VInstr::Store { pattern, .. } => Some(pattern),
        _ => None,
    }
}

impl Forward {
    /// Whether the UB ranges the forwarded body `code` would leave stale
    /// (its boxes) are written before they are read in every other body
    /// of the kernel (bodies share one UB per core).
    pub(crate) fn independent<'a>(
        &self,
        code: &[VInstr],
        others: impl Iterator<Item = &'a [VInstr]> + Clone,
    ) -> bool {
        [Some(self.a), self.b, Some(self.store)]
            .into_iter()
            .flatten()
            .filter_map(|i| pattern(code, i))
            .all(|p| {
                let len = p.rows as u64 * p.pitch as u64 * p.dtype.size() as u64;
                let r = (p.ub, (p.ub as u64 + len).min(u32::MAX as u64) as u32);
                others.clone().all(|o| written_first(o, r))
            })
    }

    /// Whether `bufs` allow forwarding: the stored buffer overlaps no
    /// buffer the body loads from.
    pub fn fits(&self, code: &[VInstr], bufs: &[GmBuf<'_>]) -> bool {
        let buf = |i: u8| bufs.get(pattern(code, i)?.buf as usize);
        let Some(stored) = buf(self.store) else {
            return false;
        };
        let apart = |i: u8| buf(i).is_some_and(|b| !b.overlaps(stored));
        apart(self.a) && self.b.is_none_or(apart)
    }

    /// Runs tile `coord` of the body `code` straight over global memory.
    /// Returns `false`, having done nothing, when the tile has a tail or
    /// padding: the caller runs it through UB.
    ///
    /// # Errors
    /// The index of the instruction whose box failed its bounds check and
    /// why (never for a verified kernel under a checked launch); nothing is
    /// written then.
    #[inline]
    pub(crate) fn run_tile(
        &self,
        code: &[VInstr],
        bufs: &[GmBuf<'_>],
        coord: [u32; 3],
        ub_len: usize,
    ) -> Result<bool, (u8, GmFault)> {
        let fault = |i: u8, fault: GmFault| (i, fault);
        let Some(VInstr::Ub(op)) = code.get(self.op as usize) else {
            return Ok(false);
        };
        let Some(gm) = op.gm else {
            return Ok(false);
        };
        let (n_src, n_dst) = gm.shape.elems(&op.args);
        let (n_src, n_dst) = (n_src as usize, n_dst as usize);
        // The box of instruction `i` and its buffer, checked.
        let boxed = |i: u8| -> Result<(Geom, &GmBuf<'_>, usize), (u8, GmFault)> {
            let p = pattern(code, i).ok_or_else(|| fault(i, GmFault::Operand))?;
            let buf = bufs
                .get(p.buf as usize)
                .ok_or_else(|| fault(i, GmFault::Operand))?;
            let g = Geom::new(p, coord, buf.len(), ub_len).map_err(|e| fault(i, e))?;
            Ok((g, buf, p.dtype.size() as usize))
        };
        let (ga, ba, sa) = boxed(self.a)?;
        let b = self.b.map(boxed).transpose()?;
        let (gs, bs, ss) = boxed(self.store)?;
        if !ga.full_run(n_src)
            || !gs.full_run(n_dst)
            || b.is_some_and(|(g, _, _)| !g.full_run(n_src))
        {
            return Ok(false);
        }
        let (Some(a), Some(bsrc)) = (
            ga.gm_run(ba, sa),
            match b {
                Some((g, buf, s)) => g.gm_run(buf, s),
                None => Some(&[][..]),
            },
        ) else {
            return Ok(false);
        };
        // SAFETY: the stored buffer overlaps neither source buffer (`fits`,
        // checked by the caller for this launch), so `a` and `bsrc` do not
        // overlap it; other blocks write disjoint elements and read none of
        // these (the `GmBuf` contract).
        let Some(dst) = (unsafe { gs.gm_run_mut(bs, ss) }) else {
            return Err(fault(self.store, GmFault::ReadOnly));
        };
        (gm.handler)(dst, a, bsrc, &op.args);
        Ok(true)
    }
}
