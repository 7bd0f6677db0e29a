//! `AtomicArc<T>`: an atomic, nullable slot holding one strong count of an
//! `Arc<T>`, read under a `crossbeam_epoch` guard (loom's stand-in for it
//! under `--cfg loom`: see `sync.rs`).
//!
//! This is the only place in the CS-trie that touches raw pointers. The rule
//! that makes it sound: a slot's strong count is released only through
//! `Guard::defer` when the slot is overwritten (or in `Drop`, which needs
//! `&mut self`, i.e. nobody can be reading the slot). So a pointer loaded
//! under a pinned guard stays valid until that guard is dropped, and while it
//! is valid it may be upgraded to a new `Arc` by bumping the strong count.
//! Sharing a value between several slots (snapshots share C-nodes between
//! generations) is then plain reference counting.

use std::marker::PhantomData;
use std::ops::Deref;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use super::sync::epoch::Guard;
use super::sync::{self, AtomicPtr, Ordering};

/// An atomic `Option<Arc<T>>`.
pub(crate) struct AtomicArc<T> {
    /// Null, or a pointer obtained from `Arc::into_raw` for which this slot
    /// owns exactly one strong count.
    ptr: AtomicPtr<T>,
    /// Makes the slot `Send`/`Sync` exactly when `Arc<T>` is, and tells
    /// drop-check that the slot owns an `Arc<T>`.
    owns: PhantomData<Arc<T>>,
}

/// A value loaded from an [`AtomicArc`], valid while the guard `'g` is pinned.
pub(crate) struct Guarded<'g, T> {
    /// Invariant: points into a live `Arc<T>` allocation whose strong count
    /// cannot reach zero before `'g` ends (see the module docs).
    ptr: NonNull<T>,
    guard: PhantomData<&'g T>,
}

impl<T> Clone for Guarded<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Guarded<'_, T> {}

impl<'g, T> Guarded<'g, T> {
    /// The reference, for as long as the guard lives.
    pub(crate) fn get(self) -> &'g T {
        // SAFETY: by the invariant on `ptr`, the allocation outlives `'g`,
        // and values behind the slot are never mutated except through
        // atomics (shared references only).
        unsafe { self.ptr.as_ref() }
    }

    /// A new owned `Arc` to the same value (bumps the strong count).
    pub(crate) fn to_arc(self) -> Arc<T> {
        let raw = self.ptr.as_ptr() as *const T;
        // SAFETY: `raw` came from `Arc::into_raw` and its strong count is at
        // least one until `'g` ends (invariant on `ptr`), so incrementing it
        // and materialising one more `Arc` is sound.
        unsafe {
            Arc::increment_strong_count(raw);
            Arc::from_raw(raw)
        }
    }

    /// The address, for identity comparisons.
    pub(crate) fn as_ptr(self) -> *const T {
        self.ptr.as_ptr()
    }
}

impl<T> Deref for Guarded<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: as in `get`.
        unsafe { self.ptr.as_ref() }
    }
}

fn into_raw<T>(value: Option<Arc<T>>) -> *mut T {
    value.map_or(ptr::null_mut(), |arc| Arc::into_raw(arc) as *mut T)
}

impl<T: Send + Sync + 'static> AtomicArc<T> {
    pub(crate) fn new(value: Option<Arc<T>>) -> Self {
        AtomicArc {
            ptr: AtomicPtr::new(into_raw(value)),
            owns: PhantomData,
        }
    }

    /// The current value. The result borrows both the slot and the guard:
    /// the slot's container must outlive it too, since dropping the container
    /// releases the slot's count immediately. Acquire pairs with the Release of the CAS that
    /// published it, so its (immutable) contents are visible.
    pub(crate) fn load<'g>(&'g self, _guard: &'g Guard) -> Option<Guarded<'g, T>> {
        NonNull::new(self.ptr.load(Ordering::Acquire)).map(|ptr| Guarded {
            ptr,
            guard: PhantomData,
        })
    }

    /// Replace `current` (compared by address) with `new`. On success the
    /// slot's count on the old value is released once every thread pinned now
    /// has unpinned, and the new value is returned as seen under `guard`; on
    /// failure `new` is handed back untouched.
    pub(crate) fn compare_exchange<'g>(
        &'g self,
        current: Option<Guarded<'_, T>>,
        new: Option<Arc<T>>,
        guard: &'g Guard,
    ) -> Result<Option<Guarded<'g, T>>, Option<Arc<T>>> {
        let current = current.map_or(ptr::null_mut(), |value| value.as_ptr() as *mut T);
        let new = into_raw(new);
        match self
            .ptr
            .compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                if !current.is_null() {
                    let retired = current as usize;
                    guard.defer(move || {
                        // SAFETY: `retired` is the count this slot owned on
                        // the value it no longer holds; the epoch guarantees
                        // every reader that could have loaded it has unpinned.
                        drop(unsafe { Arc::from_raw(retired as *const T) });
                    });
                }
                Ok(NonNull::new(new).map(|ptr| Guarded {
                    ptr,
                    guard: PhantomData,
                }))
            }
            Err(_) => Err(NonNull::new(new).map(|ptr| {
                // SAFETY: `new` came from `into_raw` just above and was never
                // published, so we still own its count.
                unsafe { Arc::from_raw(ptr.as_ptr() as *const T) }
            })),
        }
    }

    /// Take the value out with exclusive access (used to dismantle deep tries
    /// iteratively instead of by recursive drops).
    pub(crate) fn take(&mut self) -> Option<Arc<T>> {
        let raw = sync::with_mut(&mut self.ptr, |raw| std::mem::replace(raw, ptr::null_mut()));
        // SAFETY: `&mut self` means no concurrent reader; the slot owned this
        // count and now hands it over.
        NonNull::new(raw).map(|ptr| unsafe { Arc::from_raw(ptr.as_ptr() as *const T) })
    }
}

impl<T> Drop for AtomicArc<T> {
    fn drop(&mut self) {
        let raw = sync::with_mut(&mut self.ptr, |raw| *raw);
        if !raw.is_null() {
            // SAFETY: exclusive access (we are being dropped); the slot owns
            // one count on `raw`. Readers that loaded `raw` earlier reached it
            // through some container whose own release was deferred past
            // their guard, so they cannot still be using it via this slot.
            drop(unsafe { Arc::from_raw(raw as *const T) });
        }
    }
}
