//! Graph input and output declarations: ONNX dimensions as dvm [`Dim`]s.
//!
//! A `dim_value` is a constant; a `dim_param` is parsed as a dimension
//! expression (`batch`, `4*batch`, `batch*seq`, `seq+1`) over the scope's
//! symbols, so a derived dimension is tied to the symbols it names; a
//! `dim_param` that is not an expression (`batch size`) becomes a symbol of
//! its letters, digits and `_`; a dimension with neither gets the fresh
//! symbol `unk_INPUT_AXIS`.

use dvm_graph::Graph;
use dvm_sym::Dim;

use crate::proto::{tensor_shape_proto::dimension::Value as DimValue, type_proto, ValueInfoProto};

/// The tensor type of a declaration: ONNX element type and the dims as
/// written (`None` for an unknown rank).
pub(crate) fn tensor_type(vi: &ValueInfoProto) -> Option<(i32, Option<Vec<DimText>>)> {
    let t = vi.r#type.as_ref()?;
    let Some(type_proto::Value::TensorType(tt)) = &t.value else {
        return None;
    };
    let dims = tt.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(DimValue::DimValue(v)) => DimText::Value(*v),
                Some(DimValue::DimParam(p)) if !p.is_empty() => DimText::Param(p.clone()),
                _ => DimText::Unknown,
            })
            .collect()
    });
    Some((tt.elem_type(), dims))
}

/// One dimension as the file declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DimText {
    /// `dim_value`.
    Value(i64),
    /// `dim_param`.
    Param(String),
    /// Neither.
    Unknown,
}

impl std::fmt::Display for DimText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DimText::Value(v) => write!(f, "{v}"),
            DimText::Param(p) => f.write_str(p),
            DimText::Unknown => f.write_str("?"),
        }
    }
}

/// The dvm dimension of `d`, axis `axis` of value `name`; new symbols are
/// added to `g`'s scope.
///
/// # Errors
///
/// A message for a negative `dim_value`.
pub(crate) fn to_dim(g: &mut Graph, d: &DimText, name: &str, axis: usize) -> Result<Dim, String> {
    match d {
        DimText::Value(v) if *v >= 0 => Ok(Dim::from(*v)),
        DimText::Value(v) => Err(format!("axis {axis} has the negative size {v}")),
        DimText::Param(p) => match g.parse_dim(p) {
            Ok(dim) => Ok(dim),
            Err(_) => {
                let ident = identifier(p);
                g.parse_dim(&ident)
                    .map_err(|e| format!("axis {axis}: dimension `{p}`: {e}"))
            }
        },
        DimText::Unknown => {
            let ident = identifier(&format!("unk_{name}_{axis}"));
            g.parse_dim(&ident)
                .map_err(|e| format!("axis {axis}: fresh symbol `{ident}`: {e}"))
        }
    }
}

/// `text` as a symbol name: letters, digits and `_` kept, others `_`, a
/// leading digit prefixed with `_`.
pub(crate) fn identifier(text: &str) -> String {
    let mut s: String = text
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// `name` as a dvm node or output name: characters outside
/// `[A-Za-z0-9_.-]` become `_`, a leading `.` too.
pub(crate) fn node_name(name: &str) -> String {
    let mut s: String = name
        .chars()
        .take(dvm_graph::MAX_NAME_LEN)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.starts_with('.') {
        s.replace_range(0..1, "_");
    }
    if s.is_empty() {
        s.push('_');
    }
    s
}
