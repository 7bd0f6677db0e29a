//! Scratch buffers for bulk loads, backed by transparent huge pages.
//!
//! # Why
//!
//! A bulk load of a million pairs parses them into vectors of a hundred
//! megabytes or more (the words, the pairs, the sort keys, the groups), uses
//! them for one call and frees them. Each 4 KiB page of such a vector costs a
//! page fault on first touch, and after the hash sort the walk reads them in
//! hash order, so almost every read also misses the TLB. In `perf`, first
//! touches were 27% of a 1M-pair load of the wide shape, and the reads just
//! after each prefetch of a pair or word stalled on page walks.
//!
//! A vector made by [`scratch_vec`] asks the kernel (`madvise(MADV_HUGEPAGE)`)
//! to back it with 2 MiB pages when it is at least that large: 512 times fewer
//! faults and TLB entries. The advice changes neither the contents nor the
//! validity of the memory, only how the kernel maps it, and the kernel may
//! ignore it (transparent huge pages off, or none free), which costs nothing.
//! Only scratch is advised: the trie's own nodes come from the allocator in
//! small pieces and live on.

/// Transparent huge page size on x86-64 and aarch64 Linux (4 KiB base pages).
#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
const HUGE_PAGE: usize = 2 << 20;

/// An empty vector with room for `capacity` items, advised to huge pages when
/// its buffer spans at least one whole huge page.
pub(crate) fn scratch_vec<T>(capacity: usize) -> Vec<T> {
    let buffer = Vec::with_capacity(capacity);
    advise_huge_pages(buffer.as_ptr(), buffer.capacity().saturating_mul(size_of::<T>()));
    buffer
}

#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
fn advise_huge_pages<T>(start: *const T, bytes: usize) {
    /// `MADV_HUGEPAGE` of `<sys/mman.h>` on these architectures.
    const MADV_HUGEPAGE: std::ffi::c_int = 14;
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: std::ffi::c_int) -> std::ffi::c_int;
    }
    let start = start as usize;
    // Only the whole huge pages inside the buffer: advice never reaches memory the buffer does not own.
    let first = start.next_multiple_of(HUGE_PAGE);
    let end = (start.saturating_add(bytes) / HUGE_PAGE) * HUGE_PAGE;
    if end > first {
        // SAFETY: [first, end) lies inside the buffer `start` points to (rounded inwards to whole huge
        // pages, so page-aligned as madvise requires), which this vector owns and nothing else maps.
        // MADV_HUGEPAGE only sets the kernel's paging policy for the range: it reads and writes no memory
        // and leaves every byte's value and validity as it was. A failure (THP not built into the kernel)
        // is ignored: the memory is then simply backed by base pages.
        unsafe {
            madvise(first as *mut std::ffi::c_void, end - first, MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
fn advise_huge_pages<T>(_start: *const T, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use super::scratch_vec;

    #[test]
    fn scratch_vectors_hold_what_they_are_given() {
        for capacity in [0, 1, 1000, 3 << 20] {
            let mut buffer: Vec<u64> = scratch_vec(capacity);
            assert!(buffer.capacity() >= capacity);
            buffer.extend(0..capacity as u64);
            assert!(buffer.iter().enumerate().all(|(at, &value)| value == at as u64));
        }
    }
}
