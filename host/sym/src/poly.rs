//! Polynomials over atoms: the normal form behind sums and products.

use super::dim::Node;

/// Products whose expansion would produce more terms than this stay factored.
pub(crate) const EXPAND_LIMIT: usize = 64;

/// `Σ coefficient × monomial`, where a monomial is a sorted list of factors and the
/// empty monomial is the constant term. Terms are sorted by monomial, monomials
/// are distinct and coefficients nonzero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Poly {
    pub(crate) terms: Vec<(Vec<Node>, i64)>,
}

impl Poly {
    /// The constant `c`.
    pub(crate) fn constant(c: i64) -> Poly {
        if c == 0 {
            Poly::default()
        } else {
            Poly {
                terms: vec![(Vec::new(), c)],
            }
        }
    }

    /// Decomposes `n`; `None` if a coefficient overflows.
    pub(crate) fn of(n: &Node) -> Option<Poly> {
        match n {
            Node::Val(c) => Some(Poly::constant(*c)),
            Node::Mul(p) if p.c == 0 => Some(Poly::default()),
            Node::Mul(p) if p.fs.iter().all(Node::is_atom) => Some(Poly {
                terms: vec![(p.fs.to_vec(), p.c)],
            }),
            _ if n.is_atom() => Some(Poly {
                terms: vec![(vec![n.clone()], 1)],
            }),
            _ => Poly::sum([n]),
        }
    }

    /// The sum of `nodes`; `None` if a coefficient overflows.
    pub(crate) fn sum<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> Option<Poly> {
        let mut acc = Vec::new();
        for n in nodes {
            push_terms(n, &mut acc)?;
        }
        Poly::from_terms(acc)
    }

    /// Normalises raw terms: sort, merge equal monomials, drop zeros.
    pub(crate) fn from_terms(mut raw: Vec<(Vec<Node>, i128)>) -> Option<Poly> {
        raw.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut terms: Vec<(Vec<Node>, i64)> = Vec::with_capacity(raw.len());
        let mut iter = raw.into_iter().peekable();
        while let Some((mono, mut coef)) = iter.next() {
            while let Some((_, c)) = iter.next_if(|(m, _)| *m == mono) {
                coef = coef.checked_add(c)?;
            }
            if coef != 0 {
                terms.push((mono, i64::try_from(coef).ok()?));
            }
        }
        Some(Poly { terms })
    }

    /// The constant if this polynomial has no other terms.
    pub(crate) fn as_const(&self) -> Option<i64> {
        match self.terms.as_slice() {
            [] => Some(0),
            [(m, c)] if m.is_empty() => Some(*c),
            _ => None,
        }
    }

    /// The constant term (0 if none).
    pub(crate) fn as_const_term(&self) -> i64 {
        match self.terms.first() {
            Some((m, c)) if m.is_empty() => *c,
            _ => 0,
        }
    }

    /// The product; stays factored if the expansion would exceed
    /// [`EXPAND_LIMIT`] terms or copy an already factored sum. `None` if a
    /// coefficient overflows.
    pub(crate) fn mul(&self, other: &Poly) -> Option<Poly> {
        let (n, m) = (self.terms.len(), other.terms.len());
        if n == 0 || m == 0 {
            return Some(Poly::default());
        }
        let expand = (n == 1 && m == 1)
            || (n * m <= EXPAND_LIMIT && !self.is_nested() && !other.is_nested());
        if !expand {
            let (ca, fa) = self.as_factor();
            let (cb, fb) = other.as_factor();
            return Some(Poly {
                terms: vec![(merge(&fa, &fb), ca.checked_mul(cb)?)],
            });
        }
        let mut raw = Vec::with_capacity(n * m);
        for (ma, ca) in &self.terms {
            for (mb, cb) in &other.terms {
                raw.push((merge(ma, mb), i128::from(*ca) * i128::from(*cb)));
            }
        }
        Poly::from_terms(raw)
    }

    /// True if a monomial holds an unexpanded sum (copying it would duplicate it).
    fn is_nested(&self) -> bool {
        self.terms
            .iter()
            .any(|(m, _)| m.iter().any(|f| matches!(f, Node::Add(_))))
    }

    /// `(coefficient, factors)` of this polynomial seen as one factor.
    fn as_factor(&self) -> (i64, Vec<Node>) {
        match self.terms.as_slice() {
            [(m, c)] => (*c, m.clone()),
            _ => (1, vec![self.clone().into_node()]),
        }
    }

    /// The canonical node.
    pub(crate) fn into_node(self) -> Node {
        let mut nodes = Vec::with_capacity(self.terms.len());
        let mut constant = None;
        for (mono, c) in self.terms {
            if mono.is_empty() {
                constant = Some(c);
            } else {
                nodes.push(term_node(mono, c));
            }
        }
        nodes.extend(constant.map(Node::Val));
        match nodes.len() {
            0 => Node::Val(0),
            1 => nodes.pop().unwrap_or(Node::Val(0)),
            _ => Node::Add(nodes.into_boxed_slice()),
        }
    }
}

/// The node of one term `c × mono` (`mono` nonempty).
pub(crate) fn term_node(mut mono: Vec<Node>, c: i64) -> Node {
    if c == 1 && mono.len() == 1 {
        mono.pop().unwrap_or(Node::Val(1))
    } else {
        Node::mul(c, mono.into_boxed_slice())
    }
}

fn push_terms(n: &Node, acc: &mut Vec<(Vec<Node>, i128)>) -> Option<()> {
    match n {
        Node::Val(c) => acc.push((Vec::new(), i128::from(*c))),
        Node::Add(ts) => {
            for t in ts.iter() {
                push_terms(t, acc)?;
            }
        }
        Node::Mul(p) if p.fs.iter().all(Node::is_atom) => {
            acc.push((p.fs.to_vec(), i128::from(p.c)));
        }
        Node::Mul(m) => {
            let mut p = Poly::constant(m.c);
            for f in m.fs.iter() {
                p = p.mul(&Poly::of(f)?)?;
            }
            acc.extend(p.terms.into_iter().map(|(m, c)| (m, i128::from(c))));
        }
        _ => acc.push((vec![n.clone()], 1)),
    }
    Some(())
}

/// Merges two sorted factor lists.
fn merge(a: &[Node], b: &[Node]) -> Vec<Node> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i] <= b[j] {
            out.push(a[i].clone());
            i += 1;
        } else {
            out.push(b[j].clone());
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}
