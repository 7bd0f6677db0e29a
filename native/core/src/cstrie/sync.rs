//! The CS-trie's synchronisation primitives, switchable to loom.
//!
//! A plain build uses `std`'s atomics and `crossbeam_epoch`. Built with
//! `RUSTFLAGS="--cfg loom"` (`make loom`), the atomics come from loom, which
//! explores every interleaving of their operations (and the weak-memory
//! outcomes of their orderings) in `tests/cstrie_loom.rs`, the way
//! crossbeam-epoch's own `primitive` module does it.
//!
//! Under loom the epoch is a stand-in with no atomics of its own, so that loom
//! explores only the trie's atomics (GCAS, the RDCSS root swap, generation
//! renewal) and not crossbeam-epoch's internals: `pin()` is free and
//! `Guard::defer` keeps every retired value alive until the model calls
//! [`epoch::reclaim_after_model`] once all its threads have been joined. That
//! is stronger than any epoch scheme (nothing is freed while a model runs), so
//! the models check the trie's logic and orderings, not reclamation.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicIsize, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicIsize, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Raw allocation for hand-counted values (`thin_arc.rs`): `std`'s, or
/// loom's, which fails a model that leaks an allocation or frees one twice.
#[cfg(loom)]
pub(crate) use loom::alloc::{alloc, dealloc};
#[cfg(not(loom))]
pub(crate) use std::alloc::{alloc, dealloc};

/// The accesses to a hand-counted allocation (`thin_arc.rs`), for loom to
/// check: under loom a cell whose reads and final write it orders, so a model
/// fails when a free does not happen after every read (a count decremented
/// without `Release`, or freed without the `Acquire` fence). Zero-sized and
/// free in a plain build.
pub(crate) struct Accesses {
    #[cfg(loom)]
    cell: loom::cell::UnsafeCell<()>,
}

impl Accesses {
    pub(crate) fn new() -> Self {
        Accesses {
            #[cfg(loom)]
            cell: loom::cell::UnsafeCell::new(()),
        }
    }

    /// A read of the allocation.
    #[inline(always)]
    pub(crate) fn read(&self) {
        #[cfg(loom)]
        self.cell.with(|_| ());
    }

    /// The drop before the free: it must happen after every read.
    #[inline(always)]
    pub(crate) fn last_write(&self) {
        #[cfg(loom)]
        self.cell.with_mut(|_| ());
    }
}

/// Exclusive access to an atomic pointer's value (`get_mut` in `std`; loom
/// spells it `with_mut`, and checks that no other thread's access races it).
pub(crate) fn with_mut<T, R>(atomic: &mut AtomicPtr<T>, f: impl FnOnce(&mut *mut T) -> R) -> R {
    #[cfg(loom)]
    return atomic.with_mut(f);
    #[cfg(not(loom))]
    return f(atomic.get_mut());
}

#[cfg(not(loom))]
pub(crate) mod epoch {
    pub(crate) use crossbeam_epoch::{pin, Guard};
}

#[cfg(loom)]
pub(crate) mod epoch {
    use std::cell::RefCell;
    use std::marker::PhantomData;

    type Deferred = Box<dyn FnOnce()>;

    std::thread_local! {
        /// Destructors deferred by the running model. Loom runs all of a
        /// model's threads as coroutines on the one OS thread that called
        /// `loom::model`, so a `std` thread-local (not loom's, which is per
        /// model thread) holds one list per model, and using it is not a
        /// loom operation: it adds no scheduling point and no happens-before
        /// edge that could hide a missing one in the trie.
        static RETIRED: RefCell<Vec<Deferred>> = const { RefCell::new(Vec::new()) };
    }

    /// A pinned "epoch" under loom: nothing, since nothing is freed while a
    /// model runs. `!Send` like crossbeam's.
    pub(crate) struct Guard {
        not_send: PhantomData<*const ()>,
    }

    pub(crate) fn pin() -> Guard {
        Guard { not_send: PhantomData }
    }

    impl Guard {
        /// Keep `f` until [`reclaim_after_model`] (never run it earlier).
        pub(crate) fn defer<F: FnOnce() + Send + 'static>(&self, f: F) {
            RETIRED.with(|retired| retired.borrow_mut().push(Box::new(f)));
        }

        /// crossbeam's `flush` tries to run due destructors; none is due
        /// while a model runs.
        pub(crate) fn flush(&self) {}
    }

    /// Run every destructor the model deferred. Call it at the end of each
    /// model iteration, after joining every thread that used a trie (the
    /// joins order their accesses before these frees, which loom checks).
    /// Entries left behind by a model that panicked are dropped unrun when
    /// the OS thread ends (a leak, never a use of a finished model's atomics).
    pub fn reclaim_after_model() {
        loop {
            let batch = RETIRED.with(|retired| std::mem::take(&mut *retired.borrow_mut()));
            if batch.is_empty() {
                return;
            }
            // Outside the borrow: a destructor may retire more values.
            for deferred in batch {
                deferred();
            }
        }
    }
}
