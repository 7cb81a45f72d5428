//! Concrete strided views of buffers, and dimension coalescing.
//!
//! The compiler sees every operand as a view: a parameter buffer, an element
//! offset, and per-dimension extents and strides (in elements; stride 0
//! broadcasts). Transposes, slices and broadcasts are views, never copies;
//! the loads of the generated kernel express them.

use dvm_isa::DType;

/// Most dimensions a view may have.
pub const MAX_DIMS: usize = 8;

/// Most dimensions of an iteration space the compiler accepts (its scratch
/// keeps each operand's strides in an array of this size).
pub const MAX_RANK: usize = 16;

/// A strided view of a parameter buffer, dimensions outermost first.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct View {
    /// Element type.
    pub dtype: DType,
    /// Element offset of the first element.
    pub offset: u64,
    /// Extent of each dimension.
    pub shape: Vec<u64>,
    /// Element stride of each dimension (0 broadcasts).
    pub strides: Vec<u64>,
}

impl View {
    /// A dense row-major view of `shape`.
    pub fn contiguous(dtype: DType, shape: &[u64]) -> View {
        View {
            dtype,
            offset: 0,
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
        }
    }

    /// Number of elements the view addresses.
    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Number of distinct buffer elements the view reads or writes: its
    /// elements with every broadcast (stride-0) dimension counted once. A
    /// kernel's traffic statistics count these, so a `[768]` bias
    /// broadcast over `S` rows is 768 elements, not `S · 768` (the bytes a
    /// copy of the operand would move). Saturating, as [`View::numel`]'s
    /// callers' statistics are.
    pub fn distinct_numel(&self) -> u64 {
        if self.shape.contains(&0) {
            return 0;
        }
        self.shape
            .iter()
            .zip(&self.strides)
            .filter(|&(_, &st)| st != 0)
            .fold(1u64, |acc, (&ext, _)| acc.saturating_mul(ext))
    }

    /// This view broadcast (NumPy rules, aligned at the right) to `shape`:
    /// missing leading dimensions and dimensions of extent 1 get stride 0.
    /// Returns `None` when the shapes are not broadcast-compatible.
    pub fn broadcast_to(&self, shape: &[u64]) -> Option<View> {
        if self.shape.len() > shape.len() {
            return None;
        }
        let lead = shape.len() - self.shape.len();
        let mut strides = vec![0; shape.len()];
        for (i, &ext) in shape.iter().enumerate().skip(lead) {
            let mine = self.shape[i - lead];
            strides[i] = if mine == ext {
                self.strides[i - lead]
            } else if mine == 1 {
                0
            } else {
                return None;
            };
        }
        Some(View {
            dtype: self.dtype,
            offset: self.offset,
            shape: shape.to_vec(),
            strides,
        })
    }

    /// This view with its dimensions permuted: dimension `i` of the result is
    /// dimension `perm[i]` of `self`.
    pub fn permute(&self, perm: &[usize]) -> View {
        View {
            dtype: self.dtype,
            offset: self.offset,
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
        }
    }
}

/// Row-major strides of `shape`.
pub fn contiguous_strides(shape: &[u64]) -> Vec<u64> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1u64;
    for i in (0..shape.len()).rev() {
        strides[i] = if shape[i] == 1 { 0 } else { acc };
        acc = acc.saturating_mul(shape[i]);
    }
    strides
}

/// Coalesces the common iteration space of several views (all of the same
/// shape): drops extent-1 dimensions and merges adjacent dimensions `i, i+1`
/// whenever every view satisfies `stride[i] == stride[i+1] · extent[i+1]`.
/// Returns the coalesced shape and each view's coalesced strides; at least
/// one dimension is returned (a scalar becomes `[1]`).
pub fn coalesce(shape: &[u64], strides: &[&[u64]]) -> (Vec<u64>, Vec<Vec<u64>>) {
    let mut out_shape: Vec<u64> = Vec::with_capacity(shape.len());
    let mut out_strides: Vec<Vec<u64>> = strides.iter().map(|_| Vec::new()).collect();
    for (d, &ext) in shape.iter().enumerate() {
        if ext == 1 {
            continue;
        }
        let merge = out_shape.last().is_some() && {
            let last = out_strides.iter().map(|s| *s.last().unwrap_or(&0));
            last.zip(strides)
                .all(|(prev, s)| prev == s[d].saturating_mul(ext))
        };
        if merge {
            if let Some(e) = out_shape.last_mut() {
                *e *= ext;
            }
            for (o, s) in out_strides.iter_mut().zip(strides) {
                if let Some(v) = o.last_mut() {
                    *v = s[d];
                }
            }
        } else {
            out_shape.push(ext);
            for (o, s) in out_strides.iter_mut().zip(strides) {
                o.push(s[d]);
            }
        }
    }
    if out_shape.is_empty() {
        out_shape.push(1);
        for o in &mut out_strides {
            o.push(0);
        }
    }
    (out_shape, out_strides)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesces_contiguous_and_broadcast() {
        // [4, 8, 16] + bias [16] → a and out merge fully; bias merges 4×8 (both 0).
        let a = contiguous_strides(&[4, 8, 16]);
        let bias = View::contiguous(DType::F32, &[16])
            .broadcast_to(&[4, 8, 16])
            .unwrap()
            .strides;
        let (shape, s) = coalesce(&[4, 8, 16], &[&a, &bias]);
        assert_eq!(shape, vec![32, 16]);
        assert_eq!(s[0], vec![16, 1]);
        assert_eq!(s[1], vec![0, 1]);
    }

    #[test]
    fn transposed_view_does_not_merge() {
        let v = View::contiguous(DType::F32, &[3, 5]).permute(&[1, 0]);
        let (shape, s) = coalesce(&v.shape, &[&v.strides]);
        assert_eq!(shape, vec![5, 3]);
        assert_eq!(s[0], vec![1, 5]);
    }

    #[test]
    fn scalar_becomes_one_dim() {
        let (shape, s) = coalesce(&[1, 1], &[&[0, 0]]);
        assert_eq!(shape, vec![1]);
        assert_eq!(s[0], vec![0]);
    }
}
