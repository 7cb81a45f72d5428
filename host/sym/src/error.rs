//! Errors of the symbolic-dimension algebra.

use super::dim::Dim;
use super::symbol::Symbol;

/// Errors from parsing, evaluating and declaring facts about symbolic dimensions.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SymError {
    /// A symbol name is not an identifier the text syntax can read back.
    #[error("invalid symbol name `{name}`: {reason}")]
    InvalidName {
        /// The rejected name (truncated if very long).
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// The process-wide symbol table is full.
    #[error("too many distinct symbol names (limit {limit})")]
    TooManySymbols {
        /// The limit.
        limit: usize,
    },
    /// A dimension expression could not be parsed.
    #[error("cannot parse dimension `{input}` at byte {pos}: {msg}")]
    Parse {
        /// The input text (truncated if very long).
        input: String,
        /// Byte offset of the problem.
        pos: usize,
        /// What went wrong.
        msg: String,
    },
    /// Evaluation met a symbol without a value.
    #[error("symbol `{sym}` is not bound (evaluating `{expr}`)")]
    Unbound {
        /// The unbound symbol.
        sym: Symbol,
        /// The expression being evaluated.
        expr: Dim,
    },
    /// Evaluation overflowed `i64`.
    #[error("arithmetic overflow evaluating `{expr}`")]
    Overflow {
        /// The sub-expression whose value does not fit in `i64`.
        expr: Dim,
    },
    /// `/` or `%` by something that is not a positive constant.
    #[error("divisor of `{expr}` must be a positive constant, got `{divisor}`")]
    BadDivisor {
        /// The dividend.
        expr: Dim,
        /// The offending divisor.
        divisor: Dim,
    },
    /// A value lies outside a symbol's declared range.
    #[error("value {value} for symbol `{sym}` is outside its range {lo}..={hi}")]
    OutOfRange {
        /// The symbol.
        sym: Symbol,
        /// The rejected value.
        value: i64,
        /// Lowest allowed value.
        lo: i64,
        /// Highest allowed value.
        hi: i64,
    },
    /// A value violates a declared divisibility fact.
    #[error("value {value} for symbol `{sym}` is not a multiple of {multiple}")]
    NotMultiple {
        /// The symbol.
        sym: Symbol,
        /// The rejected value.
        value: i64,
        /// The declared divisor.
        multiple: i64,
    },
    /// Declared facts leave a symbol no possible value.
    #[error("no value of symbol `{sym}` lies in {lo}..={hi} and is a multiple of {multiple}")]
    EmptyRange {
        /// The symbol.
        sym: Symbol,
        /// Lower bound.
        lo: i64,
        /// Upper bound.
        hi: i64,
        /// Required divisor.
        multiple: i64,
    },
    /// A divisibility fact must name a positive divisor.
    #[error("symbol `{sym}` cannot be declared a multiple of {multiple}: need a positive divisor")]
    BadMultiple {
        /// The symbol.
        sym: Symbol,
        /// The rejected divisor.
        multiple: i64,
    },
    /// A binding contradicts a proven equality.
    #[error(
        "binding `{sym}` = {value} contradicts the equality `{sym}` = `{expr}` (= {expected})"
    )]
    Inconsistent {
        /// The symbol whose binding is wrong.
        sym: Symbol,
        /// The value it was bound to.
        value: i64,
        /// What the equality says it is.
        expr: Dim,
        /// The value of `expr` under the bindings.
        expected: i64,
    },
    /// A binding leaves no integer value for a symbol it determines.
    #[error("binding `{sym}` = {value} is impossible: `{sym}` = `{expr}` has no integer solution for `{target}`")]
    NoSolution {
        /// The bound symbol.
        sym: Symbol,
        /// Its value.
        value: i64,
        /// The recorded equality's right side.
        expr: Dim,
        /// The symbol that would have to be solved for.
        target: Symbol,
    },
    /// A declared fact contradicts a proven equality.
    #[error(transparent)]
    Unify(#[from] UnifyError),
}

/// Errors from unification and broadcasting of symbolic dimensions.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnifyError {
    /// The two sides can never be equal (different constants, a difference that
    /// is never zero, or no integer solution).
    #[error("`{lhs}` and `{rhs}` can never be equal: {reason}")]
    Mismatch {
        /// Left side.
        lhs: Dim,
        /// Right side.
        rhs: Dim,
        /// Why.
        reason: &'static str,
    },
    /// The equality would force a symbol outside its declared range.
    #[error("symbol `{sym}` would have to equal `{value}`, outside its range {lo}..={hi}")]
    OutOfRange {
        /// The symbol.
        sym: Symbol,
        /// What it would have to equal.
        value: Dim,
        /// Lower bound of its range.
        lo: i64,
        /// Upper bound of its range.
        hi: i64,
    },
    /// The equality would force a symbol to violate a divisibility fact.
    #[error("symbol `{sym}` would have to equal `{value}`, which is not a multiple of {multiple}")]
    NotMultiple {
        /// The symbol.
        sym: Symbol,
        /// What it would have to equal.
        value: Dim,
        /// The declared divisor.
        multiple: i64,
    },
    /// The equality may hold but cannot be recorded: no symbol occurs in it
    /// linearly with coefficient ±1 (e.g. `S*T == 128`, `2*S == 3*T`).
    #[error("cannot record `{lhs}` == `{rhs}`: no symbol can be solved for")]
    Unsolvable {
        /// Left side.
        lhs: Dim,
        /// Right side.
        rhs: Dim,
    },
    /// The two dimensions can never broadcast together.
    #[error("cannot broadcast `{lhs}` against `{rhs}`: they differ and neither is 1")]
    BroadcastMismatch {
        /// Left dimension.
        lhs: Dim,
        /// Right dimension.
        rhs: Dim,
    },
    /// Broadcasting depends on values not known yet (e.g. `S` against `T`).
    #[error("cannot decide how `{lhs}` broadcasts against `{rhs}`: not provably equal and neither provably 1")]
    BroadcastUndecided {
        /// Left dimension.
        lhs: Dim,
        /// Right dimension.
        rhs: Dim,
    },
}
