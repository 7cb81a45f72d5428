//! Canonical construction of division, modulo, `min`/`max`, and rebuilding a
//! tree under substitutions and facts.

use super::bounds::{gcd, interval, known_divisor, term_divisor, Facts};
use super::dim::{add_nodes, mul_nodes, Node};
use super::poly::{term_node, Poly};
use super::symbol::Symbol;

/// `min`/`max` with more arguments than this skip the pairwise dominance check.
const PRUNE_LIMIT: usize = 16;

/// `floor(x / d)` for `d >= 1`, canonical.
pub(crate) fn div_node(x: Node, d: i64, facts: &dyn Facts) -> Node {
    if d == 1 {
        return x;
    }
    if let Node::Val(c) = x {
        if d > 0 {
            return Node::Val(c.div_euclid(d));
        }
    }
    let p = match Poly::of(&x) {
        Some(p) if d > 0 => p,
        _ => return Node::Div(Box::new(x), d),
    };
    let (terms, d, _) = divide_content(p.terms, d);
    if d == 1 {
        return Poly { terms }.into_node();
    }
    // x = d*Q + E + R: E is a multiple of d by the facts, R has coefficients in 0..d.
    let (mut quotient, mut exact, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    for (mono, c) in terms {
        let (q, r) = (c.div_euclid(d), c.rem_euclid(d));
        if q != 0 {
            quotient.push((mono.clone(), q));
        }
        if r == 0 {
            continue;
        }
        if !mono.is_empty() && term_divisor(r, &mono, facts) % i128::from(d) == 0 {
            // (r*m)/d == (r/g) * (m/(d/g)) exactly, g = gcd(r, d).
            let g = gcd(i128::from(r), i128::from(d)) as i64;
            let atom = Node::Div(Box::new(term_node(mono, 1)), d / g);
            exact.push(mul_nodes(&atom, &Node::Val(r / g)));
        } else {
            rest.push((mono, r));
        }
    }
    let mut out = Poly { terms: quotient }.into_node();
    for e in &exact {
        out = add_nodes(&out, e);
    }
    let rest = Poly { terms: rest };
    if rest.as_const().is_none() {
        out = add_nodes(&out, &div_atom(rest.into_node(), d, facts));
    }
    out
}

type Terms = Vec<(Vec<Node>, i64)>;

/// Divides `terms` and `d` (positive) by `g`, the gcd of all coefficients and
/// `d`; returns the quotients and `g`.
fn divide_content(mut terms: Terms, d: i64) -> (Terms, i64, i64) {
    let g = terms
        .iter()
        .fold(i128::from(d), |g, (_, c)| gcd(g, i128::from(*c)));
    if g <= 1 {
        return (terms, d, 1);
    }
    // g divides d, so it fits in i64 and every division below is exact.
    let g = g as i64;
    for (_, c) in &mut terms {
        *c /= g;
    }
    (terms, d / g, g)
}

/// `floor(r / d)` where `r` has coefficients in `0..d` and is not constant.
fn div_atom(r: Node, d: i64, facts: &dyn Facts) -> Node {
    let (lo, hi) = interval(&r, facts);
    if lo.div_euclid(d) == hi.div_euclid(d) {
        return Node::Val(lo.div_euclid(d));
    }
    // (y/a + c)/d == (y + c*a)/(a*d)
    if let Some((y, a, c)) = div_plus_const(&r) {
        if let (Some(ad), Some(ca)) = (a.checked_mul(d), c.checked_mul(a)) {
            return div_node(add_nodes(y, &Node::Val(ca)), ad, facts);
        }
    }
    Node::Div(Box::new(r), d)
}

fn div_plus_const(n: &Node) -> Option<(&Node, i64, i64)> {
    match n {
        Node::Div(y, a) => Some((y, *a, 0)),
        Node::Add(ts) => match &ts[..] {
            [Node::Div(y, a), Node::Val(c)] => Some((y, *a, *c)),
            _ => None,
        },
        _ => None,
    }
}

/// `x mod d` (in `0..d`) for `d >= 1`, canonical.
pub(crate) fn rem_node(x: Node, d: i64, facts: &dyn Facts) -> Node {
    if d == 1 {
        return Node::Val(0);
    }
    if let Node::Val(c) = x {
        if d > 0 {
            return Node::Val(c.rem_euclid(d));
        }
    }
    let p = match Poly::of(&x) {
        Some(p) if d > 0 => p,
        _ => return Node::Rem(Box::new(x), d),
    };
    // Reduce coefficients mod d and drop terms the facts make multiples of d.
    let terms: Vec<_> = p
        .terms
        .into_iter()
        .map(|(mono, c)| (mono, c.rem_euclid(d)))
        .filter(|(mono, r)| {
            *r != 0 && (mono.is_empty() || term_divisor(*r, mono, facts) % i128::from(d) != 0)
        })
        .collect();
    // (g*y) mod (g*e) == g * (y mod e)
    let (terms, d, g) = divide_content(terms, d);
    let reduced = Poly { terms };
    if let Some(c) = reduced.as_const() {
        return Node::Val(c * g);
    }
    let inner = rem_atom(reduced.into_node(), d, facts);
    mul_nodes(&inner, &Node::Val(g))
}

/// `r mod d` where `r` has coefficients in `0..d` and is not constant.
fn rem_atom(r: Node, d: i64, facts: &dyn Facts) -> Node {
    let (lo, hi) = interval(&r, facts);
    let k = lo.div_euclid(d);
    if k == hi.div_euclid(d) {
        if let Some(kd) = k.checked_mul(d).and_then(i64::checked_neg) {
            return add_nodes(&r, &Node::Val(kd));
        }
    }
    if let Node::Rem(y, a) = &r {
        if a % d == 0 {
            return rem_node((**y).clone(), d, facts);
        }
    }
    Node::Rem(Box::new(r), d)
}

/// `min` (if `is_min`) or `max` of `args`, canonical.
pub(crate) fn min_max(args: Vec<Node>, is_min: bool, facts: &dyn Facts) -> Node {
    let pick = if is_min { i64::min } else { i64::max };
    let mut flat = Vec::with_capacity(args.len());
    let mut konst: Option<i64> = None;
    for a in args {
        match a {
            Node::Min(xs) if is_min => flat.extend(xs.into_vec()),
            Node::Max(xs) if !is_min => flat.extend(xs.into_vec()),
            other => flat.push(other),
        }
    }
    flat.retain(|a| match a {
        Node::Val(c) => {
            konst = Some(konst.map_or(*c, |k| pick(k, *c)));
            false
        }
        _ => true,
    });
    flat.sort_unstable();
    flat.dedup();
    flat.extend(konst.map(Node::Val));
    if flat.len() > 1 && flat.len() <= PRUNE_LIMIT {
        flat = prune_dominated(flat, is_min, facts);
    }
    match flat.len() {
        0 => Node::Val(0),
        1 => flat.pop().unwrap_or(Node::Val(0)),
        _ => {
            // Constant last: `min(S,128)`.
            flat.sort_unstable_by(|a, b| {
                let key = |n: &Node| matches!(n, Node::Val(_));
                key(a).cmp(&key(b)).then_with(|| a.cmp(b))
            });
            let args = flat.into_boxed_slice();
            if is_min {
                Node::Min(args)
            } else {
                Node::Max(args)
            }
        }
    }
}

/// Drops every argument that another kept argument provably never beats.
fn prune_dominated(args: Vec<Node>, is_min: bool, facts: &dyn Facts) -> Vec<Node> {
    let n = args.len();
    let mut keep = vec![true; n];
    for i in 0..n {
        for j in 0..n {
            if i == j || !keep[j] {
                continue;
            }
            // For min: args[j] <= args[i] always makes args[i] redundant.
            let diff = add_nodes(&args[j], &mul_nodes(&args[i], &Node::Val(-1)));
            let (lo, hi) = interval(&diff, facts);
            if (is_min && hi <= 0) || (!is_min && lo >= 0) {
                keep[i] = false;
                break;
            }
        }
    }
    args.into_iter()
        .zip(keep)
        .filter_map(|(a, k)| k.then_some(a))
        .collect()
}

/// Rebuilds `n` bottom-up, replacing symbols by `leaf(sym)` where it answers and
/// applying every rule that `facts` enables.
pub(crate) fn rebuild(n: &Node, facts: &dyn Facts, leaf: &dyn Fn(Symbol) -> Option<Node>) -> Node {
    match n {
        Node::Val(_) => n.clone(),
        Node::Sym(s) => leaf(*s).unwrap_or_else(|| match facts.range(*s) {
            (lo, hi) if lo == hi => Node::Val(lo),
            _ => n.clone(),
        }),
        Node::Add(ts) => {
            let parts: Vec<Node> = ts.iter().map(|t| rebuild(t, facts, leaf)).collect();
            cancel_exact(sum(&parts), facts)
        }
        Node::Mul(p) => {
            let product = p.fs.iter().fold(Node::Val(p.c), |acc, f| {
                mul_nodes(&acc, &rebuild(f, facts, leaf))
            });
            cancel_exact(product, facts)
        }
        Node::Div(x, d) => div_node(rebuild(x, facts, leaf), *d, facts),
        Node::Rem(x, d) => rem_node(rebuild(x, facts, leaf), *d, facts),
        Node::Min(args) => min_max(
            args.iter().map(|a| rebuild(a, facts, leaf)).collect(),
            true,
            facts,
        ),
        Node::Max(args) => min_max(
            args.iter().map(|a| rebuild(a, facts, leaf)).collect(),
            false,
            facts,
        ),
    }
}

fn sum(parts: &[Node]) -> Node {
    match Poly::sum(parts) {
        Some(p) => p.into_node(),
        None => parts.iter().fold(Node::Val(0), |acc, p| add_nodes(&acc, p)),
    }
}

/// Rewrites terms `c * (x/d) * ...` with `d | c` and `d | x` into `(c/d) * x * ...`.
fn cancel_exact(n: Node, facts: &dyn Facts) -> Node {
    match &n {
        Node::Mul(..) => cancel_term(&n, facts).unwrap_or(n),
        Node::Add(ts) if ts.iter().any(|t| matches!(t, Node::Mul(..))) => {
            let mut changed = false;
            let parts: Vec<Node> = ts
                .iter()
                .map(|t| match cancel_term(t, facts) {
                    Some(x) => {
                        changed = true;
                        x
                    }
                    None => t.clone(),
                })
                .collect();
            if changed {
                sum(&parts)
            } else {
                n
            }
        }
        _ => n,
    }
}

fn cancel_term(t: &Node, facts: &dyn Facts) -> Option<Node> {
    let Node::Mul(p) = t else { return None };
    let (c, fs) = (&p.c, &p.fs);
    let i = fs.iter().position(|f| {
        matches!(f, Node::Div(x, d) if *d > 0 && c % d == 0 && known_divisor(x, facts) % i128::from(*d) == 0)
    })?;
    let Node::Div(x, d) = &fs[i] else { return None };
    let mut out = mul_nodes(&Node::Val(c / d), x);
    for (j, f) in fs.iter().enumerate() {
        if j != i {
            out = mul_nodes(&out, f);
        }
    }
    Some(cancel_exact(out, facts))
}
