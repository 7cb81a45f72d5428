//! Module bytes → text.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;

use zerocopy::little_endian::U64;

use super::lex::{is_plain, quote};
use super::{assemble, DisasmError};
use crate::instr::{Instr, Opcode};
use crate::meta::{KernelMeta, ModuleMeta};
use crate::module::{features, Module};
use crate::word::{Head, WaitMask};

/// What to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DisasmOptions {
    /// Only this kernel (the `.module` line is still printed, so the text
    /// assembles into a one-kernel module); all kernels when `None`.
    pub kernel: Option<usize>,
    /// Append `; word N` to each instruction: its word offset in the body,
    /// as [`crate::VerifyError::word`] reports it.
    pub word_offsets: bool,
}

/// Disassembles a whole module into text that [`assemble`] turns back into
/// exactly the same bytes.
///
/// Holds for every module [`crate::builder::ModuleBuilder`] writes whose
/// labels each name a word of their body, including code that does not
/// decode (printed as `.word` lines).
///
/// # Errors
/// [`DisasmError::Lossy`] when the text cannot say everything the module
/// holds (metadata that does not decode or disagrees with the tables, labels
/// outside their body: on a body the kernel lacks, or at or past the end of
/// its code, which the assembler refuses), [`DisasmError::NotCanonical`]
/// when the module's layout differs from the one the builder writes
/// (section order and padding, shared or unreferenced code, non-canonical
/// metadata encoding). [`disassemble_lossy`] prints such modules anyway.
pub fn disassemble(m: &Module<'_>) -> Result<String, DisasmError> {
    let mut notes = Vec::new();
    let text = write_module(m, &DisasmOptions::default(), &mut notes);
    if let Some(note) = notes.into_iter().next() {
        return Err(DisasmError::Lossy(note));
    }
    let bytes = assemble(&text).map_err(DisasmError::Reassemble)?;
    let orig = m.bytes();
    if bytes != orig {
        let offset = bytes
            .iter()
            .zip(orig)
            .position(|(a, b)| a != b)
            .unwrap_or(bytes.len().min(orig.len()));
        return Err(DisasmError::NotCanonical {
            offset: offset as u64,
        });
    }
    Ok(text)
}

/// Disassembles a whole module, best effort: whatever the text cannot
/// represent is described in `;` comments instead (see
/// [`disassemble`] for when that happens). Never fails.
pub fn disassemble_lossy(m: &Module<'_>) -> String {
    write_module(m, &DisasmOptions::default(), &mut Vec::new())
}

/// Disassembles one kernel, best effort, with word offsets: the text for
/// `dvm disasm` and for bug reports. It assembles into a one-kernel module
/// with the original header.
///
/// # Errors
/// [`DisasmError::NoSuchKernel`] when `index` is outside the kernel table.
pub fn disassemble_kernel(m: &Module<'_>, index: usize) -> Result<String, DisasmError> {
    disassemble_with(
        m,
        &DisasmOptions {
            kernel: Some(index),
            word_offsets: true,
        },
    )
}

/// Disassembles with explicit options, best effort (as
/// [`disassemble_lossy`]).
///
/// # Errors
/// [`DisasmError::NoSuchKernel`] when `opts.kernel` is outside the kernel
/// table.
pub fn disassemble_with(m: &Module<'_>, opts: &DisasmOptions) -> Result<String, DisasmError> {
    if let Some(index) = opts.kernel {
        if index >= m.kernel_count() {
            return Err(DisasmError::NoSuchKernel {
                index,
                count: m.kernel_count(),
            });
        }
    }
    Ok(write_module(m, opts, &mut Vec::new()))
}

/// The instructions of one body's code words, one per line (indented as
/// inside a `.body`), with `; word N` offsets when `word_offsets`; words that
/// do not decode print as `.word` lines. For printing code without its
/// module, e.g. a [`crate::VerifiedKernel`]'s body.
pub fn disassemble_code(code: &[U64], word_offsets: bool) -> String {
    let mut out = String::new();
    write_code(code, &[], word_offsets, &mut out);
    out
}

/// One instruction as a line of text (mnemonic, operands, wait flags), as
/// the disassembler prints it.
pub fn format_instr(instr: &Instr, wait: WaitMask) -> String {
    let mut s = String::from(instr.opcode().mnemonic());
    let _ = instr.write_operands(&mut s);
    write_wait(&mut s, wait);
    s
}

fn write_wait(out: &mut String, wait: WaitMask) {
    if wait.is_empty() {
        return;
    }
    out.push_str(" @wait=");
    for (i, p) in wait.iter().enumerate() {
        if i > 0 {
            out.push('|');
        }
        out.push_str(p.name());
    }
}

/// `features=` text: known names joined by `|`, or `none`.
fn feature_text(bits: u64) -> String {
    let mut s = String::new();
    for (name, bit) in features::NAMES {
        if bits & bit != 0 {
            if !s.is_empty() {
                s.push('|');
            }
            s.push_str(name);
        }
    }
    // `Module::parse` rejects unknown bits, so nothing is left over.
    if s.is_empty() {
        s.push_str("none");
    }
    s
}

fn write_module(m: &Module<'_>, opts: &DisasmOptions, notes: &mut Vec<String>) -> String {
    let mut out = String::new();
    let h = m.header();
    let _ = writeln!(
        out,
        ".module {}.{} features={}",
        h.version_major.get(),
        h.version_minor.get(),
        feature_text(m.features())
    );
    let meta: Option<ModuleMeta> = match m.meta() {
        Ok(meta) => Some(meta),
        Err(e) => {
            let note = format!("metadata does not decode ({e}); names are placeholders");
            let _ = writeln!(out, "; {note}");
            notes.push(note);
            None
        }
    };
    let kernels = match opts.kernel {
        Some(k) => k..k.saturating_add(1).min(m.kernel_count()),
        None => 0..m.kernel_count(),
    };
    for k in kernels {
        let km = meta.as_ref().and_then(|meta| meta.kernels.get(k));
        write_kernel(m, k, km, opts, &mut out, notes);
    }
    out
}

fn note(out: &mut String, notes: &mut Vec<String>, indent: &str, text: String) {
    let _ = writeln!(out, "{indent}; {text}");
    notes.push(text);
}

fn write_kernel(
    m: &Module<'_>,
    k: usize,
    km: Option<&KernelMeta>,
    opts: &DisasmOptions,
    out: &mut String,
    notes: &mut Vec<String>,
) {
    let Some(kernel) = m.kernel(k) else {
        // `Module::parse` validated every entry; nothing to print otherwise.
        note(out, notes, "", format!("kernel {k} cannot be read"));
        return;
    };
    let name = km.map_or_else(|| format!("kernel{k}"), |km| km.name.clone());
    let _ = writeln!(
        out,
        ".kernel {} kind={} ub={}",
        quote(&name),
        kernel.kind.name(),
        kernel.ub_bytes
    );
    let nparams = kernel.param_count();
    for (i, p) in kernel.params().enumerate() {
        let pm = km.and_then(|km| km.params.get(i));
        if km.is_some() && pm.is_none() {
            note(
                out,
                notes,
                "  ",
                format!("kernel {k}: metadata has no entry for parameter {i}"),
            );
        }
        let pname = pm.map_or_else(|| format!("p{i}"), |pm| pm.name.clone());
        let _ = write!(
            out,
            "  .param {} {} {}",
            quote(&pname),
            p.dtype.name(),
            p.access.name()
        );
        if let Some(pm) = pm {
            if !pm.dims.is_empty() {
                out.push_str(" dims=[");
                for (j, d) in pm.dims.iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    if is_plain(d) {
                        out.push_str(d);
                    } else {
                        out.push_str(&quote(d));
                    }
                }
                out.push(']');
            }
        }
        out.push('\n');
    }
    if let Some(km) = km {
        if km.params.len() > nparams {
            note(
                out,
                notes,
                "  ",
                format!(
                    "kernel {k}: metadata names {} parameters, the table has {nparams}",
                    km.params.len()
                ),
            );
        }
    }
    let labels: &[crate::meta::Label] = km.map_or(&[], |km| &km.labels);
    let mut furthest = (0, 0);
    for l in labels {
        if l.body as usize >= kernel.bodies.len() {
            note(
                out,
                notes,
                "  ",
                format!(
                    "kernel {k}: label {} is on body {}, which does not exist",
                    quote(&l.text),
                    l.body
                ),
            );
        }
        if (l.body, l.word) < furthest {
            note(
                out,
                notes,
                "  ",
                format!("kernel {k}: label {} is out of order", quote(&l.text)),
            );
        }
        furthest = furthest.max((l.body, l.word));
    }
    for (b, body) in kernel.bodies.iter().enumerate() {
        let g = body.grid();
        let _ = writeln!(out, "  .body grid={},{},{}", g[0], g[1], g[2]);
        let mut body_labels: Vec<(usize, &str)> = labels
            .iter()
            .filter(|l| l.body as usize == b)
            .map(|l| (l.word as usize, l.text.as_str()))
            .collect();
        body_labels.sort_by_key(|l| l.0);
        let code = kernel.body_code(b).unwrap_or(&[]);
        write_code(code, &body_labels, opts.word_offsets, out);
        // A label names the word at its offset; at or past the end of the
        // body there is none, and the assembler refuses such a `.label`.
        for (word, text) in body_labels.iter().filter(|l| l.0 >= code.len()) {
            note(
                out,
                notes,
                "    ",
                format!(
                    "kernel {k}: label {} at word {word} is past the end of body {b} ({} words)",
                    quote(text),
                    code.len()
                ),
            );
        }
    }
    out.push_str(".end\n");
}

/// Prints the instructions of one body, with labels at their words (labels
/// at or past the end of `code` are not printed: they name no word).
///
/// An instruction that does not decode, that a label falls inside, or whose
/// text would not read back to the same words (never, for a decoded one)
/// is printed as `.word` lines with a comment saying why, so that every
/// word and label keeps its place.
fn write_code(code: &[U64], labels: &[(usize, &str)], offsets: bool, out: &mut String) {
    let mut li = 0;
    let mut at = 0;
    while at < code.len() {
        while let Some((_, text)) = labels.get(li).filter(|l| l.0 == at) {
            let _ = writeln!(out, "    .label {}", quote(text));
            li += 1;
        }
        // Labels that fell inside a `.word` group cannot happen: groups end
        // at the next label.
        let limit = labels.get(li).map_or(code.len(), |l| l.0).min(code.len());
        let rest = code.get(at..).unwrap_or(&[]);
        let (len, why) = match Instr::decode(rest) {
            Ok((head, instr)) => {
                let len = head.len as usize;
                if at + len > limit {
                    (
                        len,
                        format!("`{}` cut by a label", instr.opcode().mnemonic()),
                    )
                } else if let Some(line) = exact_text(&instr, head.wait, &rest[..len]) {
                    out.push_str("    ");
                    out.push_str(&line);
                    if offsets {
                        let _ = write!(out, "  ; word {at}");
                    }
                    out.push('\n');
                    at += len;
                    continue;
                } else {
                    (
                        len,
                        format!(
                            "`{}` does not read back from text",
                            instr.opcode().mnemonic()
                        ),
                    )
                }
            }
            Err(e) => (claimed_len(rest), format!("does not decode: {e}")),
        };
        let len = len.clamp(1, limit.saturating_sub(at).max(1));
        let words = rest.get(..len).unwrap_or(rest);
        for (i, chunk) in words.chunks(4).enumerate() {
            out.push_str("    .word");
            for w in chunk {
                let _ = write!(out, " {:#018x}", w.get());
            }
            if i == 0 {
                out.push_str("  ; ");
                if offsets {
                    let _ = write!(out, "word {at}: ");
                }
                out.push_str(&why);
            }
            out.push('\n');
        }
        at += words.len().max(1);
    }
}

/// How many words to group for an instruction that does not decode: the
/// length its head claims when that is plausible (a known opcode whose
/// layout has that length, or an unknown opcode whose head is otherwise
/// well formed), else one word.
fn claimed_len(rest: &[U64]) -> usize {
    let Some(w) = rest.first().map(|w| w.get()) else {
        return 1;
    };
    let len = ((w >> 8) & 0xff) as u8;
    let plausible = len >= 1
        && match Opcode::from_u8(w as u8) {
            Some(op) => op.len_words() == len,
            None => Head::decode(w).is_ok(),
        };
    if plausible {
        len as usize
    } else {
        1
    }
}

/// The text of a decoded instruction, if it reads back to exactly `words`.
fn exact_text(instr: &Instr, wait: WaitMask, words: &[U64]) -> Option<String> {
    let mut operands = String::new();
    instr.write_operands(&mut operands).ok()?;
    let back = Instr::parse_operands(instr.opcode(), &mut operands.split_whitespace()).ok()?;
    let packed = back.encode(wait);
    let same = packed.words().len() == words.len()
        && packed.words().iter().zip(words).all(|(a, b)| *a == b.get());
    same.then(|| format_instr(instr, wait))
}
