//! Text → module bytes.

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::lex::{lex_line, Tok, TokKind};
use super::{column, AsmError, AsmErrorKind};
use crate::builder::{BodyDef, BuildError, CodeWriter, KernelDef, ModuleBuilder, ParamDef};
use crate::dtype::DType;
use crate::error::OperandError;
use crate::instr::{Instr, Opcode};
use crate::module::{features, Header, KernelKind, ParamAccess, VERSION_MAJOR};
use crate::word::{Pipe, WaitMask};

/// Byte offsets of the header fields the assembler writes after the builder.
const MINOR_AT: usize = core::mem::offset_of!(Header, version_minor);
const FEATURES_AT: usize = core::mem::offset_of!(Header, features);

/// Assembles module text into module bytes.
///
/// The text is encoded as written: nothing is verified (run
/// [`crate::verify_module`] on the result), so the assembler can also write
/// the broken modules that tests and bug reports need. The one rule beyond
/// the syntax is that a `.label` names a word of its own body: an
/// instruction or `.word` must follow it before the next `.body` or `.end`.
///
/// # Errors
/// An [`AsmError`] naming the line, the column and what was expected there;
/// [`AsmErrorKind::LabelPastEnd`] at a `.label` that no word follows.
pub fn assemble(text: &str) -> Result<Vec<u8>, AsmError> {
    let mut asm = Assembler::default();
    for (i, line) in text.lines().enumerate() {
        let no = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let toks = lex_line(line).map_err(|(at, kind)| AsmError::at(no, line, at, kind))?;
        if toks.is_empty() {
            continue;
        }
        let mut cur = Cursor {
            line,
            no,
            toks: &toks,
            pos: 0,
        };
        asm.statement(&mut cur)?;
        asm.started = true;
    }
    if let Some(open) = asm.kernel.take() {
        return Err(AsmError {
            line: open.line,
            col: open.col,
            kind: AsmErrorKind::UnclosedKernel(open.def.name),
        });
    }
    let mut bytes = asm.builder.finish();
    if let Some(b) = bytes.get_mut(MINOR_AT..MINOR_AT + 2) {
        b.copy_from_slice(&asm.minor.to_le_bytes());
    }
    if let (Some(f), Some(b)) = (asm.features, bytes.get_mut(FEATURES_AT..FEATURES_AT + 8)) {
        b.copy_from_slice(&f.to_le_bytes());
    }
    Ok(bytes)
}

struct OpenKernel {
    def: KernelDef,
    /// Where its `.kernel` stands.
    line: u32,
    col: u32,
    /// The first `.label` of the current body that no word follows yet.
    dangling: Option<Dangling>,
}

/// A `.label` waiting for the word it names.
struct Dangling {
    text: String,
    line: u32,
    col: u32,
}

impl OpenKernel {
    /// Refuses a label left without a word when `closer` (`.body` or
    /// `.end`, on line `no`) ends the current body: a label names the word
    /// that follows it, and past the end of a body there is none.
    fn close_body(&mut self, closer: &'static str, no: u32) -> Result<(), AsmError> {
        match self.dangling.take() {
            None => Ok(()),
            Some(d) => Err(AsmError {
                line: d.line,
                col: d.col,
                kind: AsmErrorKind::LabelPastEnd {
                    label: d.text,
                    closer,
                    line: no,
                },
            }),
        }
    }
}

#[derive(Default)]
struct Assembler {
    builder: ModuleBuilder,
    started: bool,
    minor: u16,
    /// Exact header features from `.module … features=`; derived when absent.
    features: Option<u64>,
    kernel: Option<OpenKernel>,
}

/// The tokens of one line and a read position.
struct Cursor<'l, 't> {
    line: &'l str,
    no: u32,
    toks: &'t [Tok<'l>],
    pos: usize,
}

impl<'l> Cursor<'l, '_> {
    fn err_at(&self, at: usize, kind: AsmErrorKind) -> AsmError {
        AsmError::at(self.no, self.line, at, kind)
    }

    /// Byte offset of the next token, or the end of the line's text.
    fn here(&self) -> usize {
        self.toks.get(self.pos).map_or_else(|| self.end(), |t| t.at)
    }

    /// Byte offset just past the last token.
    fn end(&self) -> usize {
        self.toks.last().map_or(0, |t| match &t.kind {
            TokKind::Bare(s) => t.at + s.len(),
            TokKind::Punct(c) => t.at + c.len_utf8(),
            // A string's source length is not kept; scan for its end.
            TokKind::Str(_) => string_end(self.line, t.at),
        })
    }

    fn peek(&self) -> Option<&Tok<'l>> {
        self.toks.get(self.pos)
    }

    fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    fn expected(&self, expected: &'static str) -> AsmError {
        let found = self
            .peek()
            .map_or_else(|| "end of line".to_owned(), Tok::describe);
        self.err_at(self.here(), AsmErrorKind::Expected { expected, found })
    }

    fn bare(&mut self, expected: &'static str) -> Result<(usize, &'l str), AsmError> {
        match self.peek() {
            Some(Tok {
                at,
                kind: TokKind::Bare(s),
            }) => {
                let r = (*at, *s);
                self.pos += 1;
                Ok(r)
            }
            _ => Err(self.expected(expected)),
        }
    }

    fn string(&mut self, expected: &'static str) -> Result<String, AsmError> {
        match self.peek() {
            Some(Tok {
                kind: TokKind::Str(s),
                ..
            }) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => Err(self.expected(expected)),
        }
    }

    fn punct(&mut self, c: char, expected: &'static str) -> Result<(), AsmError> {
        match self.peek() {
            Some(Tok {
                kind: TokKind::Punct(p),
                ..
            }) if *p == c => {
                self.pos += 1;
                Ok(())
            }
            _ => Err(self.expected(expected)),
        }
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let hit = matches!(self.peek(), Some(Tok { kind: TokKind::Punct(p), .. }) if *p == c);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn done(&self) -> Result<(), AsmError> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.expected("end of line"))
        }
    }

    /// `key=` at the cursor: the key and its offset.
    fn key(&mut self, expected: &'static str) -> Result<(usize, &'l str), AsmError> {
        let k = self.bare(expected)?;
        self.punct('=', "`=`")?;
        Ok(k)
    }

    fn number<T: TryFrom<u64>>(&mut self, what: &'static str) -> Result<T, AsmError> {
        let (at, s) = self.bare(what)?;
        parse_u64(s)
            .and_then(|v| T::try_from(v).ok())
            .ok_or_else(|| {
                self.err_at(
                    at,
                    AsmErrorKind::BadValue {
                        what,
                        found: s.to_owned(),
                    },
                )
            })
    }
}

/// Byte offset just past the string literal starting at `at`.
fn string_end(line: &str, at: usize) -> usize {
    let mut esc = false;
    for (i, c) in line.get(at + 1..).unwrap_or("").char_indices() {
        match c {
            _ if esc => esc = false,
            '\\' => esc = true,
            '"' => return at + 1 + i + 1,
            _ => {}
        }
    }
    line.len()
}

/// Decimal, or hexadecimal after `0x`.
fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Records `key` as seen; a second sighting is an error.
fn once(seen: &mut Vec<&'static str>, key: &'static str) -> bool {
    if seen.contains(&key) {
        false
    } else {
        seen.push(key);
        true
    }
}

impl Assembler {
    fn statement(&mut self, cur: &mut Cursor<'_, '_>) -> Result<(), AsmError> {
        let (at, head) = cur.bare("a directive or an instruction mnemonic")?;
        match head {
            ".module" => self.module(cur, at),
            ".kernel" => self.kernel_start(cur, at),
            ".param" => self.param(cur, at),
            ".body" => self.body(cur, at),
            ".label" => {
                self.code(cur, at, ".label")?;
                let text = cur.string("a quoted label text")?;
                cur.done()?;
                if let Some(open) = self.kernel.as_mut() {
                    open.dangling.get_or_insert_with(|| Dangling {
                        text: text.clone(),
                        line: cur.no,
                        col: column(cur.line, at),
                    });
                }
                self.code(cur, at, ".label")?.label(text);
                Ok(())
            }
            ".word" => {
                self.code(cur, at, ".word")?;
                let mut words = Vec::new();
                while !cur.at_end() {
                    let (wat, s) = cur.bare("a 64-bit word")?;
                    let w = parse_u64(s).ok_or_else(|| {
                        cur.err_at(
                            wat,
                            AsmErrorKind::BadValue {
                                what: "64-bit word",
                                found: s.to_owned(),
                            },
                        )
                    })?;
                    words.push(w);
                }
                if words.is_empty() {
                    return Err(cur.expected("a 64-bit word"));
                }
                let code = self.code(cur, at, ".word")?;
                for w in words {
                    code.push_word(w);
                }
                self.word_written();
                Ok(())
            }
            ".end" => {
                cur.done()?;
                let mut open = self.kernel.take().ok_or_else(|| {
                    cur.err_at(
                        at,
                        AsmErrorKind::Misplaced {
                            what: ".end",
                            rule: "outside a kernel",
                        },
                    )
                })?;
                open.close_body(".end", cur.no)?;
                // Names were checked at `.kernel`, labels at `.body` and
                // `.end` (`close_body`): this cannot fail.
                self.builder.add_kernel(open.def).map_err(|e| match e {
                    BuildError::DuplicateKernel { name, first } => {
                        cur.err_at(at, AsmErrorKind::DuplicateKernel { name, first })
                    }
                    BuildError::LabelPastEnd { label, .. } => cur.err_at(
                        at,
                        AsmErrorKind::LabelPastEnd {
                            label,
                            closer: ".end",
                            line: cur.no,
                        },
                    ),
                })?;
                Ok(())
            }
            _ if head.starts_with('.') => {
                Err(cur.err_at(at, AsmErrorKind::UnknownDirective(head.to_owned())))
            }
            _ => {
                let op = Opcode::from_mnemonic(head).ok_or_else(|| {
                    cur.err_at(at, AsmErrorKind::UnknownMnemonic(head.to_owned()))
                })?;
                self.code(cur, at, "an instruction")?;
                let (instr, wait) = instruction(cur, op)?;
                self.code(cur, at, "an instruction")?.push(&instr, wait);
                self.word_written();
                Ok(())
            }
        }
    }

    /// Code was written to the current body: its pending labels name it.
    fn word_written(&mut self) {
        if let Some(open) = self.kernel.as_mut() {
            open.dangling = None;
        }
    }

    /// The code of the current body.
    fn code(
        &mut self,
        cur: &Cursor<'_, '_>,
        at: usize,
        what: &'static str,
    ) -> Result<&mut CodeWriter, AsmError> {
        self.kernel
            .as_mut()
            .and_then(|k| k.def.bodies.last_mut())
            .map(|b| &mut b.code)
            .ok_or_else(|| {
                cur.err_at(
                    at,
                    AsmErrorKind::Misplaced {
                        what,
                        rule: "outside a `.body`",
                    },
                )
            })
    }

    fn module(&mut self, cur: &mut Cursor<'_, '_>, at: usize) -> Result<(), AsmError> {
        if self.started {
            return Err(cur.err_at(
                at,
                AsmErrorKind::Misplaced {
                    what: ".module",
                    rule: "after the first statement",
                },
            ));
        }
        let (vat, v) = cur.bare("a version `major.minor`")?;
        let (major, minor) = v
            .split_once('.')
            .and_then(|(a, b)| Some((a.parse::<u16>().ok()?, b.parse::<u16>().ok()?)))
            .ok_or_else(|| {
                cur.err_at(
                    vat,
                    AsmErrorKind::BadValue {
                        what: "version",
                        found: v.to_owned(),
                    },
                )
            })?;
        if major != VERSION_MAJOR {
            return Err(cur.err_at(vat, AsmErrorKind::UnsupportedVersion { major, minor }));
        }
        self.minor = minor;
        let mut seen = Vec::new();
        while !cur.at_end() {
            let (kat, key) = cur.key("`features=`")?;
            match key {
                "features" if once(&mut seen, "features") => {
                    let (fat, f) = cur.bare("feature names joined by `|`, or `none`")?;
                    self.features = Some(parse_features(f).ok_or_else(|| {
                        cur.err_at(
                            fat,
                            AsmErrorKind::BadValue {
                                what: "feature list",
                                found: f.to_owned(),
                            },
                        )
                    })?);
                }
                "features" => return Err(dup(cur, kat, ".module", key)),
                _ => return Err(unknown_key(cur, kat, ".module", key)),
            }
        }
        Ok(())
    }

    fn kernel_start(&mut self, cur: &mut Cursor<'_, '_>, at: usize) -> Result<(), AsmError> {
        if self.kernel.is_some() {
            return Err(cur.err_at(
                at,
                AsmErrorKind::Misplaced {
                    what: ".kernel",
                    rule: "inside another kernel (close it with `.end`)",
                },
            ));
        }
        let name_at = cur.here();
        let name = cur.string("a quoted kernel name")?;
        if let Some(first) = self.builder.kernel_names().position(|n| n == name) {
            return Err(cur.err_at(
                name_at,
                AsmErrorKind::DuplicateKernel {
                    name,
                    first: u32::try_from(first).unwrap_or(u32::MAX),
                },
            ));
        }
        let (mut kind, mut ub) = (None, None);
        while !cur.at_end() {
            let (kat, key) = cur.key("`kind=` or `ub=`")?;
            match key {
                "kind" if kind.is_none() => {
                    let (at, s) = cur.bare("a kernel kind")?;
                    kind = Some(KernelKind::from_name(s).ok_or_else(|| {
                        cur.err_at(
                            at,
                            AsmErrorKind::BadValue {
                                what: "kernel kind (vector, cube, mix, parallel, sequence)",
                                found: s.to_owned(),
                            },
                        )
                    })?);
                }
                "ub" if ub.is_none() => ub = Some(cur.number::<u32>("UB bytes (a u32)")?),
                "kind" | "ub" => return Err(dup(cur, kat, ".kernel", key)),
                _ => return Err(unknown_key(cur, kat, ".kernel", key)),
            }
        }
        let missing = |key| {
            cur.err_at(
                cur.end(),
                AsmErrorKind::MissingKey {
                    directive: ".kernel",
                    key,
                },
            )
        };
        let kind = kind.ok_or_else(|| missing("kind"))?;
        let ub_bytes = ub.ok_or_else(|| missing("ub"))?;
        self.kernel = Some(OpenKernel {
            def: KernelDef {
                name,
                kind,
                ub_bytes,
                params: Vec::new(),
                bodies: Vec::new(),
            },
            line: cur.no,
            col: column(cur.line, at),
            dangling: None,
        });
        Ok(())
    }

    fn param(&mut self, cur: &mut Cursor<'_, '_>, at: usize) -> Result<(), AsmError> {
        let misplaced = |rule| AsmErrorKind::Misplaced {
            what: ".param",
            rule,
        };
        let Some(open) = self.kernel.as_mut() else {
            return Err(cur.err_at(at, misplaced("outside a kernel")));
        };
        if !open.def.bodies.is_empty() {
            return Err(cur.err_at(at, misplaced("after the kernel's first `.body`")));
        }
        let name = cur.string("a quoted parameter name")?;
        let (dat, d) = cur.bare("a dtype")?;
        let dtype = DType::from_name(d).ok_or_else(|| {
            cur.err_at(
                dat,
                AsmErrorKind::BadValue {
                    what: "dtype (f32, f16, bf16, i32, i8, bool)",
                    found: d.to_owned(),
                },
            )
        })?;
        let (aat, a) = cur.bare("an access (`in`, `out` or `inout`)")?;
        let access = ParamAccess::from_name(a).ok_or_else(|| {
            cur.err_at(
                aat,
                AsmErrorKind::BadValue {
                    what: "access (in, out, inout)",
                    found: a.to_owned(),
                },
            )
        })?;
        let mut dims = Vec::new();
        let mut seen = false;
        while !cur.at_end() {
            let (kat, key) = cur.key("`dims=`")?;
            match key {
                "dims" if !seen => {
                    seen = true;
                    cur.punct('[', "`[`")?;
                    if !cur.eat_punct(']') {
                        loop {
                            let dim = match cur.peek().map(|t| &t.kind) {
                                Some(TokKind::Bare(s)) => (*s).to_owned(),
                                Some(TokKind::Str(s)) => s.clone(),
                                _ => return Err(cur.expected("a dimension")),
                            };
                            cur.pos += 1;
                            dims.push(dim);
                            if cur.eat_punct(']') {
                                break;
                            }
                            cur.punct(',', "`,` or `]`")?;
                        }
                    }
                }
                "dims" => return Err(dup(cur, kat, ".param", key)),
                _ => return Err(unknown_key(cur, kat, ".param", key)),
            }
        }
        open.def.params.push(ParamDef {
            name,
            dtype,
            access,
            dims,
        });
        Ok(())
    }

    fn body(&mut self, cur: &mut Cursor<'_, '_>, at: usize) -> Result<(), AsmError> {
        let Some(open) = self.kernel.as_mut() else {
            return Err(cur.err_at(
                at,
                AsmErrorKind::Misplaced {
                    what: ".body",
                    rule: "outside a kernel",
                },
            ));
        };
        let mut grid = None;
        while !cur.at_end() {
            let (kat, key) = cur.key("`grid=`")?;
            match key {
                "grid" if grid.is_none() => {
                    let a = cur.number::<u32>("grid dimension 0 (a u32)")?;
                    cur.punct(',', "`,`")?;
                    let b = cur.number::<u32>("grid dimension 1 (a u32)")?;
                    cur.punct(',', "`,`")?;
                    let c = cur.number::<u32>("grid dimension 2 (a u32)")?;
                    grid = Some([a, b, c]);
                }
                "grid" => return Err(dup(cur, kat, ".body", key)),
                _ => return Err(unknown_key(cur, kat, ".body", key)),
            }
        }
        let grid = grid.ok_or_else(|| {
            cur.err_at(
                cur.end(),
                AsmErrorKind::MissingKey {
                    directive: ".body",
                    key: "grid",
                },
            )
        })?;
        open.close_body(".body", cur.no)?;
        open.def.bodies.push(BodyDef {
            grid,
            code: CodeWriter::new(),
        });
        Ok(())
    }
}

fn dup(cur: &Cursor<'_, '_>, at: usize, directive: &'static str, key: &str) -> AsmError {
    cur.err_at(
        at,
        AsmErrorKind::DuplicateKey {
            directive,
            key: key.to_owned(),
        },
    )
}

fn unknown_key(cur: &Cursor<'_, '_>, at: usize, directive: &'static str, key: &str) -> AsmError {
    cur.err_at(
        at,
        AsmErrorKind::UnknownKey {
            directive,
            key: key.to_owned(),
        },
    )
}

/// `none`, or known feature names joined by `|`.
fn parse_features(s: &str) -> Option<u64> {
    if s == "none" {
        return Some(0);
    }
    s.split('|').try_fold(0u64, |acc, name| {
        features::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, bit)| acc | bit)
    })
}

/// The operands and wait flags of an instruction line, after the mnemonic.
fn instruction(cur: &mut Cursor<'_, '_>, op: Opcode) -> Result<(Instr, WaitMask), AsmError> {
    let fields = op.fields();
    // (byte offset of the value, value) per field, in table order.
    let mut values: Vec<Option<(usize, &str)>> = alloc::vec![None; fields.len()];
    let mut wait: Option<WaitMask> = None;
    while !cur.at_end() {
        let (nat, name) = cur.bare("an operand `name=value`")?;
        cur.punct('=', "`=`")?;
        let (vat, value) = cur.bare("an operand value")?;
        if name == "@wait" {
            if wait.is_some() {
                return Err(cur.err_at(
                    nat,
                    AsmErrorKind::DuplicateOperand {
                        opcode: op,
                        name: name.to_owned(),
                    },
                ));
            }
            wait = Some(parse_wait(value).ok_or_else(|| {
                cur.err_at(
                    vat,
                    AsmErrorKind::BadValue {
                        what: "wait pipes (load, vector, cube, store joined by `|`)",
                        found: value.to_owned(),
                    },
                )
            })?);
            continue;
        }
        let slot = fields
            .iter()
            .position(|f| *f == name)
            .and_then(|i| values.get_mut(i))
            .ok_or_else(|| {
                cur.err_at(
                    nat,
                    AsmErrorKind::UnknownOperand {
                        opcode: op,
                        name: name.to_owned(),
                    },
                )
            })?;
        if slot.is_some() {
            return Err(cur.err_at(
                nat,
                AsmErrorKind::DuplicateOperand {
                    opcode: op,
                    name: name.to_owned(),
                },
            ));
        }
        *slot = Some((vat, value));
    }
    let mut tokens = Vec::with_capacity(fields.len());
    for (field, v) in fields.iter().zip(&values) {
        match v {
            Some((_, value)) => tokens.push(format!("{field}={value}")),
            None => {
                return Err(cur.err_at(
                    cur.end(),
                    AsmErrorKind::Operand {
                        opcode: op,
                        error: OperandError::Missing(field),
                    },
                ))
            }
        }
    }
    let instr =
        Instr::parse_operands(op, &mut tokens.iter().map(String::as_str)).map_err(|error| {
            // Point at the offending value when the error names a field.
            let at = match error {
                OperandError::BadValue(f)
                | OperandError::Expected(f)
                | OperandError::Missing(f) => fields
                    .iter()
                    .position(|x| *x == f)
                    .and_then(|i| values.get(i).copied().flatten())
                    .map_or_else(|| cur.end(), |(at, _)| at),
                OperandError::Extra => cur.end(),
            };
            cur.err_at(at, AsmErrorKind::Operand { opcode: op, error })
        })?;
    Ok((instr, wait.unwrap_or(WaitMask::NONE)))
}

/// Data pipe names joined by `|`.
fn parse_wait(s: &str) -> Option<WaitMask> {
    s.split('|')
        .try_fold(WaitMask::NONE, |m, name| match Pipe::from_name(name)? {
            Pipe::Control => None,
            p => Some(m.with(p)),
        })
}
