//! Module metadata: names, parameter signatures and debug labels, encoded
//! with postcard in the module's META section. The device never needs it.

use alloc::string::String;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};

/// Metadata of a whole module, one entry per kernel in table order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleMeta {
    /// Per-kernel metadata.
    pub kernels: Vec<KernelMeta>,
}

/// Metadata of one kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelMeta {
    /// Kernel name, unique within a module.
    pub name: String,
    /// Parameter signatures, in parameter order.
    pub params: Vec<ParamMeta>,
    /// Debug labels attached to instructions.
    pub labels: Vec<Label>,
}

/// Signature of one parameter (its dtype and access live in the binary
/// parameter table; this adds what only humans and the host need).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamMeta {
    /// Parameter name.
    pub name: String,
    /// Dimensions, as text (`"128"`, or a symbolic expression like `"S*4"`).
    pub dims: Vec<String>,
}

/// A debug label on the instruction at `word` of body `body`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    /// Body index within the kernel.
    pub body: u32,
    /// Word offset within the body.
    pub word: u32,
    /// Text.
    pub text: String,
}

/// Writes a [`ModuleMeta`] in postcard's wire format piece by piece, without
/// building the structs (for a compiler that reuses its buffers): the same
/// bytes `postcard::to_allocvec(&meta)` gives. Call, in order,
/// [`MetaWriter::seq`] with the kernel count, then per kernel
/// [`MetaWriter::str`] (name), `seq` (parameter count) and per parameter
/// `str` (name), `seq` (dimension count) and a `str` per dimension, then
/// `seq` (label count) and per label [`MetaWriter::u32`] (body),
/// `u32` (word) and `str` (text).
#[derive(Debug)]
pub struct MetaWriter<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> MetaWriter<'a> {
    /// A writer appending to `out`.
    pub fn new(out: &'a mut Vec<u8>) -> MetaWriter<'a> {
        MetaWriter { out }
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    /// A sequence length.
    pub fn seq(&mut self, len: usize) {
        self.varint(len as u64);
    }

    /// A `u32` field.
    pub fn u32(&mut self, v: u32) {
        self.varint(v as u64);
    }

    /// A string field.
    pub fn str(&mut self, s: &str) {
        self.varint(s.len() as u64);
        self.out.extend_from_slice(s.as_bytes());
    }

    /// A string field holding `v` in decimal (what `v.to_string()` gives).
    pub fn u64_str(&mut self, v: u64) {
        self.prefixed_index("", v);
    }

    /// A string field holding `prefix` followed by `n` in decimal
    /// (`format!("{prefix}{n}")`).
    pub fn prefixed_index(&mut self, prefix: &str, n: u64) {
        let mut buf = [0u8; 20];
        let mut at = buf.len();
        let mut v = n;
        loop {
            at -= 1;
            buf[at] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        let digits = &buf[at..];
        let len = prefix.len() + digits.len();
        if len < 0x80 {
            // The common case: a one-byte length, one reservation.
            self.out.reserve(1 + len);
            self.out.push(len as u8);
        } else {
            self.varint(len as u64);
        }
        self.out.extend_from_slice(prefix.as_bytes());
        self.out.extend_from_slice(digits);
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;
    use alloc::vec;

    use super::*;

    #[test]
    fn writer_matches_postcard() {
        let long = "x".repeat(200);
        let meta = ModuleMeta {
            kernels: vec![
                KernelMeta {
                    name: "softmax".into(),
                    params: vec![
                        ParamMeta {
                            name: "in0".into(),
                            dims: vec!["512".into(), "768".into()],
                        },
                        ParamMeta {
                            name: "out12".into(),
                            dims: vec![u64::MAX.to_string(), "0".into()],
                        },
                    ],
                    labels: vec![Label {
                        body: 3,
                        word: 300,
                        text: long.clone(),
                    }],
                },
                KernelMeta::default(),
            ],
        };
        let mut out = Vec::new();
        let mut w = MetaWriter::new(&mut out);
        w.seq(2);
        w.str("softmax");
        w.seq(2);
        w.prefixed_index("in", 0);
        w.seq(2);
        w.u64_str(512);
        w.u64_str(768);
        w.prefixed_index("out", 12);
        w.seq(2);
        w.u64_str(u64::MAX);
        w.u64_str(0);
        w.seq(1);
        w.u32(3);
        w.u32(300);
        w.str(&long);
        w.str("");
        w.seq(0);
        w.seq(0);
        assert_eq!(out, postcard::to_allocvec(&meta).unwrap());
    }
}
