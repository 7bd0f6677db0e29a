//! The one map from errors to Java exceptions: every native resolves its
//! outcome with [`ThrowMapped`], and nowhere else throws. The message is the
//! core's (or the binding's own), as it is; a panic (a bug, never hostile
//! input) becomes an exception too, so nothing unwinds into the JVM.
//!
//! | error                          | Java exception                                   |
//! |--------------------------------|--------------------------------------------------|
//! | core `NativeError::Format`     | `sparktopicrouter.udfs.FrozenFormatException` (an `IllegalArgumentException`) |
//! | core, any other                | `java.lang.IllegalArgumentException`             |
//! | `Region` (offset or length out of the array) | `java.lang.IndexOutOfBoundsException` |
//! | `NegativeOffset` (a file offset below 0) | `java.lang.IndexOutOfBoundsException` |
//! | `TooLarge`                     | `java.lang.IllegalArgumentException`             |
//! | `ClosedHandle`, `Reentered`    | `java.lang.IllegalStateException`                |
//! | a JNI call failed              | the pending Java exception if there is one, else `java.lang.IllegalStateException` |
//! | a panic                        | `java.lang.IllegalStateException` ("native panic: ...") |

use std::any::Any;
use std::fmt;

use jni::errors::ErrorPolicy;
use jni::strings::JNIString;
use jni::Env;
use spark_topic_router_core::errors::NativeError;

/// What a native of this library can fail with.
#[derive(Debug)]
pub(crate) enum JvmError {
    Core(NativeError),
    Jni(jni::errors::Error),
    /// `offset`/`length` do not lie within an array of `total` elements.
    Region {
        offset: i32,
        length: i32,
        total: usize,
    },
    /// A file offset below zero.
    NegativeOffset(i64),
    /// A count that does not fit Java's `int`.
    TooLarge(&'static str),
    /// Handle `0`: a matcher that was never opened or is already released.
    ClosedHandle,
    /// A lookup called from inside another on the same thread (cannot happen from Java; refused, not trusted).
    Reentered,
}

impl From<NativeError> for JvmError {
    fn from(error: NativeError) -> Self {
        JvmError::Core(error)
    }
}

impl From<jni::errors::Error> for JvmError {
    fn from(error: jni::errors::Error) -> Self {
        JvmError::Jni(error)
    }
}

impl fmt::Display for JvmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JvmError::Core(error) => write!(f, "{error}"),
            JvmError::Jni(error) => write!(f, "JNI call failed: {error}"),
            JvmError::Region { offset, length, total } => {
                write!(
                    f,
                    "region [{offset}, {offset} + {length}) is not within an array of {total}"
                )
            }
            JvmError::NegativeOffset(offset) => write!(f, "file offset {offset} is negative"),
            JvmError::TooLarge(what) => write!(f, "{what} too large for Java's int indices"),
            JvmError::ClosedHandle => write!(f, "frozen matcher is closed"),
            JvmError::Reentered => write!(f, "frozen matcher lookup re-entered on one thread"),
        }
    }
}

impl JvmError {
    /// The binary name of the exception class this error throws.
    fn exception_class(&self) -> &'static str {
        match self {
            JvmError::Core(NativeError::Format(_)) => "sparktopicrouter/udfs/FrozenFormatException",
            JvmError::Core(_) | JvmError::TooLarge(_) => "java/lang/IllegalArgumentException",
            JvmError::Region { .. } | JvmError::NegativeOffset(_) => "java/lang/IndexOutOfBoundsException",
            JvmError::Jni(_) | JvmError::ClosedHandle | JvmError::Reentered => "java/lang/IllegalStateException",
        }
    }
}

/// The error policy of every native: throw the mapped exception (unless one is already pending, which then
/// wins) and return the type's default (`0`, `null`), which Java never sees because the exception is thrown.
#[derive(Debug, Default)]
pub(crate) struct ThrowMapped;

impl<T: Default> ErrorPolicy<T, JvmError> for ThrowMapped {
    type Captures<'unowned_env_local: 'native_method, 'native_method> = ();

    fn on_error<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _captures: &mut Self::Captures<'unowned_env_local, 'native_method>,
        error: JvmError,
    ) -> jni::errors::Result<T> {
        if !env.exception_check() {
            throw(env, error.exception_class(), &error.to_string());
        }
        Ok(T::default())
    }

    fn on_panic<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _captures: &mut Self::Captures<'unowned_env_local, 'native_method>,
        payload: Box<dyn Any + Send + 'static>,
    ) -> jni::errors::Result<T> {
        let message = match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
            (Some(text), _) => (*text).to_owned(),
            (_, Some(text)) => text.clone(),
            _ => "a panic without a message".to_owned(),
        };
        // A payload whose drop could panic again is leaked rather than dropped here.
        std::mem::forget(payload);
        if !env.exception_check() {
            throw(
                env,
                "java/lang/IllegalStateException",
                &format!("native panic: {message}"),
            );
        }
        Ok(T::default())
    }
}

/// Throw `class` with `message`. `throw_new` reports the exception it left pending as an error, which is
/// what we want: it propagates when the native returns.
fn throw(env: &mut Env<'_>, class: &str, message: &str) {
    let _pending = env.throw_new(JNIString::from(class), JNIString::from(message));
}
