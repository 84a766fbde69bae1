//! An op's cost facts: what the EP cost model (`opt::cost`) weighs besides the sizes of its
//! inputs and outputs. The model's roofline formula is the optimizer's; which ops an EP runs,
//! which bytes a kernel reads and how many operations it performs are the op's.

use crate::ep::EpCapabilities;
use crate::ir::DType;

/// Whether an EP with these capabilities runs the op producing `dtype` (`None`: unknown)
/// with a first input of rank `rank`.
pub type EpSupport = fn(&EpCapabilities, Option<DType>, Option<usize>) -> bool;

/// The bytes a kernel of the op reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// All its inputs.
    All,
    /// A lookup: the rows it writes (as many bytes as its outputs) and its other inputs,
    /// not the table (its first input).
    Lookup,
    /// Its first `n` inputs only (the others are tables it reads one row of per token).
    Leading(usize),
}

/// The floating-point operations a kernel of the op performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// One per output element.
    PerElement,
    /// A matrix product: two per output element and element of the first input's last dim.
    Product,
    /// A mixture of experts: each token runs `k` experts of two projections to `2·I` and one
    /// back to `H` (`I` the last dim of input 4).
    Experts,
    /// The same with each expert's values packed `expert_weight_bits` to a byte (`I·bits/8`
    /// the last dim of input 5).
    PackedExperts,
    /// Attention: four per output element and position of the present key cache (output 1).
    Attention,
}

/// What the cost model weighs of an op.
#[derive(Debug, Clone, Copy)]
pub struct Cost {
    /// Whether an EP runs it (`None`: every EP that runs its domain).
    pub support: Option<EpSupport>,
    /// The bytes it reads.
    pub reads: Reads,
    /// The operations it performs.
    pub work: Work,
    /// Whether it is folded into an initializer when all its inputs are initializers.
    pub folds_on_initializers: bool,
}

impl Cost {
    /// A kernel that every EP runs, reading all its inputs, one operation per output element.
    pub const KERNEL: Cost = Cost {
        support: None,
        reads: Reads::All,
        work: Work::PerElement,
        folds_on_initializers: false,
    };

    /// This cost with the EP support test `support`.
    pub const fn support(self, support: EpSupport) -> Cost {
        Cost {
            support: Some(support),
            ..self
        }
    }

    /// This cost reading `reads`.
    pub const fn reads(self, reads: Reads) -> Cost {
        Cost { reads, ..self }
    }

    /// This cost performing `work`.
    pub const fn work(self, work: Work) -> Cost {
        Cost { work, ..self }
    }

    /// This cost, folded into an initializer when all its inputs are initializers.
    pub const fn folds_on_initializers(self) -> Cost {
        Cost {
            folds_on_initializers: true,
            ..self
        }
    }
}
