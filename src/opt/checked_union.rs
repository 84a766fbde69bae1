//! [`check_union`]: in verification mode, a rule's result is united with the class it matched
//! only when their fingerprints agree (see [`super::fingerprint`]); a disagreement is recorded
//! as a [`Violation`] naming the rule.

use egg::Id;

use super::analysis::OnnxGraph;
use super::fingerprint::{agree, describe, Violation};

/// Checks a rule's result class against the class it matched before they are united. A union
/// where either side has no fingerprint is allowed and counted as unchecked.
pub fn check_union(egraph: &mut OnnxGraph, matched: Id, result: Id, rule: &str) -> bool {
    let (a, b) = (
        &egraph[matched].data.fingerprint,
        &egraph[result].data.fingerprint,
    );
    match (a, b) {
        (Some(x), Some(y)) if !agree(x, y) => {
            let violation = Violation {
                rule: rule.to_string(),
                before: describe(x),
                after: describe(y),
            };
            egraph.analysis.violations.push(violation);
            false
        }
        (Some(_), Some(_)) => true,
        _ => {
            if let Some(leaves) = &egraph.analysis.fingerprint_leaves {
                leaves.count_unchecked_union();
            }
            true
        }
    }
}
