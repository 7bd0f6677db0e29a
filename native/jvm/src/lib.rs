//! The JVM binding of `spark_topic_router_core`: the JNI library behind the
//! native methods of `sparktopicrouter.udfs.FrozenMatcher`
//! (`udfs/jvm/sparktopicrouter/udfs/FrozenMatcher.java`), packed inside the
//! project's jar and loaded once per JVM by `NativeLibrary`. Binding code
//! only, as `native/python` is for Python: argument and result copies, and one
//! map from core errors to Java exceptions (`errors.rs`). Matching is the
//! core's `FrozenMatcher::lookup_ids`, the very code `routing._native` runs.
//!
//! # The interface, and why it is this narrow
//!
//! Real-Time Mode calls a UDF once per row, so the per-row call moves only
//! primitives: the key's bytes in, subscriber *ids* out into a reused `int[]`.
//! The subscriber texts cross once per snapshot ([`subscriberText`] and
//! [`subscriberEnds`]), and Java turns ids into its own cached `String`s. No
//! Java object is created or looked up per row.
//!
//! | Java `FrozenMatcher` native   | what it does                                          |
//! |-------------------------------|-------------------------------------------------------|
//! | `open(byte[], int, int)`      | decode (checksum verified) a region; a handle          |
//! | `openFile(byte[], long)`      | map a file from an offset and validate it; a handle    |
//! | `isMapped(long)`              | whether the matcher is a mapped file (not a copy)      |
//! | `release(long)`               | free a handle                                          |
//! | `subscriberText(long)`        | every subscriber id's UTF-8, concatenated              |
//! | `subscriberEnds(long)`        | where each id ends in that text                        |
//! | `lookup(long, byte[], int, int[])` | match a key; the count, ids in the array          |
//! | `formatVersion()`             | the frozen format this build reads                     |
//!
//! # Handles
//!
//! A handle is a `Box<FrozenMatcher>` turned into a `long` by [`open`] and
//! back by [`release`]. Java's `FrozenMatcher` owns it and upholds the
//! invariant every `unsafe` here relies on: **a handle passed to a native is
//! live (opened, not yet released) for the whole call**. It reference-counts
//! its users and releases only when the count reaches zero (see its class
//! docs). `0` is never a live handle; the natives refuse it with an exception.
//!
//! [`open`]: Java_sparktopicrouter_udfs_FrozenMatcher_open
//! [`release`]: Java_sparktopicrouter_udfs_FrozenMatcher_release
//! [`subscriberText`]: Java_sparktopicrouter_udfs_FrozenMatcher_subscriberText
//! [`subscriberEnds`]: Java_sparktopicrouter_udfs_FrozenMatcher_subscriberEnds

mod errors;

use std::cell::RefCell;
use std::os::unix::ffi::OsStrExt;

use jni::objects::{JByteArray, JClass, JIntArray};
use jni::sys::{jboolean, jint, jlong};
use jni::EnvUnowned;
use spark_topic_router_core::codec;
use spark_topic_router_core::frozen::{FrozenMatcher, Scratch};

use crate::errors::{JvmError, ThrowMapped};

/// What `lookup` returns for a key that is not UTF-8 (the micro-batch lane's
/// `invalid_key`; the Java side names the reason).
const INVALID_UTF8: jint = -1;

thread_local! {
    /// Per JVM thread: the key's bytes, the ids to copy out and the lookup's buffers, reused across rows.
    static LOOKUP: RefCell<(Vec<i8>, Vec<jint>, Scratch)> = RefCell::new((Vec::new(), Vec::new(), Scratch::default()));
}

/// The matcher behind a live `handle`.
///
/// # Safety
///
/// `handle` came from [`Java_sparktopicrouter_udfs_FrozenMatcher_open`] and
/// has not been released: Java's `FrozenMatcher` holds a use of it for the
/// whole native call (the module's invariant).
unsafe fn matcher<'a>(handle: jlong) -> Result<&'a FrozenMatcher, JvmError> {
    if handle == 0 {
        return Err(JvmError::ClosedHandle);
    }
    // SAFETY: a live handle is a `Box<FrozenMatcher>` pointer from `open`, not freed while a use is held,
    // and never mutated after `open` (shared references only), so a shared borrow for the call is sound.
    Ok(unsafe { &*(handle as *const FrozenMatcher) })
}

/// `static native long open(byte[] bytes, int offset, int length)`: decode
/// `bytes[offset, offset + length)` with the core's validating decoder.
#[unsafe(no_mangle)]
pub extern "system" fn Java_sparktopicrouter_udfs_FrozenMatcher_open<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    bytes: JByteArray<'local>,
    offset: jint,
    length: jint,
) -> jlong {
    unowned
        .with_env(|env| -> Result<jlong, JvmError> {
            let total = bytes.len(env)?;
            let (start, count) = region(offset, length, total)?;
            let mut region = vec![0i8; count];
            bytes.get_region(env, start as jint, &mut region)?;
            into_handle(codec::decode(as_bytes(&region))?)
        })
        .resolve::<ThrowMapped>()
}

/// A new handle owning `matcher` (see "Handles"), which `open` and `openFile`
/// return; refused when its subscriber ids would not fit Java's `int`.
fn into_handle(matcher: FrozenMatcher) -> Result<jlong, JvmError> {
    if jint::try_from(matcher.subscriber_count()).is_err() {
        return Err(JvmError::TooLarge("subscriber table"));
    }
    Ok(Box::into_raw(Box::new(matcher)) as jlong)
}

/// `static native long openFile(byte[] path, long offset)`: the matcher in the
/// file at `path` (its name's bytes, as the OS takes them) from byte `offset`
/// (a multiple of 8) to its end, mapped read-only and shared, and validated
/// by the core's decoder as `open` validates a copy (checksum, then every
/// structural check). Every JVM and Python worker of a machine that maps one
/// snapshot file shares its pages; a copy costs each of them the file's size.
#[unsafe(no_mangle)]
pub extern "system" fn Java_sparktopicrouter_udfs_FrozenMatcher_openFile<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    path: JByteArray<'local>,
    offset: jlong,
) -> jlong {
    unowned
        .with_env(|env| -> Result<jlong, JvmError> {
            let mut name = vec![0i8; path.len(env)?];
            path.get_region(env, 0, &mut name)?;
            let path = std::path::Path::new(std::ffi::OsStr::from_bytes(as_bytes(&name)));
            let offset = u64::try_from(offset).map_err(|_| JvmError::NegativeOffset(offset))?;
            into_handle(codec::open(path, offset)?)
        })
        .resolve::<ThrowMapped>()
}

/// `static native boolean isMapped(long handle)`: whether the matcher reads a
/// mapped file in place (`openFile`) rather than a copy (`open`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_sparktopicrouter_udfs_FrozenMatcher_isMapped<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    handle: jlong,
) -> jboolean {
    unowned
        .with_env(|_env| -> Result<jboolean, JvmError> {
            // SAFETY: the handle is live for this call (the module's invariant).
            let matcher = unsafe { matcher(handle)? };
            Ok(matcher.is_mapped())
        })
        .resolve::<ThrowMapped>()
}

/// `static native void release(long handle)`: free a handle (`0` is ignored).
#[unsafe(no_mangle)]
pub extern "system" fn Java_sparktopicrouter_udfs_FrozenMatcher_release<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    handle: jlong,
) {
    unowned
        .with_env(|_env| -> Result<(), JvmError> {
            if handle != 0 {
                // SAFETY: Java releases a handle exactly once, after its last use ended (the module's invariant):
                // this is the `Box` `open` leaked, and nothing borrows it any more.
                drop(unsafe { Box::from_raw(handle as *mut FrozenMatcher) });
            }
            Ok(())
        })
        .resolve::<ThrowMapped>()
}

/// `static native byte[] subscriberText(long handle)`: every subscriber id's
/// UTF-8 bytes, in id order, back to back.
#[unsafe(no_mangle)]
pub extern "system" fn Java_sparktopicrouter_udfs_FrozenMatcher_subscriberText<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    handle: jlong,
) -> JByteArray<'local> {
    unowned
        .with_env(|env| -> Result<JByteArray<'local>, JvmError> {
            // SAFETY: the handle is live for this call (the module's invariant).
            let matcher = unsafe { matcher(handle)? };
            let mut text = Vec::new();
            for id in 0..matcher.subscriber_count() {
                text.extend_from_slice(matcher.subscriber(id as u32).as_bytes());
            }
            Ok(env.byte_array_from_slice(&text)?)
        })
        .resolve::<ThrowMapped>()
}

/// `static native int[] subscriberEnds(long handle)`: where each subscriber
/// id ends in `subscriberText` (id `i` spans `[ends[i - 1], ends[i])`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_sparktopicrouter_udfs_FrozenMatcher_subscriberEnds<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    handle: jlong,
) -> JIntArray<'local> {
    unowned
        .with_env(|env| -> Result<JIntArray<'local>, JvmError> {
            // SAFETY: the handle is live for this call (the module's invariant).
            let matcher = unsafe { matcher(handle)? };
            let mut ends = Vec::with_capacity(matcher.subscriber_count());
            let mut end = 0usize;
            for id in 0..matcher.subscriber_count() {
                end += matcher.subscriber(id as u32).len();
                ends.push(jint::try_from(end).map_err(|_| JvmError::TooLarge("subscriber text"))?);
            }
            let array = JIntArray::new(env, ends.len())?;
            array.set_region(env, 0, &ends)?;
            Ok(array)
        })
        .resolve::<ThrowMapped>()
}

/// `static native int lookup(long handle, byte[] key, int length, int[] ids)`:
/// match `key[0, length)`. Returns how many subscribers matched and writes the
/// first `min(count, ids.length)` of their ids (ascending) into `ids`, so a
/// caller whose array is too small learns the count (a fan-out over its limit
/// needs nothing more) and can call again with a larger one. Returns
/// `INVALID_UTF8` (-1) for a key that is not UTF-8.
#[unsafe(no_mangle)]
pub extern "system" fn Java_sparktopicrouter_udfs_FrozenMatcher_lookup<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    handle: jlong,
    key: JByteArray<'local>,
    length: jint,
    ids: JIntArray<'local>,
) -> jint {
    unowned
        .with_env(|env| -> Result<jint, JvmError> {
            // SAFETY: the handle is live for this call (the module's invariant).
            let matcher = unsafe { matcher(handle)? };
            let (_, count) = region(0, length, key.len(env)?)?;
            let capacity = ids.len(env)?;
            LOOKUP.with(|cell| {
                let mut guard = cell.try_borrow_mut().map_err(|_| JvmError::Reentered)?;
                let (bytes, out, scratch) = &mut *guard;
                bytes.clear();
                bytes.resize(count, 0);
                key.get_region(env, 0, bytes)?;
                let Ok(text) = std::str::from_utf8(as_bytes(bytes)) else {
                    return Ok(INVALID_UTF8);
                };
                let found = matcher.lookup_ids(text, scratch);
                let written = found.len().min(capacity);
                // Ids index the subscriber table, which `open` refused if it did not fit Java's `int`.
                out.clear();
                out.extend(found[..written].iter().map(|&id| id as jint));
                ids.set_region(env, 0, out)?;
                let matched = jint::try_from(found.len()).unwrap_or(jint::MAX);
                scratch.trim();
                if bytes.capacity() > KEEP_BUFFER_LEN || out.capacity() > KEEP_BUFFER_LEN {
                    *bytes = Vec::new();
                    *out = Vec::new();
                }
                Ok(matched)
            })
        })
        .resolve::<ThrowMapped>()
}

/// `static native int formatVersion()`: the frozen format version this library decodes.
#[unsafe(no_mangle)]
pub extern "system" fn Java_sparktopicrouter_udfs_FrozenMatcher_formatVersion<'local>(
    _unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
) -> jint {
    jint::from(codec::FORMAT_VERSION)
}

/// A thread's key or id buffer longer than this (after a huge key or fan-out) is freed rather than kept.
const KEEP_BUFFER_LEN: usize = 1 << 16;

/// `(start, length)` of the region `[offset, offset + length)` of an array of `total` elements, checked.
fn region(offset: jint, length: jint, total: usize) -> Result<(usize, usize), JvmError> {
    let start = usize::try_from(offset).map_err(|_| JvmError::Region { offset, length, total })?;
    let count = usize::try_from(length).map_err(|_| JvmError::Region { offset, length, total })?;
    match start.checked_add(count) {
        Some(end) if end <= total => Ok((start, count)),
        _ => Err(JvmError::Region { offset, length, total }),
    }
}

/// Java's signed bytes as bytes.
fn as_bytes(bytes: &[i8]) -> &[u8] {
    // SAFETY: i8 and u8 have the same size and alignment and every bit pattern is valid for both; the
    // slice's length and lifetime carry over unchanged.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<u8>(), bytes.len()) }
}
