//! Line lexer of the assembly text, and the string quoting the disassembler
//! uses (the exact inverse of the lexer's string rules).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;

use super::AsmErrorKind;

/// One token of a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TokKind<'a> {
    /// A run of characters other than white space, `"`, `=`, `,`, `[`, `]`,
    /// `;` and `#`.
    Bare(&'a str),
    /// A quoted string, escapes resolved.
    Str(String),
    /// One of `=`, `,`, `[`, `]`.
    Punct(char),
}

/// A token and the byte offset in its line where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tok<'a> {
    pub at: usize,
    pub kind: TokKind<'a>,
}

impl Tok<'_> {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match &self.kind {
            TokKind::Bare(s) => format!("`{s}`"),
            TokKind::Str(s) => quote(s),
            TokKind::Punct(c) => format!("`{c}`"),
        }
    }
}

const fn is_punct(c: char) -> bool {
    matches!(c, '=' | ',' | '[' | ']')
}

const fn ends_bare(c: char) -> bool {
    c.is_whitespace() || is_punct(c) || matches!(c, '"' | ';' | '#')
}

/// Splits one line into tokens; a `;` or `#` outside a string starts a
/// comment that runs to the end of the line.
///
/// Errors carry the byte offset of the fault.
pub(crate) fn lex_line(line: &str) -> Result<Vec<Tok<'_>>, (usize, AsmErrorKind)> {
    let mut toks = Vec::new();
    let mut it = line.char_indices().peekable();
    while let Some(&(at, c)) = it.peek() {
        if c.is_whitespace() {
            it.next();
        } else if c == ';' || c == '#' {
            break;
        } else if is_punct(c) {
            it.next();
            toks.push(Tok {
                at,
                kind: TokKind::Punct(c),
            });
        } else if c == '"' {
            it.next();
            let mut s = String::new();
            let mut closed = false;
            while let Some((esc_at, c)) = it.next() {
                match c {
                    '"' => {
                        closed = true;
                        break;
                    }
                    '\\' => {
                        let bad =
                            |text: &str| (esc_at, AsmErrorKind::BadEscape(String::from(text)));
                        match it.next() {
                            Some((_, '\\')) => s.push('\\'),
                            Some((_, '"')) => s.push('"'),
                            Some((_, 'n')) => s.push('\n'),
                            Some((_, 't')) => s.push('\t'),
                            Some((_, 'r')) => s.push('\r'),
                            Some((_, '0')) => s.push('\0'),
                            Some((_, 'u')) => {
                                // \u{1-6 hex digits}
                                if it.next().map(|x| x.1) != Some('{') {
                                    return Err(bad("\\u"));
                                }
                                let mut v: u32 = 0;
                                let mut digits = 0;
                                loop {
                                    match it.next() {
                                        Some((_, '}')) if digits > 0 => break,
                                        Some((_, d)) if d.is_ascii_hexdigit() && digits < 6 => {
                                            v = v * 16 + d.to_digit(16).unwrap_or(0);
                                            digits += 1;
                                        }
                                        _ => {
                                            let end = it.peek().map_or(line.len(), |x| x.0);
                                            return Err(bad(line
                                                .get(esc_at..end)
                                                .unwrap_or("\\u")));
                                        }
                                    }
                                }
                                match char::from_u32(v) {
                                    Some(ch) => s.push(ch),
                                    None => {
                                        let end = it.peek().map_or(line.len(), |x| x.0);
                                        return Err(bad(line.get(esc_at..end).unwrap_or("\\u")));
                                    }
                                }
                            }
                            Some((_, other)) => {
                                let mut text = String::from("\\");
                                text.push(other);
                                return Err(bad(&text));
                            }
                            None => return Err(bad("\\")),
                        }
                    }
                    c => s.push(c),
                }
            }
            if !closed {
                return Err((at, AsmErrorKind::UnterminatedString));
            }
            toks.push(Tok {
                at,
                kind: TokKind::Str(s),
            });
        } else {
            let mut end = line.len();
            while let Some(&(i, c)) = it.peek() {
                if ends_bare(c) {
                    end = i;
                    break;
                }
                it.next();
            }
            toks.push(Tok {
                at,
                kind: TokKind::Bare(line.get(at..end).unwrap_or("")),
            });
        }
    }
    Ok(toks)
}

/// `s` as a quoted string the lexer reads back exactly.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// True when `s` can be written without quotes as a list element: a
/// non-empty run of ASCII letters, digits and `_ * + - / ( ) % .`.
pub(crate) fn is_plain(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_*+-/()%.".contains(&b))
}
