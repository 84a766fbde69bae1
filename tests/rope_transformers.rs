//! Scaled RoPE against transformers: the inverse frequencies and the cos/sin scale mobius
//! computes for each config of `tests/data/rope/scaled.json` equal what transformers computes
//! for it, the frequencies to within one f32 ulp: torch raises the base to each exponent with
//! its vectorised `pow` (SLEEF, ≤ 1 ulp from the true value), Rust with the C library's
//! `powf`, and the two round a few exponents differently (e.g. 1e6^(74/128)); everything
//! after that is the same f32 arithmetic (`scripts/make_rope_references.py`: YaRN with and without
//! truncation, mscale pairs, a factor from the context ratio, an explicit attention factor,
//! partial rotary, an empty ramp, the top-level original context, dynamic NTK).

use std::path::Path;

use serde_json::Value;

#[test]
fn frequencies_and_scale_equal_transformers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/rope/scaled.json");
    let data: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let cases = data["cases"].as_array().unwrap();
    assert!(cases.len() >= 9, "{} cases", cases.len());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let json = serde_json::to_vec(&case["config"]).unwrap();
        let cfg = mobius::models::parse_config(&json, Path::new("config.json"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let want: Vec<f32> = case["inv_freq"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let got = cfg.rope.inv_freq();
        assert_eq!(got.len(), want.len(), "{name}: frequency count");
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            let ulps = (g.to_bits() as i64 - w.to_bits() as i64).abs();
            assert!(
                ulps <= 1,
                "{name}: inv_freq[{j}] {g:e} != {w:e} ({ulps} ulps)"
            );
        }
        let scale = case["attention_scaling"].as_f64().unwrap() as f32;
        assert_eq!(cfg.rope.cos_sin_scale(), scale, "{name}: cos/sin scale");
    }
}
