//! Rotate-half RoPE graphs in the spellings exporters emit (and near misses of them), for the
//! rotary recognition proofs and tests. Included by path where needed.
#![allow(dead_code)]

use mobius::ir::{Attr, DType, GraphBuilder, TensorData};

/// How the tables `cos`/`sin` are decorated above `Cos(Concat(f, f))`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Table {
    /// `Cos(Concat(f, f))` as it is (dynamo export).
    Plain,
    /// `Mul(Cos(Concat(f, f)), k)` (transformers' attention_scaling; 1.0 in the legacy export).
    Scaled(f32),
    /// `Cast(Cos(Concat(f, f)), to f32)` (the legacy export's own-dtype Cast).
    Cast,
}

/// A deliberate departure from rotate-half RoPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `Concat(−x[…, :D/2], x[…, D/2:])`: the halves in the other order.
    SwappedHalves,
    /// `Concat(x[…, D/2:], −x[…, :D/2])`: Neg on the other half (a rotation by −θ).
    NegOnOtherHalf,
    /// The tables are `Cos(Concat(f, g))` with `g` another tensor (halves not equal).
    UnequalHalves,
    /// The halves sliced and concatenated on axis 2 (the sequence axis; `S` = `D` in such
    /// graphs).
    SliceOtherAxis,
}

/// One spelling of `x · cos + rotate_half(x) · sin`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    /// `Add(x·cos, rot·sin)` (true) or `Add(rot·sin, x·cos)`.
    pub plain_first: bool,
    /// `Mul(x, cos)` (true) or `Mul(cos, x)`.
    pub x_first: bool,
    /// `Mul(rot, sin)` (true) or `Mul(sin, rot)`.
    pub rot_first: bool,
    /// The last axis as written in the Slices and the Concat: 3 or −1.
    pub axis: i64,
    /// The upper half ends at `i64::MAX` (true, as exported) or at `D`.
    pub to_end: bool,
    /// The Slices carry a `steps` input of 1.
    pub steps: bool,
    /// The tables' decoration.
    pub table: Table,
    /// A near miss, or `None` for the exact form.
    pub fault: Option<Fault>,
}

impl Rope {
    /// The exported form (dynamo: plain tables, axis 3, to the end, with steps) in the given
    /// operand orders.
    pub fn new(plain_first: bool, x_first: bool, rot_first: bool) -> Rope {
        Rope {
            plain_first,
            x_first,
            rot_first,
            axis: 3,
            to_end: true,
            steps: true,
            table: Table::Plain,
            fault: None,
        }
    }

    /// The 8 operand orders.
    pub fn all_orders() -> Vec<Rope> {
        let mut all = Vec::new();
        for plain_first in [true, false] {
            for x_first in [true, false] {
                for rot_first in [true, false] {
                    all.push(Rope::new(plain_first, x_first, rot_first));
                }
            }
        }
        all
    }

    /// The name of the rule that recognises this operand order.
    pub fn rule(&self) -> String {
        let mut name = String::from("rotate-half");
        if !self.plain_first {
            name.push_str("-rotated-first");
        }
        if !self.x_first {
            name.push_str("-cos-first");
        }
        if !self.rot_first {
            name.push_str("-sin-first");
        }
        name
    }
}

/// `Slice(x, [start], [end], [axis][, [1]])`.
fn slice(b: &mut GraphBuilder, x: &str, start: i64, end: i64, axis: i64, steps: bool) -> String {
    let (s, e, a) = (
        b.const_i64(&[start]),
        b.const_i64(&[end]),
        b.const_i64(&[axis]),
    );
    if steps {
        let st = b.const_i64(&[1]);
        b.op("Slice", &[x, &s, &e, &a, &st], vec![])
    } else {
        b.op("Slice", &[x, &s, &e, &a], vec![])
    }
}

/// `Unsqueeze(op(Concat(f, g)), [1])` with the decoration `table` (`op` Cos or Sin).
pub fn table(b: &mut GraphBuilder, op: &str, f: &str, g: &str, table: Table) -> String {
    let both = b.op("Concat", &[f, g], vec![("axis", Attr::Int(-1))]);
    let t = b.op(op, &[&both], vec![]);
    let t = match table {
        Table::Plain => t,
        Table::Scaled(k) => {
            let k = b.constant(TensorData::from_f32(vec![], &[k]));
            b.op("Mul", &[&t, &k], vec![])
        }
        Table::Cast => b.op(
            "Cast",
            &[&t],
            vec![("to", Attr::Int(DType::F32.onnx_code() as i64))],
        ),
    };
    let axes = b.const_i64(&[1]);
    b.op("Unsqueeze", &[&t, &axes], vec![])
}

/// `x · cos + rotate_half(x) · sin` for `x` `[B, H, S, d]`, the tables over the angles
/// `cos_f` and `sin_f` `[B, S, d/2]` (`other` is the second Concat input of the tables under
/// [`Fault::UnequalHalves`]).
pub fn rope(
    b: &mut GraphBuilder,
    x: &str,
    [cos_f, sin_f, other]: [&str; 3],
    d: usize,
    s: &Rope,
) -> String {
    let d = d as i64;
    let second = |f| {
        if s.fault == Some(Fault::UnequalHalves) {
            other
        } else {
            f
        }
    };
    let cos = table(b, "Cos", cos_f, second(cos_f), s.table);
    let sin = table(b, "Sin", sin_f, second(sin_f), s.table);
    let axis = if s.fault == Some(Fault::SliceOtherAxis) {
        2
    } else {
        s.axis
    };
    let end = if s.to_end { i64::MAX } else { d };
    let lo = slice(b, x, 0, d / 2, axis, s.steps);
    let hi = slice(b, x, d / 2, end, axis, s.steps);
    let concat = |b: &mut GraphBuilder, first: &str, second: &str| {
        b.op("Concat", &[first, second], vec![("axis", Attr::Int(axis))])
    };
    let rot = match s.fault {
        Some(Fault::SwappedHalves) => {
            let neg = b.op("Neg", &[&lo], vec![]);
            concat(b, &neg, &hi)
        }
        Some(Fault::NegOnOtherHalf) => {
            let neg = b.op("Neg", &[&lo], vec![]);
            concat(b, &hi, &neg)
        }
        _ => {
            let neg = b.op("Neg", &[&hi], vec![]);
            concat(b, &neg, &lo)
        }
    };
    let plain = if s.x_first {
        b.op("Mul", &[x, &cos], vec![])
    } else {
        b.op("Mul", &[&cos, x], vec![])
    };
    let rotated = if s.rot_first {
        b.op("Mul", &[&rot, &sin], vec![])
    } else {
        b.op("Mul", &[&sin, &rot], vec![])
    };
    if s.plain_first {
        b.op("Add", &[&plain, &rotated], vec![])
    } else {
        b.op("Add", &[&rotated, &plain], vec![])
    }
}

/// A partial rotation as transformers writes it: `x[…, :r]` rotated by [`rope`] (angles
/// `[B, S, r/2]`), concatenated with `x[…, r:]` on the last axis.
pub fn partial_rope(
    b: &mut GraphBuilder,
    x: &str,
    angles: [&str; 3],
    r: usize,
    s: &Rope,
) -> String {
    let rot = slice(b, x, 0, r as i64, -1, s.steps);
    let pass = slice(b, x, r as i64, i64::MAX, -1, s.steps);
    let rotated = rope(b, &rot, angles, r, s);
    b.op("Concat", &[&rotated, &pass], vec![("axis", Attr::Int(-1))])
}
