//! The runner's state: a runtime at the requested thread count, the
//! loaded workload and its kept inputs; each command's work.

use std::time::Instant;

use dvm::{DType, Dim, Graph, Prepared, Runtime, Tensor};
use serde_json::{json, Value};

use crate::protocol::Request;
use crate::workload::WorkloadSpec;

/// The loaded workload: its specification, graph and prepared form.
struct Loaded {
    spec: WorkloadSpec,
    graph: Graph,
    prepared: Prepared,
}

/// What the runner holds between commands.
pub struct Session {
    threads: usize,
    rt: Runtime,
    loaded: Option<Loaded>,
    inputs: Vec<(String, Tensor)>,
}

/// A command's answer, or the error to report.
pub type Answer = Result<Value, String>;

/// Inputs by name, as `Runtime::run` takes them.
type Named<'a> = Vec<(&'a str, &'a Tensor)>;

fn refs(inputs: &[(String, Tensor)]) -> Named<'_> {
    inputs.iter().map(|(n, t)| (n.as_str(), t)).collect()
}

impl Session {
    /// A session on one thread until told otherwise.
    pub fn new() -> Session {
        Session {
            threads: 1,
            rt: Runtime::with_cores(1),
            loaded: None,
            inputs: Vec::new(),
        }
    }

    /// Does what `req` asks. `Quit` is the caller's.
    pub fn handle(&mut self, req: Request) -> Answer {
        match req {
            Request::Hello => Ok(json!({
                "system": "dvm",
                "version": env!("CARGO_PKG_VERSION"),
            })),
            Request::Threads { n } => self.set_threads(n),
            Request::Load { workload } => self.load(workload),
            Request::Inputs { s, seed } => {
                let l = self.loaded()?;
                self.inputs = l.spec.inputs(&l.graph, s, seed)?;
                Ok(json!({}))
            }
            Request::Run { calls } => self.run(calls),
            Request::First => self.first(),
            Request::Sequence { lens, seed } => self.sequence(&lens, seed),
            Request::Dump { path } => self.dump(&path),
            Request::Gemm { n, calls } => self.gemm(n, calls),
            Request::Quit => Ok(json!({})),
        }
    }

    fn loaded(&self) -> Result<&Loaded, String> {
        self.loaded
            .as_ref()
            .ok_or_else(|| "no workload loaded (send `load` first)".to_string())
    }

    fn kept(&self) -> Result<(&Loaded, Named<'_>), String> {
        let l = self.loaded()?;
        if self.inputs.is_empty() {
            return Err("no inputs (send `inputs` first)".into());
        }
        Ok((l, refs(&self.inputs)))
    }

    fn set_threads(&mut self, n: usize) -> Answer {
        if n == 0 {
            return Err("threads: `n` must be at least 1".into());
        }
        if n != self.threads {
            self.rt = Runtime::with_cores(n);
            self.threads = n;
        }
        Ok(json!({ "threads": self.rt.pool().cores() }))
    }

    fn load(&mut self, spec: WorkloadSpec) -> Answer {
        self.loaded = None;
        self.inputs.clear();
        let graph = spec.graph()?;
        let prepared =
            Prepared::new(&graph).map_err(|e| format!("prepare `{}`: {e}", spec.name))?;
        self.loaded = Some(Loaded {
            spec,
            graph,
            prepared,
        });
        Ok(json!({}))
    }

    fn run(&self, calls: usize) -> Answer {
        let (l, inputs) = self.kept()?;
        let mut times = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t = Instant::now();
            let out = self
                .rt
                .run(&l.prepared, &inputs)
                .map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64());
            drop(out);
        }
        Ok(json!({ "times": times }))
    }

    /// A fresh model state: the graph (imported again from its file for an
    /// ONNX workload) and its prepared form. The caller times it.
    fn fresh(l: &Loaded) -> Result<Prepared, String> {
        if l.spec.onnx.is_some() {
            let g = l.spec.graph()?;
            Prepared::new(&g).map_err(|e| e.to_string())
        } else {
            Prepared::new(&l.graph).map_err(|e| e.to_string())
        }
    }

    fn first(&self) -> Answer {
        let (l, inputs) = self.kept()?;
        let rt = Runtime::with_cores(self.threads);
        let t = Instant::now();
        let p = Self::fresh(l)?;
        let out = rt.run(&p, &inputs).map_err(|e| e.to_string())?;
        let time = t.elapsed().as_secs_f64();
        drop(out);
        Ok(json!({ "time": time }))
    }

    fn sequence(&self, lens: &[u64], seed: u64) -> Answer {
        let l = self.loaded()?;
        let rt = Runtime::with_cores(self.threads);
        let t = Instant::now();
        let p = Self::fresh(l)?;
        let prepare = t.elapsed().as_secs_f64();
        let mut passes = [Vec::new(), Vec::new()];
        for pass in &mut passes {
            for (i, &s) in lens.iter().enumerate() {
                let inputs = l.spec.inputs(&l.graph, s, seed + i as u64)?;
                let inputs = refs(&inputs);
                let t = Instant::now();
                let out = rt.run(&p, &inputs).map_err(|e| format!("S = {s}: {e}"))?;
                pass.push(t.elapsed().as_secs_f64());
                drop(out);
            }
        }
        let [mut cold, warm] = passes;
        if let Some(c) = cold.first_mut() {
            *c += prepare;
        }
        Ok(json!({ "cold": cold, "warm": warm }))
    }

    fn dump(&self, path: &str) -> Answer {
        let (l, inputs) = self.kept()?;
        let mut out = self
            .rt
            .run(&l.prepared, &inputs)
            .map_err(|e| e.to_string())?;
        let name = out
            .names()
            .next()
            .map(str::to_string)
            .ok_or("the workload has no output")?;
        let t = out.take(&name).ok_or("the first output vanished")?;
        dvm::npy::write(std::path::Path::new(path), &t).map_err(|e| e.to_string())?;
        Ok(json!({ "output": name, "shape": t.shape() }))
    }

    fn gemm(&self, n: u64, calls: usize) -> Answer {
        if n == 0 || calls == 0 {
            return Err("gemm: `n` and `calls` must be at least 1".into());
        }
        let mut g = Graph::new();
        let d = || Dim::from(n as i64);
        let a = g
            .input("a", DType::F32, &[d(), d()])
            .map_err(|e| e.to_string())?;
        let b = g
            .input("b", DType::F32, &[d(), d()])
            .map_err(|e| e.to_string())?;
        let c = g.matmul(a, b, false, false).map_err(|e| e.to_string())?;
        g.output("c", c).map_err(|e| e.to_string())?;
        let p = Prepared::new(&g).map_err(|e| e.to_string())?;
        let n_us = usize::try_from(n).map_err(|_| "gemm: `n` too large")?;
        let vals = crate::inputs::values(n_us * n_us, 0, 0, 1.0);
        let ta = Tensor::from_f32(&[n, n], &vals).map_err(|e| e.to_string())?;
        let inputs = [("a", &ta), ("b", &ta)];
        self.rt.run(&p, &inputs).map_err(|e| e.to_string())?;
        let mut best = f64::INFINITY;
        for _ in 0..calls {
            let t = Instant::now();
            let out = self.rt.run(&p, &inputs).map_err(|e| e.to_string())?;
            best = best.min(t.elapsed().as_secs_f64());
            drop(out);
        }
        let flops = 2.0 * (n as f64).powi(3);
        Ok(json!({ "gflops": flops / best / 1e9, "best": best }))
    }
}
