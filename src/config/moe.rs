//! The routing fields every mixture-of-experts config shares: how many experts a layer has
//! and how many each token is routed to.

use super::fields::Fields;
use super::HfConfig;
use crate::limits::config::MAX_EXPERTS;
use crate::Result;

/// `(experts, top_k)` of a MoE config: `num_local_experts` or its alias `num_experts`
/// (transformers maps one onto the other; both present must agree) and
/// `num_experts_per_tok` (at most the experts), with the family's defaults when absent.
pub fn read_routing(
    raw: &HfConfig,
    f: &Fields<'_>,
    (default_experts, default_k): (usize, usize),
) -> Result<(usize, usize)> {
    let experts = match (raw.num_local_experts, raw.num_experts) {
        (Some(a), Some(b)) if a != b => {
            return Err(f.err(
                "num_experts",
                &format!("{b} disagrees with num_local_experts ({a}), its alias"),
            ))
        }
        (Some(n), _) => f.count("num_local_experts", n, MAX_EXPERTS)?,
        (None, Some(n)) => f.count("num_experts", n, MAX_EXPERTS)?,
        (None, None) => default_experts,
    };
    let field = "num_experts_per_tok";
    let k = f.optional_count(field, raw.num_experts_per_tok, default_k, MAX_EXPERTS)?;
    if k > experts {
        return Err(f.err(
            field,
            &format!("{k} is more than the {experts} experts of a layer"),
        ));
    }
    Ok((experts, k))
}
