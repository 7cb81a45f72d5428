//! Value bounds and divisibility of expressions, given facts about symbols.

use super::dim::Node;
use super::symbol::Symbol;

/// What is known about symbols: used by simplification and proofs.
pub(crate) trait Facts {
    /// Inclusive range of `sym`.
    fn range(&self, sym: Symbol) -> (i64, i64);
    /// A positive number that always divides `sym` (1 if nothing is known).
    fn multiple(&self, sym: Symbol) -> i64;
}

/// No facts: every symbol may take any `i64` value.
pub(crate) struct NoFacts;

impl Facts for NoFacts {
    fn range(&self, _: Symbol) -> (i64, i64) {
        (i64::MIN, i64::MAX)
    }
    fn multiple(&self, _: Symbol) -> i64 {
        1
    }
}

/// Clamps to `i64`. Sound because an evaluation that succeeds has every
/// sub-expression in `i64`, so bounds only need to hold for such evaluations.
fn clamp(v: i128) -> i64 {
    // The clamp makes the conversion lossless.
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Inclusive bounds `(lo, hi)` of `n` over all values allowed by `facts`
/// (`i64::MIN`/`i64::MAX` mean unbounded).
pub(crate) fn interval(n: &Node, facts: &dyn Facts) -> (i64, i64) {
    match n {
        Node::Val(c) => (*c, *c),
        Node::Sym(s) => facts.range(*s),
        // Not produced by the public API; kept total anyway.
        Node::Div(_, d) | Node::Rem(_, d) if *d <= 0 => (i64::MIN, i64::MAX),
        Node::Add(ts) => {
            let (mut lo, mut hi) = (0i128, 0i128);
            for t in ts.iter() {
                let (a, b) = interval(t, facts);
                lo += i128::from(a);
                hi += i128::from(b);
            }
            (clamp(lo), clamp(hi))
        }
        Node::Mul(p) => {
            let mut acc = (p.c, p.c);
            for f in p.fs.iter() {
                acc = mul_interval(acc, interval(f, facts));
            }
            acc
        }
        Node::Div(x, d) => {
            let (lo, hi) = interval(x, facts);
            (lo.div_euclid(*d), hi.div_euclid(*d))
        }
        Node::Rem(x, d) => {
            let (lo, hi) = interval(x, facts);
            if lo.div_euclid(*d) == hi.div_euclid(*d) {
                (lo.rem_euclid(*d), hi.rem_euclid(*d))
            } else {
                let g = gcd(known_divisor(x, facts), i128::from(*d));
                (0, clamp(i128::from(*d) - g.max(1)))
            }
        }
        Node::Min(args) => fold_args(args, facts, i64::min),
        Node::Max(args) => fold_args(args, facts, i64::max),
    }
}

fn fold_args(args: &[Node], facts: &dyn Facts, pick: fn(i64, i64) -> i64) -> (i64, i64) {
    let mut iter = args.iter().map(|a| interval(a, facts));
    let first = iter.next().unwrap_or((i64::MIN, i64::MAX));
    iter.fold(first, |(lo, hi), (a, b)| (pick(lo, a), pick(hi, b)))
}

fn mul_interval((a, b): (i64, i64), (c, d): (i64, i64)) -> (i64, i64) {
    let p = [
        i128::from(a) * i128::from(c),
        i128::from(a) * i128::from(d),
        i128::from(b) * i128::from(c),
        i128::from(b) * i128::from(d),
    ];
    let lo = p.iter().copied().min().unwrap_or(0);
    let hi = p.iter().copied().max().unwrap_or(0);
    (clamp(lo), clamp(hi))
}

/// A number `g >= 0` that divides every value of `n` (0: `n` is always 0).
pub(crate) fn known_divisor(n: &Node, facts: &dyn Facts) -> i128 {
    match n {
        Node::Val(c) => i128::from(*c).abs(),
        Node::Sym(s) => i128::from(facts.multiple(*s).max(1)),
        Node::Add(ts) | Node::Min(ts) | Node::Max(ts) => {
            ts.iter().fold(0, |g, t| gcd(g, known_divisor(t, facts)))
        }
        Node::Mul(p) => term_divisor(p.c, &p.fs, facts),
        Node::Div(..) => 1,
        Node::Rem(x, d) => gcd(known_divisor(x, facts), i128::from(*d)),
    }
}

/// A divisor of the term `c × Π factors` (capped below 2^63; still a divisor).
pub(crate) fn term_divisor(c: i64, factors: &[Node], facts: &dyn Facts) -> i128 {
    let mut g = i128::from(c).abs();
    for f in factors {
        let next = g * known_divisor(f, facts).min(1 << 63);
        if next > 1 << 63 {
            break;
        }
        g = next;
    }
    g
}

/// Greatest common divisor of `|a|` and `|b|` (`gcd(0, b) = |b|`).
pub(crate) fn gcd(a: i128, b: i128) -> i128 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    // Inputs here are at most 2^64 in magnitude, so this fits.
    i128::try_from(a).unwrap_or(i128::MAX)
}
