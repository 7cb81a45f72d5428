//! Deterministic input values every system of the suite computes alike.
//!
//! Element `i` of input number `k` (its position in the workload's input
//! list) for call seed `seed` is a 32-bit integer hash of `i`, `seed` and
//! `k` mapped to `[-1, 1)` and multiplied by the input's scale, in `f64`,
//! then rounded to `f32`. Every step is exact integer arithmetic or one
//! IEEE rounding, so `bench/peers.py` (NumPy) produces the same bits.
//!
//! Integer inputs (token ids) take the same hash `u` into `[0, high)` as
//! `(u · high) >> 32`, exact in 64-bit integers on both sides.

const MASK: u64 = 0xFFFF_FFFF;

/// The hash of element `i` (see the module documentation).
fn hash(i: u64, stream: u64) -> u64 {
    let mut u = ((i + 1).wrapping_mul(0x9E37_79B1) ^ stream) & MASK;
    u ^= u >> 16;
    u = (u * 0x7FEB_352D) & MASK;
    u ^= u >> 15;
    u = (u * 0x846C_A68B) & MASK;
    u ^ (u >> 16)
}

/// `n` values of input `k` at call seed `seed`, scaled by `scale`.
pub fn values(n: usize, seed: u64, k: u64, scale: f64) -> Vec<f32> {
    let stream = seed
        .wrapping_mul(1000)
        .wrapping_add(k)
        .wrapping_mul(0x85EB_CA77);
    (0..n as u64)
        .map(|i| ((hash(i, stream) as f64 / 4_294_967_296.0 * 2.0 - 1.0) * scale) as f32)
        .collect()
}

/// `n` integers of input `k` at call seed `seed`, uniform in `[0, high)`;
/// `high` is at most `2^32`, so `u · high` fits in 64 bits.
pub fn ints(n: usize, seed: u64, k: u64, high: u64) -> Vec<i64> {
    debug_assert!((1..=1 << 32).contains(&high));
    let stream = seed
        .wrapping_mul(1000)
        .wrapping_add(k)
        .wrapping_mul(0x85EB_CA77);
    (0..n as u64)
        .map(|i| ((hash(i, stream) * high) >> 32) as i64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{ints, values};

    /// The same numbers `bench/peers.py`'s `values(4, 7, 1, 0.5)` gives
    /// (`bench/test_inputs.py` checks the Python side).
    #[test]
    fn known_values() {
        let v = values(4, 7, 1, 0.5);
        let bits: Vec<u32> = v.iter().map(|x| x.to_bits()).collect();
        assert_eq!(bits, KNOWN);
    }

    #[test]
    fn in_range_and_spread() {
        let v = values(10_000, 3, 0, 2.0);
        assert!(v.iter().all(|x| (-2.0..2.0).contains(x)));
        let mean: f64 = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.05, "mean {mean}");
        assert_ne!(values(8, 3, 0, 1.0), values(8, 3, 1, 1.0));
        assert_ne!(values(8, 3, 0, 1.0), values(8, 4, 0, 1.0));
    }

    /// The same integers `bench/inputs.py`'s `ints(6, 7, 1, 96)` gives
    /// (`bench/test_suite.py` checks the Python side).
    #[test]
    fn known_ints() {
        assert_eq!(ints(6, 7, 1, 96), KNOWN_INTS);
        let v = ints(10_000, 3, 0, 96);
        assert!(v.iter().all(|x| (0..96).contains(x)));
        assert!((0..96).all(|t| v.contains(&t)), "every token id drawn");
        assert!(ints(1000, 3, 0, 1 << 32)
            .iter()
            .all(|x| (0..1 << 32).contains(x)));
    }

    const KNOWN: [u32; 4] = [0xbe95_5063, 0x3ed9_402a, 0x3e83_8386, 0xbdd6_7751];
    const KNOWN_INTS: [i64; 6] = [20, 88, 72, 37, 46, 77];
}
