//! `ThinArc<H>`: an immutable header `H` and a text, in one reference-counted
//! allocation behind a thin (one-word) pointer. What a tail (`node::Tail`)
//! is: its subscribers as the header, its words as the text.
//!
//! # Why not `Arc`
//!
//! An `Arc<Tail>` of a `SmolStr` and a subscriber set is 16 bytes of counts
//! (strong and weak) and 48 of value: 64 heap bytes for a pattern's
//! `k3.#`, and nearly every one-subscriber pattern of a large table ends in
//! such a tail. Here the count is 4 bytes, the text's length 4, and the text
//! its own bytes, with no inline capacity to pad: `k3.#` under a 24-byte set
//! is 36 bytes. `Arc<str>` would be thin only as a fat pointer (16 bytes),
//! which would make a `Child` 24 and every branch-table slot larger.
//!
//! # Layout
//!
//! One allocation, `repr(C)`, aligned as `H` is (at least 4); offsets for
//! an `H` aligned to 8 at most, such as a subscriber set:
//!
//! ```text
//! 0             4           8               8 + size_of::<H>()
//! | count: u32  | len: u32  | header: H     | text: len bytes of UTF-8 |
//! ```
//!
//! `count` (u32) is the number of handles; `len` (u32) the text's byte
//! length, so a text is shorter than 4 GiB (`new` panics otherwise, before
//! allocating). The allocation's [`Layout`] is `Inner<H>` extended by `len`
//! bytes (no padding after the text), recomputed from `len` to free it.
//! The handle is the pointer to `count`.
//!
//! # Counting
//!
//! As `std::sync::Arc` does it: a clone increments with `Relaxed` (the new
//! handle comes from an existing one, which already orders everything
//! before it) and aborts long before the count could wrap; a drop
//! decrements with `Release`, and the one that takes the count to zero
//! issues an `Acquire` fence before it drops the header and frees, so every
//! other handle's uses happen before the free. Header and text are written
//! once, before the first handle exists, and never again.
//!
//! Under `--cfg loom` the count and fence are loom's (`sync.rs`), the
//! allocation goes through `loom::alloc` (which reports a model that leaks
//! one), and an access witness (`sync::Accesses`) records each read and the
//! final drop, so a model checks that the free happens after every read:
//! the model at the end of this file fails without the `Release` decrement,
//! without the `Acquire` fence, and without the free.

use std::alloc::Layout;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use super::sync::{self, fence, Accesses, AtomicU32, Ordering};

/// The counts above which a clone aborts: far below `u32::MAX`, so that
/// threads cloning at once past the check cannot wrap the count (std's
/// `Arc` keeps the same headroom with `isize::MAX`). Unreachable in
/// practice: each handle of a tail lives in a branch of 24 bytes, so 2^31
/// of them would take 48 GiB.
const MAX_COUNT: u32 = i32::MAX as u32;

/// The allocation's fixed part; the text follows it (see the module docs).
#[repr(C)]
struct Inner<H> {
    /// Handles to this allocation. Invariant: at least one while any handle
    /// exists; the handle that takes it to zero frees the allocation.
    count: AtomicU32,
    /// The text's length in bytes. Written once, before any handle exists.
    len: u32,
    /// Written once, before any handle exists; only ever read after.
    header: H,
    /// Under loom: the reads and the final drop, for causality checks.
    accesses: Accesses,
}

/// A counted handle to a header and a text, one word wide.
pub(crate) struct ThinArc<H> {
    /// Invariant: points to a live allocation made by [`ThinArc::new`],
    /// laid out as in the module docs (header and `len` bytes of UTF-8
    /// initialised), on which this handle owns one count.
    ptr: NonNull<Inner<H>>,
    /// Drop-check: dropping the last handle drops an `H`.
    owns: PhantomData<H>,
}

// SAFETY: a handle gives shared access to `H` (and to immutable bytes) from
// any thread holding one, and the last handle, on whatever thread, drops the
// `H`: exactly `Arc<H>`'s situation, which is `Send` and `Sync` when `H` is
// both. The count is atomic.
unsafe impl<H: Send + Sync> Send for ThinArc<H> {}
// SAFETY: as for `Send`.
unsafe impl<H: Send + Sync> Sync for ThinArc<H> {}

/// Where the text starts: right after `Inner<H>`, whose size is a multiple
/// of its alignment (`repr(C)`), so the text needs no padding.
const fn text_offset<H>() -> usize {
    std::mem::size_of::<Inner<H>>()
}

/// The allocation for a text of `len` bytes (`len` below 4 GiB, so the sum
/// cannot overflow and stays far below `isize::MAX`).
fn layout<H>(len: usize) -> Layout {
    Layout::from_size_align(text_offset::<H>() + len, std::mem::align_of::<Inner<H>>()).expect("a text below 4 GiB")
}

impl<H> ThinArc<H> {
    /// One allocation holding `header` and a copy of `text`, with one handle.
    pub(crate) fn new(header: H, text: &str) -> Self {
        let len = u32::try_from(text.len()).expect("a tail's text is shorter than 4 GiB");
        let layout = layout::<H>(text.len());
        // SAFETY: `layout` has a non-zero size (it holds at least `Inner<H>`,
        // whose count and length are 8 bytes).
        let raw = unsafe { sync::alloc(layout) };
        let Some(block) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        let inner = block.cast::<Inner<H>>();
        // SAFETY: `block` is a fresh allocation of `layout`: `Inner<H>` at
        // offset 0 (aligned, as `layout` is `Inner<H>`'s alignment) and
        // `text.len()` bytes after it, nobody else can see it yet, and `text`
        // cannot overlap it.
        unsafe {
            inner.as_ptr().write(Inner {
                count: AtomicU32::new(1),
                len,
                header,
                accesses: Accesses::new(),
            });
            ptr::copy_nonoverlapping(text.as_ptr(), raw.add(text_offset::<H>()), text.len());
        }
        ThinArc {
            ptr: inner,
            owns: PhantomData,
        }
    }

    fn inner(&self) -> &Inner<H> {
        // SAFETY: by the invariant on `ptr`, the allocation is live while
        // this handle exists, and `Inner` is initialised and only read.
        unsafe { self.ptr.as_ref() }
    }

    /// The header.
    pub(crate) fn header(&self) -> &H {
        let inner = self.inner();
        inner.accesses.read();
        &inner.header
    }

    /// The text.
    pub(crate) fn text(&self) -> &str {
        let inner = self.inner();
        inner.accesses.read();
        // SAFETY: by the invariant on `ptr`, `len` bytes after `Inner` are
        // initialised with a copy of a `str` (so UTF-8) and never written
        // again while a handle (here `self`, which the result borrows) lives.
        unsafe {
            let bytes = std::slice::from_raw_parts(
                self.ptr.as_ptr().cast::<u8>().add(text_offset::<H>()),
                inner.len as usize,
            );
            std::str::from_utf8_unchecked(bytes)
        }
    }

    /// Whether both handles are to the same allocation.
    pub(crate) fn ptr_eq(this: &Self, other: &Self) -> bool {
        this.ptr == other.ptr
    }
}

impl<H> Clone for ThinArc<H> {
    fn clone(&self) -> Self {
        // Relaxed: `self` is a handle, so the allocation is live and its
        // contents visible here; the new handle needs no more (see `Arc`).
        let old = self.inner().count.fetch_add(1, Ordering::Relaxed);
        if old > MAX_COUNT {
            // A leaked-handle loop could otherwise wrap the count and free a
            // live allocation; `Arc` aborts the same way.
            std::process::abort();
        }
        ThinArc {
            ptr: self.ptr,
            owns: PhantomData,
        }
    }
}

impl<H> Drop for ThinArc<H> {
    fn drop(&mut self) {
        // Release: this handle's uses of the allocation happen before the
        // decrement, and so before the free that follows the last one.
        if self.inner().count.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Acquire: pairs with every other handle's Release decrement, so
        // their uses happen before what follows.
        fence(Ordering::Acquire);
        let inner = self.ptr.as_ptr();
        // SAFETY: the count was 1 and we held it, so this is the last handle
        // (no other can appear: clones need a handle). The allocation is
        // live and initialised (invariant on `ptr`), every other handle's
        // accesses happen before this point (the fence), and after the drop
        // and the free nothing refers to it. `layout` is what `new` used,
        // recomputed from the same `len`.
        unsafe {
            (*inner).accesses.last_write();
            let layout = layout::<H>((*inner).len as usize);
            ptr::drop_in_place(inner);
            sync::dealloc(inner.cast::<u8>(), layout);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn holds_its_header_and_text_in_one_allocation_behind_one_word() {
        assert_eq!(std::mem::size_of::<ThinArc<String>>(), 8);
        assert_eq!(std::mem::size_of::<Option<ThinArc<String>>>(), 8);
        let held = ThinArc::new(String::from("subscribers"), "k3.#");
        assert_eq!((held.header().as_str(), held.text()), ("subscribers", "k3.#"));
        // The count and length, a 24-byte header, the text's 4 bytes.
        assert_eq!(layout::<String>(held.text().len()).size(), 8 + 24 + 4);
        for text in ["", "é", &"long.words.".repeat(100)] {
            assert_eq!(ThinArc::new((), text).text(), text);
        }
    }

    #[test]
    fn the_last_handle_drops_the_header_once() {
        let header = Arc::new(());
        let first = ThinArc::new(header.clone(), "a.b");
        let second = first.clone();
        assert!(ThinArc::ptr_eq(&first, &second));
        assert!(!ThinArc::ptr_eq(&first, &ThinArc::new(header.clone(), "a.b")));
        drop(first);
        assert_eq!((Arc::strong_count(&header), second.text()), (2, "a.b"));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let handle = second.clone();
                std::thread::spawn(move || (0..1000).for_each(|_| drop(handle.clone())))
            })
            .collect();
        threads.into_iter().for_each(|thread| thread.join().unwrap());
        assert_eq!(Arc::strong_count(&header), 2);
        drop(second);
        assert_eq!(Arc::strong_count(&header), 1);
    }
}

/// Run with `make loom` (the Makefile's loom target runs these beside
/// `tests/cstrie_loom.rs`).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::thread;

    /// Two threads read their own handle and drop it, racing the main
    /// thread's drop: whichever drops last frees, after every read (the
    /// access witness checks it: without the `Acquire` fence in `drop`, this
    /// fails), and exactly once (`loom::alloc` fails a model that leaks the
    /// allocation or frees one pointer twice).
    #[test]
    fn the_last_of_racing_drops_frees_after_every_read() {
        loom::model(|| {
            let held = ThinArc::new(String::from("subscriber"), "k3.#");
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let handle = held.clone();
                    thread::spawn(move || {
                        assert_eq!((handle.header().as_str(), handle.text()), ("subscriber", "k3.#"));
                    })
                })
                .collect();
            drop(held);
            readers.into_iter().for_each(|reader| reader.join().unwrap());
        });
    }
}
