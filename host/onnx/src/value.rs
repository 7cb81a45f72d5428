//! The importer's "known value" lattice: every ONNX value is a runtime
//! tensor (a graph node), a folded constant, or a symbolic int vector (a
//! shape tensor whose elements are [`Dim`]s).

use dvm_graph::NodeId;
use dvm_isa::DType;
use dvm_sym::Dim;

/// ONNX element types (`TensorProto.DataType`) and what dvm makes of them.
pub(crate) mod elem {
    use dvm_isa::DType;

    pub const FLOAT: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT8: i32 = 3;
    pub const UINT16: i32 = 4;
    pub const INT16: i32 = 5;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
    pub const BOOL: i32 = 9;
    pub const FLOAT16: i32 = 10;
    pub const DOUBLE: i32 = 11;
    pub const UINT32: i32 = 12;
    pub const UINT64: i32 = 13;
    pub const BFLOAT16: i32 = 16;

    /// The type's name as ONNX spells it.
    pub fn name(t: i32) -> String {
        let s = match t {
            FLOAT => "float",
            UINT8 => "uint8",
            INT8 => "int8",
            UINT16 => "uint16",
            INT16 => "int16",
            INT32 => "int32",
            INT64 => "int64",
            8 => "string",
            BOOL => "bool",
            FLOAT16 => "float16",
            DOUBLE => "double",
            UINT32 => "uint32",
            UINT64 => "uint64",
            BFLOAT16 => "bfloat16",
            _ => return format!("#{t}"),
        };
        s.to_owned()
    }

    /// Bytes per element in `raw_data`, for the types constants may have.
    pub fn byte_width(t: i32) -> Option<usize> {
        Some(match t {
            BOOL | INT8 | UINT8 => 1,
            FLOAT16 | BFLOAT16 | INT16 | UINT16 => 2,
            FLOAT | INT32 | UINT32 => 4,
            INT64 | UINT64 | DOUBLE => 8,
            _ => return None,
        })
    }

    /// One little-endian element of `raw_data` as `f64` (64-bit integers
    /// beyond 2^53 round, which shape and index values never reach).
    pub fn from_le_bytes(t: i32, c: &[u8]) -> f64 {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        let u = u64::from_le_bytes(w);
        match t {
            FLOAT => f64::from(f32::from_bits(u as u32)),
            DOUBLE => f64::from_bits(u),
            FLOAT16 => f64::from(half::f16::from_bits(u as u16)),
            BFLOAT16 => f64::from(half::bf16::from_bits(u as u16)),
            INT8 => f64::from(u as u8 as i8),
            INT16 => f64::from(u as u16 as i16),
            INT32 => f64::from(u as u32 as i32),
            INT64 => u as i64 as f64,
            BOOL => f64::from(u8::from(u != 0)),
            _ => u as f64,
        }
    }

    /// True for the integer types (not bool).
    pub fn is_int(t: i32) -> bool {
        matches!(
            t,
            UINT8 | INT8 | UINT16 | INT16 | INT32 | INT64 | UINT32 | UINT64
        )
    }

    /// The dvm dtype a runtime tensor of ONNX type `t` is computed in:
    /// `int64` as `i32` (index and shape values fit), `double` is not
    /// supported.
    pub fn dtype(t: i32) -> Option<DType> {
        Some(match t {
            FLOAT => DType::F32,
            FLOAT16 => DType::F16,
            BFLOAT16 => DType::BF16,
            INT32 | INT64 => DType::I32,
            INT8 => DType::I8,
            BOOL => DType::Bool,
            _ => return None,
        })
    }
}

/// A folded constant: an ONNX element type, a shape and the row-major
/// values (integers exact up to 2^53).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Const {
    pub elem: i32,
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Const {
    pub fn scalar(elem: i32, v: f64) -> Const {
        Const {
            elem,
            shape: Vec::new(),
            data: vec![v],
        }
    }

    /// The single value of a one-element constant.
    pub fn single(&self) -> Option<f64> {
        (self.data.len() == 1).then(|| self.data[0])
    }

    /// `self` converted to element type `to`, as ONNX `Cast` converts
    /// (floats to integers truncate; to bool is `!= 0`).
    pub fn cast(&self, to: i32) -> Const {
        let data = self
            .data
            .iter()
            .map(|&v| {
                if to == elem::BOOL {
                    f64::from(u8::from(v != 0.0))
                } else if elem::is_int(to) {
                    v.trunc()
                } else if to == elem::FLOAT {
                    f64::from(v as f32)
                } else {
                    v
                }
            })
            .collect();
        Const {
            elem: to,
            shape: self.shape.clone(),
            data,
        }
    }
}

/// What the importer knows about one ONNX value.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    /// A tensor computed at run time by graph node `id`, of ONNX type `elem`.
    Runtime { id: NodeId, elem: i32 },
    /// A constant, folded at import.
    Const(Const),
    /// An `int64` scalar (`scalar`) or vector of symbolic dimensions: shape
    /// arithmetic folded at import.
    Ints { scalar: bool, dims: Vec<Dim> },
}

impl Value {
    /// The value as a vector (or scalar) of dimensions, if it is an integer
    /// constant of rank 0 or 1 or a symbolic int vector.
    pub fn ints(&self) -> Option<(bool, Vec<Dim>)> {
        match self {
            Value::Ints { scalar, dims } => Some((*scalar, dims.clone())),
            Value::Const(c) if elem::is_int(c.elem) && c.shape.len() <= 1 => Some((
                c.shape.is_empty(),
                c.data.iter().map(|&v| Dim::from(v as i64)).collect(),
            )),
            _ => None,
        }
    }

    /// The value as a constant, if it is one (a symbolic int vector whose
    /// elements are all constants counts).
    pub fn as_const(&self) -> Option<Const> {
        match self {
            Value::Const(c) => Some(c.clone()),
            Value::Ints { scalar, dims } => {
                let data = dims
                    .iter()
                    .map(|d| d.as_const().map(|v| v as f64))
                    .collect::<Option<Vec<f64>>>()?;
                Some(Const {
                    elem: elem::INT64,
                    shape: if *scalar { vec![] } else { vec![dims.len()] },
                    data,
                })
            }
            Value::Runtime { .. } => None,
        }
    }

    /// The ONNX element type.
    pub fn elem(&self) -> i32 {
        match self {
            Value::Runtime { elem, .. } => *elem,
            Value::Const(c) => c.elem,
            Value::Ints { .. } => elem::INT64,
        }
    }

    /// Symbolic int vectors whose elements are all constants become
    /// constants; anything else is returned as it is.
    pub fn normalized(self) -> Value {
        match &self {
            Value::Ints { .. } => self.as_const().map_or(self, Value::Const),
            _ => self,
        }
    }
}

/// The broadcast shape of two constant shapes (NumPy rules).
pub(crate) fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let x = if i + a.len() >= n {
                a[i + a.len() - n]
            } else {
                1
            };
            let y = if i + b.len() >= n {
                b[i + b.len() - n]
            } else {
                1
            };
            match (x, y) {
                (x, y) if x == y => Some(x),
                (1, y) => Some(y),
                (x, 1) => Some(x),
                _ => None,
            }
        })
        .collect()
}

/// Largest result [`zip_broadcast`] computes, in elements.
pub(crate) const FOLD_ELEMENTS: usize = 1 << 24;

/// Element-wise `f` over constants with broadcasting; `None` if the shapes
/// do not broadcast or the result has more than [`FOLD_ELEMENTS`].
pub(crate) fn zip_broadcast(
    inputs: &[&Const],
    out_elem: i32,
    f: impl Fn(&[f64]) -> f64,
) -> Option<Const> {
    let mut shape: Vec<usize> = Vec::new();
    for c in inputs {
        shape = broadcast_shape(&shape, &c.shape)?;
    }
    // Folding is for small constants: a broadcast beyond the limit is
    // left to the graph.
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= FOLD_ELEMENTS)?;
    let rank = shape.len();
    let strides: Vec<Vec<usize>> = inputs
        .iter()
        .map(|c| {
            let mut s = vec![0usize; rank];
            let mut acc = 1;
            for i in (0..c.shape.len()).rev() {
                let o = rank - c.shape.len() + i;
                s[o] = if c.shape[i] == 1 { 0 } else { acc };
                acc *= c.shape[i];
            }
            s
        })
        .collect();
    let mut idx = vec![0usize; rank];
    let mut args = vec![0.0; inputs.len()];
    let mut data = Vec::with_capacity(count);
    for _ in 0..count {
        for (k, c) in inputs.iter().enumerate() {
            let off: usize = idx.iter().zip(&strides[k]).map(|(i, s)| i * s).sum();
            args[k] = c.data[off];
        }
        data.push(f(&args));
        for ax in (0..rank).rev() {
            idx[ax] += 1;
            if idx[ax] < shape[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    Some(Const {
        elem: out_elem,
        shape,
        data,
    })
}

/// A dvm dtype for ONNX type `t`, or why not.
pub(crate) fn dtype_of(t: i32) -> Result<DType, String> {
    elem::dtype(t).ok_or_else(|| format!("element type {} is not supported", elem::name(t)))
}
