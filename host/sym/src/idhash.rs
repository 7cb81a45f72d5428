//! A fast hasher for keys that are small integers, addresses or hashes
//! already: the fuser's memos, the decision cache, the graph's name index
//! and the symbol table. SipHash's defence against chosen keys buys nothing
//! for them.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A multiply-rotate over the key's words, the high half folded down at
/// the end so that keys whose low bits never vary (aligned addresses)
/// still spread over a table's buckets.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64);
    }
}

/// A set of small integer keys.
pub type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

/// A map of small integer keys.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
