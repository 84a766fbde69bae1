//! What only one family reads of a config: its typed knobs (Gemma's soft-caps, Granite's
//! multipliers, an encoder's token types…), and the graph they build. Each family defines its
//! knobs type in its own file; a decoder's knobs are [`FamilyKnobs`] by being its
//! `crate::models::decoder::Family` hooks, other builders implement the trait themselves.
//! [`super::ArchConfig`] carries the knobs as [`Knobs`], so a builder reads its own knobs,
//! typed, from `self`.

use std::any::Any;
use std::fmt::Debug;
use std::ops::Deref;
use std::sync::Arc;

use super::ArchConfig;
use crate::ir::{DType, Graph};
use crate::role::Role;

/// How checkpoint tensor names become the names a builder reads (`None`: the tensor is never
/// read).
pub type CheckpointRenaming = fn(&str) -> Option<String>;

/// A family's own part of one config, and what builds from it.
pub trait FamilyKnobs: Debug + Send + Sync + AnyKnobs {
    /// The portable graph of `cfg` (whose `family` is `self`) in `dtype`.
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph;

    /// The model's role for the optimizer.
    fn role(&self) -> Role {
        Role::Decoder
    }

    /// How the builder renames checkpoint tensors before reading them (`None`: it reads the
    /// checkpoint's own names).
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        None
    }
}

/// Equality and downcasting of knobs behind `dyn FamilyKnobs`, for every `PartialEq` type.
pub trait AnyKnobs: Any {
    /// `self` as [`Any`], to read the concrete knobs back.
    fn as_any(&self) -> &dyn Any;
    /// Whether `other` holds knobs of the same type, equal to these.
    fn same_knobs(&self, other: &dyn Any) -> bool;
}

impl<T: PartialEq + Any> AnyKnobs for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn same_knobs(&self, other: &dyn Any) -> bool {
        other.downcast_ref::<T>() == Some(self)
    }
}

/// A config's family knobs, shared between clones of the config.
#[derive(Debug, Clone)]
pub struct Knobs(Arc<dyn FamilyKnobs>);

impl Knobs {
    /// Wraps a family's knobs.
    pub fn new(knobs: impl FamilyKnobs) -> Knobs {
        Knobs(Arc::new(knobs))
    }
}

impl Deref for Knobs {
    type Target = dyn FamilyKnobs;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

/// Knobs are equal when they are of one type and equal as that type.
impl PartialEq for Knobs {
    fn eq(&self, other: &Self) -> bool {
        self.0.same_knobs(other.0.as_any())
    }
}
