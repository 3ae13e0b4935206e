//! The global allocator: mimalloc, asked the way its own C API is meant to
//! be asked.
//!
//! mimalloc rather than the system allocator: requests allocate and free
//! small objects on one thread and drop them on another (writer, publisher,
//! connection tasks), where glibc's arenas spent a measurable share of the
//! append path (see `loadtest/RESULTS.md`); the edge's forwarding spent 7 %
//! of its samples in glibc's malloc and free. Both binaries use it (feature
//! `mimalloc`); the libraries and their tests do not need it.
//!
//! The `mimalloc` crate's allocator passes every request to
//! `mi_malloc_aligned`, whose fast path covers only blocks up to 1 KiB; a
//! larger block (hyper's 8 KiB read buffers, one per request) takes the
//! generic aligned path, which over-allocates and marks the page for aligned
//! frees: ~500 instructions per append (callgrind). An alignment the plain
//! calls already guarantee goes to `mi_malloc` / `mi_zalloc` / `mi_realloc`
//! instead, as the system allocator shim in `std` does with `malloc`.
//!
//! One of the workspace's two `unsafe` modules (the other asks for the
//! writer thread's time slice, `origin/src/store/scheduling.rs`): a `GlobalAlloc`
//! cannot be written without it.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// What `mi_malloc` guarantees for every block of at least this size
/// (`MI_MAX_ALIGN_SIZE`); smaller blocks are aligned to their size class,
/// which a `Layout` whose alignment is at most its size never exceeds.
const PLAIN_ALIGN: usize = 16;

pub struct Mimalloc;

fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

// SAFETY: every pointer returned comes from mimalloc with at least the
// layout's size and alignment (the plain calls only when their guarantee
// covers the alignment, the aligned calls otherwise), or is null on failure;
// `mi_free` and `mi_realloc*` accept any pointer mimalloc returned,
// whichever call made it.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            mi::mi_malloc(layout.size()).cast()
        } else {
            mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            mi::mi_zalloc(layout.size()).cast()
        } else {
            mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi::mi_free(ptr.cast::<c_void>())
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain(layout.align(), new_size) {
            mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
        } else {
            mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_have_their_layouts_alignment_and_keep_their_bytes() {
        let a = Mimalloc;
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1usize, 7, 8, 16, 24, 100, 1024, 1025, 8192, 70_000, 1 << 20] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: a non-zero layout; the block is freed with it.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    p.write_bytes(0xab, size);
                    let grown = a.realloc(p, layout, size * 2);
                    assert_eq!(grown as usize % align, 0, "grown {size} align {align}");
                    assert!((0..size).all(|i| *grown.add(i) == 0xab));
                    let grown_layout = Layout::from_size_align(size * 2, align).unwrap();
                    a.dealloc(grown, grown_layout);
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0);
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
