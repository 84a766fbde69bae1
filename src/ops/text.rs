//! `TfIdfVectorizer` (opset 9): per row of integer tokens (`[C]` or `[N, C]`), how often each
//! n-gram of the pool occurs, its items `skip` apart for each skip distance from 1 to
//! `max_skip_count` plus one (1-grams counted once), for n in `min_gram_length..=
//! max_gram_length`; weighted as `mode` says: `TF` the counts, `IDF` the weight (or 1) where an
//! n-gram occurs, `TFIDF` the counts times the weights (or the counts). The pool (`pool_int64s`)
//! lists the 1-grams, then the 2-grams, … from the offsets `ngram_counts`; `ngram_indexes` gives
//! each n-gram's output column. String pools (`pool_strings`) need string tensors, which the
//! interpreter does not hold: refused.
//!
//! [`OPS`] registers the op with its attribute schema, type inference and cost facts beside its
//! evaluator.

use std::collections::{HashMap, HashSet};

use super::{OpCall, OpDef, Tensor};
use crate::ir::{Attr, DType};
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[OpDef::onnx(
    "TfIdfVectorizer",
    &[
        "max_gram_length",
        "max_skip_count",
        "min_gram_length",
        "mode",
        "ngram_counts",
        "ngram_indexes",
        "pool_int64s",
        "pool_strings",
        "weights",
    ],
)
.infer(|c| vec![c.ty(0).with_unknown_shape().with_dtype(Some(DType::F32))])
.since(9)
.eval(tf_idf_vectorizer)];

/// How counts become outputs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Tf,
    Idf,
    TfIdf,
}

/// `TfIdfVectorizer(X)`.
fn tf_idf_vectorizer(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    if call.attrs().get("pool_strings").is_some() {
        return Err(
            call.error("pool_strings needs string tensors, which the interpreter does not hold")
        );
    }
    let tokens = x.ints().map_err(|e| call.error(e))?;
    let (rows, width, batched) = match x.shape[..] {
        [c] => (1, c, false),
        [n, c] => (n, c, true),
        _ => return Err(call.error(format!("X must be [C] or [N, C], got shape {:?}", x.shape))),
    };
    let mode = match call.string("mode") {
        Some("TF") => Mode::Tf,
        Some("IDF") => Mode::Idf,
        Some("TFIDF") => Mode::TfIdf,
        other => return Err(call.error(format!("mode must be TF, IDF or TFIDF, got {other:?}"))),
    };
    let length = |name: &str| -> Result<usize> {
        usize::try_from(call.int(name, -1))
            .map_err(|_| call.error(format!("{name} must be set and non-negative")))
    };
    let (min_n, max_n) = (length("min_gram_length")?, length("max_gram_length")?);
    let max_skip = length("max_skip_count")?;
    if min_n == 0 || min_n > max_n {
        return Err(call.error(format!(
            "gram lengths must satisfy 1 ≤ min_gram_length ≤ max_gram_length, got {min_n} and \
             {max_n}"
        )));
    }
    let pool = call.ints("pool_int64s").unwrap_or(&[]);
    let counts = call.ints("ngram_counts").unwrap_or(&[]);
    let indexes = call.ints("ngram_indexes").unwrap_or(&[]);
    let columns = indexes
        .iter()
        .map(|&i| usize::try_from(i).map_err(|_| call.error(format!("ngram_indexes holds {i}"))))
        .collect::<Result<Vec<usize>>>()?;
    let size = columns.iter().max().map_or(0, |&m| m + 1);
    let weights: &[f32] = match call.attrs().get("weights") {
        Some(Attr::Floats(w)) => w,
        _ => &[],
    };
    if !weights.is_empty() && weights.len() < size {
        return Err(call.error(format!(
            "weights holds {} values for {size} output columns",
            weights.len()
        )));
    }
    // The pool's n-grams within the gram lengths, by their output column, and their prefixes.
    let mut grams: HashMap<&[i64], usize> = HashMap::new();
    let mut prefixes: HashSet<&[i64]> = HashSet::new();
    let mut id = 0usize;
    for (g, &start) in counts.iter().enumerate() {
        let n = g + 1;
        let end = counts.get(g + 1).copied().unwrap_or(pool.len() as i64);
        let (start, end) = match (usize::try_from(start), usize::try_from(end)) {
            (Ok(s), Ok(e)) if s <= e && e <= pool.len() => (s, e),
            _ => {
                return Err(call.error(format!(
                    "ngram_counts {counts:?} are not offsets into the pool of {}",
                    pool.len()
                )))
            }
        };
        for gram in pool[start..end].chunks_exact(n) {
            if (min_n..=max_n).contains(&n) {
                let column = *columns.get(id).ok_or_else(|| {
                    call.error(format!(
                        "ngram_indexes holds {} columns for more n-grams",
                        columns.len()
                    ))
                })?;
                grams.insert(gram, column);
                for k in 1..=n {
                    prefixes.insert(&gram[..k]);
                }
            }
            id += 1;
        }
    }
    let out_shape = if batched {
        vec![rows, size]
    } else {
        vec![size]
    };
    call.alloc(&out_shape)?;
    let mut freq = vec![0u64; rows * size];
    let mut gram = Vec::with_capacity(max_n.min(width));
    for r in 0..rows {
        let row = &tokens[r * width..(r + 1) * width];
        let mut first = min_n;
        for skip in 1..=max_skip.saturating_add(1).min(width.max(1)) {
            for start in 0..width {
                if start.saturating_add(skip.saturating_mul(first - 1)) >= width {
                    break;
                }
                gram.clear();
                let mut at = start;
                while gram.len() < max_n && at < width {
                    gram.push(row[at]);
                    if !prefixes.contains(gram.as_slice()) {
                        break;
                    }
                    if gram.len() >= first {
                        if let Some(&c) = grams.get(gram.as_slice()) {
                            freq[r * size + c] += 1;
                        }
                    }
                    at += skip;
                }
            }
            if first == 1 {
                first = 2;
                if first > max_n {
                    break;
                }
            }
        }
    }
    let out = freq
        .iter()
        .enumerate()
        .map(|(k, &f)| {
            let w = weights.get(k % size.max(1)).copied();
            match (mode, w) {
                (Mode::Tf, _) | (Mode::TfIdf, None) => f as f32,
                (Mode::Idf, w) if f > 0 => w.unwrap_or(1.0),
                (Mode::Idf, _) => 0.0,
                (Mode::TfIdf, Some(w)) => w * f as f32,
            }
        })
        .collect();
    Ok(vec![Tensor::float(DType::F32, out_shape, out)])
}
