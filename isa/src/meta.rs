//! Module metadata: names, parameter signatures and debug labels, encoded
//! with postcard in the module's META section. The device never needs it.

use alloc::string::String;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};

/// Metadata of a whole module, one entry per kernel in table order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleMeta {
    /// Per-kernel metadata.
    pub kernels: Vec<KernelMeta>,
}

/// Metadata of one kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelMeta {
    /// Kernel name, unique within a module.
    pub name: String,
    /// Parameter signatures, in parameter order.
    pub params: Vec<ParamMeta>,
    /// Debug labels attached to instructions.
    pub labels: Vec<Label>,
}

/// Signature of one parameter (its dtype and access live in the binary
/// parameter table; this adds what only humans and the host need).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamMeta {
    /// Parameter name.
    pub name: String,
    /// Dimensions, as text (`"128"`, or a symbolic expression like `"S*4"`).
    pub dims: Vec<String>,
}

/// A debug label on the instruction at `word` of body `body`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    /// Body index within the kernel.
    pub body: u32,
    /// Word offset within the body.
    pub word: u32,
    /// Text.
    pub text: String,
}
