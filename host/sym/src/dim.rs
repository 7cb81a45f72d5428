//! The `Dim` type, its representation and its arithmetic operators.

use std::ops::{Add, AddAssign, Mul, MulAssign, Neg, Sub, SubAssign};

use super::bounds::NoFacts;
use super::error::SymError;
use super::ops;
use super::poly::Poly;
use super::symbol::Symbol;

/// Representation of a [`Dim`]. Canonical invariants (when no overflow occurred
/// and no product was too large to expand):
///
/// * `Add`: at least two terms, sorted by monomial, distinct monomials, the
///   constant (if nonzero) last as a `Val`; each other term is an atom or a `Mul`.
/// * `Mul`, the [`Product`] `c · fs`: `c != 0`, `fs` sorted atoms (no `Val`, `Add`, `Mul`), and not
///   `c == 1` with a single factor.
/// * `Div(x, d)` / `Rem(x, d)`: `d >= 2`, `x` not constant, the coefficients of
///   `x` in `0..d` with `gcd(coefficients, d) == 1`.
/// * `Min` / `Max`: at least two distinct arguments, none of the same kind, at
///   most one constant (last).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Node {
    Val(i64),
    Sym(Symbol),
    Add(Box<[Node]>),
    Mul(Box<Product>),
    Div(Box<Node>, i64),
    Rem(Box<Node>, i64),
    Min(Box<[Node]>),
    Max(Box<[Node]>),
}

/// The coefficient and factors of a [`Node::Mul`], `c · fs[0] · fs[1] · …`:
/// boxed, so that a node, and with it a [`Dim`] and every dimension of a
/// shape, takes 24 bytes rather than 32 (products are rare: most
/// dimensions are constants or symbols).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Product {
    pub(crate) c: i64,
    pub(crate) fs: Box<[Node]>,
}

// The point of boxing `Product` (on 64-bit targets).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Node>() == 24);

impl Node {
    /// The product `c · fs[0] · fs[1] · …`.
    pub(crate) fn mul(c: i64, fs: Box<[Node]>) -> Node {
        Node::Mul(Box::new(Product { c, fs }))
    }

    /// True for nodes that may be factors of a canonical product.
    pub(crate) fn is_atom(&self) -> bool {
        !matches!(self, Node::Val(_) | Node::Add(_) | Node::Mul(..))
    }
}

/// A symbolic integer dimension in canonical form (see the [module docs](super)).
///
/// Build one from an `i64` or a [`Symbol`] with `From`, combine with `+ - *`
/// (against `Dim`, `&Dim` or `i64`), [`Dim::div`], [`Dim::rem`], [`Dim::min`] and
/// [`Dim::max`], or read one with [`Dim::parse`]. The operators never panic: when
/// a coefficient would overflow `i64` the expression is kept unfolded and
/// [`Dim::eval`] reports the overflow.
pub struct Dim(pub(crate) Node);

// Constants are most dimensions: comparing and copying them inline, without
// a call into the expression tree's derived impls, is what shape checks
// spend their time on. The answers are the structural ones.
impl Clone for Dim {
    #[inline]
    fn clone(&self) -> Dim {
        match self.0 {
            Node::Val(v) => Dim(Node::Val(v)),
            ref n => Dim(n.clone()),
        }
    }
}

impl PartialEq for Dim {
    #[inline]
    fn eq(&self, other: &Dim) -> bool {
        match (&self.0, &other.0) {
            (Node::Val(a), Node::Val(b)) => a == b,
            (a, b) => a == b,
        }
    }
}

impl Eq for Dim {}

impl std::hash::Hash for Dim {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl Dim {
    /// The constant 0.
    pub const ZERO: Dim = Dim(Node::Val(0));
    /// The constant 1.
    pub const ONE: Dim = Dim(Node::Val(1));

    /// The constant `value`.
    pub const fn val(value: i64) -> Dim {
        Dim(Node::Val(value))
    }

    /// The symbol `sym` as a dimension.
    pub const fn sym(sym: Symbol) -> Dim {
        Dim(Node::Sym(sym))
    }

    /// The value if this dimension is a constant.
    pub fn as_const(&self) -> Option<i64> {
        match self.0 {
            Node::Val(v) => Some(v),
            _ => None,
        }
    }

    /// True if this dimension is a constant.
    pub fn is_const(&self) -> bool {
        matches!(self.0, Node::Val(_))
    }

    /// The symbol if this dimension is exactly one symbol.
    pub fn as_symbol(&self) -> Option<Symbol> {
        match self.0 {
            Node::Sym(s) => Some(s),
            _ => None,
        }
    }

    /// The symbols occurring in this dimension, sorted by name, without repeats.
    pub fn symbols(&self) -> Vec<Symbol> {
        let mut out = Vec::new();
        collect_symbols(&self.0, &mut out);
        out.sort_unstable();
        out.dedup();
        out
    }

    /// True if `sym` occurs in this dimension.
    pub fn contains(&self, sym: Symbol) -> bool {
        contains(&self.0, sym)
    }

    /// Floor division by the positive constant `divisor` (rounds toward −∞).
    ///
    /// # Errors
    ///
    /// [`SymError::BadDivisor`] if `divisor <= 0`.
    pub fn div(&self, divisor: i64) -> Result<Dim, SymError> {
        self.check_divisor(divisor)?;
        Ok(Dim(ops::div_node(self.0.clone(), divisor, &NoFacts)))
    }

    /// Ceiling division by the positive constant `divisor`: `(self + divisor - 1) / divisor`.
    ///
    /// # Errors
    ///
    /// [`SymError::BadDivisor`] if `divisor <= 0`.
    pub fn div_ceil(&self, divisor: i64) -> Result<Dim, SymError> {
        self.check_divisor(divisor)?;
        (self + (divisor - 1)).div(divisor)
    }

    /// Modulo by the positive constant `divisor`; the result lies in `0..divisor`.
    ///
    /// # Errors
    ///
    /// [`SymError::BadDivisor`] if `divisor <= 0`.
    pub fn rem(&self, divisor: i64) -> Result<Dim, SymError> {
        self.check_divisor(divisor)?;
        Ok(Dim(ops::rem_node(self.0.clone(), divisor, &NoFacts)))
    }

    fn check_divisor(&self, divisor: i64) -> Result<(), SymError> {
        if divisor > 0 {
            Ok(())
        } else {
            Err(SymError::BadDivisor {
                expr: self.clone(),
                divisor: Dim::val(divisor),
            })
        }
    }

    /// The smaller of `self` and `other`.
    pub fn min(&self, other: &Dim) -> Dim {
        Dim(ops::min_max(
            vec![self.0.clone(), other.0.clone()],
            true,
            &NoFacts,
        ))
    }

    /// The larger of `self` and `other`.
    pub fn max(&self, other: &Dim) -> Dim {
        Dim(ops::min_max(
            vec![self.0.clone(), other.0.clone()],
            false,
            &NoFacts,
        ))
    }

    /// Replaces every occurrence of `sym` by `value` and re-canonicalises.
    pub fn substitute(&self, sym: Symbol, value: &Dim) -> Dim {
        if !self.contains(sym) {
            return self.clone();
        }
        let leaf = |s: Symbol| (s == sym).then(|| value.0.clone());
        Dim(ops::rebuild(&self.0, &NoFacts, &leaf))
    }

    /// Partial evaluation: replaces every bound symbol by its value.
    pub fn bind(&self, bindings: &super::Bindings) -> Dim {
        let leaf = |s: Symbol| bindings.get(s).map(Node::Val);
        Dim(ops::rebuild(&self.0, &NoFacts, &leaf))
    }

    /// Number of nodes in the representation (a size measure for limits).
    pub fn size(&self) -> usize {
        size(&self.0)
    }
}

fn size(n: &Node) -> usize {
    1 + match n {
        Node::Val(_) | Node::Sym(_) => 0,
        Node::Add(ts) | Node::Min(ts) | Node::Max(ts) => ts.iter().map(size).sum(),
        Node::Mul(p) => p.fs.iter().map(size).sum(),
        Node::Div(x, _) | Node::Rem(x, _) => size(x),
    }
}

fn collect_symbols(n: &Node, out: &mut Vec<Symbol>) {
    match n {
        Node::Val(_) => {}
        Node::Sym(s) => out.push(*s),
        Node::Add(ts) | Node::Min(ts) | Node::Max(ts) => {
            ts.iter().for_each(|t| collect_symbols(t, out));
        }
        Node::Mul(p) => p.fs.iter().for_each(|t| collect_symbols(t, out)),
        Node::Div(x, _) | Node::Rem(x, _) => collect_symbols(x, out),
    }
}

pub(crate) fn contains(n: &Node, sym: Symbol) -> bool {
    match n {
        Node::Val(_) => false,
        Node::Sym(s) => *s == sym,
        Node::Add(ts) | Node::Min(ts) | Node::Max(ts) => ts.iter().any(|t| contains(t, sym)),
        Node::Mul(p) => p.fs.iter().any(|t| contains(t, sym)),
        Node::Div(x, _) | Node::Rem(x, _) => contains(x, sym),
    }
}

/// `a + b`, canonical; kept unfolded if a coefficient overflows.
pub(crate) fn add_nodes(a: &Node, b: &Node) -> Node {
    match (a, b) {
        (Node::Val(0), _) => return b.clone(),
        (_, Node::Val(0)) => return a.clone(),
        (Node::Val(x), Node::Val(y)) => {
            if let Some(z) = x.checked_add(*y) {
                return Node::Val(z);
            }
        }
        _ => {}
    }
    Poly::sum([a, b]).map_or_else(|| raw(Node::Add, a, b), Poly::into_node)
}

/// `a * b`, canonical; kept unfolded if a coefficient overflows.
pub(crate) fn mul_nodes(a: &Node, b: &Node) -> Node {
    match (a, b) {
        (Node::Val(0), _) | (_, Node::Val(0)) => return Node::Val(0),
        (Node::Val(1), _) => return b.clone(),
        (_, Node::Val(1)) => return a.clone(),
        (Node::Val(x), Node::Val(y)) => {
            if let Some(z) = x.checked_mul(*y) {
                return Node::Val(z);
            }
        }
        _ => {}
    }
    let product = Poly::of(a).and_then(|pa| Poly::of(b).and_then(|pb| pa.mul(&pb)));
    product.map_or_else(|| raw(|fs| Node::mul(1, fs), a, b), Poly::into_node)
}

/// Unfolded binary node with sorted operands (overflow fallback).
fn raw(make: impl FnOnce(Box<[Node]>) -> Node, a: &Node, b: &Node) -> Node {
    let mut v = vec![a.clone(), b.clone()];
    v.sort_unstable();
    make(v.into_boxed_slice())
}

impl From<i64> for Dim {
    fn from(v: i64) -> Dim {
        Dim::val(v)
    }
}

impl From<i32> for Dim {
    fn from(v: i32) -> Dim {
        Dim::val(i64::from(v))
    }
}

impl From<u32> for Dim {
    fn from(v: u32) -> Dim {
        Dim::val(i64::from(v))
    }
}

/// A concrete extent as tensors give it (`u64`); one past `i64::MAX` (no
/// tensor has such an extent) saturates there and fails the graph's range
/// checks.
impl From<u64> for Dim {
    fn from(v: u64) -> Dim {
        Dim::val(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

/// As `From<u64>`.
impl From<usize> for Dim {
    fn from(v: usize) -> Dim {
        Dim::val(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<Symbol> for Dim {
    fn from(s: Symbol) -> Dim {
        Dim::sym(s)
    }
}

impl std::fmt::Debug for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dim({self})")
    }
}

macro_rules! binop {
    ($trait:ident, $method:ident, $assign:ident, $amethod:ident, $f:expr) => {
        impl $trait<&Dim> for &Dim {
            type Output = Dim;
            fn $method(self, rhs: &Dim) -> Dim {
                let f: fn(&Node, &Node) -> Node = $f;
                Dim(f(&self.0, &rhs.0))
            }
        }
        impl $trait<Dim> for Dim {
            type Output = Dim;
            fn $method(self, rhs: Dim) -> Dim {
                (&self).$method(&rhs)
            }
        }
        impl $trait<&Dim> for Dim {
            type Output = Dim;
            fn $method(self, rhs: &Dim) -> Dim {
                (&self).$method(rhs)
            }
        }
        impl $trait<Dim> for &Dim {
            type Output = Dim;
            fn $method(self, rhs: Dim) -> Dim {
                self.$method(&rhs)
            }
        }
        impl $trait<i64> for Dim {
            type Output = Dim;
            fn $method(self, rhs: i64) -> Dim {
                (&self).$method(&Dim::val(rhs))
            }
        }
        impl $trait<i64> for &Dim {
            type Output = Dim;
            fn $method(self, rhs: i64) -> Dim {
                self.$method(&Dim::val(rhs))
            }
        }
        impl $trait<Dim> for i64 {
            type Output = Dim;
            fn $method(self, rhs: Dim) -> Dim {
                (&Dim::val(self)).$method(&rhs)
            }
        }
        impl $trait<&Dim> for i64 {
            type Output = Dim;
            fn $method(self, rhs: &Dim) -> Dim {
                (&Dim::val(self)).$method(rhs)
            }
        }
        impl $assign<Dim> for Dim {
            fn $amethod(&mut self, rhs: Dim) {
                *self = (&*self).$method(&rhs);
            }
        }
        impl $assign<&Dim> for Dim {
            fn $amethod(&mut self, rhs: &Dim) {
                *self = (&*self).$method(rhs);
            }
        }
        impl $assign<i64> for Dim {
            fn $amethod(&mut self, rhs: i64) {
                *self = (&*self).$method(&Dim::val(rhs));
            }
        }
    };
}

binop!(Add, add, AddAssign, add_assign, add_nodes);
binop!(Mul, mul, MulAssign, mul_assign, mul_nodes);
binop!(Sub, sub, SubAssign, sub_assign, |a, b| add_nodes(
    a,
    &mul_nodes(b, &Node::Val(-1))
));

impl Neg for &Dim {
    type Output = Dim;
    fn neg(self) -> Dim {
        Dim(mul_nodes(&self.0, &Node::Val(-1)))
    }
}

impl Neg for Dim {
    type Output = Dim;
    fn neg(self) -> Dim {
        -&self
    }
}

impl std::iter::Sum for Dim {
    fn sum<I: Iterator<Item = Dim>>(iter: I) -> Dim {
        let nodes: Vec<Dim> = iter.collect();
        match Poly::sum(nodes.iter().map(|d| &d.0)) {
            Some(p) => Dim(p.into_node()),
            None => nodes.iter().fold(Dim::ZERO, |acc, d| acc + d),
        }
    }
}

impl<'a> std::iter::Sum<&'a Dim> for Dim {
    fn sum<I: Iterator<Item = &'a Dim>>(iter: I) -> Dim {
        iter.cloned().sum()
    }
}

impl std::iter::Product for Dim {
    fn product<I: Iterator<Item = Dim>>(iter: I) -> Dim {
        iter.fold(Dim::ONE, |acc, d| acc * d)
    }
}

impl<'a> std::iter::Product<&'a Dim> for Dim {
    fn product<I: Iterator<Item = &'a Dim>>(iter: I) -> Dim {
        iter.fold(Dim::ONE, |acc, d| acc * d)
    }
}
