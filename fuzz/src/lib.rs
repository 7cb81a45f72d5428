//! What the fuzz targets share: memory that ends at an inaccessible page,
//! and the whole device path for module bytes (parse, verify, predecode,
//! bind, run) on buffers of exactly the sizes the launch check accepts.
//!
//! `dvm-device` is built with `extra-checks` here: a handler or a
//! global-memory box that a verified kernel should never produce panics
//! ("verifier gap") instead of being skipped, and an access past a buffer
//! or the UB hits the guard page (a crash under AddressSanitizer or not).

use dvm_device::{run_all_blocks_sequentially, GmBuf, KernelArgs, Program};
use dvm_isa::{verify_kernel, DeviceLimits, Module, VerifiedKernel};

const PAGE: usize = 4096;

/// A mapping whose last page is inaccessible, and a slice of `len` bytes
/// that ends right before that page (or, for [`Guarded::ub`], within 63
/// bytes of it at a 64-byte aligned start).
pub struct Guarded {
    map: *mut u8,
    map_len: usize,
    start: usize,
    len: usize,
}

impl Guarded {
    /// `len` bytes ending at the guard page, filled from `fill`.
    ///
    /// # Panics
    /// When the mapping fails (out of memory): the fuzzer reports it.
    pub fn gm(len: usize, fill: &[u8]) -> Guarded {
        let mut g = Guarded::map(len);
        g.start = g.map_len - PAGE - len;
        g.len = len;
        let bytes = g.bytes_mut();
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = fill.get(i % fill.len().max(1)).copied().unwrap_or(0);
        }
        g
    }

    /// A UB of `len` bytes at a 64-byte aligned start, ending at most 63
    /// bytes before the guard page.
    pub fn ub(len: usize) -> Guarded {
        let mut g = Guarded::map(len + 64);
        g.start = (g.map_len - PAGE - len) & !63;
        g.len = len;
        g
    }

    fn map(len: usize) -> Guarded {
        let map_len = len.div_ceil(PAGE) * PAGE + 2 * PAGE;
        // SAFETY: an anonymous private mapping of `map_len` bytes at an
        // address of the kernel's choosing; the result is checked below.
        let map = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(map != libc::MAP_FAILED, "mmap of {map_len} bytes failed");
        let map = map.cast::<u8>();
        // SAFETY: the last page lies inside the mapping just made.
        let r = unsafe { libc::mprotect(map.add(map_len - PAGE).cast(), PAGE, libc::PROT_NONE) };
        assert_eq!(r, 0, "mprotect of the guard page failed");
        Guarded {
            map,
            map_len,
            start: 0,
            len: 0,
        }
    }

    /// The slice.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `start + len` is at most the guard page's start, inside
        // the readable and writable part of the mapping this owns.
        unsafe { core::slice::from_raw_parts_mut(self.map.add(self.start), self.len) }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Guarded::map`, unmapped once; no
        // slice of it outlives `self` (they borrow it).
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

/// Most bytes one buffer or the UB may have in a fuzz run: a kernel that
/// asks for more is skipped (its bounds are the verifier's arithmetic,
/// which the other targets exercise).
pub const MAX_BUFFER: u64 = 64 << 20;

/// Most tiles × instructions one fuzz run executes (the device's budget is
/// far larger; a fuzz input should take milliseconds).
pub const MAX_WORK: u64 = 1 << 20;

/// Verifies every kernel of `bytes` and runs each that verifies on
/// guard-paged buffers of exactly its required sizes, filled from `fill`,
/// on `blocks` blocks one after the other. Errors are fine (a malformed
/// module, a launch the executor refuses); a panic or a memory fault is a
/// bug.
pub fn run_module(bytes: &[u8], fill: &[u8], blocks: u32) {
    let Ok(module) = Module::parse(bytes) else {
        return;
    };
    for k in 0..module.kernel_count() {
        if let Ok(v) = verify_kernel(&module, k, &DeviceLimits::DEFAULT) {
            run_verified(&v, fill, blocks);
        }
    }
}

/// Runs one verified kernel as [`run_module`] does.
pub fn run_verified(v: &VerifiedKernel<'_>, fill: &[u8], blocks: u32) {
    let work: u64 = (0..v.body_count())
        .map(|b| u64::from(v.tiles(b)) * v.kernel().body_code(b).map_or(0, |c| c.len() as u64))
        .sum();
    let sizes: Vec<u64> = (0..v.param_count()).map(|i| v.required_bytes(i)).collect();
    if work > MAX_WORK || sizes.iter().any(|&n| n > MAX_BUFFER) {
        return;
    }
    let mut slot = Box::<Program>::new_uninit();
    let program = Program::init(&mut slot);
    if program.predecode(v).is_err() {
        return;
    }
    let mut bufs: Vec<Guarded> = sizes
        .iter()
        .map(|&n| Guarded::gm(n as usize, fill))
        .collect();
    let mut ub = Guarded::ub(v.ub_bytes() as usize);
    let Ok(args) = KernelArgs::new(
        v,
        bufs.iter_mut()
            .map(|b| GmBuf::from_mut_slice(b.bytes_mut())),
    ) else {
        return;
    };
    let _ = run_all_blocks_sequentially(program, &args, blocks, ub.bytes_mut());
}

pub mod seeds;
