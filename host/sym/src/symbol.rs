//! Interned symbol names.

use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{LazyLock, Mutex, PoisonError};

use super::error::SymError;

/// Longest accepted symbol name, in bytes.
pub(crate) const MAX_NAME_LEN: usize = 64;
/// Most distinct symbol names a process will intern.
pub(crate) const MAX_SYMBOLS: usize = 1 << 16;

/// Names that cannot be symbols because the text syntax uses them.
const RESERVED: [&str; 2] = ["min", "max"];

static NAMES: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Mutex::default);

/// A named symbolic dimension, e.g. `S` or `batch`.
///
/// Symbols are interned by name: the same name always yields the same `Symbol`,
/// whichever [`SymbolScope`](super::SymbolScope) asked for it, and copying or
/// comparing one is a pointer operation. Facts about a symbol (range,
/// divisibility, equalities) live in a scope, not in the symbol. Symbols order by
/// name, which keeps canonical forms and printed text deterministic.
///
/// Create symbols with [`SymbolScope::symbol`](super::SymbolScope::symbol).
#[derive(Clone, Copy)]
pub struct Symbol(&'static str);

impl Symbol {
    /// Interns `name`.
    ///
    /// # Errors
    ///
    /// [`SymError::InvalidName`] unless `name` is an ASCII identifier
    /// (`[A-Za-z_][A-Za-z0-9_]*`, at most 64 bytes, not `min` or `max`);
    /// [`SymError::TooManySymbols`] once the process holds 65536 distinct names.
    pub(crate) fn intern(name: &str) -> Result<Symbol, SymError> {
        validate(name)?;
        let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&interned) = names.get(name) {
            return Ok(Symbol(interned));
        }
        if names.len() >= MAX_SYMBOLS {
            return Err(SymError::TooManySymbols { limit: MAX_SYMBOLS });
        }
        let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
        names.insert(leaked);
        Ok(Symbol(leaked))
    }

    /// The symbol's name.
    pub fn name(self) -> &'static str {
        self.0
    }
}

fn validate(name: &str) -> Result<(), SymError> {
    let reason = if name.is_empty() {
        Some("empty name")
    } else if name.len() > MAX_NAME_LEN {
        Some("longer than 64 bytes")
    } else if RESERVED.contains(&name) {
        Some("reserved word")
    } else if name.as_bytes()[0].is_ascii_digit() {
        Some("starts with a digit")
    } else if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Some("only ASCII letters, digits and `_` are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => {
            let mut shown: String = name.chars().take(MAX_NAME_LEN).collect();
            if shown.len() < name.len() {
                shown.push('…');
            }
            Err(SymError::InvalidName {
                name: shown,
                reason,
            })
        }
        None => Ok(()),
    }
}

impl PartialEq for Symbol {
    fn eq(&self, other: &Symbol) -> bool {
        // Interned: one allocation per distinct name.
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for Symbol {}

impl Hash for Symbol {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.as_ptr().hash(state);
    }
}

/// A map keyed by symbols, hashed by their interned address.
pub(crate) type SymbolMap<V> = crate::idhash::IdMap<Symbol, V>;

impl PartialOrd for Symbol {
    fn partial_cmp(&self, other: &Symbol) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Symbol {
    fn cmp(&self, other: &Symbol) -> std::cmp::Ordering {
        if self == other {
            std::cmp::Ordering::Equal
        } else {
            self.0.cmp(other.0)
        }
    }
}

impl fmt::Display for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl fmt::Debug for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}
