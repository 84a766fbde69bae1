//! mobius's block quantization against onnxruntime's own quantizer, byte for byte.
//!
//! The goldens (tests/data/quant, written by scripts/make_quant_goldens.py) hold weights and
//! what onnxruntime's `quantize_matmul_{4,8}bits` (MatMulNBits layout) and
//! `quantize_qdq_matmul_4bits` (DequantizeLinear layout) make of them. The MatMulNBits layout
//! must match exactly; the DequantizeLinear one too, except at the elements where onnxruntime's
//! two quantizers disagree with each other (they round halves differently, see `mobius::quant`):
//! there mobius must side with the MatMulNBits quantizer, one step away from the QDQ one.

use std::path::{Path, PathBuf};

use mobius::ir::{pack_4bit, unpack_4bit, DType};
use mobius::quant::{nbits_shapes, nbits_weight, nbits_zero_points, quantize, QuantSpec};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/quant")
}

/// A `.npy` array: its `descr`, shape and raw little-endian data.
struct Npy {
    descr: String,
    shape: Vec<usize>,
    data: Vec<u8>,
}

/// Reads the `.npy` files numpy writes (C order, header versions 1 to 3).
fn read_npy(path: &Path) -> Npy {
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("golden {} unreadable: {e}", path.display()));
    assert!(
        bytes.starts_with(b"\x93NUMPY"),
        "{} is not .npy",
        path.display()
    );
    let (header_len, start) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        _ => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
    };
    let header = std::str::from_utf8(&bytes[start..start + header_len]).unwrap();
    assert!(
        header.contains("'fortran_order': False"),
        "{}",
        path.display()
    );
    let field = |key: &str, open: char, close: char| {
        let at = header
            .find(key)
            .unwrap_or_else(|| panic!("{}: no {key}", path.display()));
        let rest = &header[at + key.len()..];
        let from = rest.find(open).unwrap() + 1;
        let to = from + rest[from..].find(close).unwrap();
        rest[from..to].to_string()
    };
    let descr = field("'descr':", '\'', '\'');
    let shape = field("'shape':", '(', ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    Npy {
        descr,
        shape,
        data: bytes[start + header_len..].to_vec(),
    }
}

/// One golden case, as listed in manifest.json.
struct Case {
    name: String,
    dtype: DType,
    spec: QuantSpec,
    k: usize,
    n: usize,
}

impl Case {
    fn part(&self, part: &str) -> Npy {
        read_npy(&golden_dir().join(format!("{}.{part}.npy", self.name)))
    }

    /// The scales' `.npy` dtype (bf16 is stored as uint16 bits).
    fn scale_descr(&self) -> &'static str {
        match self.dtype {
            DType::F32 => "<f4",
            DType::F16 => "<f2",
            _ => "<u2",
        }
    }
}

fn read_cases() -> Vec<Case> {
    let path = golden_dir().join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run scripts/make_quant_goldens.py to make the goldens",
            path.display()
        )
    });
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = manifest["cases"]
        .as_array()
        .expect("manifest.json: no `cases` list");
    assert!(
        !cases.is_empty(),
        "{}: no golden cases; run scripts/make_quant_goldens.py",
        path.display()
    );
    cases
        .iter()
        .map(|c| {
            let int = |key: &str| c[key].as_u64().unwrap_or_else(|| panic!("{c}: {key}")) as usize;
            Case {
                name: c["name"].as_str().unwrap().to_string(),
                dtype: match c["dtype"].as_str().unwrap() {
                    "f32" => DType::F32,
                    "f16" => DType::F16,
                    "bf16" => DType::BF16,
                    other => panic!("{c}: dtype {other}"),
                },
                spec: QuantSpec {
                    bits: int("bits") as u8,
                    block_size: int("block_size"),
                    symmetric: c["symmetric"].as_bool().unwrap(),
                },
                k: int("k"),
                n: int("n"),
            }
        })
        .collect()
}

/// Asserts `ours == theirs`, naming the first differing element through `locate` (index →
/// description).
fn assert_same(
    case: &str,
    what: &str,
    ours: &[u8],
    theirs: &[u8],
    locate: impl Fn(usize) -> String,
) {
    assert_eq!(
        ours.len(),
        theirs.len(),
        "{case}: {what}: {} bytes, onnxruntime has {}",
        ours.len(),
        theirs.len()
    );
    if let Some(i) = (0..ours.len()).find(|&i| ours[i] != theirs[i]) {
        panic!(
            "{case}: {what} differs first at byte {i} ({}): ours {:#04x}, onnxruntime {:#04x}",
            locate(i),
            ours[i],
            theirs[i]
        );
    }
}

/// Checks one case; returns how many elements onnxruntime's two quantizers disagree on.
fn check_case(case: &Case) -> usize {
    let (k, n, spec, name) = (case.k, case.n, &case.spec, case.name.as_str());
    let w = case.part("w");
    assert_eq!(w.shape, [k, n], "{name}: weight shape");
    let q = quantize(&w.data, case.dtype, k, n, spec).unwrap();
    let shapes = nbits_shapes(k, n, spec);
    let scale_size = case.dtype.size();

    // MatMulNBits layout: exact.
    let b = case.part("qop_b");
    assert_eq!(b.shape, shapes.weight, "{name}: MatMulNBits B shape");
    let blob = shapes.weight[2];
    let k_blocks = shapes.weight[1];
    assert_same(
        name,
        "MatMulNBits B",
        &nbits_weight(&q.values, k, n, spec),
        &b.data,
        |i| {
            format!(
                "column {}, block {}, byte {}",
                i / (k_blocks * blob),
                i / blob % k_blocks,
                i % blob
            )
        },
    );
    let scales = case.part("qop_scales");
    assert_eq!(
        (scales.descr.as_str(), &scales.shape[..]),
        (case.scale_descr(), &shapes.scales[..])
    );
    // The saved model's MatMulNBits scales are the transpose of the quantization's.
    let ours = mobius::weights::transpose::transposed(&q.scales, k_blocks, n, case.dtype);
    assert_same(name, "MatMulNBits scales", &ours, &scales.data, |i| {
        let e = i / scale_size;
        format!("column {}, block {}", e / k_blocks, e % k_blocks)
    });
    match &q.zero_points {
        None => assert!(spec.symmetric, "{name}: asymmetric without zero points"),
        Some(zero_points) => {
            let zp = case.part("qop_zp");
            assert_eq!(
                zp.shape, shapes.zero_points,
                "{name}: MatMulNBits zero point shape"
            );
            let per_column = shapes.zero_points[1];
            let ours = nbits_zero_points(zero_points, k, n, spec);
            assert_same(name, "MatMulNBits zero points", &ours, &zp.data, |i| {
                format!("column {}, byte {}", i / per_column, i % per_column)
            });
        }
    }
    if spec.bits != 4 {
        return 0; // onnxruntime's QDQ quantizer has only 4 bits
    }

    // DequantizeLinear layout: scales and zero points exact.
    let scales = case.part("qdq_scales");
    assert_eq!(scales.shape, [k_blocks, n], "{name}: QDQ scales shape");
    assert_same(name, "QDQ scales", &q.scales, &scales.data, |i| {
        let e = i / scale_size;
        format!("block {}, column {}", e / n, e % n)
    });
    if let Some(zero_points) = &q.zero_points {
        assert_same(
            name,
            "QDQ zero points",
            &pack_4bit(zero_points),
            &case.part("qdq_zp").data,
            |i| format!("elements {} and {}", 2 * i, 2 * i + 1),
        );
    }
    // Values exact except where onnxruntime's MatMulNBits quantizer (which mobius follows, as
    // the check above proved) and its QDQ quantizer disagree.
    let qdq = unpack_4bit(&case.part("qdq_b").data, k * n, spec.symmetric);
    let mut disagreements = 0;
    for (i, (&ours, &theirs)) in q.values.iter().zip(&qdq).enumerate() {
        if ours == theirs {
            continue;
        }
        let (row, column) = (i / n, i % n);
        let byte = b.data[column * k_blocks * blob + row / 2];
        let code = (byte >> (4 * (row % 2))) & 0x0f;
        let qoperator = if spec.symmetric {
            code.wrapping_sub(8)
        } else {
            code
        };
        let widen = |v: u8| {
            if spec.symmetric {
                i16::from(v as i8)
            } else {
                i16::from(v)
            }
        };
        let (a, t) = (widen(ours), widen(theirs));
        assert!(
            qoperator != theirs,
            "{name}: QDQ value differs at element (row {row}, column {column}): ours {a}, \
             onnxruntime {t} (its MatMulNBits quantizer agrees with the QDQ one there)"
        );
        // Where they disagree it is by one step (halves rounded before or after adding the
        // zero point), or because 1/scale overflowed to infinity (a subnormal scale) and the
        // QDQ quantizer turns the infinite product into its lowest value.
        let meta = ((row / spec.block_size) * n + column) * scale_size;
        let scale = match case.dtype {
            DType::F32 => f32::from_le_bytes(q.scales[meta..meta + 4].try_into().unwrap()),
            DType::F16 => half::f16::from_le_bytes([q.scales[meta], q.scales[meta + 1]]).to_f32(),
            _ => half::bf16::from_le_bytes([q.scales[meta], q.scales[meta + 1]]).to_f32(),
        };
        assert!(
            (a - t).abs() == 1 || (1.0 / scale).is_infinite(),
            "{name}: QDQ value at element (row {row}, column {column}): ours {a}, onnxruntime \
             {t}, with scale {scale}: more than one step apart"
        );
        disagreements += 1;
    }
    disagreements
}

#[test]
fn quantization_matches_onnxruntime_goldens() {
    let cases = read_cases();
    let mut disagreements = Vec::new();
    for case in &cases {
        let d = check_case(case);
        if d > 0 {
            disagreements.push(format!("{} ({d})", case.name));
        }
    }
    eprintln!(
        "{} golden cases match; onnxruntime's QDQ and MatMulNBits quantizers disagree on \
         rounding in: {}",
        cases.len(),
        disagreements.join(", ")
    );
}

#[test]
fn every_golden_file_belongs_to_a_listed_case() {
    let names: Vec<String> = read_cases().into_iter().map(|c| c.name).collect();
    let mut files = 0;
    for entry in std::fs::read_dir(golden_dir()).unwrap() {
        let file = entry.unwrap().file_name().into_string().unwrap();
        if file == "manifest.json" {
            continue;
        }
        let case = file.split('.').next().unwrap();
        assert!(
            names.iter().any(|n| n == case),
            "{file}: not a case of manifest.json"
        );
        files += 1;
    }
    assert!(
        files >= 4 * names.len(),
        "{files} golden files for {} cases",
        names.len()
    );
}
