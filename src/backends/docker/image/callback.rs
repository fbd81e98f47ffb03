//! A caller's optional callback as a backend keeps it: shared by every backend value built
//! from one another, and printed by `Debug` without its contents.

use std::fmt;
use std::sync::Arc;

/// An optional callback of type `F` (a `dyn Fn(..) + Send + Sync`).
pub(crate) struct Callback<F: ?Sized>(pub Option<Arc<F>>);

impl<F: ?Sized> Clone for Callback<F> {
    fn clone(&self) -> Self {
        Callback(self.0.clone())
    }
}

impl<F: ?Sized> Default for Callback<F> {
    fn default() -> Self {
        Callback(None)
    }
}

impl<F: ?Sized> fmt::Debug for Callback<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Some(<callback>)" } else { "None" })
    }
}
