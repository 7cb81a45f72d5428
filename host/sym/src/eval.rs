//! Symbol bindings and evaluation.

use super::dim::{Dim, Node};
use super::error::SymError;
use super::symbol::Symbol;

/// Values of symbols at one call, e.g. `S = 128`.
///
/// A small map kept sorted by symbol name; lookups do not allocate. Validate
/// values against a scope's facts with
/// [`SymbolScope::bind`](super::SymbolScope::bind) or
/// [`SymbolScope::check_bindings`](super::SymbolScope::check_bindings).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bindings {
    vals: Vec<(Symbol, i64)>,
}

impl Bindings {
    /// No bindings.
    pub fn new() -> Bindings {
        Bindings::default()
    }

    /// `self` with `sym = value` added (or replaced).
    #[must_use]
    pub fn with(mut self, sym: Symbol, value: i64) -> Bindings {
        self.set(sym, value);
        self
    }

    /// Binds `sym` to `value`; returns the previous value.
    pub fn set(&mut self, sym: Symbol, value: i64) -> Option<i64> {
        match self.vals.binary_search_by(|(s, _)| s.cmp(&sym)) {
            Ok(i) => Some(std::mem::replace(&mut self.vals[i].1, value)),
            Err(i) => {
                self.vals.insert(i, (sym, value));
                None
            }
        }
    }

    /// Removes the binding of `sym`; returns its value.
    pub fn remove(&mut self, sym: Symbol) -> Option<i64> {
        let i = self.vals.binary_search_by(|(s, _)| s.cmp(&sym)).ok()?;
        Some(self.vals.remove(i).1)
    }

    /// The value of `sym`, if bound.
    pub fn get(&self, sym: Symbol) -> Option<i64> {
        if self.vals.len() <= 8 {
            // Pointer comparisons beat a binary search over names here.
            return self.vals.iter().find(|(s, _)| *s == sym).map(|(_, v)| *v);
        }
        let i = self.vals.binary_search_by(|(s, _)| s.cmp(&sym)).ok()?;
        Some(self.vals[i].1)
    }

    /// Number of bound symbols.
    pub fn len(&self) -> usize {
        self.vals.len()
    }

    /// True if nothing is bound.
    pub fn is_empty(&self) -> bool {
        self.vals.is_empty()
    }

    /// The bindings, sorted by symbol name.
    pub fn iter(&self) -> impl Iterator<Item = (Symbol, i64)> + '_ {
        self.vals.iter().copied()
    }
}

impl FromIterator<(Symbol, i64)> for Bindings {
    fn from_iter<I: IntoIterator<Item = (Symbol, i64)>>(iter: I) -> Bindings {
        let mut b = Bindings::new();
        for (s, v) in iter {
            b.set(s, v);
        }
        b
    }
}

impl Extend<(Symbol, i64)> for Bindings {
    fn extend<I: IntoIterator<Item = (Symbol, i64)>>(&mut self, iter: I) {
        for (s, v) in iter {
            self.set(s, v);
        }
    }
}

/// Why an evaluation failed, without allocating.
enum Fail<'a> {
    Unbound(Symbol),
    Overflow(&'a Node),
}

impl Dim {
    /// The value of this dimension under `bindings`, in checked `i64` arithmetic.
    ///
    /// Does not allocate unless it fails. Division and modulo round toward −∞
    /// (the remainder is in `0..divisor`).
    ///
    /// # Errors
    ///
    /// [`SymError::Unbound`] naming the first symbol without a value;
    /// [`SymError::Overflow`] naming the sub-expression whose value does not fit
    /// in `i64`.
    pub fn eval(&self, bindings: &Bindings) -> Result<i64, SymError> {
        eval(&self.0, bindings).map_err(|fail| match fail {
            Fail::Unbound(sym) => SymError::Unbound {
                sym,
                expr: self.clone(),
            },
            Fail::Overflow(n) => SymError::Overflow {
                expr: Dim(n.clone()),
            },
        })
    }
}

fn eval<'a>(n: &'a Node, b: &Bindings) -> Result<i64, Fail<'a>> {
    let overflow = || Fail::Overflow(n);
    match n {
        Node::Val(c) => Ok(*c),
        Node::Sym(s) => b.get(*s).ok_or(Fail::Unbound(*s)),
        Node::Add(ts) => ts.iter().try_fold(0i64, |acc, t| {
            acc.checked_add(eval(t, b)?).ok_or_else(overflow)
        }),
        Node::Mul(p) => p.fs.iter().try_fold(p.c, |acc, f| {
            acc.checked_mul(eval(f, b)?).ok_or_else(overflow)
        }),
        Node::Div(x, d) => eval(x, b)?.checked_div_euclid(*d).ok_or_else(overflow),
        Node::Rem(x, d) => eval(x, b)?.checked_rem_euclid(*d).ok_or_else(overflow),
        Node::Min(args) => fold(args, b, i64::min),
        Node::Max(args) => fold(args, b, i64::max),
    }
}

fn fold<'a>(args: &'a [Node], b: &Bindings, pick: fn(i64, i64) -> i64) -> Result<i64, Fail<'a>> {
    let mut acc: Option<i64> = None;
    for a in args {
        let v = eval(a, b)?;
        acc = Some(acc.map_or(v, |x| pick(x, v)));
    }
    Ok(acc.unwrap_or(0))
}
