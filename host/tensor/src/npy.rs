//! NumPy `.npy` files ↔ [`Tensor`]s, through the `npyz` crate.
//!
//! | dtype | `.npy` descr | notes |
//! |---|---|---|
//! | f32 | `<f4` | big-endian `>f4` is read too |
//! | f16 | `<f2` | |
//! | i32 | `<i4` | |
//! | i8 | `\|i1` | |
//! | i64 | `<i8` | values as exact as `f64` holds them through [`Tensor::to_f64_vec`] (2^53); the bytes are kept |
//! | bool | `\|b1` | bytes must be 0 or 1 |
//! | bf16 | `<u2` | **raw bits**: NumPy has no bfloat16, so the 16-bit patterns are stored as `uint16` (in PyTorch: `torch.from_numpy(a).view(torch.bfloat16)`; in NumPy with `ml_dtypes`: `a.view(ml_dtypes.bfloat16)`) |
//!
//! [`read`] infers the dtype from the file and refuses `<u2` (it cannot know
//! the bits are bf16); [`read_as`] checks the file against an expected dtype
//! and reads `<u2` as bf16 when bf16 is expected, and `<i8` as i32 when i32
//! is expected (ONNX saves index tensors as int64; dvm computes them as
//! i32), refusing a value outside i32. Fortran-order files are
//! transposed into row-major order. Other dtypes (`<f8`, `<u4`, …) are
//! refused with an error naming the file and the dtype. As NumPy's own
//! reader does, a header whose dict has other keys than exactly `descr`,
//! `fortran_order` and `shape` is refused (here also one that repeats a
//! key), naming the keys at fault.
//!
//! A header longer than [`MAX_HEADER_LEN`] bytes is refused, as NumPy
//! refuses it, before anything is allocated for it. [`read`] and
//! [`read_as`] read the header first and then at most one byte more than
//! its shape needs, so a file whose data runs on (or a device such as
//! `/dev/zero`) is refused without being read whole.
//!
//! Writing is atomic: the file is written to a temporary file in the same
//! directory and renamed into place, so a failure leaves no half-written
//! file (and no temporary either).

use std::io::Cursor;
use std::path::{Path, PathBuf};

use dvm_isa::DType;
use half::f16;
use npyz::{NpyFile, NpyHeader, Order, TypeChar, WriterBuilder};

use crate::{numel, Tensor};

/// Errors of reading and writing `.npy` files; each names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NpyError {
    /// The file could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a valid `.npy` file.
    #[error("{}: not a valid .npy file: {msg}", .path.display())]
    NotNpy {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// The file's dtype has no tensor dtype.
    #[error("{}: unsupported .npy dtype `{descr}` (supported: <f4 f32, <f2 f16, <i4 i32, <i8 i64, |i1 i8, |b1 bool, <u2 bf16 bits)", .path.display())]
    UnsupportedDType {
        /// The file.
        path: PathBuf,
        /// The file's dtype string.
        descr: String,
    },
    /// The header is longer than [`MAX_HEADER_LEN`] bytes.
    #[error("{}: the .npy header is {len} bytes long, more than the {MAX_HEADER_LEN} allowed (NumPy refuses such a header too)", .path.display())]
    HeaderTooLong {
        /// The file.
        path: PathBuf,
        /// The header length its length field gives.
        len: u64,
    },
    /// The header's dict does not have exactly the keys `descr`,
    /// `fortran_order` and `shape`, each once (NumPy refuses such a header
    /// too: "Header does not contain the correct keys").
    #[error("{}: the .npy header must have exactly the keys 'descr', 'fortran_order' and 'shape': {}", .path.display(), KeyProblems { unexpected, missing, repeated })]
    HeaderKeys {
        /// The file.
        path: PathBuf,
        /// Keys that are none of the three, in file order (a key that is
        /// no string is shown as its Python literal).
        unexpected: Vec<String>,
        /// Keys of the three that are absent.
        missing: Vec<&'static str>,
        /// Keys of the three given more than once.
        repeated: Vec<&'static str>,
    },
    /// The file holds another dtype than expected.
    #[error("{}: expected dtype {expected}, but the file holds `{descr}`{}", .path.display(), found.map(|d| format!(" ({d})")).unwrap_or_default())]
    DTypeMismatch {
        /// The file.
        path: PathBuf,
        /// The dtype expected.
        expected: DType,
        /// The file's dtype string.
        descr: String,
        /// The file's dtype as a tensor dtype, if it has one.
        found: Option<DType>,
    },
    /// An `<i8` file read as `i32` holds a value `i32` cannot.
    #[error("{}: element {index} is {value}, outside i32 (the file is <i8, read as i32)", .path.display())]
    Narrowing {
        /// The file.
        path: PathBuf,
        /// Row-major index of the first such element.
        index: usize,
        /// Its value.
        value: i64,
    },
    /// The data section is shorter or longer than the header's shape says.
    #[error("{}: shape {shape:?} of {dtype} needs {expected} data bytes, the file has {}", .path.display(), if *.more { format!("more (at least {found})") } else { found.to_string() })]
    DataLength {
        /// The file.
        path: PathBuf,
        /// Shape in the header.
        shape: Vec<u64>,
        /// Dtype.
        dtype: DType,
        /// Bytes needed.
        expected: u64,
        /// Bytes present (at least this many when `more`).
        found: u64,
        /// The file was not read to its end: it has `found` data bytes or
        /// more (a device or pipe whose length is unknown).
        more: bool,
    },
    /// The tensor cannot be stored (e.g. too large).
    #[error("{}: {msg}", .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
}

/// The longest `.npy` header read, in bytes (the text after the length
/// field): NumPy's own limit (`max_header_size` of `numpy.lib.format`,
/// 10 000 by default since NumPy 1.24), beyond which it refuses a file as
/// possibly unsafe to parse. Longer headers are refused before anything is
/// allocated for them.
pub const MAX_HEADER_LEN: usize = 10_000;

/// Magic, version and the longest length field (version 2 and 3).
const PREAMBLE_LEN: usize = 12;

/// The keys an `.npy` header's dict must have, each exactly once.
const HEADER_KEYS: [&str; 3] = ["descr", "fortran_order", "shape"];

/// How much of a key an error message shows.
const KEY_SHOWN: usize = 40;

/// The key problems of [`NpyError::HeaderKeys`], for its message.
struct KeyProblems<'a> {
    unexpected: &'a [String],
    missing: &'a [&'static str],
    repeated: &'a [&'static str],
}

impl std::fmt::Display for KeyProblems<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sep = "";
        let mut list = |f: &mut std::fmt::Formatter<'_>, what: &str, keys: &[&str]| {
            if keys.is_empty() {
                return Ok(());
            }
            let s = if keys.len() > 1 { "s" } else { "" };
            write!(f, "{sep}{what}{s} ")?;
            sep = "; ";
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                shown_key(f, k)?;
            }
            Ok(())
        };
        let unexpected: Vec<&str> = self.unexpected.iter().map(String::as_str).collect();
        list(f, "unexpected key", &unexpected)?;
        list(f, "missing key", self.missing)?;
        list(f, "repeated key", self.repeated)
    }
}

/// `'key'`, escaped, and cut short when long.
fn shown_key(f: &mut std::fmt::Formatter<'_>, key: &str) -> std::fmt::Result {
    let mut chars = key.chars();
    let head: String = chars.by_ref().take(KEY_SHOWN).collect();
    let more = if chars.next().is_some() { "…" } else { "" };
    write!(f, "'{}{more}'", head.escape_debug())
}

/// The `.npy` dtype string written for `dtype`.
pub fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::BF16 => "<u2",
        DType::I32 => "<i4",
        DType::I8 => "|i1",
        DType::Bool => "|b1",
        DType::I64 => "<i8",
    }
}

/// Reads an `.npy` file, inferring the dtype.
///
/// # Errors
///
/// [`NpyError::Io`] if the file cannot be read, [`NpyError::NotNpy`] for a
/// malformed file, [`NpyError::HeaderTooLong`] for a header longer than
/// [`MAX_HEADER_LEN`], [`NpyError::HeaderKeys`] for a header whose keys are
/// not exactly `descr`, `fortran_order` and `shape`,
/// [`NpyError::UnsupportedDType`] (including `<u2`: use [`read_as`] for
/// bf16), [`NpyError::DataLength`] for a truncated file or one with data
/// beyond the header's shape.
pub fn read(path: &Path) -> Result<Tensor, NpyError> {
    read_checked(path, None)
}

/// Reads `path` with [`read_bounded`] and parses it, the
/// [`NpyError::DataLength`] of a file not read to its end giving the
/// file's real length where it is known.
fn read_checked(path: &Path, expected: Option<DType>) -> Result<Tensor, NpyError> {
    let (bytes, whole) = read_bounded(path)?;
    match from_bytes(&bytes, path, expected) {
        Err(NpyError::DataLength {
            path,
            shape,
            dtype,
            expected,
            found,
            more: false,
        }) if !whole => {
            // `found` is one byte past the data the shape needs: the file
            // goes on. A regular file says how far.
            let header = bytes.len() as u64 - found;
            let len = std::fs::metadata(&path)
                .ok()
                .filter(std::fs::Metadata::is_file)
                .map(|m| m.len());
            Err(NpyError::DataLength {
                found: len.map_or(found, |l| l.saturating_sub(header)),
                more: len.is_none(),
                path,
                shape,
                dtype,
                expected,
            })
        }
        other => other,
    }
}

/// The bytes of `path` that matter: the preamble and header (at most
/// [`MAX_HEADER_LEN`] bytes of it), then at most one byte more than the
/// header's shape needs. Returns them and whether the file was read to its
/// end. Nothing is allocated on a length field's word: the buffer grows
/// only as bytes arrive.
fn read_bounded(path: &Path) -> Result<(Vec<u8>, bool), NpyError> {
    use std::io::Read;
    let io = |source| NpyError::Io {
        path: path.to_owned(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    let prefix = (PREAMBLE_LEN + MAX_HEADER_LEN) as u64;
    (&mut f).take(prefix).read_to_end(&mut bytes).map_err(io)?;
    if (bytes.len() as u64) < prefix {
        return Ok((bytes, true));
    }
    // A header that does not parse: `from_bytes` says what is wrong.
    let Some(total) = file_len(&bytes, path) else {
        return Ok((bytes, false));
    };
    let rest = total.saturating_add(1).saturating_sub(bytes.len() as u64);
    let n = (&mut f).take(rest).read_to_end(&mut bytes).map_err(io)?;
    Ok((bytes, (n as u64) < rest))
}

/// The length of the file whose first bytes are `prefix` (its whole
/// header), as the header's shape and dtype say: `None` when the header
/// does not parse or the length overflows.
fn file_len(prefix: &[u8], path: &Path) -> Option<u64> {
    let (data_start, text) = header_text(prefix, path).ok()?;
    header_dict(text, path).ok()?;
    let header = NpyHeader::from_reader(prefix).ok()?;
    let n = header
        .shape()
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
    let size = u64::try_from(header.dtype().num_bytes()?).ok()?;
    n.checked_mul(size)?.checked_add(data_start as u64)
}

/// Reads an `.npy` file that must hold `dtype` (`<u2` is read as bf16 bits
/// when `dtype` is bf16, `<i8` as i32 when `dtype` is i32 and every value
/// fits).
///
/// # Errors
///
/// [`NpyError::DTypeMismatch`] naming both dtypes,
/// [`NpyError::Narrowing`] for an `<i8` value outside `i32`, and the
/// errors of [`read`].
pub fn read_as(path: &Path, dtype: DType) -> Result<Tensor, NpyError> {
    read_checked(path, Some(dtype))
}

/// Parses `.npy` bytes; `path` only names the source in errors. With
/// `expected`, the file must hold that dtype.
///
/// # Errors
///
/// As [`read`] and [`read_as`].
pub fn from_bytes(bytes: &[u8], path: &Path, expected: Option<DType>) -> Result<Tensor, NpyError> {
    let not_npy = |msg: String| NpyError::NotNpy {
        path: path.to_owned(),
        msg,
    };
    let (data_start, text) = header_text(bytes, path)?;
    let shape_hint = header_dict(text, path)?;
    let header = NpyHeader::from_reader(bytes).map_err(|e| not_npy(e.to_string()))?;
    if header.shape() != shape_hint.as_slice() {
        return Err(not_npy("inconsistent shape in header".into()));
    }
    let dtype_descr = header.dtype().descr();
    let npyz::DType::Plain(ts) = header.dtype() else {
        return Err(NpyError::UnsupportedDType {
            path: path.to_owned(),
            descr: dtype_descr,
        });
    };
    let natural = match (ts.type_char(), ts.size_field()) {
        (TypeChar::Float, 4) => Some(DType::F32),
        (TypeChar::Float, 2) => Some(DType::F16),
        (TypeChar::Int, 4) => Some(DType::I32),
        (TypeChar::Int, 1) => Some(DType::I8),
        (TypeChar::Int, 8) => Some(DType::I64),
        (TypeChar::Bool, 1) => Some(DType::Bool),
        _ => None,
    };
    let is_u2 = matches!((ts.type_char(), ts.size_field()), (TypeChar::Uint, 2));
    // An `<i8` file for an `i32` tensor (ONNX index tensors, which dvm
    // computes as i32) is read as i64 and narrowed, each value checked.
    let narrow = expected == Some(DType::I32) && natural == Some(DType::I64);
    let dtype = match (expected, natural) {
        (Some(DType::BF16), _) if is_u2 => DType::BF16,
        _ if narrow => DType::I64,
        (Some(e), Some(n)) if e == n => n,
        (Some(e), found) => {
            return Err(NpyError::DTypeMismatch {
                path: path.to_owned(),
                expected: e,
                descr: dtype_descr,
                found,
            })
        }
        (None, Some(n)) => n,
        (None, None) => {
            return Err(NpyError::UnsupportedDType {
                path: path.to_owned(),
                descr: dtype_descr,
            })
        }
    };
    let shape = header.shape().to_vec();
    let data = &bytes[data_start..];
    let n = numel(&shape).ok_or_else(|| not_npy(format!("shape {shape:?} is too large")))?;
    let need = (n as u64).checked_mul(u64::from(dtype.size()));
    if need != Some(data.len() as u64) {
        return Err(NpyError::DataLength {
            path: path.to_owned(),
            shape,
            dtype,
            expected: need.unwrap_or(u64::MAX),
            found: data.len() as u64,
            more: false,
        });
    }
    let order = header.order();
    let file = NpyFile::with_header(header, data);
    let io = |e: std::io::Error| not_npy(e.to_string());
    let mut out: Vec<u8> = Vec::with_capacity(data.len());
    match dtype {
        DType::F32 => out.extend(
            file.into_vec::<f32>()
                .map_err(io)?
                .iter()
                .flat_map(|v| v.to_le_bytes()),
        ),
        DType::F16 => out.extend(
            file.into_vec::<f16>()
                .map_err(io)?
                .iter()
                .flat_map(|v| v.to_le_bytes()),
        ),
        DType::BF16 => out.extend(
            file.into_vec::<u16>()
                .map_err(io)?
                .iter()
                .flat_map(|v| v.to_le_bytes()),
        ),
        DType::I32 => out.extend(
            file.into_vec::<i32>()
                .map_err(io)?
                .iter()
                .flat_map(|v| v.to_le_bytes()),
        ),
        DType::I8 => out.extend(
            file.into_vec::<i8>()
                .map_err(io)?
                .iter()
                .map(|v| v.to_le_bytes()[0]),
        ),
        DType::Bool => out.extend(
            file.into_vec::<bool>()
                .map_err(io)?
                .iter()
                .map(|&v| u8::from(v)),
        ),
        DType::I64 => out.extend(
            file.into_vec::<i64>()
                .map_err(io)?
                .iter()
                .flat_map(|v| v.to_le_bytes()),
        ),
    }
    if order == Order::Fortran && shape.len() > 1 {
        out = fortran_to_c(&out, &shape, dtype.size() as usize);
    }
    if narrow {
        out = narrow_i64(&out, path)?;
        return Tensor::new(DType::I32, shape, out).map_err(|e| not_npy(e.to_string()));
    }
    Tensor::new(dtype, shape, out).map_err(|e| not_npy(e.to_string()))
}

/// Reorders column-major element bytes into row-major.
fn fortran_to_c(src: &[u8], shape: &[u64], size: usize) -> Vec<u8> {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let n: usize = dims.iter().product();
    // Column-major strides.
    let mut fst = vec![1usize; dims.len()];
    for i in 1..dims.len() {
        fst[i] = fst[i - 1] * dims[i - 1];
    }
    let mut out = Vec::with_capacity(src.len());
    let mut idx = vec![0usize; dims.len()];
    for _ in 0..n {
        let off: usize = idx.iter().zip(&fst).map(|(i, s)| i * s).sum();
        out.extend_from_slice(&src[off * size..(off + 1) * size]);
        for ax in (0..dims.len()).rev() {
            idx[ax] += 1;
            if idx[ax] < dims[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    out
}

/// Checks the magic, version and header length (at most
/// [`MAX_HEADER_LEN`]); returns the offset of the data and the header's
/// text.
fn header_text<'a>(bytes: &'a [u8], path: &Path) -> Result<(usize, &'a str), NpyError> {
    const MAGIC: &[u8] = b"\x93NUMPY";
    let not_npy = |msg: &str| NpyError::NotNpy {
        path: path.to_owned(),
        msg: msg.into(),
    };
    if bytes.len() < 10 || !bytes.starts_with(MAGIC) {
        return Err(not_npy("missing the \\x93NUMPY magic"));
    }
    let (len, start) = match bytes[6] {
        1 => (u64::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10usize),
        2 | 3 if bytes.len() >= 12 => (
            u64::from(u32::from_le_bytes([
                bytes[8], bytes[9], bytes[10], bytes[11],
            ])),
            12,
        ),
        v => return Err(not_npy(&format!("unsupported format version {v}"))),
    };
    if len > MAX_HEADER_LEN as u64 {
        return Err(NpyError::HeaderTooLong {
            path: path.to_owned(),
            len,
        });
    }
    // At most `MAX_HEADER_LEN`: no overflow.
    let end = start + len as usize;
    if end > bytes.len() {
        return Err(not_npy("the header runs past the end of the file"));
    }
    let text =
        std::str::from_utf8(&bytes[start..end]).map_err(|_| not_npy("the header is not text"))?;
    Ok((end, text))
}

/// Checks that the header is a dict literal whose keys are exactly
/// [`HEADER_KEYS`], each once: NumPy refuses other keys ("Header does not
/// contain the correct keys"), and `npyz` would ignore extra ones and read
/// the last of repeated ones. The text is parsed as `npyz` parses it (same
/// parser, one trailing newline dropped). Returns the shape ([`dict_shape`]).
fn header_dict(text: &str, path: &Path) -> Result<Vec<u64>, NpyError> {
    let not_npy = |msg: String| NpyError::NotNpy {
        path: path.to_owned(),
        msg,
    };
    let literal = text.strip_suffix('\n').unwrap_or(text);
    if let Some(at) = too_deep(literal) {
        return Err(not_npy(format!(
            "the header nests brackets more than {MAX_NESTING} deep (at byte {at})"
        )));
    }
    let value: py_literal::Value = literal
        .parse()
        .map_err(|e: py_literal::ParseError| not_npy(literal_error(&e)))?;
    let py_literal::Value::Dict(entries) = value else {
        return Err(not_npy("the header is not a Python dict literal".into()));
    };
    let mut count = [0usize; HEADER_KEYS.len()];
    let mut unexpected = Vec::new();
    for (key, _) in &entries {
        let known = key
            .as_string()
            .and_then(|k| HEADER_KEYS.iter().position(|h| h == k));
        match known {
            Some(i) => count[i] += 1,
            None => unexpected.push(match key.as_string() {
                Some(k) => k.clone(),
                // Its Python literal (`to_string` would panic where there
                // is none; `format_ascii` says so).
                None => key
                    .format_ascii()
                    .unwrap_or_else(|_| "(a key that is no string)".into()),
            }),
        }
    }
    let pick = |want: fn(usize) -> bool| -> Vec<&'static str> {
        HEADER_KEYS
            .iter()
            .zip(count)
            .filter(|&(_, n)| want(n))
            .map(|(k, _)| *k)
            .collect()
    };
    let (missing, repeated) = (pick(|n| n == 0), pick(|n| n > 1));
    if unexpected.is_empty() && missing.is_empty() && repeated.is_empty() {
        return dict_shape(&entries).map_err(not_npy);
    }
    Err(NpyError::HeaderKeys {
        path: path.to_owned(),
        unexpected,
        missing,
        repeated,
    })
}

/// The deepest nesting of brackets a header may have: NumPy's headers
/// nest two deep (the dict, the shape tuple); `py_literal`'s parser takes
/// time exponential in the depth (20 levels: seconds, 40: hours), so
/// deeper ones are refused before it sees them.
const MAX_NESTING: usize = 8;

/// The byte offset of the first bracket (`(`, `[` or `{`, outside string
/// literals) nested more than [`MAX_NESTING`] deep in `text`, if any.
fn too_deep(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    for (i, &b) in text.as_bytes().iter().enumerate() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == q {
                    quote = None;
                }
            }
            None => match b {
                b'\'' | b'"' => quote = Some(b),
                b'(' | b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Some(i);
                    }
                }
                b')' | b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    None
}

/// A parse error of the header literal in a line: the parser's own message
/// for a syntax error quotes the whole header, which may be megabytes long.
fn literal_error(e: &py_literal::ParseError) -> String {
    let msg = e.to_string();
    // A syntax error reads "syntax error:  --> LINE:COL", the header, a
    // caret line, then "= what went wrong".
    let at = msg
        .lines()
        .find_map(|l| l.split_once("--> ").map(|(_, at)| at.trim()));
    let what = msg.lines().find_map(|l| l.trim_start().strip_prefix("= "));
    let short: String = match (at, what) {
        (Some(at), Some(what)) => format!("syntax error at {at}: {what}"),
        _ => msg
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect(),
    };
    format!("the header is not a Python literal ({short})")
}

/// The `'shape'` of a header dict whose keys were checked: a tuple of
/// non-negative integers whose product fits `u64` (so that absurd shapes
/// are refused before `npyz` multiplies them).
fn dict_shape(entries: &[(py_literal::Value, py_literal::Value)]) -> Result<Vec<u64>, String> {
    let value = entries
        .iter()
        .find(|(k, _)| k.as_string().is_some_and(|k| k == "shape"))
        .map(|(_, v)| v)
        .ok_or("the header has no 'shape'")?;
    let dims = value
        .as_tuple()
        .ok_or("'shape' is not a tuple of integers")?;
    let shape = dims
        .iter()
        .map(|d| {
            d.as_integer()
                .and_then(|i| u64::try_from(i).ok())
                .ok_or_else(|| {
                    let shown = d.format_ascii().unwrap_or_else(|_| "?".into());
                    let shown: String = shown.chars().take(40).collect();
                    format!("bad dimension `{shown}` in 'shape'")
                })
        })
        .collect::<Result<Vec<u64>, String>>()?;
    shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format!("shape {shape:?} has too many elements"))?;
    Ok(shape)
}

/// The `.npy` encoding of `tensor` (version 1.0, little-endian, C order).
///
/// # Errors
///
/// [`NpyError::Invalid`] if the encoder fails (`path` names the destination).
pub fn to_bytes(tensor: &Tensor, path: &Path) -> Result<Vec<u8>, NpyError> {
    let invalid = |e: String| NpyError::Invalid {
        path: path.to_owned(),
        msg: e,
    };
    let ts: npyz::TypeStr = descr(tensor.dtype())
        .parse()
        .map_err(|e: npyz::ParseTypeStrError| invalid(e.to_string()))?;
    let mut buf = Cursor::new(Vec::with_capacity(tensor.bytes().len() + 128));
    let b = tensor.bytes();
    let io = |e: std::io::Error| invalid(e.to_string());
    macro_rules! write_as {
        ($t:ty, $conv:expr) => {{
            let mut w = npyz::WriteOptions::<$t>::new()
                .dtype(npyz::DType::Plain(ts))
                .shape(tensor.shape())
                .writer(&mut buf)
                .begin_nd()
                .map_err(io)?;
            let size = std::mem::size_of::<$t>();
            w.extend(b.chunks_exact(size).map($conv)).map_err(io)?;
            w.finish().map_err(io)?;
        }};
    }
    match tensor.dtype() {
        DType::F32 => write_as!(f32, |c: &[u8]| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        DType::F16 => write_as!(f16, |c: &[u8]| f16::from_le_bytes([c[0], c[1]])),
        DType::BF16 => write_as!(u16, |c: &[u8]| u16::from_le_bytes([c[0], c[1]])),
        DType::I32 => write_as!(i32, |c: &[u8]| i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        DType::I8 => write_as!(i8, |c: &[u8]| c[0] as i8),
        DType::Bool => write_as!(bool, |c: &[u8]| c[0] != 0),
        DType::I64 => write_as!(i64, |c: &[u8]| i64::from_le_bytes([
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
        ])),
    }
    Ok(buf.into_inner())
}

/// Writes `tensor` to `path` atomically (see the [module docs](self)).
///
/// # Errors
///
/// [`NpyError::Io`] naming the file if it cannot be written; nothing is left
/// behind then.
pub fn write(path: &Path, tensor: &Tensor) -> Result<(), NpyError> {
    write_all(&[(path, tensor)])
}

/// Writes several files: all are written to temporaries first and renamed
/// into place only when every one was written, so a failure leaves none of
/// them (unless a rename itself fails part-way, which names its file).
///
/// # Errors
///
/// [`NpyError::Io`] or [`NpyError::Invalid`] naming the file at fault.
pub fn write_all(files: &[(&Path, &Tensor)]) -> Result<(), NpyError> {
    let io = |e: crate::staged::StageError| NpyError::Io {
        path: e.path,
        source: e.source,
    };
    let mut staged = crate::staged::Staged::new();
    for &(path, tensor) in files {
        let bytes = to_bytes(tensor, path)?;
        staged.stage(path, &bytes, None).map_err(io)?;
    }
    staged.commit().map_err(io)
}

/// Little-endian i64 bytes as i32 bytes.
///
/// # Errors
///
/// [`NpyError::Narrowing`] naming the first value outside `i32`.
fn narrow_i64(bytes: &[u8], path: &Path) -> Result<Vec<u8>, NpyError> {
    let mut out = Vec::with_capacity(bytes.len() / 2);
    for (index, c) in bytes.chunks_exact(8).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        let value = i64::from_le_bytes(b);
        let v = i32::try_from(value).map_err(|_| NpyError::Narrowing {
            path: path.to_owned(),
            index,
            value,
        })?;
        out.extend(v.to_le_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn roundtrip(t: &Tensor) -> Tensor {
        let d = dir();
        let p = d.path().join("t.npy");
        write(&p, t).unwrap();
        let back = read_as(&p, t.dtype()).unwrap();
        // Only the file itself is left.
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("t.npy")]);
        back
    }

    #[test]
    fn roundtrip_every_dtype() {
        let vals = [0.0, 1.5, -2.0, 3.25, 100.0, -0.5];
        for dt in DType::ALL {
            let t = Tensor::from_f64(dt, &[2, 3], &vals).unwrap();
            let back = roundtrip(&t);
            assert_eq!(back, t, "{dt}");
        }
        let scalar = Tensor::from_f32(&[], &[4.0]).unwrap();
        assert_eq!(roundtrip(&scalar), scalar);
        let empty = Tensor::zeros(DType::I32, &[0, 3]).unwrap();
        assert_eq!(roundtrip(&empty), empty);
    }

    #[test]
    fn i64_is_int64() {
        let big = (1i64 << 40) + 3;
        let t = Tensor::from_f64(DType::I64, &[3], &[big as f64, -7.0, 0.0]).unwrap();
        let bytes = to_bytes(&t, Path::new("x.npy")).unwrap();
        let text = String::from_utf8_lossy(&bytes[10..]);
        assert!(text.contains("'descr': '<i8'"), "{text}");
        let d = dir();
        let p = d.path().join("i.npy");
        write(&p, &t).unwrap();
        let back = read(&p).unwrap();
        assert_eq!(back.dtype(), DType::I64);
        assert_eq!(back.to_f64_vec(), [big as f64, -7.0, 0.0]);
        assert_eq!(&back.bytes()[..8], &big.to_le_bytes());
    }

    #[test]
    fn header_is_numpy_compatible() {
        let t = Tensor::from_f32(&[2, 3], &[1.0; 6]).unwrap();
        let bytes = to_bytes(&t, Path::new("x.npy")).unwrap();
        assert!(bytes.starts_with(b"\x93NUMPY\x01\x00"));
        let text = String::from_utf8_lossy(&bytes[10..]);
        assert!(text.contains("'descr': '<f4'"), "{text}");
        assert!(text.contains("'shape': (2, 3"), "{text}");
        assert_eq!((bytes.len() - 24) % 16, 0);
    }

    #[test]
    fn i64_files_read_as_i32_when_every_value_fits() {
        let d = dir();
        let p = d.path().join("ids.npy");
        let t = Tensor::from_f64(
            DType::I64,
            &[2, 2],
            &[0.0, -3.0, 2147483647.0, -2147483648.0],
        )
        .unwrap();
        write(&p, &t).unwrap();
        let n = read_as(&p, DType::I32).unwrap();
        assert_eq!(n.dtype(), DType::I32);
        assert_eq!(n.shape(), &[2, 2]);
        assert_eq!(n.to_f64_vec(), t.to_f64_vec());
        assert_eq!(read_as(&p, DType::I64).unwrap(), t);
        let big = Tensor::from_f64(DType::I64, &[3], &[1.0, 2147483648.0, 5.0]).unwrap();
        write(&p, &big).unwrap();
        let e = read_as(&p, DType::I32).unwrap_err().to_string();
        assert!(
            e.contains("element 1 is 2147483648") && e.contains("ids.npy"),
            "{e}"
        );
        assert!(read_as(&p, DType::I8).is_err());
    }

    #[test]
    fn bf16_needs_read_as() {
        let t = Tensor::from_f64(DType::BF16, &[2], &[1.0, -2.0]).unwrap();
        let bytes = to_bytes(&t, Path::new("b.npy")).unwrap();
        let e = from_bytes(&bytes, Path::new("b.npy"), None).unwrap_err();
        assert!(e.to_string().contains("<u2"), "{e}");
        let back = from_bytes(&bytes, Path::new("b.npy"), Some(DType::BF16)).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn wrong_dtype_names_file_and_types() {
        let t = Tensor::from_i32(&[2], &[1, 2]).unwrap();
        let bytes = to_bytes(&t, Path::new("a.npy")).unwrap();
        let e = from_bytes(&bytes, Path::new("in/a.npy"), Some(DType::F32)).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("in/a.npy") && msg.contains("expected dtype f32") && msg.contains("<i4"),
            "{msg}"
        );
    }

    fn header(descr: &str, shape: &str, fortran: bool) -> Vec<u8> {
        let mut text = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
            if fortran { "True" } else { "False" }
        );
        while (10 + text.len() + 1) % 16 != 0 {
            text.push(' ');
        }
        text.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(text.len() as u16).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
        out
    }

    /// A version 1.0 file whose header dict is `{dict}`, with 4 data bytes.
    fn with_dict(dict: &str) -> Vec<u8> {
        let text = format!("{{{dict}}}\n");
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(text.len() as u16).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(&1.0f32.to_le_bytes());
        out
    }

    fn keys_error(dict: &str) -> (Vec<String>, Vec<&'static str>, Vec<&'static str>, String) {
        let e = from_bytes(&with_dict(dict), Path::new("in/h.npy"), None).unwrap_err();
        let msg = e.to_string();
        let NpyError::HeaderKeys {
            unexpected,
            missing,
            repeated,
            ..
        } = e
        else {
            panic!("{dict}: {msg}")
        };
        (unexpected, missing, repeated, msg)
    }

    #[test]
    fn header_shape_must_be_a_tuple_of_sizes() {
        for (shape, what) in [
            ("[1]", "not a tuple"),
            ("(-1,)", "bad dimension `-1`"),
            ("(1.5,)", "bad dimension `"),
            ("(4294967296, 4294967296, 2)", "too many elements"),
        ] {
            let dict = format!("'descr': '<f4', 'fortran_order': False, 'shape': {shape}");
            let e = from_bytes(&with_dict(&dict), Path::new("s.npy"), None).unwrap_err();
            assert!(
                matches!(e, NpyError::NotNpy { .. }) && e.to_string().contains(what),
                "{shape}: {e}"
            );
        }
    }

    #[test]
    fn header_keys_must_be_exactly_numpys() {
        // What `np.save` writes, with and without the trailing comma.
        // Double quotes are Python strings too (NumPy reads the header with
        // `ast.literal_eval`).
        for dict in [
            "'descr': '<f4', 'fortran_order': False, 'shape': (1,), ",
            "'shape': (1,), 'descr': '<f4', 'fortran_order': False",
            "\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (1,)",
        ] {
            let t = from_bytes(&with_dict(dict), Path::new("ok.npy"), None).unwrap();
            assert_eq!(t.shape(), &[1]);
        }
        let (unexpected, missing, repeated, msg) =
            keys_error("'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1");
        assert_eq!(
            (unexpected, missing, repeated),
            (vec!["extra".into()], vec![], vec![])
        );
        assert_eq!(
            msg,
            "in/h.npy: the .npy header must have exactly the keys 'descr', 'fortran_order' \
             and 'shape': unexpected key 'extra'"
        );
        let (unexpected, missing, _, msg) = keys_error("'descr': '<f4', 'shape': (1,)");
        assert_eq!((unexpected, missing), (vec![], vec!["fortran_order"]));
        assert!(msg.ends_with(": missing key 'fortran_order'"), "{msg}");
        // A misspelt key is both; a repeated one is refused too (NumPy and
        // npyz would take the last).
        let (_, _, _, msg) = keys_error(
            "'descr': '<f4', 'fortran-order': False, 'shape': (1,), 'Shape': (1,), 'shape': (1,)",
        );
        assert!(
            msg.ends_with(
                ": unexpected keys 'fortran-order', 'Shape'; missing key 'fortran_order'; \
                 repeated key 'shape'"
            ),
            "{msg}"
        );
        // Keys that are no strings, and awkward ones, are shown escaped and
        // cut short.
        let long = "k".repeat(100);
        let (unexpected, _, _, msg) = keys_error(&format!(
            "'descr': '<f4', 'fortran_order': False, 'shape': (1,), 1: 2, 'a\\n\\'': 0, '{long}': 0"
        ));
        assert_eq!(unexpected, ["1".to_string(), "a\n'".into(), long]);
        assert!(
            msg.ends_with(&format!(
                ": unexpected keys '1', 'a\\n\\'', '{}…'",
                "k".repeat(40)
            )),
            "{msg}"
        );
        // Empty dict: all three missing.
        let (_, missing, _, _) = keys_error("");
        assert_eq!(missing, HEADER_KEYS);
    }

    #[test]
    fn header_that_is_no_dict_is_refused_briefly() {
        let p = Path::new("h.npy");
        // A list, not a dict.
        let text = "['descr', 'fortran_order', 'shape']\n";
        let mut not_dict = b"\x93NUMPY\x01\x00".to_vec();
        not_dict.extend_from_slice(&(text.len() as u16).to_le_bytes());
        not_dict.extend_from_slice(text.as_bytes());
        let e = from_bytes(&not_dict, p, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "h.npy: not a valid .npy file: the header is not a Python dict literal"
        );
        // Bad syntax: one short line, not the header.
        let long = format!("'descr': {}", "1 ".repeat(4_000));
        let e = from_bytes(&with_dict(&long), p, None).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("h.npy: not a valid .npy file: the header is not a Python literal (syntax error at 1:"), "{msg}");
        assert!(msg.len() < 200 && !msg.contains('\n'), "{msg}");
        let e = from_bytes(&with_dict("'descr' '<f4'"), p, None).unwrap_err();
        assert!(e.to_string().contains("syntax error at 1:"), "{e}");
    }

    #[test]
    fn deeply_nested_headers_are_refused_at_once() {
        // 40 brackets took `py_literal` hours (its time doubles with each
        // level); 60 bytes of header hung `dvm run`.
        let p = Path::new("deep.npy");
        let start = std::time::Instant::now();
        for (open, close) in [("[", "]"), ("(", ")"), ("{1: ", "}")] {
            for depth in [9, 40, 1_000] {
                let dict = format!("'descr': {}{}", open.repeat(depth), close.repeat(depth));
                let e = from_bytes(&with_dict(&dict), p, None).unwrap_err();
                // The dict is level 1: the eighth `open` is the ninth.
                let at = "{'descr': ".len() + 7 * open.len();
                assert_eq!(
                    e.to_string(),
                    format!(
                        "deep.npy: not a valid .npy file: the header nests brackets more \
                         than 8 deep (at byte {at})"
                    )
                );
            }
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
        // Brackets in strings do not count; eight levels are allowed (and
        // quick), though no such value is a valid dtype or shape.
        let quoted = "'descr': '<f4', 'fortran_order': False, 'shape': (1,), '((((((((((': 0";
        assert!(matches!(
            from_bytes(&with_dict(quoted), p, None),
            Err(NpyError::HeaderKeys { .. })
        ));
        let eight = format!("'descr': {}{}", "[".repeat(7), "]".repeat(7));
        assert!(matches!(
            from_bytes(&with_dict(&eight), p, None),
            Err(NpyError::HeaderKeys { .. })
        ));
    }

    #[test]
    fn reads_big_endian_f8_refused_and_fortran() {
        let mut be = header(">f4", "(2,)", false);
        be.extend_from_slice(&1.5f32.to_be_bytes());
        be.extend_from_slice(&(-3.0f32).to_be_bytes());
        let t = from_bytes(&be, Path::new("be.npy"), None).unwrap();
        assert_eq!(t.to_f64_vec(), vec![1.5, -3.0]);

        let mut f8 = header("<f8", "(1,)", false);
        f8.extend_from_slice(&1.0f64.to_le_bytes());
        let e = from_bytes(&f8, Path::new("f8.npy"), None).unwrap_err();
        assert!(matches!(e, NpyError::UnsupportedDType { .. }), "{e}");
        assert!(e.to_string().contains("f8.npy"), "{e}");

        // Fortran order: [[1, 2, 3], [4, 5, 6]] stored column by column.
        let mut f = header("<i4", "(2, 3)", true);
        for v in [1i32, 4, 2, 5, 3, 6] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        let t = from_bytes(&f, Path::new("f.npy"), None).unwrap();
        assert_eq!(t.as_i32_vec().unwrap(), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(t.shape(), &[2, 3]);
    }

    #[test]
    fn bad_files_are_errors_not_panics() {
        let p = Path::new("bad.npy");
        let cases: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"hello world, not numpy".to_vec(),
            b"\x93NUMPY\x01\x00\xff\xff{".to_vec(),
            b"\x93NUMPY\x09\x00\x00\x00".to_vec(),
            header("<f4", "(4294967296, 4294967296, 4294967296)", false),
            header("<f4", "(3,)", false),
            {
                let mut v = header("<f4", "(1,)", false);
                v.extend_from_slice(&[0; 8]);
                v
            },
            {
                let mut v = header("|b1", "(1,)", false);
                v.push(7);
                v
            },
            header("<f4", "(-1,)", false),
            header("[('a', '<f4')]", "(1,)", false),
            // Version 2 with a header length of 4 GiB, and a header that
            // is not UTF-8.
            b"\x93NUMPY\x02\x00\xff\xff\xff\xff{".to_vec(),
            {
                let mut v = header("<f4", "(1,)", false);
                v[12] = 0xff;
                v
            },
        ];
        for (i, c) in cases.iter().enumerate() {
            let e = from_bytes(c, p, None).unwrap_err();
            assert!(e.to_string().contains("bad.npy"), "case {i}: {e}");
        }
        // Truncated data is a length error.
        let e = from_bytes(&header("<f4", "(3,)", false), p, None).unwrap_err();
        assert!(
            matches!(
                e,
                NpyError::DataLength {
                    expected: 12,
                    found: 0,
                    ..
                }
            ),
            "{e}"
        );
        // Random prefixes of a valid file.
        let good = to_bytes(&Tensor::from_f32(&[3], &[1.0, 2.0, 3.0]).unwrap(), p).unwrap();
        for n in 0..good.len() {
            assert!(from_bytes(&good[..n], p, None).is_err());
        }
        // Any byte of the header replaced by an awkward one: an error or a
        // tensor, never a panic.
        let start = good.len() - 12;
        for at in 6..start {
            for b in [
                0u8, b'\'', b'"', b'{', b'}', b'(', b',', b':', b'\\', b'9', 0x80, 0xff,
            ] {
                let mut v = good.clone();
                v[at] = b;
                let _ = from_bytes(&v, p, None);
            }
        }
    }

    /// A version `major` file whose header text is `text` padded with
    /// spaces to `len` bytes (newline last), then `data`.
    fn padded(major: u8, dict: &str, len: usize, data: &[u8]) -> Vec<u8> {
        let mut text = dict.to_string();
        while text.len() + 1 < len {
            text.push(' ');
        }
        text.push('\n');
        let mut out = b"\x93NUMPY".to_vec();
        out.extend([major, 0]);
        if major == 1 {
            out.extend_from_slice(&(text.len() as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn headers_longer_than_numpys_limit_are_refused() {
        let p = Path::new("long.npy");
        let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
        let data = 2.5f32.to_le_bytes();
        // NumPy reads a header of exactly 10 000 bytes, and refuses more.
        for major in [1, 2] {
            let t = from_bytes(&padded(major, dict, MAX_HEADER_LEN, &data), p, None).unwrap();
            assert_eq!(t.to_f64_vec(), [2.5]);
            let e =
                from_bytes(&padded(major, dict, MAX_HEADER_LEN + 1, &data), p, None).unwrap_err();
            assert!(
                matches!(e, NpyError::HeaderTooLong { len: 10_001, .. }),
                "{e}"
            );
            assert_eq!(
                e.to_string(),
                "long.npy: the .npy header is 10001 bytes long, more than the 10000 allowed \
                 (NumPy refuses such a header too)"
            );
        }
        // The length field alone decides, whatever follows it: 4 GiB is
        // refused as too long, not read (nor looked for).
        let e = from_bytes(b"\x93NUMPY\x03\x00\xff\xff\xff\xff{", p, None).unwrap_err();
        assert!(
            matches!(
                e,
                NpyError::HeaderTooLong {
                    len: 0xffff_ffff,
                    ..
                }
            ),
            "{e}"
        );
        // Through a file too.
        let d = dir();
        let f = d.path().join("long.npy");
        std::fs::write(&f, padded(1, dict, 20_000, &data)).unwrap();
        assert!(matches!(
            read(&f),
            Err(NpyError::HeaderTooLong { len: 20_000, .. })
        ));
    }

    #[test]
    fn data_beyond_the_shape_is_refused_without_reading_it() {
        let d = dir();
        let f = d.path().join("long.npy");
        // A 1 TiB sparse file whose header says one f32: refused naming
        // its real length, without reading (or allocating) a terabyte.
        let t = Tensor::from_f32(&[1], &[1.0]).unwrap();
        let bytes = to_bytes(&t, &f).unwrap();
        let header = bytes.len() as u64 - 4;
        std::fs::write(&f, &bytes).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
        file.set_len(1 << 40).unwrap();
        drop(file);
        let e = read_as(&f, DType::F32).unwrap_err();
        assert!(
            matches!(e, NpyError::DataLength { expected: 4, found, more: false, .. }
                if found == (1 << 40) - header),
            "{e}"
        );
        assert!(e.to_string().ends_with(&format!(
            "shape [1] of f32 needs 4 data bytes, the file has {}",
            (1u64 << 40) - header
        )));
        // The same file cut to its data reads.
        let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
        file.set_len(header + 4).unwrap();
        drop(file);
        assert_eq!(read(&f).unwrap(), t);
        // A device that never ends is not read to its end either.
        #[cfg(target_os = "linux")]
        {
            let e = read(Path::new("/dev/zero")).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("/dev/zero: not a valid .npy file: missing the"),
                "{e}"
            );
        }
    }

    #[test]
    fn missing_file_and_unwritable_directory() {
        let e = read(Path::new("/nonexistent-dvm/x.npy")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent-dvm/x.npy"), "{e}");
        let t = Tensor::from_f32(&[1], &[1.0]).unwrap();
        let e = write(Path::new("/nonexistent-dvm/y.npy"), &t).unwrap_err();
        assert!(e.to_string().contains("/nonexistent-dvm/y.npy"), "{e}");
    }

    #[test]
    fn write_all_leaves_nothing_on_failure() {
        let d = dir();
        let t = Tensor::from_f32(&[1], &[1.0]).unwrap();
        let good = d.path().join("a.npy");
        let bad = d.path().join("missing-subdir").join("b.npy");
        assert!(write_all(&[(&good, &t), (&bad, &t)]).is_err());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        // Overwriting an existing file replaces it whole.
        write(&good, &t).unwrap();
        let t2 = Tensor::from_f32(&[2], &[5.0, 6.0]).unwrap();
        write(&good, &t2).unwrap();
        assert_eq!(read(&good).unwrap(), t2);
    }
}
