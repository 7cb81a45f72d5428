//! Modules the compiler makes: the benchmark workloads and generated
//! graphs at a few lengths, each launch's kernel as a one-kernel module.
//! The structure-aware target mutates them; `seeds` writes them (and jobs
//! and graphs around them) as the other targets' starting corpora.

use dvm_graph::{models, Graph};
use dvm_runtime::{Prepared, Runtime};
use dvm_sym::Bindings;

/// The graphs compiled: the benchmark workloads at hidden 64 and a few
/// generated graphs with every composite.
pub fn graphs() -> Vec<Graph> {
    let mut v: Vec<Graph> = [
        models::gelu_linear(64, 4096),
        models::matmul_bias_relu(64, 4096),
        models::softmax_rows(64, 4096),
        models::layer_norm_rows(64, 4096),
        models::add_layer_norm(64, 4096),
        models::row_sum(64, 4096),
    ]
    .into_iter()
    .flatten()
    .collect();
    v.extend((0..6).map(|s| models::generated_graph(s, None)));
    v
}

/// Every kernel of every graph of [`graphs`] at every symbol bound to each
/// of `lens`, as module bytes.
pub fn compiled_modules(lens: &[i64]) -> Vec<Vec<u8>> {
    let rt = Runtime::new(1, 64);
    let mut out = Vec::new();
    for g in graphs() {
        let Ok(p) = Prepared::new(&g) else {
            continue;
        };
        for &len in lens {
            let mut b = Bindings::new();
            for s in g.scope().symbols() {
                let _ = g.scope().bind(&mut b, s, len);
            }
            if g.scope().complete_bindings(&mut b).is_err() {
                continue;
            }
            if let Ok((_, kernels)) = rt.plan(&p, &b) {
                out.extend(kernels.iter().map(|k| k.module.clone()));
            }
        }
    }
    out
}
