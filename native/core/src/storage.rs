//! Immutable, 8-aligned bytes that a frozen matcher lives in, and typed views of them.
//!
//! A frozen matcher is one byte buffer in the layout of [`crate::codec`]: the same bytes whether it was
//! just built, decoded from a copy, or mapped from a snapshot file. Its arrays (nodes, edges, ids, the
//! hash indices) are [`Array`]s: slices of that buffer, read in place. Nothing is copied into
//! structures on load, so loading costs what validating costs, and every process that maps one file
//! shares its pages through the page cache.
//!
//! # Where the bytes live
//!
//! * [`Storage::owned`] / [`Storage::copy_of`]: a heap buffer of `u64`s, so 8-aligned.
//! * [`Storage::map`]: a read-only shared mapping of a file (`mmap(2)`, page-aligned), from a byte
//!   offset that must be a multiple of 8. The mapping is unmapped when the last [`Array`] goes.
//!
//! # Invariants
//!
//! * A storage's bytes never change while it exists: nothing hands out a `&mut` to them, and a mapped
//!   file is one the router wrote once and renamed into place (snapshot files are content-addressed and
//!   never rewritten). Truncating a mapped file under a running process is outside that contract: the
//!   kernel then raises `SIGBUS` on the next read of a lost page, as for every mapped file.
//! * `bytes()` starts 8-aligned, so a section at an 8-aligned offset can be viewed as any [`Plain`] type.
//!
//! Only little-endian targets can read the format in place (it is little-endian), hence the
//! `compile_error!` below.

use std::fs::File;
use std::ops::Deref;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

#[cfg(not(target_endian = "little"))]
compile_error!("the frozen format is read in place and is little-endian: a big-endian target cannot map it");

/// A type whose every bit pattern is a valid value, with no padding and an alignment of at most 8:
/// bytes of the right length and alignment can be viewed as a slice of it.
///
/// # Safety
///
/// Implement only for `#[repr(C)]` types made of integers, whose size is the sum of their fields'
/// sizes (no padding bytes, which would be read uninitialized) and whose alignment divides 8.
pub unsafe trait Plain: Copy + 'static {}

// SAFETY: integers: every bit pattern valid, no padding, alignment <= 8.
unsafe impl Plain for u8 {}
// SAFETY: as for u8.
unsafe impl Plain for u32 {}
// SAFETY: as for u8.
unsafe impl Plain for u64 {}

/// The bytes of `values` as they lie in memory (little-endian on this target).
pub fn bytes_of<T: Plain>(values: &[T]) -> &[u8] {
    // SAFETY: `T: Plain` has no padding, so all `size_of_val` bytes are initialized; u8 needs no
    // alignment, and the borrow is the same as `values`'.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) }
}

enum Backing {
    /// A heap buffer; `u64` elements make it 8-aligned.
    Owned(Box<[u64]>),
    /// A read-only `MAP_SHARED` mapping of `len` bytes at `ptr`, unmapped on drop.
    Mapped { ptr: NonNull<u8>, len: usize },
}

/// Immutable bytes, 8-aligned at [`Storage::bytes`]'s start (see the module docs).
pub struct Storage {
    backing: Backing,
    /// The bytes are `backing[start .. start + len]`; `start` is a multiple of 8.
    start: usize,
    len: usize,
}

// SAFETY: the bytes are never written after construction (module invariant), so sharing or sending
// references to them across threads cannot race; a mapping may be unmapped from any thread.
unsafe impl Send for Storage {}
// SAFETY: as for Send: read-only bytes.
unsafe impl Sync for Storage {}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Backing::Mapped { ptr, len } = self.backing {
            // SAFETY: `ptr`/`len` are exactly what mmap returned (see `map`), and no `Array` outlives
            // this storage (each holds an `Arc` of it), so nothing reads the pages afterwards.
            unsafe {
                libc::munmap(ptr.as_ptr().cast(), len);
            }
        }
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.backing {
            Backing::Owned(_) => "owned",
            Backing::Mapped { .. } => "mapped",
        };
        write!(f, "Storage({kind}, {} bytes)", self.len)
    }
}

impl Storage {
    /// `len` bytes held in `words` (the first `len` bytes of them, little-endian in memory).
    pub fn owned(words: Box<[u64]>, len: usize) -> Storage {
        assert!(len <= words.len() * 8, "storage length past its buffer");
        Storage {
            backing: Backing::Owned(words),
            start: 0,
            len,
        }
    }

    /// An aligned copy of `bytes`.
    pub fn copy_of(bytes: &[u8]) -> Storage {
        let mut words = vec![0u64; bytes.len().div_ceil(8)].into_boxed_slice();
        // SAFETY: `words` holds at least `bytes.len()` bytes, u8 has alignment 1, and the regions are
        // distinct allocations.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast::<u8>(), bytes.len());
        }
        Storage::owned(words, bytes.len())
    }

    /// The bytes of the file at `path` from byte `offset` (a multiple of 8) to its end, mapped
    /// read-only and shared: every process mapping the file reads the same page-cache pages.
    pub fn map(path: &Path, offset: u64) -> std::io::Result<Storage> {
        let invalid = |message: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, message);
        if !offset.is_multiple_of(8) {
            return Err(invalid(format!("offset {offset} is not a multiple of 8")));
        }
        let file = File::open(path)?;
        let file_len = file.metadata()?.len();
        if offset >= file_len {
            return Err(invalid(format!(
                "offset {offset} is at or past the file's {file_len} bytes"
            )));
        }
        let len = usize::try_from(file_len).map_err(|_| invalid(format!("{file_len} bytes do not fit in memory")))?;
        // SAFETY: a fresh read-only mapping of a file we opened: no existing memory is affected. The
        // result is checked against MAP_FAILED before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| invalid("mmap returned null".to_owned()))?;
        // The descriptor may close now: a mapping keeps its file open.
        Ok(Storage {
            backing: Backing::Mapped { ptr, len },
            start: offset as usize,
            len: len - offset as usize,
        })
    }

    /// The bytes; their start is 8-aligned.
    pub fn bytes(&self) -> &[u8] {
        let base = match &self.backing {
            Backing::Owned(words) => words.as_ptr().cast::<u8>(),
            Backing::Mapped { ptr, .. } => ptr.as_ptr().cast_const(),
        };
        // SAFETY: `start + len` lies within the backing (checked where each storage is made), and the
        // bytes are immutable for the storage's lifetime, which bounds the returned borrow.
        unsafe { std::slice::from_raw_parts(base.add(self.start), self.len) }
    }

    /// Whether the bytes are a mapped file (else a heap buffer).
    pub fn is_mapped(&self) -> bool {
        matches!(self.backing, Backing::Mapped { .. })
    }
}

/// `len` values of `T` read in place from a [`Storage`], which it keeps alive.
pub struct Array<T: Plain> {
    storage: Arc<Storage>,
    /// Invariant: `ptr .. ptr + len` lies within `storage.bytes()` and `ptr` is aligned for `T`.
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: an Array only reads immutable bytes that its Arc keeps alive (Storage is Send + Sync), and
// T: Plain values are plain integers.
unsafe impl<T: Plain> Send for Array<T> {}
// SAFETY: as for Send.
unsafe impl<T: Plain> Sync for Array<T> {}

impl<T: Plain> Clone for Array<T> {
    fn clone(&self) -> Self {
        Array {
            storage: Arc::clone(&self.storage),
            ptr: self.ptr,
            len: self.len,
        }
    }
}

impl<T: Plain + std::fmt::Debug> std::fmt::Debug for Array<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter().take(16)).finish()
    }
}

impl<T: Plain> Array<T> {
    /// The `len` values at byte `offset` of `storage`.
    ///
    /// Panics when they do not lie within the storage or `offset` is not aligned for `T`: callers
    /// pass offsets from a layout that was checked against the storage's length first, so a panic
    /// here is a bug of this crate, never a consequence of the bytes.
    pub fn view(storage: &Arc<Storage>, offset: usize, len: usize) -> Array<T> {
        let bytes = storage.bytes();
        let size = len.checked_mul(std::mem::size_of::<T>()).expect("array size overflows");
        assert!(
            offset.checked_add(size).is_some_and(|end| end <= bytes.len()),
            "array past its storage"
        );
        assert_eq!(offset % std::mem::align_of::<T>(), 0, "misaligned array");
        // SAFETY: `offset <= bytes.len()` (just checked), so the pointer stays within (or one past)
        // the storage's allocation; it is non-null as a pointer into a live allocation.
        let ptr = unsafe { NonNull::new_unchecked(bytes.as_ptr().add(offset).cast_mut().cast::<T>()) };
        Array {
            storage: Arc::clone(storage),
            ptr,
            len,
        }
    }
}

impl<T: Plain> Deref for Array<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `ptr .. ptr + len` lies within the storage and is aligned for `T` (field invariant,
        // established by `view`); the storage is alive (held by `self`) and immutable; `T: Plain`
        // makes any bytes there a valid `T`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast_const(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_copy_is_aligned_and_views_read_its_integers() {
        let bytes: Vec<u8> = (0u8..40).collect();
        // Misaligned source on purpose.
        let storage = Arc::new(Storage::copy_of(&bytes[1..]));
        assert_eq!(storage.bytes(), &bytes[1..]);
        assert_eq!(storage.bytes().as_ptr() as usize % 8, 0);
        let words: Array<u32> = Array::view(&storage, 8, 2);
        assert_eq!(
            &words[..],
            [
                u32::from_le_bytes([9, 10, 11, 12]),
                u32::from_le_bytes([13, 14, 15, 16])
            ]
        );
        let empty: Array<u64> = Array::view(&storage, 32, 0);
        assert!(empty.is_empty());
    }

    #[test]
    #[should_panic(expected = "array past its storage")]
    fn a_view_past_the_end_is_a_bug() {
        let storage = Arc::new(Storage::copy_of(&[0u8; 12]));
        let _: Array<u32> = Array::view(&storage, 8, 2);
    }

    #[test]
    fn a_mapped_file_reads_like_its_bytes_from_an_aligned_offset() {
        let dir = std::env::temp_dir().join(format!("storage-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mapped.bin");
        let content: Vec<u8> = (0..100u8).collect();
        std::fs::File::create(&path).unwrap().write_all(&content).unwrap();
        let storage = Arc::new(Storage::map(&path, 16).unwrap());
        assert!(storage.is_mapped());
        assert_eq!(storage.bytes(), &content[16..]);
        let values: Array<u64> = Array::view(&storage, 0, 2);
        assert_eq!(values[1], u64::from_le_bytes(content[24..32].try_into().unwrap()));
        // The file may go: the mapping holds its pages.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(values[0], u64::from_le_bytes(content[16..24].try_into().unwrap()));
        assert!(Storage::map(&path, 0).is_err());
        std::fs::File::create(&path).unwrap().write_all(&content).unwrap();
        assert!(Storage::map(&path, 4).is_err(), "an offset that is not a multiple of 8");
        assert!(Storage::map(&path, 104).is_err(), "an offset past the end");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
