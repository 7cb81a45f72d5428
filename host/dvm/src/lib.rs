//! dvm: dynamic-shape tensor graphs through a runtime operator compiler and
//! a bytecode virtual machine.
//!
//! This crate is the API a user needs; `use dvm::prelude::*` brings all of
//! it into scope. The crates behind it (`dvm-graph`, `dvm-runtime`, …) hold
//! the compiler's and devices' internals.
//!
//! - [`Graph`]: operators over symbolic dimensions ([`Dim`]), built with
//!   one method per operator or read from JSON ([`Graph::from_json_file`]).
//! - [`Prepared`]: a graph decomposed and fused once, on its symbolic
//!   shapes; it runs at every binding of its symbols.
//! - [`Runtime`]: the CPU device. [`Runtime::run`] deduces the symbols from
//!   the inputs' shapes, compiles the kernels its cache does not hold, runs
//!   them and returns [`Outputs`], fetched by name.
//! - [`Tensor`]: a dtype, a shape (`&[u64]`) and aligned element bytes,
//!   viewed in place with [`Tensor::as_slice`].
//! - [`Eager`] and [`LazyTensor`]: operations recorded as they are called
//!   and run fused when a value is read.
//! - [`device`]: every device behind the [`Device`] trait, opened by name.
//!
//! # A graph, prepared once, run at several shapes
//!
//! ```
//! use dvm::prelude::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // y = softmax(x · w + b) over a symbolic sequence length S.
//! let mut g = Graph::new();
//! let s = g.symbol("S", 1, 4096)?;
//! let x = g.input("x", DType::F32, &[s.into(), 8.into()])?;
//! let w = g.input("w", DType::F32, &[8.into(), 8.into()])?;
//! let b = g.input("b", DType::F32, &[8.into()])?;
//! let xw = g.matmul(x, w, false, false)?;
//! let h = g.add(xw, b)?;
//! let y = g.softmax(h, -1)?;
//! g.output("y", y)?;
//!
//! let prepared = Prepared::new(&g)?; // decomposed and fused once
//! let rt = Runtime::with_cores(2); // or Runtime::default(): every core
//! let w = Tensor::from_f32(&[8, 8], &[0.01; 64])?;
//! let b = Tensor::zeros(DType::F32, &[8])?;
//! for len in [1u64, 17, 128] {
//!     let x = Tensor::full(DType::F32, &[len, 8], 0.5)?;
//!     // S is deduced from x's shape: no bindings needed.
//!     let out = rt.run(&prepared, &[("x", &x), ("w", &w), ("b", &b)])?;
//!     let y = out.get("y").ok_or("no output y")?;
//!     assert_eq!(y.shape(), &[len, 8]);
//!     let row_sum: f32 = y.as_slice::<f32>()?[..8].iter().sum();
//!     assert!((row_sum - 1.0).abs() < 1e-5);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! A symbol that no input's shape fixes is given with
//! [`Runtime::run_with_bindings`] and a [`Bindings`] map.
//!
//! # Eager tensors
//!
//! ```
//! use dvm::prelude::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ctx = Eager::new(2);
//! let x = ctx.tensor(Tensor::from_f32(&[2, 3], &[1.0, 2.0, 3.0, -1.0, 0.0, 1.0])?);
//! let gamma = ctx.tensor(Tensor::full(DType::F32, &[3], 1.0)?);
//! // Recorded, not run yet: the operators have the graph builder's names.
//! let y = x.silu()?.rms_norm(&gamma, 1e-6)?.log_softmax(-1)?;
//! assert_eq!(y.shape(), &[2, 3]);
//! let y = y.to_tensor()?; // runs the window, fused
//! let probs: f32 = y.as_slice::<f32>()?[..3].iter().map(|v| v.exp()).sum();
//! assert!((probs - 1.0).abs() < 1e-5);
//! # Ok(())
//! # }
//! ```
//!
//! # Devices by name
//!
//! ```
//! use dvm::prelude::*;
//! use dvm::device::{self, DeviceConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut g = Graph::new();
//! let x = g.input("x", DType::F32, &[4.into()])?;
//! let y = g.tanh(x)?;
//! g.output("y", y)?;
//! let prepared = Prepared::new(&g)?;
//! let x = Tensor::from_f32(&[4], &[-2.0, -0.5, 0.5, 2.0])?;
//!
//! let config = DeviceConfig { cores: Some(2), ..DeviceConfig::default() };
//! let cpu: Box<dyn Device> = device::open("cpu", &config)?;
//! let reference = device::open("reference", &config)?; // f64 evaluator
//! let got = cpu.run(&prepared, &[("x", &x)])?;
//! let want = reference.run(&prepared, &[("x", &x)])?;
//! assert!(got["y"].allclose(&want["y"], 1e-6, 1e-6)?);
//! for entry in device::DEVICES {
//!     println!("{}: {}", entry.name, entry.about); // cpu, reference, qemu, sim
//! }
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

pub use dvm_graph::{Graph, GraphError, NodeId, ReduceOp};
pub use dvm_isa::{DType, Opcode};
pub use dvm_runtime::{
    Device, Eager, EagerError, LazyTensor, Outputs, Prepared, RunError, Runtime,
    DEFAULT_CACHE_CAPACITY,
};
pub use dvm_sym::{Bindings, Dim, SymError, Symbol};
pub use dvm_tensor::{Element, Tensor, TensorError};

/// Fusion options for [`Prepared::with_options`] and [`Eager::with_options`].
pub use dvm_fuse::FuseOptions;

/// Devices: the [`Device`] trait, the registry and [`device::open`].
pub mod device {
    pub use dvm_runtime::device::{
        entry, open, Capabilities, Device, DeviceConfig, DeviceEntry, DeviceError, DEVICES,
    };
    pub use dvm_runtime::{QemuDevice, QemuError, ReferenceDevice, Runtime};
}

/// ONNX import: [`onnx::import`] reads a `.onnx` model as a [`Graph`]
/// with symbolic dimensions (see `docs/onnx.md`).
///
/// ```
/// use dvm::prelude::*;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let path = std::path::Path::new("../../tests/models/encoder.dynamo18.onnx");
/// let g = dvm::onnx::import(path)?; // x: [batch, seq, 64]
/// let prepared = Prepared::new(&g)?;
/// let rt = Runtime::with_cores(2);
/// for (batch, seq) in [(1u64, 5u64), (2, 17)] {
///     let x = Tensor::full(DType::F32, &[batch, seq, 64], 0.1)?;
///     let out = rt.run(&prepared, &[("x", &x)])?;
///     assert_eq!(out["y"].shape(), &[batch, seq, 64]);
/// }
/// # Ok(())
/// # }
/// ```
pub mod onnx {
    pub use dvm_onnx::{
        import, is_onnx, ModelInfo, OnnxError, OnnxModel, UnsupportedNode, ValueInfo, MAX_OPSET,
        MIN_OPSET,
    };
}

/// NumPy `.npy` files: [`npy::read`] and [`npy::write`] a [`Tensor`].
pub mod npy {
    pub use dvm_tensor::npy::{read, read_as, write, write_all, NpyError};
}

/// Everything a program running graphs needs: `use dvm::prelude::*;`.
pub mod prelude {
    pub use crate::device::{DeviceConfig, DeviceError};
    pub use crate::{
        Bindings, DType, Device, Dim, Eager, EagerError, Graph, GraphError, LazyTensor, NodeId,
        Outputs, Prepared, RunError, Runtime, SymError, Symbol, Tensor, TensorError,
    };
}

/// The README's Rust example, compiled and run as a doctest so that the
/// first code a user copies stays true.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
