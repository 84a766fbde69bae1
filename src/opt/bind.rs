//! How a rule's pattern variables reach the Rust code it names. A condition (`when NAME ?v…`)
//! and an applier (`apply NAME`) take the classes bound to their variables as an array
//! `[Id; N]`, in the order the `when` line lists them or the applier declares them. The rule
//! loader resolves those variables against the pattern once, when the rule is read: a
//! variable the pattern does not bind, or a `when` line with the wrong number of variables, is
//! an error naming the rule file and line. A match of the pattern binds every variable of the
//! pattern, so applying a resolved rule cannot miss one.

use std::fmt;
use std::sync::Arc;

use egg::{Id, Subst, Var};

use super::analysis::OnnxGraph;

/// Where a rule matched.
#[derive(Debug, Clone, Copy)]
pub struct Site<'a> {
    /// The matched e-class.
    pub class: Id,
    /// The rule's name, under which an applier checks the unions it makes itself (other
    /// outputs of a fused op) with [`super::checked_union::check_union`].
    pub rule: &'a str,
}

/// An applier body: given the classes bound to its declared variables (in declaration order),
/// the class to unite with the match, or `None` to leave the match as it is.
pub type ApplyFn<const N: usize> = fn(&mut OnnxGraph, Site<'_>, [Id; N]) -> Option<Id>;

/// A condition body: whether the classes bound to the variables of its `when` line (in that
/// order) meet it.
pub type CheckFn<const N: usize> = fn(&OnnxGraph, [Id; N]) -> bool;

/// An applier with the pattern variables it reads (`?name`s, in the order its body takes them).
pub struct Applier<const N: usize> {
    vars: [&'static str; N],
    apply: ApplyFn<N>,
}

impl<const N: usize> Applier<N> {
    /// `apply`, reading the classes bound to `vars`.
    pub const fn new(vars: [&'static str; N], apply: ApplyFn<N>) -> Applier<N> {
        Applier { vars, apply }
    }
}

/// The variables `head` then `tail` as one list, for appliers whose variables end with a list
/// several share; `N` must be `A + B` (checked where the constant is evaluated: at compile time).
pub const fn vars<const A: usize, const B: usize, const N: usize>(
    head: [&'static str; A],
    tail: [&'static str; B],
) -> [&'static str; N] {
    assert!(
        A + B == N,
        "an applier's variable count is its head's plus its tail's"
    );
    let mut out = [""; N];
    let mut i = 0;
    while i < A {
        out[i] = head[i];
        i += 1;
    }
    while i < N {
        out[i] = tail[i - A];
        i += 1;
    }
    out
}

/// A condition over `N` variables.
pub struct Condition<const N: usize>(pub CheckFn<N>);

/// A registered applier of any arity.
pub trait AnyApplier: Sync {
    /// This applier in a rule whose pattern binds `bound`; an error (worded to follow the
    /// applier's name) names a declared variable the pattern does not bind.
    fn resolve(&self, bound: &[Var]) -> Result<Arc<dyn BoundApplier>, String>;
}

/// A registered condition of any arity.
pub trait AnyCondition: Sync {
    /// This condition given `vars` in a rule whose pattern binds `bound`; an error (worded to
    /// follow the condition's name) says the count is wrong or names an unbound variable.
    fn resolve(&self, vars: &[Var], bound: &[Var]) -> Result<Arc<dyn BoundCondition>, String>;
}

/// An applier resolved for one rule.
pub trait BoundApplier: fmt::Debug + Send + Sync {
    /// Runs the applier on a match of the rule's pattern.
    fn apply(&self, g: &mut OnnxGraph, site: Site<'_>, subst: &Subst) -> Option<Id>;
}

/// A condition resolved for one rule.
pub trait BoundCondition: fmt::Debug + Send + Sync {
    /// Whether a match of the rule's pattern meets the condition.
    fn holds(&self, g: &OnnxGraph, subst: &Subst) -> bool;
}

/// A body with the pattern variables it reads.
#[derive(Debug)]
struct Resolved<const N: usize, F> {
    vars: [Var; N],
    body: F,
}

impl<const N: usize, F> Resolved<N, F> {
    /// The classes a match binds to the variables.
    fn classes(&self, subst: &Subst) -> [Id; N] {
        self.vars.map(|v| subst[v])
    }
}

/// `?v` of `vars` the pattern does not bind, if any.
fn unbound(vars: &[Var], bound: &[Var]) -> Option<Var> {
    vars.iter().copied().find(|v| !bound.contains(v))
}

impl<const N: usize> AnyApplier for Applier<N> {
    fn resolve(&self, bound: &[Var]) -> Result<Arc<dyn BoundApplier>, String> {
        // Every entry is overwritten below: one name per entry.
        let mut vars = [Var::from(0u32); N];
        for (var, name) in vars.iter_mut().zip(self.vars) {
            *var = name
                .parse()
                .map_err(|_| format!("declares `{name}`, which is not a ?variable"))?;
        }
        if let Some(v) = unbound(&vars, bound) {
            return Err(format!("reads {v}, which the pattern does not bind"));
        }
        Ok(Arc::new(Resolved {
            vars,
            body: self.apply,
        }))
    }
}

impl<const N: usize> AnyCondition for Condition<N> {
    fn resolve(&self, vars: &[Var], bound: &[Var]) -> Result<Arc<dyn BoundCondition>, String> {
        let vars: [Var; N] = vars.try_into().map_err(|_| {
            let s = if N == 1 { "" } else { "s" };
            format!("takes {N} variable{s}, not {}", vars.len())
        })?;
        if let Some(v) = unbound(&vars, bound) {
            return Err(format!("uses {v}, which the pattern does not bind"));
        }
        Ok(Arc::new(Resolved { vars, body: self.0 }))
    }
}

impl<const N: usize> BoundApplier for Resolved<N, ApplyFn<N>> {
    fn apply(&self, g: &mut OnnxGraph, site: Site<'_>, subst: &Subst) -> Option<Id> {
        (self.body)(g, site, self.classes(subst))
    }
}

impl<const N: usize> BoundCondition for Resolved<N, CheckFn<N>> {
    fn holds(&self, g: &OnnxGraph, subst: &Subst) -> bool {
        (self.body)(g, self.classes(subst))
    }
}
