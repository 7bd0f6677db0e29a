//! A cache hint shared by the CS-trie's walks and the frozen matcher's: a leaf module.

/// A hint that the cache line at `address` will soon be read (x86-64 only;
/// elsewhere nothing). Any address will do, even a dangling or wild one.
#[inline(always)]
pub(crate) fn prefetch<T>(address: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 only hints the cache: it reads nothing architecturally and never
    // faults, whatever the address, so no validity of `address` is needed.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}
