//! A global allocator that counts the bytes it hands out and takes back, to
//! measure memory per key (not estimate it).
//!
//! Only the `footprint` bench installs it (`#[global_allocator]`), so the
//! timing benches pay nothing for the counting. The figures are the bytes
//! *requested*: the allocator's own per-block overhead (malloc headers,
//! size-class rounding) is not included, for ratelab and governor alike.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// [`System`], counting every byte allocated and freed.
#[derive(Debug)]
pub struct CountingAlloc {
    allocated: AtomicU64,
    freed: AtomicU64,
}

impl CountingAlloc {
    /// A counter at zero.
    pub const fn new() -> Self {
        CountingAlloc {
            allocated: AtomicU64::new(0),
            freed: AtomicU64::new(0),
        }
    }

    /// Bytes allocated and not yet freed, since the process started.
    pub fn live_bytes(&self) -> u64 {
        // Read `freed` first: a free between the two loads can only make the
        // figure larger, never wrap it below zero.
        let freed = self.freed.load(Ordering::SeqCst);
        self.allocated.load(Ordering::SeqCst).saturating_sub(freed)
    }

    fn add(&self, bytes: usize) {
        self.allocated.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    fn sub(&self, bytes: usize) {
        self.freed.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

impl Default for CountingAlloc {
    fn default() -> Self {
        Self::new()
    }
}

// A `GlobalAlloc` impl is `unsafe` by definition: the contract is that the
// returned blocks are valid for the layout. Every call is forwarded unchanged
// to `System`, which upholds it; the counters are plain atomics.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is; the caller upholds `alloc`'s contract.
        let block = unsafe { System.alloc(layout) };
        if !block.is_null() {
            self.add(layout.size());
        }
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is; the caller upholds `alloc_zeroed`'s contract.
        let block = unsafe { System.alloc_zeroed(layout) };
        if !block.is_null() {
            self.add(layout.size());
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is; `block` came from this allocator, which
        // got it from `System`, with this layout.
        unsafe { System.dealloc(block, layout) };
        self.sub(layout.size());
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is; the caller upholds `realloc`'s contract.
        let moved = unsafe { System.realloc(block, layout, new_size) };
        if !moved.is_null() {
            self.sub(layout.size());
            self.add(new_size);
        }
        moved
    }
}
