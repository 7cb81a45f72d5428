//! Many threads at once: eight threads share one CPU runtime (its kernel
//! cache small enough to evict under them, its worker pool contended) and
//! each runs its own mix of graphs at its own lengths for a fixed number of
//! iterations, while others record and run eager windows in contexts of
//! their own. Every result must be the bytes the same call gives on a
//! runtime used by one thread alone: no mixed-up kernels, plans or output
//! buffers, no lost call, no deadlock (the test ends).

use std::sync::Arc;

use dvm_graph::{models, Graph};
use dvm_isa::Opcode;
use dvm_runtime::{Eager, Prepared, Runtime};
use dvm_tensor::sample_data as data;
use dvm_tensor::Tensor;

const THREADS: usize = 8;
const ITERATIONS: usize = 40;

/// The graphs the threads share, at hidden 32.
fn graphs() -> Vec<Graph> {
    vec![
        models::softmax_rows(32, 4096).unwrap(),
        models::layer_norm_rows(32, 4096).unwrap(),
        models::gelu_linear(32, 4096).unwrap(),
        models::add_layer_norm(32, 4096).unwrap(),
        models::row_sum(32, 4096).unwrap(),
    ]
}

/// Inputs of `g` with the row symbol at `rows`: every input's `S` extent
/// is `rows`, the others as declared.
fn inputs(g: &Graph, rows: u64, seed: u32) -> Vec<(String, Tensor)> {
    g.inputs()
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let node = &g[id];
            let shape: Vec<u64> = node
                .shape
                .iter()
                .map(|d| d.as_const().map_or(rows, |v| v as u64))
                .collect();
            let n: u64 = shape.iter().product();
            let t = Tensor::from_f32(&shape, &data(n as usize, seed + i as u32)).unwrap();
            (node.name.to_string(), t)
        })
        .collect()
}

/// The call thread `t` makes at iteration `i`: a graph and a length.
fn call(t: usize, i: usize, graphs: usize) -> (usize, u64) {
    let g = (t + i) % graphs;
    let rows = [1u64, 3, 17, 64, 129, 300][(t * 5 + i * 7) % 6];
    (g, rows)
}

fn run_one(rt: &Runtime, p: &Prepared, ins: &[(String, Tensor)]) -> Vec<(String, Vec<u8>)> {
    let named: Vec<(&str, &Tensor)> = ins.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let outs = rt.run(p, &named).expect("runs");
    outs.iter()
        .map(|(n, t)| (n.to_string(), t.bytes().to_vec()))
        .collect()
}

#[test]
fn eight_threads_share_a_runtime_and_get_single_thread_results() {
    let graphs = graphs();
    let prepared: Vec<Prepared> = graphs.iter().map(|g| Prepared::new(g).unwrap()).collect();
    // What one thread alone gets, call by call.
    let alone = Runtime::new(2, 256);
    let mut want = Vec::new();
    for t in 0..THREADS {
        for i in 0..ITERATIONS {
            let (g, rows) = call(t, i, graphs.len());
            let ins = inputs(&graphs[g], rows, (t * 100 + i) as u32);
            want.push(run_one(&alone, &prepared[g], &ins));
        }
    }
    // Eight threads on one runtime whose cache holds fewer kernels than
    // the calls need, so kernels are evicted and rebuilt under them.
    let shared = Arc::new(Runtime::new(2, 6));
    let (graphs, prepared, want) = (&graphs, &prepared, &want);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let rt = Arc::clone(&shared);
            s.spawn(move || {
                for i in 0..ITERATIONS {
                    let (g, rows) = call(t, i, graphs.len());
                    let ins = inputs(&graphs[g], rows, (t * 100 + i) as u32);
                    let got = run_one(&rt, &prepared[g], &ins);
                    assert!(
                        got == want[t * ITERATIONS + i],
                        "thread {t}, call {i}: graph {g} at {rows} rows differs from one thread's result"
                    );
                }
            });
        }
    });
    // More kernels were built than the cache holds: it evicted under the
    // threads.
    let stats = shared.cache_stats();
    assert!(stats.len <= 6 && stats.misses > 6, "{stats:?}");
}

/// One eager context per thread, eight at once, each recording and
/// syncing windows of its own shapes: the values are those of a context
/// used alone.
#[test]
fn eight_eager_contexts_at_once() {
    let work = |t: usize| -> Vec<Vec<f32>> {
        let cx = Eager::new(2);
        (0..ITERATIONS)
            .map(|i| {
                let rows = 1 + ((t * 7 + i * 3) % 40) as u64;
                let x = cx.tensor(
                    Tensor::from_f32(&[rows, 16], &data(rows as usize * 16, (t + i) as u32))
                        .unwrap(),
                );
                let y = x
                    .scalar(Opcode::MulS, 0.5)
                    .and_then(|y| y.unary(Opcode::Exp))
                    .and_then(|y| y.softmax(-1))
                    .and_then(|y| y.sum(&[1], false))
                    .unwrap();
                y.to_f32_vec().unwrap()
            })
            .collect()
    };
    let want: Vec<_> = (0..THREADS).map(work).collect();
    let got: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS).map(|t| s.spawn(move || work(t))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for t in 0..THREADS {
        assert!(got[t] == want[t], "eager context of thread {t} differs");
    }
}
