//! The kernel cache: compiled kernels keyed by group structure, concrete
//! shapes, dtypes and target (and, for stacked launches, by the member
//! groups, how they share buffers and the stack kind); bounded,
//! least-recently-used eviction.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use dvm_isa::KernelKind;

use crate::codegen::{Group, GroupKind, Target, TileOp};
use crate::kernel::{build, BuildError, ReadyKernel};

/// What a cached kernel was built from.
#[derive(Clone, Debug, PartialEq)]
pub enum LaunchKey {
    /// One group.
    Group(Group),
    /// Groups stacked into one kernel of `kind`, with their parameter maps.
    Stack {
        /// Parallel or sequence.
        kind: KernelKind,
        /// Members.
        groups: Vec<Group>,
        /// Per member, the stacked parameter of each of its parameters.
        maps: Vec<Vec<u8>>,
    },
}

/// Hashes a group's structure, shapes, strides, dtypes and constants.
fn fingerprint(group: &Group, target: &Target) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    target.hash(&mut h);
    hash_group(group, &mut h);
    h.finish()
}

/// Hashes a stack: its kind, members and maps.
fn stack_fingerprint(
    kind: KernelKind,
    groups: &[&Group],
    maps: &[Vec<u8>],
    target: &Target,
) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    target.hash(&mut h);
    (kind as u8, groups.len()).hash(&mut h);
    for g in groups {
        hash_group(g, &mut h);
    }
    maps.hash(&mut h);
    h.finish()
}

fn hash_group(group: &Group, h: &mut impl Hasher) {
    match &group.kind {
        GroupKind::Elementwise { shape } => (0u8, shape).hash(h),
        GroupKind::Reduce { shape, axis } => (1u8, shape, axis).hash(h),
        GroupKind::Matmul {
            batch,
            m,
            n,
            k,
            acc,
        } => (2u8, batch, m, n, k, acc).hash(h),
        GroupKind::Gather {
            outer,
            extent,
            n,
            inner,
        } => (3u8, outer, extent, n, inner).hash(h),
    }
    group.inputs.hash(h);
    for (node, dt) in &group.nodes {
        dt.hash(h);
        match node {
            TileOp::Input(i) => (0u8, i).hash(h),
            TileOp::Unary(c, x) => (1u8, c, x).hash(h),
            TileOp::Binary(c, a, b) => (2u8, c, a, b).hash(h),
            TileOp::Scalar(c, x, v) => (3u8, c, x, v.to_bits()).hash(h),
            TileOp::Select(c, a, b) => (4u8, c, a, b).hash(h),
            TileOp::Cast(x) => (5u8, x).hash(h),
            TileOp::Fill(v) => (6u8, v.to_bits()).hash(h),
            TileOp::Reduce(c, x) => (7u8, c, x).hash(h),
            TileOp::Matmul => 8u8.hash(h),
        }
    }
    group.outputs.hash(h);
}

struct Entry {
    key: LaunchKey,
    kernel: Arc<ReadyKernel>,
    last_use: u64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<u64, Vec<Entry>>,
    len: usize,
    clock: u64,
    hits: u64,
    misses: u64,
}

/// A bounded cache of ready kernels, shared between threads.
pub struct KernelCache {
    inner: Mutex<Inner>,
    capacity: usize,
}

/// Cache counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found a kernel.
    pub hits: u64,
    /// Lookups that compiled one.
    pub misses: u64,
    /// Kernels held.
    pub len: usize,
}

impl KernelCache {
    /// A cache holding at most `capacity` kernels (at least one).
    pub fn new(capacity: usize) -> KernelCache {
        KernelCache {
            inner: Mutex::new(Inner::default()),
            capacity: capacity.max(1),
        }
    }

    /// The kernel for `group` on `target`, compiled on a miss. A failed
    /// compilation is returned and nothing is cached.
    ///
    /// # Errors
    /// [`BuildError`] from the compiler.
    pub fn get_or_build(
        &self,
        group: &Group,
        name: &str,
        target: &Target,
    ) -> Result<Arc<ReadyKernel>, BuildError> {
        self.lookup(
            fingerprint(group, target),
            &|k| matches!(k, LaunchKey::Group(g) if g == group),
            || LaunchKey::Group(group.clone()),
            || build(group, name, target),
        )
    }

    /// The stacked kernel of `groups` (see [`crate::stack`]), built on
    /// a miss. A failed build is returned and nothing is cached.
    ///
    /// # Errors
    /// [`BuildError`] from the compiler, verifier or predecoder.
    pub fn get_or_build_stack(
        &self,
        kind: KernelKind,
        groups: &[&Group],
        maps: &[Vec<u8>],
        name: &str,
        target: &Target,
    ) -> Result<Arc<ReadyKernel>, BuildError> {
        let same = |k: &LaunchKey| match k {
            LaunchKey::Stack {
                kind: k2,
                groups: g2,
                maps: m2,
            } => {
                *k2 == kind
                    && m2.as_slice() == maps
                    && g2.len() == groups.len()
                    && g2.iter().zip(groups).all(|(a, b)| a == *b)
            }
            LaunchKey::Group(_) => false,
        };
        self.lookup(
            stack_fingerprint(kind, groups, maps, target),
            &same,
            || LaunchKey::Stack {
                kind,
                groups: groups.iter().map(|g| (*g).clone()).collect(),
                maps: maps.to_vec(),
            },
            || crate::stack::build_stack(kind, groups, maps, name, target),
        )
    }

    fn lookup(
        &self,
        key: u64,
        same: &dyn Fn(&LaunchKey) -> bool,
        make_key: impl FnOnce() -> LaunchKey,
        make: impl FnOnce() -> Result<Arc<ReadyKernel>, BuildError>,
    ) -> Result<Arc<ReadyKernel>, BuildError> {
        {
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner.clock += 1;
            let now = inner.clock;
            let found = inner.map.get_mut(&key).and_then(|bucket| {
                bucket.iter_mut().find(|e| same(&e.key)).map(|e| {
                    e.last_use = now;
                    Arc::clone(&e.kernel)
                })
            });
            if let Some(k) = found {
                inner.hits += 1;
                return Ok(k);
            }
            inner.misses += 1;
        }
        // Compile outside the lock so other threads keep running.
        let kernel = make()?;
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.len >= self.capacity {
            evict_oldest(&mut inner);
        }
        inner.clock += 1;
        let now = inner.clock;
        inner.map.entry(key).or_default().push(Entry {
            key: make_key(),
            kernel: Arc::clone(&kernel),
            last_use: now,
        });
        inner.len += 1;
        Ok(kernel)
    }

    /// Counters.
    pub fn stats(&self) -> CacheStats {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        CacheStats {
            hits: inner.hits,
            misses: inner.misses,
            len: inner.len,
        }
    }
}

fn evict_oldest(inner: &mut Inner) {
    let oldest = inner
        .map
        .iter()
        .flat_map(|(k, b)| b.iter().enumerate().map(move |(i, e)| (e.last_use, *k, i)))
        .min();
    if let Some((_, key, i)) = oldest {
        if let Some(bucket) = inner.map.get_mut(&key) {
            bucket.swap_remove(i);
            if bucket.is_empty() {
                inner.map.remove(&key);
            }
            inner.len -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use dvm_isa::{DType, Opcode};

    use super::*;
    use crate::codegen::View;

    fn neg(n: u64) -> Group {
        let v = View::contiguous(DType::F32, &[n]);
        Group {
            kind: GroupKind::Elementwise { shape: vec![n] },
            inputs: vec![v.clone()],
            nodes: vec![
                (TileOp::Input(0), DType::F32),
                (TileOp::Unary(Opcode::Neg, 0), DType::F32),
            ],
            outputs: vec![(1, v)],
        }
    }

    #[test]
    fn hits_misses_and_lru_eviction() {
        let cache = KernelCache::new(2);
        let t = Target::default();
        let a = cache.get_or_build(&neg(10), "a", &t).unwrap();
        let a2 = cache.get_or_build(&neg(10), "a", &t).unwrap();
        assert!(Arc::ptr_eq(&a, &a2));
        cache.get_or_build(&neg(11), "b", &t).unwrap();
        // Touch 10 so that 11 is the least recently used, then add 12.
        cache.get_or_build(&neg(10), "a", &t).unwrap();
        cache.get_or_build(&neg(12), "c", &t).unwrap();
        let s = cache.stats();
        assert_eq!((s.hits, s.misses, s.len), (2, 3, 2));
        let a3 = cache.get_or_build(&neg(10), "a", &t).unwrap();
        assert!(Arc::ptr_eq(&a, &a3), "the recently used kernel survived");
        cache.get_or_build(&neg(11), "b", &t).unwrap();
        assert_eq!(
            cache.stats().misses,
            4,
            "the least recently used one was evicted"
        );
    }

    #[test]
    fn a_failed_compile_is_not_cached() {
        let cache = KernelCache::new(4);
        let mut bad = neg(10);
        bad.nodes[1].0 = TileOp::Unary(Opcode::Neg, 7);
        assert!(cache.get_or_build(&bad, "bad", &Target::default()).is_err());
        assert_eq!(cache.stats().len, 0);
    }

    #[test]
    fn different_targets_do_not_share_kernels() {
        let cache = KernelCache::new(4);
        let one = Target {
            cores: 1,
            ..Target::default()
        };
        let two = Target {
            cores: 2,
            ..Target::default()
        };
        cache.get_or_build(&neg(100_000), "a", &one).unwrap();
        cache.get_or_build(&neg(100_000), "a", &two).unwrap();
        assert_eq!(cache.stats().misses, 2);
    }
}
