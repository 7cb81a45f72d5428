//! `dvm-bench`: dvm's side of the side-by-side benchmark suite
//! (`cargo ci bench`). A long-lived process driven by the orchestrator
//! `bench/orchestrate.py` over JSON lines on stdin and stdout, as the
//! Python peers are (ONNX Runtime, PyTorch eager, Inductor): it holds the
//! workloads as dvm graphs (`dvm_graph::models`), runs them through
//! `Runtime::run` with every weight passed per call, and answers times in
//! seconds. The commands are in [`protocol::Request`].
#![forbid(unsafe_code)]

mod inputs;
mod protocol;
mod session;
mod workload;

use std::io::{BufRead, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;

use serde_json::{json, Value};

use protocol::Request;
use session::Session;

fn main() -> ExitCode {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    let mut session = Session::new();
    for line in stdin.lock().lines() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                eprintln!("dvm-bench: reading stdin: {e}");
                return ExitCode::FAILURE;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let (answer, quit) = answer(&mut session, &line);
        if writeln!(stdout, "{answer}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return ExitCode::FAILURE;
        }
        if quit {
            break;
        }
    }
    ExitCode::SUCCESS
}

/// The answer line for one request line, and whether it was `quit`.
fn answer(session: &mut Session, line: &str) -> (Value, bool) {
    let req: Request = match serde_json::from_str(line) {
        Ok(r) => r,
        Err(e) => {
            return (
                json!({"ok": false, "error": format!("bad request: {e}")}),
                false,
            )
        }
    };
    let quit = matches!(req, Request::Quit);
    let result = catch_unwind(AssertUnwindSafe(|| session.handle(req)));
    let value = match result {
        Ok(Ok(mut v)) => {
            v["ok"] = json!(true);
            v
        }
        Ok(Err(e)) => json!({"ok": false, "error": e}),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            json!({"ok": false, "error": format!("panic: {msg}")})
        }
    };
    (value, quit)
}

#[cfg(test)]
mod tests {
    use super::{answer, Session};

    #[test]
    fn protocol_round_trip() {
        let mut s = Session::new();
        let (v, _) = answer(&mut s, r#"{"cmd":"hello"}"#);
        assert_eq!(v["system"], "dvm");
        let (v, _) = answer(&mut s, r#"{"cmd":"run","calls":1}"#);
        assert_eq!(v["ok"], false);
        assert!(v["error"].as_str().unwrap().contains("no workload"));
        let (v, _) = answer(&mut s, r#"{"cmd":"frobnicate"}"#);
        assert!(v["error"].as_str().unwrap().contains("bad request"));
        let load = r#"{"cmd":"load","workload":{"name":"rs","builder":"row_sum",
            "params":{"hidden":16},"inputs":[{"name":"x","shape":["S",16],"scale":1.0}]}}"#;
        let (v, _) = answer(&mut s, &load.replace('\n', " "));
        assert_eq!(v["ok"], true, "{v}");
        let (v, _) = answer(&mut s, r#"{"cmd":"inputs","s":9,"seed":1}"#);
        assert_eq!(v["ok"], true, "{v}");
        let (v, _) = answer(&mut s, r#"{"cmd":"run","calls":3}"#);
        assert_eq!(v["times"].as_array().unwrap().len(), 3);
        let (v, _) = answer(&mut s, r#"{"cmd":"first"}"#);
        assert!(v["time"].as_f64().unwrap() > 0.0);
        let (v, _) = answer(&mut s, r#"{"cmd":"sequence","lens":[3,5,3],"seed":4}"#);
        assert_eq!(v["cold"].as_array().unwrap().len(), 3, "{v}");
        assert_eq!(v["warm"].as_array().unwrap().len(), 3);
        let dir = std::env::temp_dir().join(format!("dvm-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("y.npy");
        let req = serde_json::json!({"cmd": "dump", "path": path});
        let (v, _) = answer(&mut s, &req.to_string());
        assert_eq!(v["shape"], serde_json::json!([9]), "{v}");
        let y = dvm::npy::read(&path).unwrap();
        let x = &s_inputs(9, 1)[..];
        for (r, row) in x.chunks(16).enumerate() {
            let want: f32 = row.iter().sum();
            let got = y.as_slice::<f32>().unwrap()[r];
            assert!((want - got).abs() < 1e-4, "row {r}: {got} against {want}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        let (v, _) = answer(&mut s, r#"{"cmd":"gemm","n":32,"calls":2}"#);
        assert!(v["gflops"].as_f64().unwrap() > 0.0, "{v}");
        let (v, quit) = answer(&mut s, r#"{"cmd":"quit"}"#);
        assert!(quit && v["ok"] == true);
    }

    fn s_inputs(s: usize, seed: u64) -> Vec<f32> {
        crate::inputs::values(s * 16, seed, 0, 1.0)
    }
}
