//! The graph IR: typed tensors with symbolic shapes, built op by op.
//!
//! Programs take the user API from the `dvm` crate (`use dvm::prelude::*`),
//! which re-exports what they need from here; this crate's other items are
//! the internals the CLI, the tests and the benchmarks use.
//!
//! A [`Graph`] owns a [`SymbolScope`], a list of [`Node`]s (each an [`Op`], its
//! operand node ids, a unique name, a dtype and a symbolic shape), the inputs
//! in order and the named outputs. Node ids are indices into the node list,
//! and since a node can only use nodes that already exist, the list is in
//! topological order by construction.
//!
//! ```
//! use dvm_graph::Graph;
//! use dvm_isa::DType;
//!
//! let mut g = Graph::new();
//! let s = g.symbol("S", 1, 8192)?;
//! let x = g.input("x", DType::F32, &[s.into(), 768.into()])?;
//! let w = g.input("w", DType::F32, &[768.into(), 3072.into()])?;
//! let h = g.matmul(x, w, false, false)?;
//! let y = g.gelu_tanh(h)?;
//! g.output("y", y)?;
//! assert_eq!(g.shape_string(y), "[S, 3072]");
//! # Ok::<(), dvm_graph::GraphError>(())
//! ```
//!
//! # Shape propagation
//!
//! Every builder method computes the result's dtype and symbolic shape when
//! the node is added, and rejects the node with a [`GraphError`] naming the
//! node, its op, the operand shapes and the dimension at fault.
//!
//! **Broadcasting policy** (element-wise ops, `where`, matmul batch axes):
//! NumPy's rules with shapes right-aligned, and dimensions decided by
//! [`SymbolScope::broadcast`], which never assumes: two dimensions combine if
//! they are provably equal (same canonical form, or equal under the scope's
//! recorded equalities and ranges), or if one of them is the constant 1. Two
//! different symbols (`S` against `T`), or a symbol against a constant other
//! than 1 (`S` against `768`, where `S` might be 1), are errors; declare the
//! fact with [`Graph::declare_equal`] (or a range excluding 1) first.
//! Dimensions that must match exactly (matmul contraction, concat's other
//! axes, layer-norm weights, expand targets) must be provably equal.
//!
//! **Dtypes** follow the instruction set's rule for the opcode an op lowers
//! to (e.g. `exp` accepts f32/f16/bf16, so `exp` of an i32 tensor is an
//! error); operands of element-wise ops must have the same dtype (no implicit
//! promotion: insert a [`cast`](Graph::cast)).
//!
//! **Axes** are given as `i64`; negative values count from the end.
#![forbid(unsafe_code)]

mod bind;
mod builder;
mod decompose;
mod elementwise;
mod error;
pub mod json;
pub mod models;
pub mod op;
pub mod reference;
mod shape;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasherDefault;
use std::sync::OnceLock;

use smallvec::SmallVec;

use dvm_isa::DType;

pub use bind::ConcreteShapes;
pub use compact_str::CompactString;
pub use decompose::{decompose, decompose_owned, decompose_with_spans, decomposed_len};
pub use error::{DimsDisplay, GraphError, ShapeDisplay};
pub use op::{
    is_comparison, opcode_dtypes, opcode_kind, result_dtype, window_extent, Conv2d, Op, OpcodeKind,
    Pool2d, ReduceOp,
};

use dvm_sym::{Dim, Symbol, SymbolScope};

/// Index of a node in its graph (see [`Graph::nodes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

impl NodeId {
    /// The index into [`Graph::nodes`].
    pub fn index(self) -> usize {
        self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// The operand ids of a [`Node`]: a slice ([`Deref`](std::ops::Deref)),
/// held inline for up to [`Operands::INLINE`] operands (every operator but a
/// long concat), so that a node costs no allocation for them.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Operands(SmallVec<[NodeId; Operands::INLINE]>);

impl Operands {
    /// Most operands held inline.
    pub const INLINE: usize = 3;

    /// No operands.
    pub const fn new() -> Operands {
        Operands(SmallVec::new_const())
    }

    /// The ids as a slice.
    #[inline]
    pub fn as_slice(&self) -> &[NodeId] {
        &self.0
    }

    /// The ids as a mutable slice.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [NodeId] {
        &mut self.0
    }
}

impl std::ops::Deref for Operands {
    type Target = [NodeId];
    #[inline]
    fn deref(&self) -> &[NodeId] {
        &self.0
    }
}

impl std::ops::DerefMut for Operands {
    #[inline]
    fn deref_mut(&mut self) -> &mut [NodeId] {
        &mut self.0
    }
}

impl From<&[NodeId]> for Operands {
    fn from(ids: &[NodeId]) -> Operands {
        Operands(SmallVec::from_slice(ids))
    }
}

impl From<Vec<NodeId>> for Operands {
    fn from(ids: Vec<NodeId>) -> Operands {
        Operands(SmallVec::from_vec(ids))
    }
}

impl FromIterator<NodeId> for Operands {
    fn from_iter<I: IntoIterator<Item = NodeId>>(iter: I) -> Operands {
        Operands(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a Operands {
    type Item = &'a NodeId;
    type IntoIter = std::slice::Iter<'a, NodeId>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a mut Operands {
    type Item = &'a mut NodeId;
    type IntoIter = std::slice::IterMut<'a, NodeId>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter_mut()
    }
}

impl PartialEq<[NodeId]> for Operands {
    fn eq(&self, other: &[NodeId]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<Vec<NodeId>> for Operands {
    fn eq(&self, other: &Vec<NodeId>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl fmt::Debug for Operands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// One node: an operator applied to earlier nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The operator (axes normalised to non-negative, sorted where the op
    /// says so).
    pub op: Op,
    /// Operand node ids, in order (all smaller than this node's id).
    pub operands: Operands,
    /// Unique name (`[A-Za-z0-9_.-]`, not starting with `.`), held inline
    /// up to 24 bytes.
    pub name: CompactString,
    /// Element type of the result.
    pub dtype: DType,
    /// Symbolic shape of the result, canonical under the graph's scope at the
    /// time the node was added.
    pub shape: Shape,
}

/// The symbolic shape of a [`Node`]: a slice of [`Dim`]s
/// ([`Deref`](std::ops::Deref)), held inline up to rank 3, so that a node
/// of the common ranks costs no allocation for it. (A `Dim` is 24 bytes:
/// room for rank 4 would make every node 24 bytes larger; with 32-byte
/// `Dim`s that measured slower on the fusion benchmark's window of rank-2
/// shapes.)
pub type Shape = SmallVec<[Dim; 3]>;

/// `dims` as a [`Shape`], a push per dimension: for the short shapes of
/// most nodes that costs less than `SmallVec`'s `clone` and
/// `From<&[Dim]>` (a generic `extend` behind `collect`).
pub(crate) fn to_shape(dims: &[Dim]) -> Shape {
    let mut s = Shape::with_capacity(dims.len());
    for d in dims {
        s.push(d.clone());
    }
    s
}

/// A tensor program over symbolic shapes (see the [module docs](self)).
#[derive(Clone, Debug, Default)]
pub struct Graph {
    scope: SymbolScope,
    nodes: Vec<Node>,
    inputs: Vec<NodeId>,
    outputs: Vec<(String, NodeId)>,
    /// Node names to ids, built on the first lookup and kept up to date
    /// from then on: a graph that is never looked up by name (a
    /// decomposed copy) does not pay for it.
    names: OnceLock<NameIndex>,
}

/// An index of node names by a 64-bit hash of the name, so that it holds no
/// copies of the names: an entry is confirmed against the node's own name,
/// and the (practically never seen) names whose hash another name already
/// holds are kept in a list.
#[derive(Clone, Debug, Default)]
struct NameIndex {
    by_hash: HashMap<u64, NodeId, BuildHasherDefault<dvm_sym::IdHasher>>,
    collided: Vec<NodeId>,
}

/// FNV-1a over the name's bytes, eight at a time.
fn name_hash(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut chunks = name.as_bytes().chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^ (name.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl NameIndex {
    fn build(nodes: &[Node]) -> NameIndex {
        let mut ix = NameIndex::default();
        ix.by_hash.reserve(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            ix.insert(nodes, &n.name, NodeId(i));
        }
        ix
    }

    fn get(&self, nodes: &[Node], name: &str) -> Option<NodeId> {
        let id = *self.by_hash.get(&name_hash(name))?;
        if nodes.get(id.0).is_some_and(|n| n.name == name) {
            return Some(id);
        }
        self.collided
            .iter()
            .copied()
            .find(|c| nodes.get(c.0).is_some_and(|n| n.name == name))
    }

    /// Records `id` under `name` (`nodes[id]` may not exist yet).
    fn insert(&mut self, nodes: &[Node], name: &str, id: NodeId) {
        match self.by_hash.entry(name_hash(name)) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(id);
            }
            std::collections::hash_map::Entry::Occupied(e) => {
                let held = *e.get();
                if nodes.get(held.0).is_some_and(|n| n.name == name) {
                    // The same name again (a rename to itself).
                    return;
                }
                self.collided.push(id);
            }
        }
    }

    /// Forgets `id`, listed under `name`.
    fn remove(&mut self, nodes: &[Node], name: &str, id: NodeId) {
        let h = name_hash(name);
        if self.by_hash.get(&h) == Some(&id) {
            self.by_hash.remove(&h);
            // A collided name with the same hash takes the slot.
            if let Some(k) = self
                .collided
                .iter()
                .position(|c| nodes.get(c.0).is_some_and(|n| name_hash(&n.name) == h))
            {
                let c = self.collided.swap_remove(k);
                self.by_hash.insert(h, c);
            }
        } else {
            self.collided.retain(|&c| c != id);
        }
    }
}

/// Longest accepted node or output name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// Checks a node or output name: 1 to 128 bytes of `[A-Za-z0-9_.-]`, not
/// starting with `.` (names become file names, e.g. `DIR/NAME.npy`).
///
/// # Errors
///
/// [`GraphError::InvalidName`] naming the problem.
pub fn check_name(kind: &'static str, name: &str) -> Result<(), GraphError> {
    let reason = if name.is_empty() {
        Some("empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("longer than 128 bytes")
    } else if name.starts_with('.') {
        Some("starts with `.`")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        Some("only ASCII letters, digits, `_`, `.` and `-` are allowed")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(GraphError::InvalidName {
            kind,
            name: name.chars().take(MAX_NAME_LEN).collect(),
            reason,
        }),
    }
}

impl Graph {
    /// An empty graph with an empty symbol scope.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// The symbol scope (ranges, divisibility, equalities).
    pub fn scope(&self) -> &SymbolScope {
        &self.scope
    }

    /// All nodes, in topological order; `NodeId(i)` is `nodes()[i]`.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node `id`, if it is in this graph.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.0)
    }

    /// The graph inputs (nodes with [`Op::Input`]), in declaration order.
    pub fn inputs(&self) -> &[NodeId] {
        &self.inputs
    }

    /// The named outputs, in declaration order.
    pub fn outputs(&self) -> &[(String, NodeId)] {
        &self.outputs
    }

    /// The node named `name`.
    pub fn find(&self, name: &str) -> Option<NodeId> {
        self.name_index().get(&self.nodes, name)
    }

    /// The input named `name`: a scan of the inputs while the name index
    /// is not built and they are few (binding a prepared graph's inputs
    /// does not build it).
    pub(crate) fn input_named(&self, name: &str) -> Option<NodeId> {
        if self.names.get().is_none() && self.inputs.len() <= 32 {
            return self
                .inputs
                .iter()
                .copied()
                .find(|&i| self.nodes[i.0].name == name);
        }
        self.find(name)
            .filter(|&id| self.nodes[id.0].op == Op::Input)
    }

    fn name_index(&self) -> &NameIndex {
        self.names.get_or_init(|| NameIndex::build(&self.nodes))
    }

    /// The node's shape printed as `[S, 768]` (empty string for a foreign id).
    pub fn shape_string(&self, id: NodeId) -> String {
        self.node(id)
            .map(|n| ShapeDisplay(&n.shape).to_string())
            .unwrap_or_default()
    }

    /// The symbol `name` with the declared range `lo..=hi`.
    ///
    /// Declaring an existing symbol again intersects the ranges.
    ///
    /// # Errors
    ///
    /// [`GraphError::Symbol`] for an invalid name or an empty range.
    pub fn symbol(&mut self, name: &str, lo: i64, hi: i64) -> Result<Symbol, GraphError> {
        let ctx = || format!("declaring symbol `{name}` in {lo}..={hi}");
        let mut scope = self.scope.clone();
        let sym = scope.symbol(name).map_err(|source| GraphError::Symbol {
            context: ctx(),
            source,
        })?;
        scope
            .declare_range(sym, lo, hi)
            .map_err(|source| GraphError::Symbol {
                context: ctx(),
                source,
            })?;
        self.scope = scope;
        Ok(sym)
    }

    /// Declares `sym % multiple == 0`.
    ///
    /// # Errors
    ///
    /// [`GraphError::Symbol`] if the fact is invalid or leaves no value.
    pub fn declare_multiple_of(&mut self, sym: Symbol, multiple: i64) -> Result<(), GraphError> {
        self.scope
            .declare_multiple_of(sym, multiple)
            .map_err(|source| GraphError::Symbol {
                context: format!("declaring `{sym}` a multiple of {multiple}"),
                source,
            })
    }

    /// Declares `lo <= sym <= hi` (intersected with what is known).
    ///
    /// # Errors
    ///
    /// [`GraphError::Symbol`] if no value would remain.
    pub fn declare_range(&mut self, sym: Symbol, lo: i64, hi: i64) -> Result<(), GraphError> {
        self.scope
            .declare_range(sym, lo, hi)
            .map_err(|source| GraphError::Symbol {
                context: format!("declaring `{sym}` in {lo}..={hi}"),
                source,
            })
    }

    /// Records that two dimensions are equal (e.g. two inputs' sequence
    /// symbols), so that they broadcast and match each other.
    ///
    /// # Errors
    ///
    /// [`GraphError::Symbol`] if they can never be equal or the equality
    /// cannot be recorded.
    pub fn declare_equal(&mut self, a: &Dim, b: &Dim) -> Result<(), GraphError> {
        self.scope.unify(a, b).map_err(|source| GraphError::Symbol {
            context: format!("declaring `{a}` == `{b}`"),
            source: source.into(),
        })
    }

    /// Parses a dimension expression (`"S"`, `"2*S+1"`, `"768"`), adding new
    /// symbols to the scope with the default range.
    ///
    /// # Errors
    ///
    /// [`GraphError::Symbol`] for malformed text.
    pub fn parse_dim(&mut self, text: &str) -> Result<Dim, GraphError> {
        Dim::parse(text, &mut self.scope).map_err(|source| GraphError::Symbol {
            context: format!("parsing dimension `{text}`"),
            source,
        })
    }

    /// Gives node `id` the name `name`.
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownNode`], [`GraphError::InvalidName`], or
    /// [`GraphError::DuplicateName`] if another node has that name.
    pub fn rename(&mut self, id: NodeId, name: &str) -> Result<(), GraphError> {
        self.check(id)?;
        check_name("node", name)?;
        match self.find(name) {
            Some(other) if other == id => return Ok(()),
            Some(_) => {
                return Err(GraphError::DuplicateName {
                    kind: "node",
                    name: name.to_owned(),
                })
            }
            None => {}
        }
        let mut ix = self
            .names
            .take()
            .unwrap_or_else(|| NameIndex::build(&self.nodes));
        ix.remove(&self.nodes, &self.nodes[id.0].name, id);
        self.nodes[id.0].name = CompactString::from(name);
        ix.insert(&self.nodes, name, id);
        self.names = OnceLock::from(ix);
        Ok(())
    }

    /// Marks node `node` as the output `name`.
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownNode`], [`GraphError::InvalidName`], or
    /// [`GraphError::DuplicateName`] if an output already has that name.
    pub fn output(&mut self, name: &str, node: NodeId) -> Result<(), GraphError> {
        self.check(node)?;
        check_name("output", name)?;
        if self.outputs.iter().any(|(n, _)| n == name) {
            return Err(GraphError::DuplicateName {
                kind: "output",
                name: name.to_owned(),
            });
        }
        self.outputs.push((name.to_owned(), node));
        Ok(())
    }

    pub(crate) fn check(&self, id: NodeId) -> Result<&Node, GraphError> {
        // (A match, not `ok_or`: the error is built, and dropped, only
        // when it is returned.)
        match self.nodes.get(id.0) {
            Some(n) => Ok(n),
            None => Err(GraphError::UnknownNode {
                id: id.0,
                len: self.nodes.len(),
            }),
        }
    }

    /// A fresh node name derived from `base` (`base`, else `base_1`, …).
    pub(crate) fn fresh_name(&self, base: &str) -> String {
        if self.find(base).is_none() && check_name("node", base).is_ok() {
            return base.to_owned();
        }
        (1..)
            .map(|i| format!("{base}_{i}"))
            .find(|n| self.find(n).is_none())
            .unwrap_or_else(|| base.to_owned())
    }

    /// Appends a node whose op, dtype and shape were already checked.
    fn push(&mut self, node: Node) -> NodeId {
        let id = NodeId(self.nodes.len());
        if let Some(ix) = self.names.get_mut() {
            ix.insert(&self.nodes, &node.name, id);
        }
        if node.op == Op::Input {
            self.inputs.push(id);
        }
        self.nodes.push(node);
        id
    }
}

impl std::ops::Index<NodeId> for Graph {
    type Output = Node;

    /// The node `id`.
    ///
    /// # Panics
    ///
    /// If `id` is not a node of this graph; use [`Graph::node`] for ids of
    /// unknown origin.
    fn index(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }
}

impl fmt::Display for Graph {
    /// One line per node: `%3 h: f32[S, 3072] = matmul(%0 x, %1 w) {…}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, n) in self.nodes.iter().enumerate() {
            write!(
                f,
                "%{i} {}: {}{} = {}(",
                n.name,
                n.dtype,
                ShapeDisplay(&n.shape),
                n.op.name()
            )?;
            for (j, o) in n.operands.iter().enumerate() {
                if j > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{o} {}", self.nodes[o.0].name)?;
            }
            f.write_str(")")?;
            match &n.op {
                Op::Input | Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast => {}
                Op::Reshape | Op::Expand => {}
                Op::Constant(v) => write!(f, " [{} values]", v.len())?,
                Op::Scalar(_, v) => write!(f, " {v}")?,
                Op::ScalarDim(_, d) => write!(f, " {d}")?,
                other => write!(f, " {other:?}")?,
            }
            writeln!(f)?;
        }
        for (name, id) in &self.outputs {
            writeln!(f, "output {name} = {id} {}", self.nodes[id.0].name)?;
        }
        Ok(())
    }
}
