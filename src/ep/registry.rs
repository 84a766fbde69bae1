//! The process-wide EP registry, seeded with the built-ins, in registration order.

use std::sync::{OnceLock, PoisonError, RwLock};

use super::builtins::builtin_eps;
use super::capabilities::EpCapabilities;
use crate::error::{Error, Result};

static REGISTRY: OnceLock<RwLock<Vec<EpCapabilities>>> = OnceLock::new();

fn registry() -> &'static RwLock<Vec<EpCapabilities>> {
    REGISTRY.get_or_init(|| RwLock::new(builtin_eps()))
}

/// The names of the registered EPs, in registration order (built-ins first).
pub fn ep_registry() -> Vec<String> {
    let eps = registry().read().unwrap_or_else(PoisonError::into_inner);
    eps.iter().map(|c| c.name.clone()).collect()
}

/// The capabilities registered under `name`.
///
/// Fails with [`Error::UnknownEp`] (listing the registered names) when there are none.
pub fn get_ep(name: &str) -> Result<EpCapabilities> {
    let eps = registry().read().unwrap_or_else(PoisonError::into_inner);
    eps.iter()
        .find(|c| c.name == name)
        .cloned()
        .ok_or_else(|| Error::UnknownEp {
            name: name.to_string(),
            registered: eps.iter().map(|c| c.name.clone()).collect(),
        })
}

/// Validates `caps` and registers it under `caps.name`.
///
/// A new name is appended; a registered name (built-ins included) is replaced in place only
/// when `overwrite` is true, otherwise this fails with [`Error::InvalidEp`]. Invalid
/// capabilities fail with [`Error::InvalidEp`] as [`EpCapabilities::validate`] does.
pub fn register_ep(caps: EpCapabilities, overwrite: bool) -> Result<()> {
    caps.validate()?;
    let mut eps = registry().write().unwrap_or_else(PoisonError::into_inner);
    match eps.iter_mut().find(|c| c.name == caps.name) {
        Some(_) if !overwrite => Err(Error::InvalidEp {
            name: caps.name,
            message: "already registered (pass overwrite to replace it)".into(),
        }),
        Some(slot) => {
            *slot = caps;
            Ok(())
        }
        None => {
            eps.push(caps);
            Ok(())
        }
    }
}
