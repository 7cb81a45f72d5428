//! Composite operators exporters write as primitives, recognised before
//! conversion so they become dvm's own (and fuse as hand-written graphs
//! do):
//!
//! * GELU, erf form: `x · 0.5 · (1 + erf(x / √2))` (or `x · (1/√2)`);
//! * GELU, tanh form: `x · 0.5 · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`;
//!
//! with the final products in any order. Every intermediate value must
//! feed only the next step of the pattern (and not be a graph output).
//! `LayerNormalization` and `Softmax` arrive as single ONNX ops from both
//! PyTorch exporters at opsets 17 and 18 and map to dvm's composites
//! directly.

use std::collections::{HashMap, HashSet};

use dvm_isa::Opcode;

use crate::proto::{GraphProto, NodeProto};
use crate::tensor_data;
use crate::value::Value;

/// A recognised composite: computed from `input`, it replaces the node
/// that produces `output`.
#[derive(Clone, Debug)]
pub(crate) struct Match {
    pub input: String,
    pub output: String,
    pub opcode: Opcode,
}

/// The recognised composites of a graph.
#[derive(Default)]
pub(crate) struct Plan {
    covered: HashSet<usize>,
    roots: HashMap<usize, Match>,
}

impl Plan {
    /// True for a node replaced by a composite (skipped).
    pub fn covered(&self, index: usize) -> bool {
        self.covered.contains(&index) && !self.roots.contains_key(&index)
    }

    /// The composite emitted in place of node `index`.
    pub fn root(&self, index: usize) -> Option<&Match> {
        self.roots.get(&index)
    }
}

struct View<'g> {
    nodes: &'g [NodeProto],
    producer: HashMap<&'g str, usize>,
    consumers: HashMap<&'g str, Vec<usize>>,
    outputs: HashSet<&'g str>,
    values: &'g HashMap<String, Value>,
}

impl<'g> View<'g> {
    /// The value's constant single element (an initializer or a
    /// `Constant` node).
    fn scalar(&self, name: &str) -> Option<f64> {
        if let Some(v) = self.values.get(name) {
            return v.as_const()?.single();
        }
        let n = &self.nodes[*self.producer.get(name)?];
        if n.op_type() != "Constant" {
            return None;
        }
        let a = n.attribute.iter().find(|a| a.name() == "value")?;
        tensor_data::decode(a.t.as_ref()?, None).ok()?.single()
    }

    fn near(&self, name: &str, want: f64) -> bool {
        self.scalar(name)
            .is_some_and(|v| (v - want).abs() <= 1e-4 * want.abs())
    }

    /// The only consumer of `name`, if it has exactly one and is not a
    /// graph output.
    fn sole(&self, name: &str) -> Option<usize> {
        match self.consumers.get(name).map(Vec::as_slice) {
            Some([one]) if !self.outputs.contains(name) => Some(*one),
            _ => None,
        }
    }

    fn node(&self, i: usize, op: &str) -> Option<&'g NodeProto> {
        let n = &self.nodes[i];
        (n.op_type() == op && n.domain().is_empty() && n.input.len() == 2).then_some(n)
    }

    /// For a binary node with one operand `≈ c`, the other operand.
    fn other_than_const(&self, n: &'g NodeProto, c: f64) -> Option<&'g str> {
        if self.near(&n.input[1], c) {
            Some(&n.input[0])
        } else if self.near(&n.input[0], c) {
            Some(&n.input[1])
        } else {
            None
        }
    }

    /// The node producing `name` if it is `op` and feeds only `consumer`.
    fn feeding(&self, name: &str, op: &str, consumer: usize) -> Option<(usize, &'g NodeProto)> {
        let p = *self.producer.get(name)?;
        (self.sole(name) == Some(consumer)).then_some(())?;
        Some((p, self.node(p, op)?))
    }

    /// From `v = 1 + f(x)`: the products with `x` and `0.5` in any order.
    /// Returns the final node and the nodes used.
    fn tail(&self, v: &str, x: &str) -> Option<(usize, Vec<usize>)> {
        let m1 = self.sole(v)?;
        let n1 = self.node(m1, "Mul")?;
        let o = if n1.input[0] == v {
            &n1.input[1]
        } else {
            &n1.input[0]
        };
        let m2_of = |want_x: bool| -> Option<usize> {
            let m2 = self.sole(&n1.output[0])?;
            let n2 = self.node(m2, "Mul")?;
            let o2 = if n2.input[0] == n1.output[0] {
                &n2.input[1]
            } else {
                &n2.input[0]
            };
            let ok = if want_x { o2 == x } else { self.near(o2, 0.5) };
            ok.then_some(m2)
        };
        if o == x {
            let m2 = m2_of(false)?;
            return Some((m2, vec![m1, m2]));
        }
        if self.near(o, 0.5) {
            let m2 = m2_of(true)?;
            return Some((m2, vec![m1, m2]));
        }
        let (h, hn) = self.feeding(o, "Mul", m1)?;
        (self.other_than_const(hn, 0.5)? == x).then_some((m1, vec![h, m1]))
    }

    fn erf(&self, e: usize) -> Option<(String, usize, Vec<usize>)> {
        let en = &self.nodes[e];
        let (pre, pn) = self
            .feeding(&en.input[0], "Div", e)
            .filter(|(_, n)| self.near(&n.input[1], std::f64::consts::SQRT_2))
            .or_else(|| {
                self.feeding(&en.input[0], "Mul", e).filter(|(_, n)| {
                    self.other_than_const(n, std::f64::consts::FRAC_1_SQRT_2)
                        .is_some()
                })
            })?;
        let x = if pn.op_type() == "Div" {
            pn.input[0].as_str()
        } else {
            self.other_than_const(pn, std::f64::consts::FRAC_1_SQRT_2)?
        };
        let a = self.sole(&en.output[0])?;
        let an = self.node(a, "Add")?;
        self.other_than_const(an, 1.0)?;
        let (last, mut used) = self.tail(&an.output[0], x)?;
        used.extend([pre, e, a]);
        Some((x.to_owned(), last, used))
    }

    fn tanh(&self, t: usize) -> Option<(String, usize, Vec<usize>)> {
        let tn = &self.nodes[t];
        let k = (2.0 / std::f64::consts::PI).sqrt();
        let (m, mn) = self.feeding(&tn.input[0], "Mul", t)?;
        let inner = self.other_than_const(mn, k)?;
        let (s, sn) = self.feeding(inner, "Add", m)?;
        // x + 0.044715 · x³, either order.
        for (x, cube) in [(&sn.input[0], &sn.input[1]), (&sn.input[1], &sn.input[0])] {
            let Some((c, cn)) = self.feeding(cube, "Mul", s) else {
                continue;
            };
            let Some(p) = self.other_than_const(cn, 0.044715) else {
                continue;
            };
            let Some((pw, pn)) = self.feeding(p, "Pow", c) else {
                continue;
            };
            if &pn.input[0] != x || !self.near(&pn.input[1], 3.0) {
                continue;
            }
            let a = self.sole(&tn.output[0])?;
            let an = self.node(a, "Add")?;
            self.other_than_const(an, 1.0)?;
            let (last, mut used) = self.tail(&an.output[0], x)?;
            used.extend([pw, c, s, m, t, a]);
            return Some((x.clone(), last, used));
        }
        None
    }
}

/// Finds the composites of `g`; `values` holds the initializers.
pub(crate) fn find(g: &GraphProto, values: &HashMap<String, Value>) -> Plan {
    let mut view = View {
        nodes: &g.node,
        producer: HashMap::new(),
        consumers: HashMap::new(),
        outputs: g.output.iter().map(|o| o.name()).collect(),
        values,
    };
    for (i, n) in g.node.iter().enumerate() {
        for o in &n.output {
            view.producer.insert(o, i);
        }
        for inp in &n.input {
            view.consumers.entry(inp).or_default().push(i);
        }
    }
    let mut plan = Plan::default();
    for (i, n) in g.node.iter().enumerate() {
        let found = match (n.op_type(), n.domain().is_empty(), n.input.len()) {
            ("Erf", true, 1) => view.erf(i).map(|m| (m, Opcode::GeluErf)),
            ("Tanh", true, 1) => view.tanh(i).map(|m| (m, Opcode::GeluTanh)),
            _ => None,
        };
        if let Some(((x, last, used), opcode)) = found {
            if used.iter().any(|u| plan.covered.contains(u)) {
                continue;
            }
            plan.covered.extend(used);
            plan.roots.insert(
                last,
                Match {
                    input: x,
                    output: g.node[last].output[0].clone(),
                    opcode,
                },
            );
        }
    }
    plan
}
