//! Printing dimensions in the syntax [`Dim::parse`](super::Dim::parse) reads.

use std::fmt::{self, Formatter, Write};

use super::dim::{Dim, Node};

/// Binding strength of the context an expression is printed in.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Prec {
    /// Top level, a term of a sum, or a function argument.
    Sum,
    /// The left operand of `/` or `%`.
    Product,
    /// A factor of a product.
    Atom,
}

impl fmt::Display for Dim {
    /// Prints the canonical form, e.g. `2*S+1`, `min(S,128)`, `(S+1)/2`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write_node(&self.0, f, Prec::Sum)
    }
}

fn write_node(n: &Node, f: &mut Formatter<'_>, ctx: Prec) -> fmt::Result {
    match n {
        Node::Val(c) => write_val(*c, f, ctx),
        Node::Sym(s) => f.write_str(s.name()),
        Node::Add(ts) => parens(ctx > Prec::Sum, f, |f| {
            for (i, t) in ts.iter().enumerate() {
                match t {
                    Node::Val(c) if i > 0 && *c < 0 && *c != i64::MIN => write!(f, "-{}", -c)?,
                    Node::Mul(p) if i > 0 && p.c < 0 && p.c != i64::MIN => {
                        f.write_char('-')?;
                        write_product(-p.c, &p.fs, f, Prec::Sum)?;
                    }
                    _ => {
                        if i > 0 {
                            f.write_char('+')?;
                        }
                        write_node(t, f, Prec::Sum)?;
                    }
                }
            }
            Ok(())
        }),
        Node::Mul(p) => write_product(p.c, &p.fs, f, ctx),
        Node::Div(x, d) => parens(ctx > Prec::Product, f, |f| {
            write_node(x, f, Prec::Product)?;
            write!(f, "/{d}")
        }),
        Node::Rem(x, d) => parens(ctx > Prec::Product, f, |f| {
            write_node(x, f, Prec::Product)?;
            write!(f, "%{d}")
        }),
        Node::Min(args) => write_call("min", args, f),
        Node::Max(args) => write_call("max", args, f),
    }
}

fn write_val(c: i64, f: &mut Formatter<'_>, ctx: Prec) -> fmt::Result {
    if c == i64::MIN {
        // `9223372036854775808` is not an i64 literal.
        write!(f, "({}-1)", i64::MIN + 1)
    } else if c < 0 && ctx > Prec::Sum {
        write!(f, "({c})")
    } else {
        write!(f, "{c}")
    }
}

fn write_product(c: i64, fs: &[Node], f: &mut Formatter<'_>, ctx: Prec) -> fmt::Result {
    if fs.is_empty() {
        return write_val(c, f, ctx);
    }
    parens(ctx == Prec::Atom, f, |f| {
        match c {
            1 => {}
            -1 => f.write_char('-')?,
            _ => {
                write_val(c, f, Prec::Sum)?;
                f.write_char('*')?;
            }
        }
        for (i, x) in fs.iter().enumerate() {
            if i > 0 {
                f.write_char('*')?;
            }
            write_node(x, f, Prec::Atom)?;
        }
        Ok(())
    })
}

fn write_call(name: &str, args: &[Node], f: &mut Formatter<'_>) -> fmt::Result {
    f.write_str(name)?;
    f.write_char('(')?;
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            f.write_char(',')?;
        }
        write_node(a, f, Prec::Sum)?;
    }
    f.write_char(')')
}

fn parens(
    wrap: bool,
    f: &mut Formatter<'_>,
    body: impl FnOnce(&mut Formatter<'_>) -> fmt::Result,
) -> fmt::Result {
    if wrap {
        f.write_char('(')?;
    }
    body(f)?;
    if wrap {
        f.write_char(')')?;
    }
    Ok(())
}
