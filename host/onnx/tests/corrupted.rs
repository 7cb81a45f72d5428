//! Corrupted models never panic the importer: every zoo file with bytes
//! flipped, cut short or spliced imports or fails with an error.

use std::path::Path;

/// xorshift64: a reproducible byte and position source.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn corrupted_zoo_models_are_errors_not_panics() {
    let zoo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/models");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut tried = 0;
    for name in ["mlp.ts17.onnx", "encoder.dynamo18.onnx", "llama.ts17.onnx"] {
        let bytes = std::fs::read(zoo.join(name)).expect("zoo model");
        for round in 0..150 {
            let mut b = bytes.clone();
            match round % 3 {
                0 => {
                    for _ in 0..1 + rng.below(8) {
                        let i = rng.below(b.len());
                        b[i] = rng.next() as u8;
                    }
                }
                1 => b.truncate(rng.below(b.len())),
                _ => {
                    let (from, to) = (rng.below(b.len()), rng.below(b.len()));
                    let len = rng.below(64).min(b.len() - from.max(to));
                    b.copy_within(from..from + len, to);
                }
            }
            // Either outcome is fine; a panic fails the test.
            if let Ok(model) = dvm_onnx::OnnxModel::from_bytes(&b, None) {
                let _ = model.to_graph();
                let _ = model.info();
            }
            tried += 1;
        }
    }
    assert_eq!(tried, 450);
}
