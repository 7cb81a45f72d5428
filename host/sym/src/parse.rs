//! Reading dimensions from text.

use super::bounds::NoFacts;
use super::dim::{Dim, Node};
use super::error::SymError;
use super::ops;
use super::scope::SymbolScope;
use super::symbol::Symbol;

/// Longest accepted input, in bytes.
pub(crate) const MAX_INPUT: usize = 4096;
/// Deepest accepted nesting of parentheses, calls and unary minus.
const MAX_DEPTH: usize = 64;

impl Dim {
    /// Parses a dimension, interning new symbol names in `scope`.
    ///
    /// Syntax: integers, identifiers, `+ - * / %`, parentheses, unary minus,
    /// `min(a, b, ...)`, `max(a, b, ...)`; whitespace is ignored. `/` (floor
    /// division) and `%` need a positive constant on their right. Whatever
    /// `Display` prints parses back to an equal `Dim`.
    ///
    /// # Errors
    ///
    /// [`SymError::Parse`] with the byte offset of the problem for malformed
    /// input, input over 4096 bytes, nesting deeper than 64, integer literals out
    /// of `i64` range, invalid or too many symbol names, and divisors that are not
    /// positive constants. On error, no symbol is added to `scope`.
    pub fn parse(input: &str, scope: &mut SymbolScope) -> Result<Dim, SymError> {
        if input.len() > MAX_INPUT {
            return Err(error(
                input,
                MAX_INPUT,
                format!("input longer than {MAX_INPUT} bytes"),
            ));
        }
        let mut p = Parser {
            src: input,
            pos: 0,
            depth: 0,
            seen: Vec::new(),
        };
        let d = p.expr()?;
        p.skip_ws();
        if p.pos < input.len() {
            return Err(p.unexpected("an operator or the end"));
        }
        for s in p.seen {
            scope.register(s);
        }
        Ok(d)
    }
}

fn error(input: &str, pos: usize, msg: String) -> SymError {
    const SHOWN: usize = 80;
    let mut shown: String = input.chars().take(SHOWN).collect();
    if shown.len() < input.len() {
        shown.push('…');
    }
    SymError::Parse {
        input: shown,
        pos,
        msg,
    }
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
    /// Symbols met, registered in the scope only if the whole parse succeeds.
    seen: Vec<Symbol>,
}

impl<'a> Parser<'a> {
    fn err(&self, pos: usize, msg: impl Into<String>) -> SymError {
        error(self.src, pos, msg.into())
    }

    fn unexpected(&self, expected: &str) -> SymError {
        match self.src[self.pos..].chars().next() {
            Some(c) => self.err(self.pos, format!("expected {expected}, found `{c}`")),
            None => self.err(self.pos, format!("expected {expected}, found the end")),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    /// Skips whitespace and consumes `c` if it comes next.
    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        let hit = self.peek() == Some(c);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn enter(&mut self) -> Result<(), SymError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(self.pos, format!("nested deeper than {MAX_DEPTH}")));
        }
        Ok(())
    }

    /// `expr := term (('+' | '-') term)*`
    fn expr(&mut self) -> Result<Dim, SymError> {
        let mut terms = vec![self.term()?];
        loop {
            if self.eat(b'+') {
                terms.push(self.term()?);
            } else if self.eat(b'-') {
                terms.push(-self.term()?);
            } else {
                return Ok(terms.into_iter().sum());
            }
        }
    }

    /// `term := unary (('*' | '/' | '%') unary)*`
    fn term(&mut self) -> Result<Dim, SymError> {
        let mut acc = self.unary()?;
        loop {
            if self.eat(b'*') {
                acc *= self.unary()?;
            } else if self.eat(b'/') || self.eat(b'%') {
                let is_div = self.src.as_bytes()[self.pos - 1] == b'/';
                self.skip_ws();
                let at = self.pos;
                let rhs = self.unary()?;
                let divisor = match rhs.as_const() {
                    Some(d) if d > 0 => d,
                    _ => {
                        let e = SymError::BadDivisor {
                            expr: acc,
                            divisor: rhs,
                        };
                        return Err(self.err(at, e.to_string()));
                    }
                };
                let node = acc.0;
                acc = Dim(if is_div {
                    ops::div_node(node, divisor, &NoFacts)
                } else {
                    ops::rem_node(node, divisor, &NoFacts)
                });
            } else {
                return Ok(acc);
            }
        }
    }

    /// `unary := '-' unary | primary`
    fn unary(&mut self) -> Result<Dim, SymError> {
        if self.eat(b'-') {
            self.enter()?;
            let d = -self.unary()?;
            self.depth -= 1;
            return Ok(d);
        }
        self.primary()
    }

    /// `primary := integer | identifier | ('min' | 'max') '(' expr (',' expr)* ')' | '(' expr ')'`
    fn primary(&mut self) -> Result<Dim, SymError> {
        self.skip_ws();
        let start = self.pos;
        match self.peek() {
            Some(b'0'..=b'9') => {
                let text = self.take_while(|b| b.is_ascii_digit());
                match text.parse::<i64>() {
                    Ok(v) => Ok(Dim::val(v)),
                    Err(_) => Err(self.err(start, format!("integer `{text}` does not fit in i64"))),
                }
            }
            Some(b) if b.is_ascii_alphabetic() || b == b'_' => {
                let name = self.take_while(|b| b.is_ascii_alphanumeric() || b == b'_');
                if self.eat(b'(') {
                    return self.call(name, start);
                }
                let sym = Symbol::intern(name).map_err(|e| self.err(start, e.to_string()))?;
                self.seen.push(sym);
                Ok(Dim::sym(sym))
            }
            Some(b'(') => {
                self.pos += 1;
                self.enter()?;
                let d = self.expr()?;
                if !self.eat(b')') {
                    return Err(self.unexpected("`)`"));
                }
                self.depth -= 1;
                Ok(d)
            }
            _ => Err(self.unexpected("a number, a symbol, `min(`, `max(` or `(`")),
        }
    }

    /// Arguments of `min(` / `max(` (the `(` is consumed).
    fn call(&mut self, name: &str, start: usize) -> Result<Dim, SymError> {
        let is_min = match name {
            "min" => true,
            "max" => false,
            _ => {
                return Err(self.err(
                    start,
                    format!("unknown function `{name}` (expected `min` or `max`)"),
                ))
            }
        };
        self.enter()?;
        let mut args: Vec<Node> = vec![self.expr()?.0];
        while self.eat(b',') {
            args.push(self.expr()?.0);
        }
        if !self.eat(b')') {
            return Err(self.unexpected("`,` or `)`"));
        }
        self.depth -= 1;
        Ok(Dim(ops::min_max(args, is_min, &NoFacts)))
    }

    fn take_while(&mut self, pred: impl Fn(u8) -> bool) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(&pred) {
            self.pos += 1;
        }
        &self.src[start..self.pos]
    }
}
