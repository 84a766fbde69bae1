//! DecomposeRotaryEmbedding: ONNX `RotaryEmbedding` on a 3-D `[B, S, heads·D]` input →
//! Reshape / Slice / Mul / Sub / Add / Concat ("rotate half", or neighbour pairs when
//! interleaved), rotating the first `rotary_embedding_dim` elements of each head.

use egg::Id;

use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::{Emit, TO_END};

/// `decompose-rotary`.
pub(crate) const DECOMPOSE_ROTARY: Applier<6> = Applier::new(
    ["?x", "?cos", "?sin", "?inter", "?heads", "?rd"],
    decompose_rotary,
);

/// `decompose-rotary-with-positions`.
pub(crate) const DECOMPOSE_ROTARY_WITH_POSITIONS: Applier<7> = Applier::new(
    ["?x", "?cos", "?sin", "?pos", "?inter", "?heads", "?rd"],
    decompose_rotary_with_positions,
);

/// Reads `?x ?cos ?sin ?inter ?heads ?rd` of `(RotaryEmbedding ?x ?cos ?sin ?inter ?heads ?rd)`:
/// see [`decompose`].
fn decompose_rotary(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, cos, sin, inter, heads, rd]: [Id; 6],
) -> Option<Id> {
    decompose(g, [x, cos, sin], None, [inter, heads, rd])
}

/// Reads `?x ?cos ?sin ?pos ?inter ?heads ?rd` of `(RotaryEmbedding ?x ?cos ?sin ?pos ?inter
/// ?heads ?rd)` (`?pos` may be an absent input): see [`decompose`].
fn decompose_rotary_with_positions(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, cos, sin, pos, inter, heads, rd]: [Id; 7],
) -> Option<Id> {
    decompose(g, [x, cos, sin], Some(pos), [inter, heads, rd])
}

/// `RotaryEmbedding(x, cos, sin[, pos]; interleaved, num_heads, rotary_embedding_dim)`
/// (attribute classes `[inter, heads, rd]`) in standard ops. Declines unless `x` is 3-D with
/// `num_heads` set and the rotary width is known and even.
fn decompose(
    g: &mut OnnxGraph,
    [x, cos, sin]: [Id; 3],
    pos: Option<Id>,
    [inter, heads, rd]: [Id; 3],
) -> Option<Id> {
    let mut e = Emit::new(g);
    let shape = e.tensor(x)?.shape.clone()?;
    let heads = e.int_or(heads, 0)?;
    let interleaved = e.int_or(inter, 0)?;
    let requested = e.int_or(rd, 0)?;
    if shape.len() != 3 || heads <= 0 || !(0..=1).contains(&interleaved) || requested < 0 {
        return None;
    }
    let head_size = shape[2]
        .known()
        .filter(|w| w % heads == 0)
        .map(|w| w / heads);
    let rotary = if requested > 0 { requested } else { head_size? };
    if rotary % 2 != 0 || head_size.is_some_and(|d| rotary > d) {
        return None;
    }
    let partial = head_size != Some(rotary);
    let half = rotary / 2;
    let (cos, sin) = match pos {
        Some(pos) if !e.is_absent(pos) => {
            let axis0 = [("axis", crate::ops::value::AttrValue::Int(0))];
            (
                e.op("Gather", &[cos, pos], &axis0),
                e.op("Gather", &[sin, pos], &axis0),
            )
        }
        _ => (cos, sin),
    };
    if [cos, sin]
        .iter()
        .any(|&t| e.tensor(t).and_then(|t| t.rank()).is_some_and(|r| r != 3))
    {
        return None;
    }

    let per_head = e.reshape(x, &[0, 0, heads, -1]);
    let rot = if partial {
        e.slice(per_head, 0, rotary, -1)
    } else {
        per_head
    };
    let rotated = if interleaved == 1 {
        // [B, S, N, rd/2, 2]: element pairs (2i, 2i+1) on the last axis.
        let pairs = e.reshape(rot, &[0, 0, 0, half, 2]);
        let (x1, x2) = (e.slice(pairs, 0, 1, -1), e.slice(pairs, 1, 2, -1));
        let (c, sn) = (e.unsqueeze(cos, &[2, 4]), e.unsqueeze(sin, &[2, 4]));
        let joined = rotate_pair(&mut e, x1, x2, c, sn);
        e.reshape(joined, &[0, 0, 0, rotary])
    } else {
        let (x1, x2) = (e.slice(rot, 0, half, -1), e.slice(rot, half, rotary, -1));
        let (c, sn) = (e.unsqueeze(cos, &[2]), e.unsqueeze(sin, &[2]));
        rotate_pair(&mut e, x1, x2, c, sn)
    };
    let out = if partial {
        let pass = e.slice(per_head, rotary, TO_END, -1);
        e.concat(&[rotated, pass], -1)
    } else {
        rotated
    };
    Some(e.reshape(out, &[0, 0, -1]))
}

/// `Concat(x1·cos − x2·sin, x2·cos + x1·sin; axis −1)`.
fn rotate_pair(e: &mut Emit<'_>, x1: Id, x2: Id, cos: Id, sin: Id) -> Id {
    let (a, b) = (e.bin("Mul", x1, cos), e.bin("Mul", x2, sin));
    let first = e.bin("Sub", a, b);
    let (c, d) = (e.bin("Mul", x2, cos), e.bin("Mul", x1, sin));
    let second = e.bin("Add", c, d);
    e.concat(&[first, second], -1)
}
