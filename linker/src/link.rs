//! Linking several modules into one image.
//!
//! Every kernel of every input is copied (kind, UB bytes, parameter table,
//! bodies with their code words, metadata with names, dims and labels) and
//! the image is rebuilt with [`ModuleBuilder`], so it has the builder's
//! canonical layout. Kernels keep the order of their first appearance.
//! A kernel identical to one already linked (same name, kind, UB bytes,
//! parameters, grids, code words and metadata) is kept once; two different
//! kernels with one name are a [`LinkError::NameClash`].

use std::collections::HashMap;

use dvm_isa::builder::{BodyDef, CodeWriter, KernelDef, ModuleBuilder, ParamDef};
use dvm_isa::meta::KernelMeta;
use dvm_isa::{verify_kernel, verify_module, DeviceLimits, KernelKind, Module, Param};

use crate::error::LinkError;

/// One kernel, copied out of an input module: everything that makes two
/// kernels the same.
#[derive(Clone, Debug, PartialEq, Eq)]
struct KernelCopy {
    kind: KernelKind,
    ub_bytes: u32,
    params: Vec<Param>,
    bodies: Vec<([u32; 3], Vec<u64>)>,
    meta: KernelMeta,
}

/// A kernel in the link and the input it came from first.
#[derive(Clone, Debug)]
struct Linked {
    input: String,
    kernel: KernelCopy,
}

/// Collects the kernels of several modules and writes one image.
///
/// ```
/// # use dvm_linker::Linker;
/// # fn demo(a: &[u8], b: &[u8]) -> Result<Vec<u8>, dvm_linker::LinkError> {
/// let mut linker = Linker::new();
/// linker.add_bytes("a.dvmb", a)?;
/// linker.add_bytes("b.dvmb", b)?;
/// let image = linker.finish()?;
/// # Ok(image) }
/// ```
#[derive(Clone, Debug)]
pub struct Linker {
    limits: DeviceLimits,
    kernels: Vec<Linked>,
    by_name: HashMap<String, usize>,
    features: u64,
}

impl Default for Linker {
    fn default() -> Self {
        Linker::new()
    }
}

impl Linker {
    /// An empty link that verifies kernels against [`DeviceLimits::DEFAULT`].
    pub fn new() -> Linker {
        Linker::with_limits(DeviceLimits::DEFAULT)
    }

    /// An empty link that verifies kernels against `limits`.
    pub fn with_limits(limits: DeviceLimits) -> Linker {
        Linker {
            limits,
            kernels: Vec::new(),
            by_name: HashMap::new(),
            features: 0,
        }
    }

    /// Number of distinct kernels linked so far.
    pub fn kernel_count(&self) -> usize {
        self.kernels.len()
    }

    /// Names of the kernels linked so far, in image order.
    pub fn kernel_names(&self) -> impl Iterator<Item = &str> {
        self.kernels.iter().map(|k| k.kernel.meta.name.as_str())
    }

    /// Parses `bytes` and adds the module's kernels; `input` names it in
    /// errors (usually the file name). Returns how many new kernels it
    /// added (duplicates of linked kernels are not counted).
    ///
    /// # Errors
    /// As [`Linker::add`], plus [`LinkError::Parse`] when `bytes` is not a
    /// module container.
    pub fn add_bytes(&mut self, input: &str, bytes: &[u8]) -> Result<usize, LinkError> {
        let module = Module::parse(bytes).map_err(|source| LinkError::Parse {
            input: input.to_string(),
            source,
        })?;
        self.add(input, &module)
    }

    /// Adds the kernels of `module`; `input` names it in errors. Returns
    /// how many new kernels it added. On error nothing is added.
    ///
    /// # Errors
    /// [`LinkError::Parse`] when the metadata does not decode,
    /// [`LinkError::BadMeta`] when it disagrees with the tables,
    /// [`LinkError::Verify`] when a kernel fails verification against the
    /// link's device limits, [`LinkError::NameClash`] when a kernel has the
    /// name of a different kernel linked before. (Two kernels of one name
    /// in the same module never get here: [`Module::parse`] rejects them.)
    pub fn add(&mut self, input: &str, module: &Module<'_>) -> Result<usize, LinkError> {
        let meta = module.meta().map_err(|source| LinkError::Parse {
            input: input.to_string(),
            source,
        })?;
        let mut fresh: Vec<Linked> = Vec::new();
        let mut fresh_names: HashMap<&str, usize> = HashMap::new();
        for (index, kmeta) in meta.kernels.iter().enumerate() {
            let copy = copy_kernel(input, module, index, kmeta)?;
            verify_kernel(module, index, &self.limits).map_err(|source| LinkError::Verify {
                input: input.to_string(),
                kernel: kmeta.name.clone(),
                source,
            })?;
            let name = kmeta.name.as_str();
            let earlier = self
                .by_name
                .get(name)
                .map(|&i| &self.kernels[i])
                .or_else(|| fresh_names.get(name).map(|&i| &fresh[i]));
            match earlier {
                Some(prev) if prev.kernel == copy => {}
                Some(prev) => {
                    return Err(LinkError::NameClash {
                        kernel: name.to_string(),
                        first: prev.input.clone(),
                        second: input.to_string(),
                    })
                }
                None => {
                    fresh_names.insert(name, fresh.len());
                    fresh.push(Linked {
                        input: input.to_string(),
                        kernel: copy,
                    });
                }
            }
        }
        let added = fresh.len();
        for linked in fresh {
            self.by_name
                .insert(linked.kernel.meta.name.clone(), self.kernels.len());
            self.kernels.push(linked);
        }
        self.features |= module.features();
        Ok(added)
    }

    /// Writes the image: one module holding every linked kernel, declaring
    /// the union of the inputs' feature bits. The image is parsed and
    /// verified before it is returned.
    ///
    /// # Errors
    /// [`LinkError::TooLarge`] when a table would overflow its 32-bit
    /// indices; [`LinkError::Internal`] if the image fails to verify (a
    /// linker bug; the inputs were verified).
    pub fn finish(&self) -> Result<Vec<u8>, LinkError> {
        self.check_size()?;
        let mut builder = ModuleBuilder::new();
        builder.declare_features(self.features);
        for linked in &self.kernels {
            builder
                .add_kernel(kernel_def(&linked.kernel))
                .map_err(|e| LinkError::Internal(e.to_string()))?;
        }
        let image = builder.finish();
        let module = Module::parse(&image).map_err(|e| LinkError::Internal(e.to_string()))?;
        verify_module(&module, &self.limits).map_err(|e| LinkError::Internal(e.to_string()))?;
        Ok(image)
    }

    fn check_size(&self) -> Result<(), LinkError> {
        let sum = |f: &dyn Fn(&KernelCopy) -> u64| -> u64 {
            self.kernels.iter().map(|k| f(&k.kernel)).sum()
        };
        let tables: [(&'static str, u64); 4] = [
            ("kernels", self.kernels.len() as u64),
            ("bodies", sum(&|k| k.bodies.len() as u64)),
            ("parameters", sum(&|k| k.params.len() as u64)),
            (
                "code words",
                sum(&|k| k.bodies.iter().map(|b| b.1.len() as u64).sum()),
            ),
        ];
        for (what, count) in tables {
            if count > u64::from(u32::MAX) {
                return Err(LinkError::TooLarge { what, count });
            }
        }
        Ok(())
    }
}

/// Links `modules` into one image (see [`Linker`]); errors name the
/// inputs `module 0`, `module 1`, … in the order given.
///
/// # Errors
/// The first [`LinkError`] of [`Linker::add`] or [`Linker::finish`].
pub fn link(modules: &[Module<'_>]) -> Result<Vec<u8>, LinkError> {
    let mut linker = Linker::new();
    for (i, m) in modules.iter().enumerate() {
        linker.add(&format!("module {i}"), m)?;
    }
    linker.finish()
}

/// Copies kernel `index` of `module`, checking that its metadata agrees
/// with its tables (so nothing is lost on the way through the builder).
fn copy_kernel(
    input: &str,
    module: &Module<'_>,
    index: usize,
    meta: &KernelMeta,
) -> Result<KernelCopy, LinkError> {
    let bad = |what: String| LinkError::BadMeta {
        input: input.to_string(),
        kernel: format!("`{}`", meta.name),
        what,
    };
    let k = module
        .kernel(index)
        .ok_or_else(|| bad(format!("kernel {index} is not in the kernel table")))?;
    if meta.params.len() != k.param_count() {
        return Err(bad(format!(
            "metadata names {} parameters, the parameter table has {}",
            meta.params.len(),
            k.param_count()
        )));
    }
    for l in &meta.labels {
        // A label names a word of an existing body (as `Module::parse`
        // checks): the builder would refuse anything else.
        let Some(code) = k.body_code(l.body as usize) else {
            return Err(bad(format!(
                "label `{}` is on body {}, the kernel has {} bodies",
                l.text,
                l.body,
                k.bodies.len()
            )));
        };
        if l.word as usize >= code.len() {
            return Err(bad(format!(
                "label `{}` is on word {} of body {}, which has {} word(s)",
                l.text,
                l.word,
                l.body,
                code.len()
            )));
        }
    }
    let params: Vec<Param> = k.params().collect();
    if params.len() != k.param_count() {
        return Err(bad("a parameter does not decode".to_string()));
    }
    let mut bodies = Vec::with_capacity(k.bodies.len());
    for (b, body) in k.bodies.iter().enumerate() {
        let code = k
            .body_code(b)
            .ok_or_else(|| bad(format!("body {b}'s code is outside the code section")))?;
        bodies.push((body.grid(), code.iter().map(|w| w.get()).collect()));
    }
    Ok(KernelCopy {
        kind: k.kind,
        ub_bytes: k.ub_bytes,
        params,
        bodies,
        meta: meta.clone(),
    })
}

/// The builder's description of a copied kernel.
fn kernel_def(k: &KernelCopy) -> KernelDef {
    let params = k
        .params
        .iter()
        .zip(&k.meta.params)
        .map(|(p, m)| ParamDef {
            name: m.name.clone(),
            dtype: p.dtype,
            access: p.access,
            dims: m.dims.clone(),
        })
        .collect();
    let bodies = k
        .bodies
        .iter()
        .enumerate()
        .map(|(b, (grid, words))| {
            let mut code = CodeWriter::new();
            for w in words {
                code.push_word(*w);
            }
            for l in k.meta.labels.iter().filter(|l| l.body as usize == b) {
                code.label_at(l.word, l.text.clone());
            }
            BodyDef { grid: *grid, code }
        })
        .collect();
    KernelDef {
        name: k.meta.name.clone(),
        kind: k.kind,
        ub_bytes: k.ub_bytes,
        params,
        bodies,
    }
}
