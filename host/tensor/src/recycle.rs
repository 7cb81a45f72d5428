//! Recycled tensor memory: a bounded pool of 8-byte aligned buffers that a
//! runtime hands out as device buffers and output tensors, and that come
//! back to it when they are dropped.
//!
//! A call that allocates its outputs fresh pays for the allocation twice:
//! the allocator's zeroing (or the kernel's page faults on fresh pages) and
//! the dirty cache lines that zeroing leaves behind. A loop that calls a
//! graph and drops its outputs before the next call gets the same memory
//! back instead, already faulted in and still warm in the caches.
//!
//! A recycled buffer holds whatever its previous user wrote: it is for
//! memory that is overwritten in full before anything reads it (the
//! outputs and temporaries of a kernel launch). In builds with debug
//! assertions, a reused buffer is filled with the byte [`POISON`] first, so
//! that a kernel that leaves part of its output unwritten shows up in the
//! tests as wrong values, not as a stale copy of the right ones.

use std::sync::{Arc, Mutex, Weak};

use dvm_isa::DType;
use zerocopy::IntoBytes;

use crate::tensor::{byte_len, Storage};
use crate::{Tensor, TensorError};

/// The byte a reused buffer is filled with in builds with debug assertions.
pub const POISON: u8 = 0xA5;

/// A bounded pool of 8-byte aligned buffers (cheap to clone: clones share
/// the pool).
///
/// [`BufferPool::take`] hands out a buffer of at least the size asked for,
/// reusing a free one of up to twice that size, else allocating a zeroed
/// one; [`BufferPool::give`] takes one back while the pool holds less than
/// its bound. Tensors from [`BufferPool::tensor`] give their memory back
/// when dropped (while the pool exists; afterwards it is freed).
#[derive(Clone)]
pub struct BufferPool {
    inner: Arc<Inner>,
}

/// The free buffers and what they hold in all.
pub(crate) struct Inner {
    free: Mutex<Free>,
    max_bytes: usize,
    /// Called on each freshly allocated buffer (not on reused ones).
    on_fresh: fn(&mut [u64]),
}

#[derive(Default)]
struct Free {
    bufs: Vec<Vec<u64>>,
    bytes: usize,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let free = self.inner.lock();
        f.debug_struct("BufferPool")
            .field("free_buffers", &free.bufs.len())
            .field("free_bytes", &free.bytes)
            .field("max_bytes", &self.inner.max_bytes)
            .finish()
    }
}

impl BufferPool {
    /// A pool that keeps at most `max_bytes` of free buffers.
    pub fn new(max_bytes: usize) -> BufferPool {
        BufferPool::with_fresh_hook(max_bytes, |_| {})
    }

    /// [`BufferPool::new`] that calls `on_fresh` on every freshly allocated
    /// (zeroed) buffer before handing it out: a runtime faults large ones
    /// in there, so that a kernel does not stall on first-touch faults.
    pub fn with_fresh_hook(max_bytes: usize, on_fresh: fn(&mut [u64])) -> BufferPool {
        BufferPool {
            inner: Arc::new(Inner {
                free: Mutex::default(),
                max_bytes,
                on_fresh,
            }),
        }
    }

    /// A buffer of exactly `words` 64-bit words: a free one of up to twice
    /// that capacity (its contents those of its previous user, or
    /// [`POISON`] in builds with debug assertions), else a zeroed one;
    /// `None` when the allocation fails.
    pub fn take(&self, words: usize) -> Option<Vec<u64>> {
        let reused = {
            let mut free = self.inner.lock();
            let best = free
                .bufs
                .iter()
                .enumerate()
                .filter(|(_, b)| b.capacity() >= words && b.capacity() <= 2 * words.max(1))
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i);
            best.map(|i| {
                let b = free.bufs.swap_remove(i);
                free.bytes -= b.capacity() * 8;
                b
            })
        };
        match reused {
            Some(mut b) => {
                if cfg!(debug_assertions) {
                    b.clear();
                    b.resize(words, u64::from_ne_bytes([POISON; 8]));
                } else if b.len() >= words {
                    b.truncate(words);
                } else {
                    b.resize(words, 0);
                }
                Some(b)
            }
            None => {
                let mut b = <u64 as zerocopy::FromZeros>::new_vec_zeroed(words).ok()?;
                (self.inner.on_fresh)(&mut b);
                Some(b)
            }
        }
    }

    /// Takes `buf` back for reuse, unless the pool would then hold more
    /// than its bound (the smallest free buffers are dropped first).
    pub fn give(&self, buf: Vec<u64>) {
        self.inner.give(buf);
    }

    /// A `dtype` tensor of `shape` whose memory comes from this pool and
    /// returns to it when the tensor is dropped. Its element bytes are
    /// unspecified (those of the memory's previous user): for outputs that
    /// a kernel overwrites in full. The bytes past the last element, up to
    /// the next multiple of 8, are zero, as in every tensor.
    ///
    /// # Errors
    /// [`TensorError::TooLarge`] if the shape's byte size overflows or
    /// cannot be allocated.
    pub fn tensor(&self, dtype: DType, shape: &[u64]) -> Result<Tensor, TensorError> {
        let (_, len) = byte_len(dtype, shape)?;
        let mut words = self
            .take(len.div_ceil(8))
            .ok_or_else(|| TensorError::TooLarge {
                shape: shape.to_vec(),
            })?;
        // The bytes past the last element are zero in every tensor.
        words.as_mut_bytes()[len..].fill(0);
        let storage = Storage::pooled(words, len, Arc::downgrade(&self.inner));
        Ok(Tensor::from_storage(dtype, shape.to_vec(), storage))
    }

    /// Bytes of the free buffers the pool holds.
    pub fn free_bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Free> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn give(&self, buf: Vec<u64>) {
        let bytes = buf.capacity() * 8;
        if bytes == 0 || bytes > self.max_bytes {
            return;
        }
        let mut free = self.lock();
        free.bufs.push(buf);
        free.bytes += bytes;
        if free.bytes > self.max_bytes {
            free.bufs.sort_by_key(|b| std::cmp::Reverse(b.capacity()));
            while free.bytes > self.max_bytes {
                match free.bufs.pop() {
                    Some(b) => free.bytes -= b.capacity() * 8,
                    None => break,
                }
            }
        }
    }
}

/// Where a tensor's memory goes when it is dropped.
pub(crate) type Home = Weak<Inner>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_tensor_gives_its_memory_back() {
        let pool = BufferPool::new(1 << 20);
        let t = pool.tensor(DType::F32, &[4, 5]).unwrap();
        assert_eq!(t.bytes().len(), 80);
        let ptr = t.bytes().as_ptr();
        assert_eq!(pool.free_bytes(), 0);
        drop(t);
        assert_eq!(pool.free_bytes(), 80);
        // The same size again gets the same memory.
        let t = pool.tensor(DType::F32, &[20]).unwrap();
        assert_eq!(t.bytes().as_ptr(), ptr);
        assert_eq!(pool.free_bytes(), 0);
        if cfg!(debug_assertions) {
            assert!(t.bytes().iter().all(|&b| b == POISON));
        }
    }

    #[test]
    fn the_bytes_past_the_elements_are_zero_and_equality_ignores_the_pool() {
        let pool = BufferPool::new(1 << 20);
        drop(pool.tensor(DType::I8, &[16]).unwrap());
        // 13 bytes in a reused 16-byte buffer: bytes 13..16 are zero.
        let mut t = pool.tensor(DType::I8, &[13]).unwrap();
        t.bytes_mut().fill(1);
        let plain = Tensor::new(DType::I8, vec![13], vec![1; 13]).unwrap();
        assert_eq!(t, plain);
        let copy = t.clone();
        drop(t);
        assert_eq!(pool.free_bytes(), 16);
        // A clone has memory of its own: dropping it gives nothing back.
        drop(copy);
        assert_eq!(pool.free_bytes(), 16);
    }

    #[test]
    fn sizes_reuse_up_to_twice_and_the_bound_holds() {
        let pool = BufferPool::new(1000);
        pool.give(vec![0u64; 50]); // 400 bytes
        assert_eq!(pool.free_bytes(), 400);
        // 20 words: a 50-word buffer is more than twice as large.
        let small = pool.take(20).unwrap();
        assert_eq!((small.len(), pool.free_bytes()), (20, 400));
        // 30 words: reused, truncated.
        let b = pool.take(30).unwrap();
        assert_eq!((b.len(), b.capacity(), pool.free_bytes()), (30, 50, 0));
        pool.give(b);
        pool.give(small);
        pool.give(vec![0u64; 60]); // 480: over 1000 in all, the smallest go
        assert!(pool.free_bytes() <= 1000);
        assert_eq!(pool.free_bytes(), 880);
        // A buffer beyond the bound is never kept.
        pool.give(vec![0u64; 200]);
        assert_eq!(pool.free_bytes(), 880);
    }

    #[test]
    fn a_tensor_outliving_its_pool_frees_its_memory() {
        let pool = BufferPool::new(1 << 20);
        let t = pool.tensor(DType::F32, &[8]).unwrap();
        drop(pool);
        assert_eq!(t.bytes().len(), 32);
        drop(t);
    }

    #[test]
    fn an_oversized_shape_is_an_error() {
        let pool = BufferPool::new(1 << 20);
        assert!(matches!(
            pool.tensor(DType::F32, &[u64::MAX, 2]),
            Err(TensorError::TooLarge { .. })
        ));
    }
}
