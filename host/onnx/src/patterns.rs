//! Composite operators exporters write as primitives, recognised before
//! conversion so they become dvm's own (and fuse as hand-written graphs
//! do):
//!
//! * GELU, erf form: `x · 0.5 · (1 + erf(x / √2))` (or `x · (1/√2)`);
//! * GELU, tanh form: `x · 0.5 · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`;
//!
//! * SiLU: `x · sigmoid(x)` (the gate of SwiGLU);
//! * RMS norm: `x · 1/sqrt(mean(x², last axis) + eps) [· w]`, the
//!   reciprocal as `Reciprocal` or `1 / ·`;
//! * softmax: `e = exp(x − max(x))` (or `exp(x)`), `e / sum(e)` over one
//!   axis;
//! * layer norm (exports before opset 17): `d = x − mean(x)`,
//!   `d / sqrt(mean(d²) + eps) · w + b`, all over the last axis;
//!
//! with the final products in any order. Every intermediate value must
//! feed only the next step of the pattern (and not be a graph output).
//! PyTorch's exporters write `Softmax`, and from opset 17
//! `LayerNormalization`, as single ONNX ops, which map to dvm's
//! composites directly.

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
    pub kind: Kind,
}

/// What a [`Match`] computes.
#[derive(Clone, Debug)]
pub(crate) enum Kind {
    /// An element-wise unary opcode (GELU, SiLU).
    Unary(Opcode),
    /// Softmax along `axis`.
    Softmax { axis: i64 },
    /// RMS norm over the last axis, with the weight's value name if any.
    RmsNorm { eps: f64, weight: Option<String> },
    /// Layer norm over the last axis, with weight and bias value names.
    LayerNorm {
        eps: f64,
        weight: String,
        bias: String,
    },
}

/// A match found at one node: the input, the last node, the nodes used.
type Found = (String, usize, Vec<usize>, Kind);

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
        // (A node without outputs, malformed, never joins a pattern.)
        match self.consumers.get(name).map(Vec::as_slice) {
            Some([one]) if !self.outputs.contains(name) && !self.nodes[*one].output.is_empty() => {
                Some(*one)
            }
            _ => None,
        }
    }

    fn node(&self, i: usize, op: &str) -> Option<&'g NodeProto> {
        let n = &self.nodes[i];
        let ok = n.op_type() == op
            && n.domain().is_empty()
            && n.input.len() == 2
            && !n.output.is_empty();
        ok.then_some(n)
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

    fn erf(&self, e: usize) -> Option<Found> {
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
        Some((x.to_owned(), last, used, Kind::Unary(Opcode::GeluErf)))
    }

    /// `p = x³` feeding only `consumer`: `Pow(x, 3)` or `x · (x · x)` in
    /// any order. Returns the nodes used.
    fn cube(&self, p: &str, x: &str, consumer: usize) -> Option<Vec<usize>> {
        if let Some((pw, pn)) = self.feeding(p, "Pow", consumer) {
            return (pn.input[0] == x && self.near(&pn.input[1], 3.0)).then(|| vec![pw]);
        }
        let (m2, n2) = self.feeding(p, "Mul", consumer)?;
        let sq = if n2.input[0] == x {
            &n2.input[1]
        } else {
            &n2.input[0]
        };
        let other = if n2.input[0] == x {
            &n2.input[0]
        } else {
            &n2.input[1]
        };
        if other != x {
            return None;
        }
        let (m1, n1) = self.feeding(sq, "Mul", m2)?;
        (n1.input[0] == x && n1.input[1] == x).then(|| vec![m1, m2])
    }

    fn tanh(&self, t: usize) -> Option<Found> {
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
            let Some(cube) = self.cube(p, x, c) else {
                continue;
            };
            let a = self.sole(&tn.output[0])?;
            let an = self.node(a, "Add")?;
            self.other_than_const(an, 1.0)?;
            let (last, mut used) = self.tail(&an.output[0], x)?;
            used.extend(cube);
            used.extend([c, s, m, t, a]);
            return Some((x.clone(), last, used, Kind::Unary(Opcode::GeluTanh)));
        }
        None
    }
}

impl<'g> View<'g> {
    /// `Sigmoid(x)` feeding only `x · s`.
    fn silu(&self, sg: usize) -> Option<Found> {
        let x = &self.nodes[sg].input[0];
        let s = &self.nodes[sg].output[0];
        let m = self.sole(s)?;
        let mn = self.node(m, "Mul")?;
        let other = if &mn.input[0] == s {
            &mn.input[1]
        } else {
            &mn.input[0]
        };
        (other == x).then(|| (x.clone(), m, vec![sg, m], Kind::Unary(Opcode::Silu)))
    }

    /// The axes and `keepdims` of a reduction node (axes from the
    /// attribute or a constant input).
    fn reduce_axes(&self, n: &NodeProto) -> Option<(Vec<i64>, bool)> {
        let keep = n
            .attribute
            .iter()
            .find(|a| a.name() == "keepdims")
            .and_then(|a| a.i)
            .unwrap_or(1)
            != 0;
        let axes = match n.input.get(1) {
            Some(a) if !a.is_empty() => {
                let c = match self.values.get(a.as_str()) {
                    Some(v) => v.as_const()?,
                    None => {
                        let p = &self.nodes[*self.producer.get(a.as_str())?];
                        if p.op_type() != "Constant" {
                            return None;
                        }
                        let t = p
                            .attribute
                            .iter()
                            .find(|x| x.name() == "value")?
                            .t
                            .as_ref()?;
                        tensor_data::decode(t, None).ok()?
                    }
                };
                c.data.iter().map(|&v| v as i64).collect()
            }
            _ => n
                .attribute
                .iter()
                .find(|a| a.name() == "axes")
                .map(|a| a.ints.clone())?,
        };
        Some((axes, keep))
    }

    /// `Exp` at node `e` whose result is divided by its own sum over one
    /// axis, the exponent optionally `x − max(x)` over that axis.
    fn softmax(&self, e: usize) -> Option<Found> {
        let en = &self.nodes[e];
        let eo = en.output[0].as_str();
        let users = self.consumers.get(eo)?;
        if users.len() != 2 || self.outputs.contains(eo) {
            return None;
        }
        let find = |op: &str| {
            users
                .iter()
                .copied()
                .find(|&u| self.nodes[u].op_type() == op && !self.nodes[u].output.is_empty())
        };
        let (sum, div) = (find("ReduceSum")?, find("Div")?);
        let (sn, dn) = (&self.nodes[sum], &self.nodes[div]);
        if sn.input[0] != eo
            || dn.input.len() != 2
            || dn.input[0] != eo
            || dn.input[1] != sn.output[0]
        {
            return None;
        }
        if self.sole(&sn.output[0]) != Some(div) {
            return None;
        }
        let (axes, keep) = self.reduce_axes(sn)?;
        let [axis] = axes[..] else { return None };
        if !keep {
            return None;
        }
        let mut used = vec![e, sum, div];
        // The max subtraction, if the exporter wrote it.
        let mut x = en.input[0].clone();
        if let Some((sb, sbn)) = self.feeding(&en.input[0], "Sub", e) {
            let m = *self.producer.get(sbn.input[1].as_str())?;
            let mn = &self.nodes[m];
            if mn.op_type() == "ReduceMax"
                && mn.input.first() == Some(&sbn.input[0])
                && self.sole(&sbn.input[1]) == Some(sb)
                && self.reduce_axes(mn) == Some((vec![axis], true))
            {
                x = sbn.input[0].clone();
                used.extend([m, sb]);
            }
        }
        Some((x, div, used, Kind::Softmax { axis }))
    }

    /// A `ReduceMean` over the last axis only, keeping it.
    fn mean_last(&self, i: usize, consumer: usize, of: &str) -> bool {
        let n = &self.nodes[i];
        if n.op_type() != "ReduceMean" || n.input.first().map(String::as_str) != Some(of) {
            return false;
        }
        if self.sole(&n.output[0]) != Some(consumer) {
            return false;
        }
        let keep = n
            .attribute
            .iter()
            .find(|a| a.name() == "keepdims")
            .and_then(|a| a.i)
            .unwrap_or(1);
        let axes: Option<Vec<i64>> = match n.input.get(1) {
            Some(a) if !a.is_empty() => self.scalar(a).map(|v| vec![v as i64]),
            _ => n
                .attribute
                .iter()
                .find(|a| a.name() == "axes")
                .map(|a| a.ints.clone()),
        };
        keep == 1 && axes.as_deref() == Some(&[-1])
    }

    /// `1 / sqrt(mean + eps)` ending at node `r` (a `Reciprocal` or a
    /// `Div(1, ·)`), from `Pow(v, 2)`: returns `v`, eps, nodes used.
    fn inv_rms(&self, r: usize) -> Option<(String, f64, Vec<usize>)> {
        let rn = &self.nodes[r];
        let sq_out = match rn.op_type() {
            "Reciprocal" => &rn.input[0],
            "Div" if rn.input.len() == 2 && self.near(&rn.input[0], 1.0) => &rn.input[1],
            _ => return None,
        };
        let sq = *self.producer.get(sq_out.as_str())?;
        let sqn = &self.nodes[sq];
        if sqn.op_type() != "Sqrt" || self.sole(sq_out) != Some(r) {
            return None;
        }
        let (a, an) = self.feeding(&sqn.input[0], "Add", sq)?;
        let (mean_out, eps) = if let Some(e) = self.scalar(&an.input[1]) {
            (&an.input[0], e)
        } else {
            (&an.input[1], self.scalar(&an.input[0])?)
        };
        let mean = *self.producer.get(mean_out.as_str())?;
        let p_out = self.nodes[mean].input.first()?;
        let (p, pn) = self.feeding(p_out, "Pow", mean)?;
        if !self.near(&pn.input[1], 2.0) || !self.mean_last(mean, a, p_out) {
            return None;
        }
        Some((pn.input[0].clone(), eps, vec![p, mean, a, sq, r]))
    }

    /// `x · inv_rms(x) [· w]` with the reciprocal at node `r`.
    fn rms_norm(&self, r: usize) -> Option<Found> {
        let (x, eps, mut used) = self.inv_rms(r)?;
        let inv = &self.nodes[r].output[0];
        let m = self.sole(inv)?;
        let mn = self.node(m, "Mul")?;
        let other = if &mn.input[0] == inv {
            &mn.input[1]
        } else {
            &mn.input[0]
        };
        if *other != x {
            return None;
        }
        used.push(m);
        // An optional weight: a constant `[D]` product.
        let weighted = self.sole(&mn.output[0]).and_then(|w| {
            let wn = self.node(w, "Mul")?;
            let o = if wn.input[0] == mn.output[0] {
                &wn.input[1]
            } else {
                &wn.input[0]
            };
            self.is_vector(o).then(|| (w, o.clone()))
        });
        Some(match weighted {
            Some((w, weight)) => {
                used.push(w);
                (
                    x,
                    w,
                    used,
                    Kind::RmsNorm {
                        eps,
                        weight: Some(weight),
                    },
                )
            }
            None => (x, m, used, Kind::RmsNorm { eps, weight: None }),
        })
    }

    /// True if `name` is a constant of rank 1 (an initializer).
    fn is_vector(&self, name: &str) -> bool {
        self.values
            .get(name)
            .and_then(Value::as_const)
            .is_some_and(|c| c.shape.len() == 1)
    }

    /// Layer norm from its first `ReduceMean` (`m0`): `d = x − m0`,
    /// `d / sqrt(mean(d²) + eps) · w + b`.
    fn layer_norm(&self, m0: usize) -> Option<Found> {
        let x = self.nodes[m0].input.first()?.clone();
        let mean_out = &self.nodes[m0].output[0];
        let sub = self.sole(mean_out)?;
        let sn = self.node(sub, "Sub")?;
        if sn.input[0] != x || &sn.input[1] != mean_out || !self.mean_last(m0, sub, &x) {
            return None;
        }
        let d = &sn.output[0];
        // d feeds exactly the Pow and the Div.
        let users = self.consumers.get(d.as_str())?;
        if users.len() != 2 || self.outputs.contains(d.as_str()) {
            return None;
        }
        let (pw, dv) = match (self.node(users[0], "Pow"), self.node(users[1], "Div")) {
            (Some(_), Some(_)) => (users[0], users[1]),
            _ => (
                self.node(users[1], "Pow").map(|_| users[1])?,
                self.node(users[0], "Div").map(|_| users[0])?,
            ),
        };
        let dvn = &self.nodes[dv];
        if &dvn.input[0] != d {
            return None;
        }
        let sq = *self.producer.get(dvn.input[1].as_str())?;
        if self.nodes[sq].op_type() != "Sqrt" || self.sole(&dvn.input[1]) != Some(dv) {
            return None;
        }
        let (a, an) = self.feeding(&self.nodes[sq].input[0], "Add", sq)?;
        let (m1_out, eps) = if let Some(e) = self.scalar(&an.input[1]) {
            (&an.input[0], e)
        } else {
            (&an.input[1], self.scalar(&an.input[0])?)
        };
        let m1 = *self.producer.get(m1_out.as_str())?;
        if !self.near(&self.nodes[pw].input[1], 2.0)
            || !self.mean_last(m1, a, &self.nodes[pw].output[0])
            || self.sole(&self.nodes[pw].output[0]) != Some(m1)
        {
            return None;
        }
        let w = self.sole(&dvn.output[0])?;
        let wn = self.node(w, "Mul")?;
        let weight = if wn.input[0] == dvn.output[0] {
            &wn.input[1]
        } else {
            &wn.input[0]
        };
        let b = self.sole(&wn.output[0])?;
        let bn = self.node(b, "Add")?;
        let bias = if bn.input[0] == wn.output[0] {
            &bn.input[1]
        } else {
            &bn.input[0]
        };
        if !self.is_vector(weight) || !self.is_vector(bias) {
            return None;
        }
        let kind = Kind::LayerNorm {
            eps,
            weight: weight.clone(),
            bias: bias.clone(),
        };
        Some((x, b, vec![m0, sub, pw, m1, a, sq, dv, w, b], kind))
    }
}

/// True if `n` has the inputs and outputs the matchers index for its op
/// type (the conversion reports a malformed node; the search must not
/// trip over one first).
fn well_formed(n: &NodeProto) -> bool {
    let inputs = match n.op_type() {
        "Erf" | "Tanh" | "Sigmoid" | "Sqrt" | "Reciprocal" | "Exp" => 1..=1,
        "Add" | "Sub" | "Mul" | "Div" | "Pow" => 2..=2,
        "ReduceMean" | "ReduceSum" | "ReduceMax" => 1..=2,
        _ => 0..=usize::MAX,
    };
    !n.output.is_empty() && inputs.contains(&n.input.len())
}

/// Finds the composites of `g`; `values` holds the initializers. A graph
/// with a malformed node gets no composites.
pub(crate) fn find(g: &GraphProto, values: &HashMap<String, Value>) -> Plan {
    if !g.node.iter().all(well_formed) {
        return Plan::default();
    }
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
        if n.output.is_empty() {
            continue;
        }
        let found = match (n.op_type(), n.domain().is_empty(), n.input.len()) {
            ("Erf", true, 1) => view.erf(i),
            ("Tanh", true, 1) => view.tanh(i),
            ("Sigmoid", true, 1) => view.silu(i),
            ("Reciprocal", true, 1) | ("Div", true, 2) => view.rms_norm(i),
            ("ReduceMean", true, _) => view.layer_norm(i),
            ("Exp", true, 1) => view.softmax(i),
            _ => None,
        };
        if let Some((x, last, used, kind)) = found {
            if used.iter().any(|u| plan.covered.contains(u)) {
                continue;
            }
            plan.covered.extend(used);
            plan.roots.insert(
                last,
                Match {
                    input: x,
                    output: g.node[last].output[0].clone(),
                    kind,
                },
            );
        }
    }
    plan
}
