//! The one module that calls zstd's C API directly: a compression context that lives in a
//! workspace allocated once, when a chunk writer is made, so that compressing a chunk never
//! allocates (zstd's `ZSTD_initStaticCCtx`, FORMAT.md §5.4).
//!
//! A context made by `ZSTD_createCCtx` calls the C `malloc`, which in a recorded program is
//! the program's own (the recorder must never call it from its hooks). A static context
//! instead takes its whole memory from the caller, here a `Vec` allocated through Rust's global
//! allocator: in the recorder, its own `mmap`-backed allocator (`recorder/src/alloc.rs`, which
//! maps a block this large directly); in tools, the system allocator. zstd never allocates for
//! a static context: where it would need more memory (a level whose tables do not fit) it
//! returns an error instead (`ZSTD_resetCCtx_internal`: "static cctx : no resize"), and the
//! chunk is then written plain.

use std::ptr::NonNull;

use zstd_safe::zstd_sys as sys;

/// A zstd compression context in a workspace of its own, for one compression level.
pub(crate) struct StaticCCtx {
    /// The context's memory; never read from Rust, so it is left uninitialised (zstd does not
    /// read what it has not written, whatever a static workspace holds). `u64` for the 8-byte
    /// alignment `ZSTD_initStaticCCtx` requires.
    /// Owned here so that it lives as long as the context; never used otherwise.
    _workspace: Vec<u64>,
    /// The context, at the start of `workspace`.
    cctx: NonNull<sys::ZSTD_CCtx>,
}

/// The narrowest hash table (log2 of its entries) a context gets. zstd's fast levels use 2^14
/// entries on chunks of 256 KiB; 2^16 finds enough more matches in the event bytes to make the
/// random-order lock benchmark's chunks about 6% smaller (`zstd -b1 -B256K --zstd=hlog=16` on
/// its events: 4.47 → 4.76×, 4.84 → 5.16× on a second recording), at the same compression
/// speed and with faster decompression (longer matches), for 192 KiB more workspace per
/// context (a 256 KiB table, which stays in the L2 cache).
const MIN_HASH_LOG: u32 = 16;

// SAFETY: the context is plain memory inside `workspace`, owned by this value alone, with no
// thread affinity (zstd contexts may be used from any thread, one at a time: `&mut self`).
unsafe impl Send for StaticCCtx {}

/// `level` clamped to zstd's levels.
fn clamp_level(level: i32) -> i32 {
    level.clamp(zstd_safe::min_c_level(), zstd_safe::max_c_level())
}

/// `Some` when zstd's return `code` is not an error.
fn succeeded(code: usize) -> Option<()> {
    // SAFETY: a pure function of its argument.
    (unsafe { sys::ZSTD_isError(code) } == 0).then_some(())
}

impl StaticCCtx {
    /// A context for `level` (zstd's levels, clamped to those it has) and inputs of at most
    /// `max_src` bytes, which `set_level` may also switch to any faster level (whose tables
    /// are no larger: zstd's negative levels keep level 1's); `None` if its memory cannot be
    /// had.
    pub fn new(level: i32, max_src: usize) -> Option<Self> {
        let level = clamp_level(level);
        // The level's hash table is made `MIN_HASH_LOG` bits wide if it is narrower.
        // SAFETY: a pure function of its arguments (no pointers).
        let widen = unsafe { sys::ZSTD_getCParams(level, 256 << 10, 0) }.hashLog < MIN_HASH_LOG;
        // The workspace one-shot compressions of up to `max_src` bytes need (zstd's advice for
        // inputs of a known bound, tighter than `ZSTD_estimateCCtxSize`, which assumes any
        // size): zstd picks its parameters from the input's size in tiers (up to 16 KiB,
        // 128 KiB, 256 KiB, larger), so the largest over the tiers up to `max_src`, each with
        // the hash table widened (zstd narrows it again for a small input, never widens it).
        let size = [16 << 10, 128 << 10, 256 << 10, max_src]
            .into_iter()
            .map(|s: usize| s.min(max_src))
            .map(|s| {
                // SAFETY: pure functions of their arguments (no pointers).
                unsafe {
                    let mut params = sys::ZSTD_getCParams(level, s as u64, 0);
                    if widen {
                        params.hashLog = params.hashLog.max(MIN_HASH_LOG);
                    }
                    sys::ZSTD_estimateCCtxSize_usingCParams(params)
                }
            })
            .max()
            .unwrap_or(0);
        if size == 0 {
            return None;
        }
        succeeded(size)?;
        let mut workspace: Vec<u64> = Vec::new();
        workspace.try_reserve_exact(size.div_ceil(8)).ok()?;
        let bytes = workspace.capacity() * 8;
        // SAFETY: the pointer is 8-byte aligned and `bytes` bytes behind it are allocated and
        // owned by `workspace`, which outlives the context (both are fields of this value, and
        // the heap block does not move when the value does). Nothing else touches them.
        let cctx = unsafe { sys::ZSTD_initStaticCCtx(workspace.as_mut_ptr().cast(), bytes) };
        let cctx = NonNull::new(cctx)?;
        // The parameters stay with the context for every compression (`ZSTD_compress2` resets
        // the session, not the parameters). A static context starts with every parameter zero
        // (no content size in the frame, for one): reset to zstd's defaults first. Neither
        // allocates.
        // SAFETY: `cctx` is the live context just made in `workspace`.
        succeeded(unsafe {
            sys::ZSTD_CCtx_reset(
                cctx.as_ptr(),
                sys::ZSTD_ResetDirective::ZSTD_reset_parameters,
            )
        })?;
        let params = [
            (sys::ZSTD_cParameter::ZSTD_c_compressionLevel, level),
            (sys::ZSTD_cParameter::ZSTD_c_hashLog, MIN_HASH_LOG as i32),
        ];
        for &(param, value) in &params[..1 + usize::from(widen)] {
            // SAFETY: `cctx` is the live context just made in `workspace`.
            succeeded(unsafe { sys::ZSTD_CCtx_setParameter(cctx.as_ptr(), param, value) })?;
        }
        Some(Self {
            _workspace: workspace,
            cctx,
        })
    }

    /// Compresses the next frames at `level` (clamped as in `new`), at most the level the
    /// context was made for (its workspace holds no larger tables; a larger one would make
    /// every compression fail). The hash table's width stays. `None` if zstd refused, the
    /// level then unchanged.
    pub fn set_level(&mut self, level: i32) -> Option<()> {
        // SAFETY: `cctx` is a live context in `self._workspace` (see `new`), used by nobody
        // else (`&mut self`); setting a parameter between frames allocates nothing.
        succeeded(unsafe {
            sys::ZSTD_CCtx_setParameter(
                self.cctx.as_ptr(),
                sys::ZSTD_cParameter::ZSTD_c_compressionLevel,
                clamp_level(level),
            )
        })
    }

    /// Compresses `src` as one zstd frame (content size in its header, no checksum) into
    /// `dst`; the frame's length, or `None` if it did not fit or zstd refused.
    pub fn compress(&mut self, dst: &mut [u8], src: &[u8]) -> Option<usize> {
        // SAFETY: `cctx` is a live context in `self._workspace` (see `new`), used by nobody else
        // (`&mut self`); `dst` and `src` are valid for their lengths and do not overlap (one is
        // borrowed mutably). `ZSTD_compress2` writes at most `dst.len()` bytes and reports a
        // full `dst` as an error; it compresses in one shot from `src` to `dst` (stable
        // buffers: no streaming buffers to make), and on a static context it allocates nothing.
        let n = unsafe {
            sys::ZSTD_compress2(
                self.cctx.as_ptr(),
                dst.as_mut_ptr().cast(),
                dst.len(),
                src.as_ptr().cast(),
                src.len(),
            )
        };
        succeeded(n).map(|()| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compresses_into_its_workspace_and_round_trips() {
        let src: Vec<u8> = (0..100_000u32)
            .map(|i| ((i % 251) ^ (i / 977)) as u8)
            .collect();
        for level in [-1, 1, 2, 3, 6] {
            let mut c = StaticCCtx::new(level, src.len()).expect("a context");
            let mut dst = vec![0; zstd_safe::compress_bound(src.len())];
            // Inputs of every size tier up to the one it was made for, in turn.
            for len in [100_000, 1000, 20_000, 0, 100_000] {
                let n = c.compress(&mut dst, &src[..len]).expect("compresses");
                let mut back = vec![0u8; len + 1];
                // One frame that says its content size (FORMAT.md §5.3).
                let said = zstd_safe::get_frame_content_size(&dst[..n]);
                assert!(
                    matches!(said, Ok(Some(size)) if size == len as u64),
                    "level {level}, {len} bytes: {said:?}"
                );
                let got = zstd_safe::decompress(&mut back[..], &dst[..n]);
                assert_eq!(got, Ok(len), "level {level}");
                assert_eq!(&back[..len], &src[..len]);
            }
            // Too small an output is an error, not an overflow.
            assert_eq!(c.compress(&mut dst[..8], &src), None);
        }
    }

    #[test]
    fn a_fast_level_gets_the_wider_hash_table() {
        for (level, want) in [(1, MIN_HASH_LOG as i32), (19, 0)] {
            let c = StaticCCtx::new(level, 256 << 10).expect("a context");
            let mut got = -1;
            // SAFETY: `c.cctx` is a live context; `got` is a valid place for the value.
            let r = unsafe {
                sys::ZSTD_CCtx_getParameter(
                    c.cctx.as_ptr(),
                    sys::ZSTD_cParameter::ZSTD_c_hashLog,
                    &mut got,
                )
            };
            assert_eq!(succeeded(r), Some(()));
            assert_eq!(got, want, "level {level}");
        }
    }
}
