//! [`Cancel`]: a flag a caller sets from another thread to stop a build or a save.
//!
//! The CLI stops on a signal by exiting (see [`crate::package::interrupt`]); a library caller
//! that must keep running (the Python package on Ctrl-C) sets a [`Cancel`] instead. The build
//! polls it between stages and the weight writer before each initializer; a cancelled call
//! returns [`crate::Error::Interrupted`] and, like any failed save, leaves no output behind.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A shared cancellation flag; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A flag not yet set.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Asks every call polling this flag (or a clone) to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// [`crate::Error::Interrupted`] once [`Cancel::cancel`] was called.
    pub fn check(&self) -> crate::Result<()> {
        match self.0.load(Ordering::Relaxed) {
            true => Err(crate::Error::Interrupted),
            false => Ok(()),
        }
    }
}

/// [`Cancel::check`] of an optional flag (`None` never stops).
pub(crate) fn check(cancel: Option<&Cancel>) -> crate::Result<()> {
    cancel.map_or(Ok(()), Cancel::check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_sees_the_cancel() {
        let flag = Cancel::new();
        let seen_by = flag.clone();
        assert!(seen_by.check().is_ok());
        flag.cancel();
        assert!(matches!(seen_by.check(), Err(crate::Error::Interrupted)));
        assert!(check(None).is_ok());
    }
}
