//! Equalities between dimensions: unification, canonical forms under the
//! recorded facts, proofs and broadcasting.
//!
//! The recorded equalities form a union-find in solved form: each eliminated
//! symbol maps to a canonical expression over the remaining symbols, and no
//! right side mentions an eliminated symbol (full path compression). When an
//! equality relates two symbols, the one added to the scope later is
//! eliminated, so representatives are the earliest (usually input) symbols.

use super::bounds::{gcd, interval};
use super::dim::{contains, Dim, Node};
use super::error::{SymError, UnifyError};
use super::eval::Bindings;
use super::ops;
use super::poly::Poly;
use super::scope::{fit, lcm, SymbolScope};
use super::symbol::Symbol;

/// Rounds of re-canonicalisation before a result is accepted as is.
const FIXPOINT_ROUNDS: usize = 4;

impl SymbolScope {
    /// True when `dim` is its own [canonical](Self::canonical) form
    /// because it is a constant, or a symbol that no equality rewrites and
    /// whose range has more than one value (checked without rewriting).
    pub fn is_settled(&self, dim: &Dim) -> bool {
        match dim.0 {
            Node::Val(_) => true,
            Node::Sym(s) => {
                let (lo, hi) = self.range(s);
                lo != hi && !self.subst.contains_key(&s)
            }
            _ => false,
        }
    }

    /// `dim` rewritten under every recorded fact: eliminated symbols replaced by
    /// their representatives, ranges and divisibility used to fold `/`, `%`,
    /// `min` and `max` (`min(S, 0) == 0` when `S >= 1`; `S % 8 == 0` when
    /// `8 | S`; `8 * (S/8) == S` when `8 | S`), and symbols with a single
    /// possible value replaced by it.
    pub fn canonical(&self, dim: &Dim) -> Dim {
        if dim.is_const() {
            // A constant is its own canonical form.
            return dim.clone();
        }
        if let Node::Sym(s) = dim.0 {
            // What the rewrite below makes of a single symbol that no
            // equality rewrites: its value when its range has one, else
            // itself.
            if !self.subst.contains_key(&s) {
                return match self.range(s) {
                    (lo, hi) if lo == hi => Dim::val(lo),
                    _ => dim.clone(),
                };
            }
        }
        let leaf = |s: Symbol| self.subst.get(&s).map(|d| d.0.clone());
        let mut cur = ops::rebuild(&dim.0, self, &leaf);
        for _ in 1..FIXPOINT_ROUNDS {
            let next = ops::rebuild(&cur, self, &leaf);
            if next == cur {
                break;
            }
            cur = next;
        }
        Dim(cur)
    }

    /// Inclusive bounds of `dim` over all values the facts allow
    /// (`i64::MIN` / `i64::MAX` stand for unbounded).
    pub fn bounds(&self, dim: &Dim) -> (i64, i64) {
        interval(&self.canonical(dim).0, self)
    }

    fn diff_bounds(&self, a: &Dim, b: &Dim) -> (i64, i64) {
        self.bounds(&(a - b))
    }

    /// True if `a == b` for every binding the facts allow (`false` means
    /// "not proven", not "different").
    pub fn prove_eq(&self, a: &Dim, b: &Dim) -> bool {
        self.canonical(a) == self.canonical(b) || self.diff_bounds(a, b) == (0, 0)
    }

    /// True if `a != b` for every binding the facts allow.
    pub fn prove_ne(&self, a: &Dim, b: &Dim) -> bool {
        let (lo, hi) = self.diff_bounds(a, b);
        lo > 0 || hi < 0
    }

    /// True if `a >= b` for every binding the facts allow.
    pub fn prove_ge(&self, a: &Dim, b: &Dim) -> bool {
        self.diff_bounds(a, b).0 >= 0
    }

    /// True if `a <= b` for every binding the facts allow.
    pub fn prove_le(&self, a: &Dim, b: &Dim) -> bool {
        self.diff_bounds(a, b).1 <= 0
    }

    /// True if `a > b` for every binding the facts allow.
    pub fn prove_gt(&self, a: &Dim, b: &Dim) -> bool {
        self.diff_bounds(a, b).0 > 0
    }

    /// True if `a < b` for every binding the facts allow.
    pub fn prove_lt(&self, a: &Dim, b: &Dim) -> bool {
        self.diff_bounds(a, b).1 < 0
    }

    /// Records `a == b`.
    ///
    /// Constants must be equal. Otherwise the difference is solved for a symbol
    /// that occurs in it once, linearly, with coefficient ±1 (after dividing out
    /// common factors): `S == 128`, `T == S`, `S == 2*T + 1` and `2*S == 2*T`
    /// are recorded; later [`canonical`](Self::canonical) calls rewrite with it.
    /// The solved symbol's range and divisibility carry over to the symbol it is
    /// expressed in when that relation is affine.
    ///
    /// # Errors
    ///
    /// * [`UnifyError::Mismatch`]: provably never equal (`3` vs `4`, `S` vs
    ///   `S+1`, `2*S` vs `7`);
    /// * [`UnifyError::OutOfRange`] / [`UnifyError::NotMultiple`]: the equality
    ///   would force a symbol outside its declared range or divisibility
    ///   (`S == 0` when `1 <= S`), naming that symbol;
    /// * [`UnifyError::Unsolvable`]: may hold but cannot be recorded
    ///   (`S*T == 128`, `2*S == 3*T`, `S == min(S, 4)`).
    ///
    /// On error the scope is unchanged.
    pub fn unify(&mut self, a: &Dim, b: &Dim) -> Result<(), UnifyError> {
        let (ca, cb) = (self.canonical(a), self.canonical(b));
        if ca == cb {
            return Ok(());
        }
        let mut next = self.clone();
        for s in ca.symbols().into_iter().chain(cb.symbols()) {
            next.register(s);
        }
        next.record(a, b, &ca - &cb)?;
        *self = next;
        Ok(())
    }

    fn record(&mut self, a: &Dim, b: &Dim, diff: Dim) -> Result<(), UnifyError> {
        let mismatch = |reason| UnifyError::Mismatch {
            lhs: a.clone(),
            rhs: b.clone(),
            reason,
        };
        let diff = self.canonical(&diff);
        match diff.as_const() {
            Some(0) => return Ok(()),
            Some(_) => return Err(mismatch("they differ by a constant")),
            None => {}
        }
        let unsolvable = || UnifyError::Unsolvable {
            lhs: a.clone(),
            rhs: b.clone(),
        };
        let (lo, hi) = interval(&diff.0, self);
        let never = lo > 0 || hi < 0;
        let Some(poly) = Poly::of(&diff.0) else {
            return Err(if never {
                mismatch("their difference is never zero")
            } else {
                unsolvable()
            });
        };
        let content = poly
            .terms
            .iter()
            .filter(|(m, _)| !m.is_empty())
            .fold(0, |g, (_, c)| gcd(g, i128::from(*c)));
        let constant = poly.as_const_term();
        if content == 0 || i128::from(constant) % content != 0 {
            return Err(mismatch("no integer solution"));
        }
        // Candidates: `±content * S` with S nowhere else in the difference.
        let candidate = |(i, (mono, c)): (usize, &(Vec<Node>, i64))| -> Option<(Symbol, usize)> {
            let [Node::Sym(s)] = mono.as_slice() else {
                return None;
            };
            let others = poly.terms.iter().enumerate().filter(|(j, _)| *j != i);
            let occurs = others
                .into_iter()
                .any(|(_, (m, _))| m.iter().any(|f| contains(f, *s)));
            (i128::from(*c).abs() == content && !occurs).then_some((*s, i))
        };
        let best = poly
            .terms
            .iter()
            .enumerate()
            .filter_map(candidate)
            .max_by_key(|(s, _)| self.facts_of(*s).order);
        let Some((sym, index)) = best else {
            return Err(if never {
                mismatch("their difference is never zero")
            } else {
                unsolvable()
            });
        };
        // diff = unit*content*S + rest == 0  =>  S = -unit * rest / content.
        let unit = poly.terms[index].1.signum();
        let rest: Vec<_> = poly
            .terms
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != index)
            .map(|(_, t)| t.clone())
            .collect();
        let rest = Dim(Poly { terms: rest }.into_node()) * -unit;
        // content divides every coefficient of rest, so this division is exact.
        let content = i64::try_from(content).map_err(|_| unsolvable())?;
        let rhs = self.canonical(&rest.div(content).map_err(|_| unsolvable())?);
        if never {
            let (lo, hi) = self.range(sym);
            return Err(UnifyError::OutOfRange {
                sym,
                value: rhs,
                lo,
                hi,
            });
        }
        self.subst.insert(sym, rhs);
        self.refresh()
    }

    /// Re-canonicalises every recorded equality under the current facts,
    /// propagates ranges through affine equalities, and checks consistency.
    pub(crate) fn refresh(&mut self) -> Result<(), UnifyError> {
        for _ in 0..=self.subst.len().min(16) {
            let mut changed = false;
            let keys: Vec<Symbol> = self.subst.keys().copied().collect();
            for k in &keys {
                let rhs = self.canonical(&self.subst[k]);
                if rhs != self.subst[k] {
                    changed = true;
                    self.subst.insert(*k, rhs);
                }
            }
            for k in &keys {
                let rhs = self.subst[k].clone();
                changed |= self.tighten(*k, &rhs)?;
            }
            if !changed {
                break;
            }
        }
        Ok(())
    }

    /// Checks `sym == rhs` against the facts of `sym` and narrows the facts of
    /// the symbol `rhs` is affine in. Returns whether any fact changed.
    fn tighten(&mut self, sym: Symbol, rhs: &Dim) -> Result<bool, UnifyError> {
        let f = self.facts_of(sym);
        let out_of_range = || UnifyError::OutOfRange {
            sym,
            value: rhs.clone(),
            lo: f.lo,
            hi: f.hi,
        };
        let not_multiple = || UnifyError::NotMultiple {
            sym,
            value: rhs.clone(),
            multiple: f.multiple,
        };
        let (lo, hi) = interval(&rhs.0, self);
        if hi < f.lo || lo > f.hi {
            return Err(out_of_range());
        }
        if let Some(v) = rhs.as_const() {
            return if v % f.multiple == 0 {
                Ok(false)
            } else {
                Err(not_multiple())
            };
        }
        let Some((t, c1, c0)) = affine(rhs) else {
            return Ok(false);
        };
        let tf = self.facts_of(t);
        let (plo, phi) = preimage(f.lo, f.hi, c1, c0);
        let (lo, hi) = (plo.max(tf.lo), phi.min(tf.hi));
        let mut multiple = tf.multiple;
        if f.multiple > 1 {
            let m = i128::from(f.multiple);
            if i128::from(c0) % gcd(i128::from(c1), m) != 0 {
                return Err(not_multiple());
            }
            if i128::from(c0) % m == 0 {
                let need = i64::try_from(m / gcd(i128::from(c1), m)).unwrap_or(1);
                multiple = lcm(multiple, need).unwrap_or(multiple);
            }
        }
        let (lo, hi) = fit(lo, hi, multiple).ok_or_else(out_of_range)?;
        let mut new = tf;
        (new.lo, new.hi, new.multiple, new.declared) = (lo, hi, multiple, true);
        let changed = new != tf;
        self.facts.insert(t, new);
        Ok(changed)
    }

    /// The recorded value of an eliminated symbol.
    pub fn substitution(&self, sym: Symbol) -> Option<&Dim> {
        self.subst.get(&sym)
    }

    /// Every recorded equality `symbol == expression`, by symbol name.
    pub fn equalities(&self) -> impl Iterator<Item = (Symbol, &Dim)> + '_ {
        self.subst.iter().map(|(s, d)| (*s, d))
    }

    /// Fills in the values that the recorded equalities and single-valued
    /// ranges determine (`T = S` with `S` bound binds `T`; `S = T + 1` with only
    /// `S` bound binds `T`), then checks every binding against the facts.
    /// Symbols that nothing determines stay unbound.
    ///
    /// # Errors
    ///
    /// [`SymError::Inconsistent`] if a binding contradicts an equality,
    /// [`SymError::NoSolution`] if it leaves no integer value for a symbol,
    /// [`SymError::Overflow`], and the errors of
    /// [`check_binding`](Self::check_binding).
    pub fn complete_bindings(&self, bindings: &mut Bindings) -> Result<(), SymError> {
        for &s in &self.order {
            let f = self.facts_of(s);
            if f.lo == f.hi && bindings.get(s).is_none() && !self.subst.contains_key(&s) {
                bindings.set(s, f.lo);
            }
        }
        for _ in 0..=self.subst.len() {
            let mut progress = false;
            for (&sym, rhs) in &self.subst {
                match (bindings.get(sym), rhs.eval(bindings)) {
                    (Some(value), Ok(expected)) if value != expected => {
                        return Err(SymError::Inconsistent {
                            sym,
                            value,
                            expr: rhs.clone(),
                            expected,
                        });
                    }
                    (None, Ok(v)) => {
                        bindings.set(sym, v);
                        progress = true;
                    }
                    (Some(value), Err(SymError::Unbound { .. })) => {
                        let Some((t, c1, c0)) = affine(rhs) else {
                            continue;
                        };
                        let num = i128::from(value) - i128::from(c0);
                        let solution = (num % i128::from(c1) == 0)
                            .then(|| i64::try_from(num / i128::from(c1)).ok())
                            .flatten();
                        let Some(tv) = solution else {
                            return Err(SymError::NoSolution {
                                sym,
                                value,
                                expr: rhs.clone(),
                                target: t,
                            });
                        };
                        bindings.set(t, tv);
                        progress = true;
                    }
                    (_, Err(e @ SymError::Overflow { .. })) => return Err(e),
                    _ => {}
                }
            }
            if !progress {
                break;
            }
        }
        self.check_bindings(bindings)
    }

    /// The NumPy broadcast of two dimensions: `1` against `X` gives `X`, `X`
    /// against `X` gives `X` (equality proven under the facts).
    ///
    /// Policy: this never assumes anything. When the answer depends on values
    /// not known yet (`S` against `T`, or `S` against `4` while `S` may be 1) it
    /// returns [`UnifyError::BroadcastUndecided`]; the caller may then choose
    /// [`broadcast_unify`](Self::broadcast_unify).
    ///
    /// # Errors
    ///
    /// [`UnifyError::BroadcastMismatch`] if the two are provably different and
    /// neither can be 1; [`UnifyError::BroadcastUndecided`] as above. Both name
    /// the two dimensions.
    pub fn broadcast(&self, a: &Dim, b: &Dim) -> Result<Dim, UnifyError> {
        let (ca, cb) = (self.canonical(a), self.canonical(b));
        if ca == cb || cb.as_const() == Some(1) {
            return Ok(ca);
        }
        if ca.as_const() == Some(1) || self.prove_eq(&ca, &cb) {
            return Ok(cb);
        }
        let one = Dim::ONE;
        if self.prove_ne(&ca, &one) && self.prove_ne(&cb, &one) && self.prove_ne(&ca, &cb) {
            return Err(UnifyError::BroadcastMismatch {
                lhs: a.clone(),
                rhs: b.clone(),
            });
        }
        Err(UnifyError::BroadcastUndecided {
            lhs: a.clone(),
            rhs: b.clone(),
        })
    }

    /// [`broadcast`](Self::broadcast), but an undecided case is resolved by
    /// assuming the two dimensions are equal and recording that with
    /// [`unify`](Self::unify) (the usual policy for dynamic shapes: a symbolic
    /// dimension is not expected to be a broadcasting 1). Bindings that break
    /// the assumption are caught by [`complete_bindings`](Self::complete_bindings).
    ///
    /// # Errors
    ///
    /// [`UnifyError::BroadcastMismatch`], or any error of
    /// [`unify`](Self::unify) (then the scope is unchanged).
    pub fn broadcast_unify(&mut self, a: &Dim, b: &Dim) -> Result<Dim, UnifyError> {
        match self.broadcast(a, b) {
            Err(UnifyError::BroadcastUndecided { .. }) => {
                self.unify(a, b)?;
                Ok(self.canonical(a))
            }
            other => other,
        }
    }
}

/// `rhs == c1 * t + c0` with one symbol `t`: `(t, c1, c0)`.
fn affine(rhs: &Dim) -> Option<(Symbol, i64, i64)> {
    let poly = Poly::of(&rhs.0)?;
    let mut sym = None;
    for (mono, c) in &poly.terms {
        match mono.as_slice() {
            [] => {}
            [Node::Sym(t)] if sym.is_none() => sym = Some((*t, *c)),
            _ => return None,
        }
    }
    sym.map(|(t, c1)| (t, c1, poly.as_const_term()))
}

/// The `t` with `lo <= c1*t + c0 <= hi` (`c1 != 0`), clamped to `i64`.
fn preimage(lo: i64, hi: i64, c1: i64, c0: i64) -> (i64, i64) {
    let (c1, c0) = (i128::from(c1), i128::from(c0));
    let (a, b) = (i128::from(lo) - c0, i128::from(hi) - c0);
    let (tlo, thi) = if c1 > 0 {
        (ceil_div(a, c1), floor_div(b, c1))
    } else {
        (ceil_div(b, c1), floor_div(a, c1))
    };
    let clamp =
        |v: i128| i64::try_from(v.clamp(i128::from(i64::MIN), i128::from(i64::MAX))).unwrap_or(0);
    (clamp(tlo), clamp(thi))
}

fn floor_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

fn ceil_div(a: i128, b: i128) -> i128 {
    -floor_div(-a, b)
}
