//! Per-graph symbol table: names, declared ranges and divisibility facts.

use std::collections::BTreeMap;

use super::bounds::{gcd, Facts};
use super::dim::Dim;
use super::error::SymError;
use super::eval::Bindings;
use super::symbol::{Symbol, SymbolMap};

/// Range of a symbol nobody declared a range for: dimensions are at least 1.
pub const DEFAULT_RANGE: (i64, i64) = (1, i64::MAX);

/// What a scope knows about one symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SymFacts {
    pub(crate) lo: i64,
    pub(crate) hi: i64,
    /// Every value is a multiple of this (≥ 1).
    pub(crate) multiple: i64,
    /// Position in declaration order.
    pub(crate) order: usize,
    /// False while the range is still [`DEFAULT_RANGE`] by default: the first
    /// declaration replaces it, later ones intersect with it.
    pub(crate) declared: bool,
}

/// The symbols of one graph and the facts proven about them.
///
/// Holds, per symbol, an inclusive range (default [`DEFAULT_RANGE`]) and a
/// divisibility fact (`S % 8 == 0`), plus the equalities recorded by
/// [`unify`](SymbolScope::unify). Facts only ever get stronger; every mutating
/// method either succeeds or leaves the scope unchanged.
///
/// Declare ranges and divisibility before deriving shapes: simplifications made
/// under the default range (`min(S, 0) == 0` because `S >= 1`) are not revisited.
#[derive(Clone, Debug, Default)]
pub struct SymbolScope {
    pub(crate) order: Vec<Symbol>,
    pub(crate) facts: SymbolMap<SymFacts>,
    /// Eliminated symbol → its canonical value in terms of the others.
    pub(crate) subst: BTreeMap<Symbol, Dim>,
}

impl SymbolScope {
    /// An empty scope.
    pub fn new() -> SymbolScope {
        SymbolScope::default()
    }

    /// The symbol named `name`, adding it to this scope (with the default range)
    /// if it is new here.
    ///
    /// # Errors
    ///
    /// [`SymError::InvalidName`] unless `name` is an ASCII identifier of at most
    /// 64 bytes other than `min`/`max`; [`SymError::TooManySymbols`] if the
    /// process-wide name table is full.
    pub fn symbol(&mut self, name: &str) -> Result<Symbol, SymError> {
        let sym = Symbol::intern(name)?;
        self.register(sym);
        Ok(sym)
    }

    /// The symbol named `name` if this scope has it.
    pub fn lookup(&self, name: &str) -> Option<Symbol> {
        self.order.iter().copied().find(|s| s.name() == name)
    }

    /// This scope's symbols in the order they were added.
    pub fn symbols(&self) -> impl Iterator<Item = Symbol> + '_ {
        self.order.iter().copied()
    }

    /// Adds `sym` with default facts if it is new here.
    pub(crate) fn register(&mut self, sym: Symbol) {
        let order = self.order.len();
        self.facts.entry(sym).or_insert_with(|| {
            let (lo, hi) = DEFAULT_RANGE;
            SymFacts {
                lo,
                hi,
                multiple: 1,
                order,
                declared: false,
            }
        });
        if self.order.len() < self.facts.len() {
            self.order.push(sym);
        }
    }

    pub(crate) fn facts_of(&self, sym: Symbol) -> SymFacts {
        self.facts.get(&sym).copied().unwrap_or_else(|| {
            let (lo, hi) = DEFAULT_RANGE;
            SymFacts {
                lo,
                hi,
                multiple: 1,
                order: usize::MAX,
                declared: false,
            }
        })
    }

    /// The inclusive range of `sym` (after unification and divisibility).
    pub fn range(&self, sym: Symbol) -> (i64, i64) {
        let f = self.facts_of(sym);
        (f.lo, f.hi)
    }

    /// The largest known `k` with `sym % k == 0` (1 if none).
    pub fn multiple_of(&self, sym: Symbol) -> i64 {
        self.facts_of(sym).multiple
    }

    /// Declares `lo <= sym <= hi`. The first declaration replaces the default
    /// range; later ones (and ranges implied by equalities) intersect with it.
    ///
    /// # Errors
    ///
    /// [`SymError::EmptyRange`] if no value would remain;
    /// [`SymError::Unify`] if the range contradicts a recorded equality.
    pub fn declare_range(&mut self, sym: Symbol, lo: i64, hi: i64) -> Result<(), SymError> {
        let mut next = self.clone();
        next.register(sym);
        let mut f = next.facts_of(sym);
        let (lo, hi) = if f.declared {
            (lo.max(f.lo), hi.min(f.hi))
        } else {
            (lo, hi)
        };
        let multiple = f.multiple;
        (f.lo, f.hi) = fit(lo, hi, multiple).ok_or(SymError::EmptyRange {
            sym,
            lo,
            hi,
            multiple,
        })?;
        f.declared = true;
        next.facts.insert(sym, f);
        next.refresh()?;
        *self = next;
        Ok(())
    }

    /// Declares `sym % multiple == 0`.
    ///
    /// # Errors
    ///
    /// [`SymError::BadMultiple`] if `multiple <= 0` (or the combined divisor
    /// overflows); [`SymError::EmptyRange`] if no value in the range remains;
    /// [`SymError::Unify`] if the fact contradicts a recorded equality.
    pub fn declare_multiple_of(&mut self, sym: Symbol, multiple: i64) -> Result<(), SymError> {
        if multiple <= 0 {
            return Err(SymError::BadMultiple { sym, multiple });
        }
        let mut next = self.clone();
        next.register(sym);
        let mut f = next.facts_of(sym);
        f.multiple = lcm(f.multiple, multiple).ok_or(SymError::BadMultiple { sym, multiple })?;
        let (lo, hi) = (f.lo, f.hi);
        (f.lo, f.hi) = fit(lo, hi, f.multiple).ok_or(SymError::EmptyRange {
            sym,
            lo,
            hi,
            multiple: f.multiple,
        })?;
        next.facts.insert(sym, f);
        next.refresh()?;
        *self = next;
        Ok(())
    }

    /// Checks `value` against the declared range and divisibility of `sym`.
    ///
    /// # Errors
    ///
    /// [`SymError::OutOfRange`] or [`SymError::NotMultiple`], naming the symbol,
    /// the value and the violated fact.
    pub fn check_binding(&self, sym: Symbol, value: i64) -> Result<(), SymError> {
        let f = self.facts_of(sym);
        if value < f.lo || value > f.hi {
            return Err(SymError::OutOfRange {
                sym,
                value,
                lo: f.lo,
                hi: f.hi,
            });
        }
        if value % f.multiple != 0 {
            return Err(SymError::NotMultiple {
                sym,
                value,
                multiple: f.multiple,
            });
        }
        Ok(())
    }

    /// Checks `value` with [`check_binding`](Self::check_binding), then binds it.
    ///
    /// # Errors
    ///
    /// As [`check_binding`](Self::check_binding); `bindings` is unchanged on error.
    pub fn bind(&self, bindings: &mut Bindings, sym: Symbol, value: i64) -> Result<(), SymError> {
        self.check_binding(sym, value)?;
        bindings.set(sym, value);
        Ok(())
    }

    /// Checks every binding with [`check_binding`](Self::check_binding).
    ///
    /// # Errors
    ///
    /// The first violation, in symbol-name order.
    pub fn check_bindings(&self, bindings: &Bindings) -> Result<(), SymError> {
        bindings
            .iter()
            .try_for_each(|(s, v)| self.check_binding(s, v))
    }
}

impl Facts for SymbolScope {
    fn range(&self, sym: Symbol) -> (i64, i64) {
        SymbolScope::range(self, sym)
    }
    fn multiple(&self, sym: Symbol) -> i64 {
        self.multiple_of(sym)
    }
}

/// Shrinks `lo..=hi` to start and end on multiples of `m`; `None` if empty.
pub(crate) fn fit(lo: i64, hi: i64, m: i64) -> Option<(i64, i64)> {
    let m = i128::from(m.max(1));
    let lo = i128::from(lo).div_euclid(m) * m
        + if i128::from(lo).rem_euclid(m) == 0 {
            0
        } else {
            m
        };
    let hi = i128::from(hi).div_euclid(m) * m;
    if lo > hi {
        return None;
    }
    Some((i64::try_from(lo).ok()?, i64::try_from(hi).ok()?))
}

/// Least common multiple of positive numbers; `None` on overflow.
pub(crate) fn lcm(a: i64, b: i64) -> Option<i64> {
    let g = gcd(i128::from(a), i128::from(b));
    i64::try_from(i128::from(a) / g * i128::from(b)).ok()
}
