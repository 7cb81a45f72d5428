//! Binding symbols from input shapes, and concrete shapes under bindings.

use std::collections::HashMap;

use dvm_isa::DType;

use super::error::GraphError;
use super::{Graph, NodeId, Op};
use dvm_sym::{Bindings, Dim, SymError, Symbol};
use dvm_tensor::Tensor;

/// The concrete shape of every node, indexed by node id.
pub type ConcreteShapes = Vec<Vec<u64>>;

fn names(g: &Graph) -> String {
    g.inputs()
        .iter()
        .map(|&i| format!("`{}`", g[i].name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// ` with S = 4, T = 2` for the bound symbols of `d` (empty if none).
fn with_values(d: &Dim, b: &Bindings) -> String {
    let parts: Vec<String> = d
        .symbols()
        .into_iter()
        .filter_map(|s| b.get(s).map(|v| format!("{s} = {v}")))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" with {}", parts.join(", "))
    }
}

impl Graph {
    /// Binds the graph's symbols from concrete input shapes, starting from
    /// `explicit` values (e.g. `S = 128` given on a command line).
    ///
    /// Each input axis whose declared dimension is a plain symbol binds that
    /// symbol; constant dimensions must match exactly; a dimension that is an
    /// expression (`2*S`) is checked once its symbols are bound, and solves
    /// for its one unbound symbol when that is possible (affine). Every value
    /// is checked against the symbol's declared range and divisibility and
    /// against the recorded equalities, and every symbol that some node's
    /// shape needs must end up bound.
    ///
    /// # Errors
    ///
    /// [`GraphError::MissingInput`], [`GraphError::ExtraInput`],
    /// [`GraphError::DuplicateInput`], [`GraphError::InputRank`] and
    /// [`GraphError::InputDim`] naming the input (and axis);
    /// [`GraphError::Binding`] naming the symbol, its value and its range or
    /// divisor; [`GraphError::UnknownSymbol`] for an explicit binding of a
    /// symbol the graph does not have; [`GraphError::Unbound`] for a symbol
    /// nothing determines.
    pub fn bind(
        &self,
        inputs: &[(&str, &[u64])],
        explicit: &Bindings,
    ) -> Result<Bindings, GraphError> {
        let mut bx = Binder {
            g: self,
            b: Bindings::new(),
            origin: HashMap::new(),
        };
        bx.bind_explicit(explicit)?;
        let shapes = input_shapes(self, inputs)?;
        bx.bind_plain(&shapes)?;
        complete(self, &mut bx.b, "the input shapes")?;
        bx.bind_expressions(&shapes)?;
        check_all_bound(self, &bx.b)?;
        Ok(bx.b)
    }

    /// [`Graph::bind`] from tensors, also checking each input's dtype.
    ///
    /// # Errors
    ///
    /// [`GraphError::InputDType`] naming the input, and the errors of
    /// [`Graph::bind`].
    pub fn bind_tensors(
        &self,
        inputs: &[(&str, &Tensor)],
        explicit: &Bindings,
    ) -> Result<Bindings, GraphError> {
        let shapes: Vec<(&str, &[u64])> = inputs.iter().map(|(n, t)| (*n, t.shape())).collect();
        let b = self.bind(&shapes, explicit)?;
        for &(name, t) in inputs {
            let expected: DType = self
                .input_named(name)
                .map_or(t.dtype(), |id| self[id].dtype);
            if t.dtype() != expected {
                return Err(GraphError::InputDType {
                    input: name.to_owned(),
                    expected,
                    got: t.dtype(),
                });
            }
        }
        Ok(b)
    }

    /// The concrete shape of node `id` under `bindings`.
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownNode`]; [`GraphError::Unbound`] for a missing
    /// symbol; [`GraphError::NodeShape`] for an extent that is negative or
    /// overflows, or a shape whose bytes a 64-bit address space does not
    /// hold (more than `isize::MAX`).
    pub fn concrete_shape(&self, id: NodeId, bindings: &Bindings) -> Result<Vec<u64>, GraphError> {
        let node = self.check(id)?;
        let shape = self.concrete_extents(node, bindings)?;
        if dvm_tensor::byte_size(node.dtype, &shape).is_none() {
            return Err(GraphError::NodeShape {
                node: node.name.to_string(),
                op: node.op.name(),
                shape: node.shape.to_vec(),
                msg: if node.shape.iter().all(Dim::is_const) {
                    format!(
                        "has more bytes of {} than an address space holds",
                        node.dtype
                    )
                } else {
                    format!(
                        "is {} at these bindings: more bytes of {} than an address space holds",
                        super::DimsDisplay(&shape),
                        node.dtype
                    )
                },
            });
        }
        Ok(shape)
    }

    /// The extents of `node` under `bindings`, each checked on its own.
    fn concrete_extents(
        &self,
        node: &super::Node,
        bindings: &Bindings,
    ) -> Result<Vec<u64>, GraphError> {
        node.shape
            .iter()
            .enumerate()
            .map(|(axis, d)| {
                let bad = |msg: String| GraphError::NodeShape {
                    node: node.name.to_string(),
                    op: node.op.name(),
                    shape: node.shape.to_vec(),
                    msg,
                };
                match d.eval(bindings) {
                    Ok(v) => u64::try_from(v).map_err(|_| {
                        bad(format!(
                            "has the negative extent {v} at axis {axis}{}",
                            with_values(d, bindings)
                        ))
                    }),
                    Err(SymError::Unbound { sym, .. }) => Err(GraphError::Unbound {
                        symbol: sym.name().to_owned(),
                        node: node.name.to_string(),
                    }),
                    Err(e) => Err(bad(format!("cannot be evaluated at axis {axis}: {e}"))),
                }
            })
            .collect()
    }

    /// Every node's concrete shape under `bindings` (see [`Graph::bind`]).
    ///
    /// # Errors
    ///
    /// As [`Graph::concrete_shape`], for the first node that fails.
    pub fn concrete_shapes(&self, bindings: &Bindings) -> Result<ConcreteShapes, GraphError> {
        (0..self.nodes().len())
            .map(|i| self.concrete_shape(NodeId(i), bindings))
            .collect()
    }
}

/// The state of [`Graph::bind`]: the values so far and where each came from.
struct Binder<'g> {
    g: &'g Graph,
    b: Bindings,
    /// Where each symbol got its value: an input's axis, or `None` for an
    /// explicit binding (named only in an error message).
    origin: HashMap<Symbol, Option<(NodeId, usize)>>,
}

/// Each graph input with the concrete shape given for it, in the graph's
/// input order; an unknown, repeated or missing input or a wrong rank is
/// an error.
fn input_shapes<'s>(
    g: &Graph,
    inputs: &[(&str, &'s [u64])],
) -> Result<Vec<(NodeId, &'s [u64])>, GraphError> {
    let mut given: HashMap<&str, &[u64]> = HashMap::new();
    for &(name, shape) in inputs {
        if g.input_named(name).is_none() {
            return Err(GraphError::ExtraInput {
                input: name.to_owned(),
                expected: names(g),
            });
        }
        if given.insert(name, shape).is_some() {
            return Err(GraphError::DuplicateInput {
                input: name.to_owned(),
            });
        }
    }
    let mut shapes: Vec<(NodeId, &[u64])> = Vec::with_capacity(g.inputs().len());
    for &id in g.inputs() {
        let node = &g[id];
        let Some(&shape) = given.get(node.name.as_str()) else {
            return Err(GraphError::MissingInput {
                input: node.name.to_string(),
                expected: names(g),
            });
        };
        if shape.len() != node.shape.len() {
            return Err(GraphError::InputRank {
                input: node.name.to_string(),
                expected: node.shape.to_vec(),
                got: shape.to_vec(),
            });
        }
        shapes.push((id, shape));
    }
    Ok(shapes)
}

/// Input `id`'s axis `axis` does not match its declared `dim`.
fn dim_error(
    g: &Graph,
    id: NodeId,
    shape: &[u64],
    axis: usize,
    dim: &Dim,
    detail: String,
) -> GraphError {
    GraphError::InputDim {
        input: g[id].name.to_string(),
        shape: shape.to_vec(),
        axis,
        dim: dim.clone(),
        got: shape[axis],
        detail,
    }
}

/// Axis `axis` of a given input shape as an `i64`.
fn extent(g: &Graph, id: NodeId, shape: &[u64], axis: usize, dim: &Dim) -> Result<i64, GraphError> {
    i64::try_from(shape[axis])
        .map_err(|_| dim_error(g, id, shape, axis, dim, " (too large)".to_owned()))
}

impl Binder<'_> {
    fn origin_text(&self, sym: Symbol) -> String {
        match self.origin.get(&sym) {
            Some(Some((id, axis))) => format!("input `{}` axis {axis}", self.g[*id].name),
            Some(None) => "an explicit binding".to_owned(),
            None => String::new(),
        }
    }

    /// The explicit bindings: each names a symbol of the graph.
    fn bind_explicit(&mut self, explicit: &Bindings) -> Result<(), GraphError> {
        let scope = self.g.scope();
        for (sym, value) in explicit.iter() {
            if scope.lookup(sym.name()) != Some(sym) {
                return Err(GraphError::UnknownSymbol {
                    symbol: sym.name().to_owned(),
                    known: scope
                        .symbols()
                        .map(|s| format!("`{s}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            scope
                .bind(&mut self.b, sym, value)
                .map_err(|source| GraphError::Binding {
                    context: format!("explicit binding `{sym}` = {value}"),
                    source,
                })?;
            self.origin.insert(sym, None);
        }
        Ok(())
    }

    /// Pass 1: axes declared as plain symbols bind them; constant axes
    /// must match.
    fn bind_plain(&mut self, shapes: &[(NodeId, &[u64])]) -> Result<(), GraphError> {
        let g = self.g;
        let scope = g.scope();
        for &(id, shape) in shapes {
            for (axis, declared) in g[id].shape.iter().enumerate() {
                let dim = scope.canonical(declared);
                let value = extent(g, id, shape, axis, &dim)?;
                if let Some(c) = dim.as_const() {
                    if c != value {
                        return Err(dim_error(g, id, shape, axis, &dim, String::new()));
                    }
                } else if let Some(sym) = dim.as_symbol() {
                    match self.b.get(sym) {
                        Some(v) if v != value => {
                            let from = self.origin_text(sym);
                            return Err(dim_error(
                                g,
                                id,
                                shape,
                                axis,
                                &dim,
                                format!(", and `{sym}` = {v} from {from}"),
                            ));
                        }
                        Some(_) => {}
                        None => {
                            scope.bind(&mut self.b, sym, value).map_err(|source| {
                                GraphError::Binding {
                                    context: format!(
                                        "input `{}` (shape {}) axis {axis}",
                                        g[id].name,
                                        super::DimsDisplay(shape)
                                    ),
                                    source,
                                }
                            })?;
                            self.origin.insert(sym, Some((id, axis)));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Pass 2: axes declared as expressions, solving for one unbound symbol
    /// at a time until nothing changes.
    fn bind_expressions(&mut self, shapes: &[(NodeId, &[u64])]) -> Result<(), GraphError> {
        let g = self.g;
        loop {
            let mut progress = false;
            let mut pending = None;
            for &(id, shape) in shapes {
                for (axis, declared) in g[id].shape.iter().enumerate() {
                    match self.bind_expression(id, shape, axis, declared)? {
                        Solved::Nothing => {}
                        Solved::Bound => progress = true,
                        Solved::Pending(dim, t) => pending = Some((id, shape, axis, dim, t)),
                    }
                }
            }
            if progress {
                complete(g, &mut self.b, "the input shapes")?;
                continue;
            }
            if let Some((id, shape, axis, dim, t)) = pending {
                return Err(dim_error(
                    g,
                    id,
                    shape,
                    axis,
                    &dim,
                    format!(" and `{t}` cannot be solved for; bind it explicitly"),
                ));
            }
            return Ok(());
        }
    }

    /// One axis of pass 2: checks an expression whose symbols are bound, or
    /// solves it for its one unbound symbol.
    fn bind_expression(
        &mut self,
        id: NodeId,
        shape: &[u64],
        axis: usize,
        declared: &Dim,
    ) -> Result<Solved, GraphError> {
        let g = self.g;
        let scope = g.scope();
        let dim = scope.canonical(declared);
        if dim.is_const() || dim.as_symbol().is_some() {
            return Ok(Solved::Nothing);
        }
        let value = extent(g, id, shape, axis, &dim)?;
        let unbound: Vec<Symbol> = dim
            .symbols()
            .into_iter()
            .filter(|s| self.b.get(*s).is_none())
            .collect();
        match unbound.as_slice() {
            [] => {
                let v = dim.eval(&self.b).map_err(|source| GraphError::Binding {
                    context: format!("input `{}` axis {axis}", g[id].name),
                    source,
                })?;
                if v != value {
                    return Err(dim_error(
                        g,
                        id,
                        shape,
                        axis,
                        &dim,
                        format!(" = {v}{}", with_values(&dim, &self.b)),
                    ));
                }
                Ok(Solved::Nothing)
            }
            [t] => match solve(&dim, *t, value, &self.b) {
                Some(tv) => {
                    scope
                        .bind(&mut self.b, *t, tv)
                        .map_err(|source| GraphError::Binding {
                            context: format!(
                                "input `{}` (shape {}) axis {axis}: `{dim}` = {value} gives `{t}` = {tv}",
                                g[id].name,
                                super::DimsDisplay(shape)
                            ),
                            source,
                        })?;
                    self.origin.insert(*t, Some((id, axis)));
                    Ok(Solved::Bound)
                }
                None => Ok(Solved::Pending(dim.clone(), *t)),
            },
            [t, ..] => Ok(Solved::Pending(dim.clone(), *t)),
        }
    }
}

/// What one axis of pass 2 did.
enum Solved {
    /// Checked, or nothing to do.
    Nothing,
    /// Bound a symbol.
    Bound,
    /// Cannot be solved yet: the expression and an unbound symbol.
    Pending(Dim, Symbol),
}

/// Every symbol a node needs must be bound.
fn check_all_bound(g: &Graph, b: &Bindings) -> Result<(), GraphError> {
    for node in g.nodes() {
        let extra = match &node.op {
            Op::ScalarDim(_, d) => Some(d),
            _ => None,
        };
        for d in node.shape.iter().chain(extra) {
            // (Constants need nothing; a plain symbol is looked up
            // without collecting it.)
            if d.is_const() || d.as_symbol().is_some_and(|s| b.get(s).is_some()) {
                continue;
            }
            if let Some(s) = d.symbols().into_iter().find(|s| b.get(*s).is_none()) {
                return Err(GraphError::Unbound {
                    symbol: s.name().to_owned(),
                    node: node.name.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// Fills in values the scope's equalities determine and checks everything.
fn complete(g: &Graph, b: &mut Bindings, what: &str) -> Result<(), GraphError> {
    g.scope()
        .complete_bindings(b)
        .map_err(|source| GraphError::Binding {
            context: format!("binding symbols from {what}"),
            source,
        })
}

/// The value of `t` making `dim == value`, when `dim` is affine in `t` under
/// the other bindings (checked by substituting back).
fn solve(dim: &Dim, t: Symbol, value: i64, b: &Bindings) -> Option<i64> {
    let at = |v: i64| dim.eval(&b.clone().with(t, v)).ok();
    let (e0, e1) = (at(0)?, at(1)?);
    let c1 = e1.checked_sub(e0)?;
    let num = value.checked_sub(e0)?;
    if c1 == 0 || num % c1 != 0 {
        return None;
    }
    let tv = num / c1;
    (at(tv)? == value).then_some(tv)
}
