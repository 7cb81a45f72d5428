//! Tensor payloads: `TensorProto` (typed fields, `raw_data`, external data
//! files) decoded into [`Const`] values.

use std::path::{Component, Path};

use crate::error::OnnxError;
use crate::proto::TensorProto;
use crate::value::{elem, Const};

/// Largest tensor the importer decodes, in elements.
const MAX_ELEMENTS: usize = 1 << 28;

/// Decodes `t` (named `name` in errors); external data is read relative to
/// `base_dir`.
///
/// # Errors
///
/// [`OnnxError::TensorData`] for an unsupported element type, a payload of
/// the wrong length, or external data that is missing, too short or outside
/// `base_dir`.
pub(crate) fn decode(t: &TensorProto, base_dir: Option<&Path>) -> Result<Const, OnnxError> {
    let name = t.name().to_owned();
    let fail = |reason: String| OnnxError::TensorData {
        tensor: name.clone(),
        reason,
    };
    let et = t.data_type();
    let width = elem::byte_width(et)
        .ok_or_else(|| fail(format!("element type {} is not supported", elem::name(et))))?;
    let mut shape = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        shape.push(usize::try_from(d).map_err(|_| fail(format!("negative dimension {d}")))?);
    }
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| fail(format!("{shape:?} has too many elements")))?;
    let external = t.data_location() == crate::proto::tensor_proto::DataLocation::External;
    let bytes: Option<Vec<u8>> = if external {
        Some(read_external(t, base_dir, count * width).map_err(fail)?)
    } else {
        t.raw_data.clone().filter(|r| !r.is_empty() || count == 0)
    };
    let data = match bytes {
        Some(raw) => {
            if raw.len() != count * width {
                return Err(fail(format!(
                    "holds {} bytes of data, the shape {shape:?} needs {}",
                    raw.len(),
                    count * width
                )));
            }
            raw.chunks_exact(width)
                .map(|c| elem::from_le_bytes(et, c))
                .collect()
        }
        None => typed_fields(t, et),
    };
    if data.len() != count {
        return Err(fail(format!(
            "holds {} values, the shape {shape:?} needs {count}",
            data.len()
        )));
    }
    Ok(Const {
        elem: et,
        shape,
        data,
    })
}

/// The values of the typed repeated fields (`float_data`, `int64_data`, …).
fn typed_fields(t: &TensorProto, et: i32) -> Vec<f64> {
    use elem::*;
    match et {
        FLOAT => t.float_data.iter().map(|&v| f64::from(v)).collect(),
        DOUBLE => t.double_data.clone(),
        INT64 => t.int64_data.iter().map(|&v| v as f64).collect(),
        UINT64 | UINT32 => t.uint64_data.iter().map(|&v| v as f64).collect(),
        FLOAT16 => t
            .int32_data
            .iter()
            .map(|&v| f64::from(half::f16::from_bits(v as u16)))
            .collect(),
        BFLOAT16 => t
            .int32_data
            .iter()
            .map(|&v| f64::from(half::bf16::from_bits(v as u16)))
            .collect(),
        _ => t.int32_data.iter().map(|&v| f64::from(v)).collect(),
    }
}

/// The `len` bytes of `t`'s external data (`location`, `offset`, `length`).
fn read_external(t: &TensorProto, base_dir: Option<&Path>, len: usize) -> Result<Vec<u8>, String> {
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for e in &t.external_data {
        let v = e.value();
        match e.key() {
            "location" => location = Some(v.to_owned()),
            "offset" => offset = v.parse().map_err(|_| format!("external offset `{v}`"))?,
            "length" => {
                length = Some(
                    v.parse::<u64>()
                        .map_err(|_| format!("external length `{v}`"))?,
                )
            }
            _ => {}
        }
    }
    let location = location.ok_or("external data without a `location`")?;
    let rel = Path::new(&location);
    if rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "external data file `{location}` is outside the model's folder (only relative \
             paths without `..` are accepted)"
        ));
    }
    let base = base_dir.ok_or_else(|| {
        format!("external data file `{location}` but the model was not read from a file")
    })?;
    let path = base.join(rel);
    // A symbolic link must not lead out of the folder either.
    let (real, real_base) = match (path.canonicalize(), base.canonicalize()) {
        (Ok(p), Ok(b)) => (p, b),
        (Err(e), _) | (_, Err(e)) => {
            return Err(format!("external data file {}: {e}", path.display()))
        }
    };
    if !real.starts_with(&real_base) {
        return Err(format!(
            "external data file `{location}` resolves outside the model's folder"
        ));
    }
    if let Some(l) = length {
        if l != len as u64 {
            return Err(format!("external length {l}, the shape needs {len} bytes"));
        }
    }
    let bytes =
        std::fs::read(&real).map_err(|e| format!("external data file {}: {e}", path.display()))?;
    let start = usize::try_from(offset).map_err(|_| format!("external offset {offset}"))?;
    bytes
        .get(start..start.saturating_add(len))
        .filter(|_| start.checked_add(len).is_some())
        .map(<[u8]>::to_vec)
        .ok_or_else(|| {
            format!(
                "external data file {} holds {} bytes, the tensor needs {len} from offset {offset}",
                path.display(),
                bytes.len()
            )
        })
}
