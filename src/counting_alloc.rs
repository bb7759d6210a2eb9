//! A global allocator that counts heap allocations, so "no allocation per
//! step" is measured rather than asserted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Heap activity counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocCounts {
    /// `alloc`, `alloc_zeroed` and `realloc` calls.
    pub allocations: u64,
    /// `dealloc` calls.
    pub deallocations: u64,
    /// Bytes requested by those allocations.
    pub bytes: u64,
}

impl std::ops::Sub for AllocCounts {
    type Output = AllocCounts;
    fn sub(self, rhs: AllocCounts) -> AllocCounts {
        AllocCounts {
            allocations: self.allocations - rhs.allocations,
            deallocations: self.deallocations - rhs.deallocations,
            bytes: self.bytes - rhs.bytes,
        }
    }
}

/// The system allocator, counting every call per thread and in total.
///
/// Install it in a binary or test, then read the counters around the code
/// under test:
///
/// ```no_run
/// use tensor_arena::CountingAllocator;
/// #[global_allocator]
/// static ALLOC: CountingAllocator = CountingAllocator;
///
/// let before = CountingAllocator::thread_counts();
/// let v = vec![1u8; 100];
/// assert_eq!((CountingAllocator::thread_counts() - before).allocations, 1);
/// # drop(v);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAllocator;

thread_local! {
    static THREAD: Cell<AllocCounts> = const {
        Cell::new(AllocCounts { allocations: 0, deallocations: 0, bytes: 0 })
    };
}
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static DEALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

impl CountingAllocator {
    /// Counts of the calling thread (zero unless this allocator is the
    /// global allocator).
    pub fn thread_counts() -> AllocCounts {
        THREAD.try_with(Cell::get).unwrap_or_default()
    }

    /// Counts of the whole process.
    pub fn global_counts() -> AllocCounts {
        AllocCounts {
            allocations: ALLOCATIONS.load(Ordering::Relaxed),
            deallocations: DEALLOCATIONS.load(Ordering::Relaxed),
            bytes: BYTES.load(Ordering::Relaxed),
        }
    }

    fn count_alloc(size: usize) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(size as u64, Ordering::Relaxed);
        // During thread teardown the slot may be gone; the global count
        // still sees the call.
        let _ = THREAD.try_with(|c| {
            let mut v = c.get();
            v.allocations += 1;
            v.bytes += size as u64;
            c.set(v);
        });
    }

    fn count_dealloc() {
        DEALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        let _ = THREAD.try_with(|c| {
            let mut v = c.get();
            v.deallocations += 1;
            c.set(v);
        });
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees carry over; the counting touches only
// atomics and a const-initialised thread-local `Cell` without destructor,
// neither of which allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::count_alloc(layout.size());
        // SAFETY: forwarded contract of `GlobalAlloc::alloc`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::count_alloc(layout.size());
        // SAFETY: forwarded contract of `GlobalAlloc::alloc_zeroed`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        Self::count_dealloc();
        // SAFETY: forwarded contract of `GlobalAlloc::dealloc`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::count_alloc(new_size);
        // SAFETY: forwarded contract of `GlobalAlloc::realloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
