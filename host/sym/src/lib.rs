//! Symbolic dimensions: the integer algebra behind dynamic shapes.
//!
//! Programs take the user API from the `dvm` crate (`use dvm::prelude::*`),
//! which re-exports what they need from here; this crate's other items are
//! the internals the CLI, the tests and the benchmarks use.
//!
//! A [`Dim`] is an integer expression over named [`Symbol`]s: constants, sums,
//! products, floor division and modulo by positive constants, `min` and `max`.
//! Every `Dim` is kept in a **canonical form**, so two expressions that are equal
//! by the algebraic rules below compare equal with `==` and hash equally:
//!
//! * sums are sorted `monomial → coefficient` maps with the constant folded last
//!   (`2*S + S == 3*S`, `S - S == 0`);
//! * products are a coefficient times a sorted factor list (`S*T == T*S`);
//! * `X / d` and `X % d` pull out whatever divides evenly
//!   (`(2*S+4)/2 == S+2`, `(S*4)/2 == 2*S`, `(3*S)/2 == S + S/2`), merge nested
//!   divisions (`(S/2)/3 == S/6`) and fold anything decided by value bounds;
//! * `min`/`max` are flattened, sorted and deduplicated, constants are folded and an
//!   argument provably dominated by another is dropped (`min(S, S+1) == S`).
//!
//! The canonical form is complete for polynomial identities; beyond that it is a
//! sound, best-effort normal form (two equal expressions may still differ, e.g.
//! `2*(S/2) + S%2` and `S`). Products whose expansion would exceed
//! 64 terms are kept factored, and arithmetic whose coefficients would overflow
//! `i64` is kept unfolded; both still evaluate exactly.
//!
//! A [`SymbolScope`] (one per graph) interns symbol names, records declared ranges
//! (`1 <= S <= 8192`) and divisibility facts (`S % 8 == 0`), and the equalities
//! proven by [`SymbolScope::unify`]. [`SymbolScope::canonical`] rewrites a `Dim`
//! under all of those facts, and the `prove_*` methods decide simple comparisons.
//! At call time, [`Bindings`] give symbols values and [`Dim::eval`] computes a
//! dimension with checked arithmetic and no allocation.
//!
//! Text syntax (what [`Dim`]'s `Display` prints and [`Dim::parse`] reads):
//! integers, identifiers, `+ - * / %`, parentheses, `min(a, b, ...)` and
//! `max(a, b, ...)`; `/` and `%` need a positive constant on the right.
//!
//! ```
//! use dvm_sym::{Bindings, Dim, SymbolScope};
//!
//! let mut scope = SymbolScope::new();
//! let s = scope.symbol("S")?;
//! scope.declare_range(s, 1, 8192)?;
//! let d = (Dim::from(s) * 2 + 4).div(2)?;
//! assert_eq!(d, Dim::parse("S+2", &mut scope)?);
//! assert_eq!(d.to_string(), "S+2");
//! assert_eq!(d.eval(&Bindings::new().with(s, 10))?, 12);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod bounds;
mod dim;
mod display;
mod error;
mod eval;
mod idhash;
mod ops;
mod parse;
mod poly;
mod scope;
mod symbol;
mod unify;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use dim::Dim;
pub use error::{SymError, UnifyError};
pub use eval::Bindings;
pub use idhash::{IdHasher, IdSet};
pub use scope::{SymbolScope, DEFAULT_RANGE};
pub use symbol::Symbol;
