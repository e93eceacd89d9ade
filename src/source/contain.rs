//! The last line of defence around the Parquet decoder: a panic inside it (arrow-rs
//! asserts on some corrupt files, e.g. apache/arrow-rs#6255) becomes an error value.
//!
//! [`contain`] runs a call into the decoder under `catch_unwind`. The process's panic
//! hook stays quiet for those panics only, keeping their message for the error instead;
//! a panic anywhere else (our own code included) goes to the hook that was installed
//! before, and shows as it always did.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Set while this thread runs a contained call.
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
    /// The message of the last contained panic on this thread.
    static MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Installs (once) a hook that keeps contained panics quiet and passes every other
/// panic to the hook installed before it.
fn install_hook() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if CONTAINED.with(Cell::get) {
                let text = describe(info.payload());
                let place = info
                    .location()
                    .map(|l| format!(" ({}:{})", short_path(l.file()), l.line()))
                    .unwrap_or_default();
                MESSAGE.with(|m| *m.borrow_mut() = Some(format!("{text}{place}")));
            } else {
                previous(info);
            }
        }));
    });
}

/// A panic payload as text.
fn describe(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// A source path from a crate in the registry, from the crate's folder on
/// (`parquet-60.1.0/src/...`): enough to find the line upstream.
fn short_path(file: &str) -> &str {
    file.rfind("/registry/src/")
        .and_then(|i| {
            file[i..]
                .match_indices('/')
                .nth(3)
                .map(|(j, _)| &file[i + j + 1..])
        })
        .unwrap_or(file)
}

/// Runs `f`; a panic inside it becomes `Err(its message and place)`, with nothing
/// printed. What `f` touches must be dropped or rebuilt after an `Err` (a decoder that
/// panicked half-way is not to be used again).
pub(crate) fn contain<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    let outer = CONTAINED.with(|c| c.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(outer));
    result.map_err(|payload| {
        MESSAGE
            .with(|m| m.borrow_mut().take())
            .unwrap_or_else(|| describe(payload.as_ref()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contained_panic_is_an_error_with_its_message_and_place() {
        let err = contain(|| -> u32 { panic!("column start and length should not be negative") })
            .unwrap_err();
        assert!(
            err.starts_with(
                "column start and length should not be negative (src/source/contain.rs:"
            ),
            "{err}"
        );
        assert_eq!(contain(|| 7), Ok(7));
        // Nested calls restore the outer state.
        assert_eq!(
            contain(|| contain(|| -> () { panic!("inner") }).is_err()),
            Ok(true)
        );
    }

    #[test]
    fn registry_paths_are_shortened_to_the_crate() {
        assert_eq!(
            short_path("/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/parquet-60.1.0/src/file/metadata/mod.rs"),
            "parquet-60.1.0/src/file/metadata/mod.rs"
        );
        assert_eq!(short_path("src/x.rs"), "src/x.rs");
    }
}
