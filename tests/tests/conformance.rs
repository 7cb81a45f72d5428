//! The CPU device against the f64 reference device on every conformance case.

use dvm_graph::reference;
use dvm_runtime::{Prepared, Runtime};
use dvm_sym::Bindings;
use dvm_tests::{cases, within};

#[test]
fn cpu_matches_reference_on_every_case() {
    let cases = cases().expect("the suite's graphs are well-formed");
    let rt = Runtime::new(2, 256);
    let mut failures = Vec::new();
    for case in &cases {
        let named = case.named();
        let want = reference::run(&case.graph, &named, &Bindings::new());
        let got = Prepared::new(&case.graph)
            .map_err(|e| e.to_string())
            .and_then(|p| {
                rt.run(&p, &named, &Bindings::new())
                    .map_err(|e| e.to_string())
            });
        let verdict = match (want, got) {
            (Ok(w), Ok(g)) => within(&w, &g, case.rtol, case.atol),
            (Err(e), _) => Err(format!("reference failed: {e}")),
            (_, Err(e)) => Err(format!("cpu failed: {e}")),
        };
        if let Err(e) = verdict {
            failures.push(format!("{}: {e}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn case_names_are_unique() {
    let cases = cases().unwrap();
    let mut names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n);
    assert!(n > 100, "the suite has {n} cases");
}

/// Every kernel the compiler makes for the suite, fused and unfused, is
/// proven to have independent tiles: none falls back to one core.
#[test]
fn every_compiled_kernel_has_independent_tiles() {
    use dvm_fuse::FuseOptions;
    let cases = cases().unwrap();
    let rt = Runtime::new(2, 1024);
    let mut refused = Vec::new();
    let mut kernels = 0;
    for case in &cases {
        for opts in [FuseOptions::default(), FuseOptions::off()] {
            let p = Prepared::with_options(&case.graph, &opts).unwrap();
            let bindings = p
                .graph()
                .bind_tensors(&case.named(), &Bindings::new())
                .unwrap();
            let Ok((_, ready)) = rt.plan(&p, &bindings) else {
                continue;
            };
            for k in &ready {
                kernels += 1;
                if !k.program.tiles_independent() {
                    let m = dvm_isa::Module::parse(&k.module).unwrap();
                    let v = dvm_isa::verify_kernel(&m, 0, &dvm_isa::DeviceLimits::DEFAULT).unwrap();
                    refused.push(format!(
                        "{} ({}): {:?}",
                        case.name,
                        k.name(),
                        v.tiles_independent()
                    ));
                }
            }
        }
    }
    assert!(kernels > 200, "{kernels} kernels");
    assert!(
        refused.is_empty(),
        "{} kernels refused:\n{}",
        refused.len(),
        refused.join("\n")
    );
}
