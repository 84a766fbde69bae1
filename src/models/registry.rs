//! The family registry: the one list of the model types mobius builds.
//!
//! A family is one file in `src/models/` that declares a [`FamilySpec`]: the Hugging Face
//! `model_type`s it answers to, and for each how its config.json reads (into an
//! [`ArchConfig`] whose `family` knobs build the graph) and which onnxruntime-genai
//! `model.type` runs it. [`FAMILIES`] lists them, one line each; config parsing, `mobius list
//! models`, the README's list and docs/families.md's table all read it.

use std::path::Path;

use serde_json::Value;

use super::assume_llama;
use super::family::FamilySpec;
use crate::config::{ArchConfig, Fields, HfConfig, ModelType, RopeScaling};
use crate::Error;
use crate::Result;

/// Every family mobius builds, in the order `mobius list models` prints them.
pub static FAMILIES: &[&FamilySpec] = &[
    &super::llama::FAMILY,
    &super::gemma::FAMILY,
    &super::gpt2::FAMILY,
    &super::gpt_bigcode::FAMILY,
    &super::openai::FAMILY,
    &super::gptj::FAMILY,
    &super::opt::FAMILY,
    &super::gpt_neo::FAMILY,
    &super::xglm::FAMILY,
    &super::ctrl::FAMILY,
    &super::biogpt::FAMILY,
    &super::phi::FAMILY,
    &super::qwen3::FAMILY,
    &super::smollm3::FAMILY,
    &super::granite::FAMILY,
    &super::olmo::FAMILY,
    &super::olmo2::FAMILY,
    &super::olmo3::FAMILY,
    &super::phi3::FAMILY,
    &super::ministral::FAMILY,
    &super::helium::FAMILY,
    &super::starcoder2::FAMILY,
    &super::mixtral::FAMILY,
    &super::qwen_moe::FAMILY,
    &super::olmoe::FAMILY,
    &super::granitemoe::FAMILY,
    &super::phimoe::FAMILY,
    &super::gpt_oss::FAMILY,
    &super::stablelm::FAMILY,
    &super::gpt_neox::FAMILY,
    &super::gpt_neox_japanese::FAMILY,
    &super::nemotron::FAMILY,
    &super::cohere::FAMILY,
    &super::cohere2::FAMILY,
    &super::cohere2_moe::FAMILY,
    &super::glm::FAMILY,
    &super::glm4::FAMILY,
    &super::exaone4::FAMILY,
    &super::exaone_moe::FAMILY,
    &super::ernie4_5::FAMILY,
    &super::apertus::FAMILY,
    &super::arcee::FAMILY,
    &super::seed_oss::FAMILY,
    &super::internlm3::FAMILY,
    &super::exaone::FAMILY,
    &super::hunyuan_v1_dense::FAMILY,
    &super::cwm::FAMILY,
    &super::vaultgemma::FAMILY,
    &super::ministral3::FAMILY,
    &super::granite_swa::FAMILY,
    &super::granitemoeshared::FAMILY,
    &super::granitemoe_swa::FAMILY,
    &super::flex_olmo::FAMILY,
    &super::jais2::FAMILY,
    &super::nanochat::FAMILY,
    &super::bitnet::FAMILY,
    &super::iquestcoder::FAMILY,
    &super::hyperclovax::FAMILY,
    &super::mellum::FAMILY,
    &super::bloom::FAMILY,
    &super::falcon::FAMILY,
    &super::mpt::FAMILY,
    &super::persimmon::FAMILY,
    &super::ernie4_5_moe::FAMILY,
    &super::minimax_m2::FAMILY,
    &super::hunyuan_v1_moe::FAMILY,
    &super::deepseek::FAMILY,
    &super::deepseek_v32::FAMILY,
    &super::minicpm3::FAMILY,
    &super::youtu::FAMILY,
    &super::glm4_moe::FAMILY,
    &super::sarvam_moe::FAMILY,
    &super::param2moe::FAMILY,
    &super::hy_v3::FAMILY,
    &super::minicpm5_moe::FAMILY,
    &super::axk1::FAMILY,
    &super::axk2::FAMILY,
    &super::longcat_flash::FAMILY,
    &super::emu3::FAMILY,
    &super::mllama::FAMILY,
    &super::dots1::FAMILY,
    &super::dbrx::FAMILY,
    &super::diffllama::FAMILY,
    &super::solar_open::FAMILY,
    &super::lfm2::FAMILY,
    &super::lfm2_moe::FAMILY,
    &super::mamba::FAMILY,
    &super::mamba2::FAMILY,
    &super::bamba::FAMILY,
    &super::granitemoehybrid::FAMILY,
    &super::nemotron_h::FAMILY,
    &super::falcon_h1::FAMILY,
    &super::zamba2::FAMILY,
    &super::jamba::FAMILY,
    &super::qwen3_next::FAMILY,
    &super::recurrent_gemma::FAMILY,
    &super::doge::FAMILY,
    &super::jetmoe::FAMILY,
    &super::modernbert_decoder::FAMILY,
    &super::llama4::FAMILY,
    &super::afmoe::FAMILY,
    &super::aria_text::FAMILY,
    &super::kolibri1::FAMILY,
    &super::flint::FAMILY,
    &super::cohere_compass_text::FAMILY,
    &super::laguna::FAMILY,
    &super::beam::FAMILY,
    &super::mimo_v2_flash::FAMILY,
    &super::ergo::FAMILY,
    &super::gemma4::FAMILY,
    &super::gemma3n::FAMILY,
    &super::bert::FAMILY,
    &super::bert_lm::FAMILY,
    &super::bart_lm::FAMILY,
];

/// The registry entry of `model_type`, if a family answers to it.
pub fn model_type(name: &str) -> Option<&'static ModelType> {
    model_types().find(|t| t.name == name)
}

/// Every registered model type, family by family.
pub fn model_types() -> impl Iterator<Item = &'static ModelType> {
    FAMILIES.iter().flat_map(|f| f.model_types.iter())
}

/// The registry as `mobius list models` prints it: one row per model type, with its family
/// and its onnxruntime-genai `model.type` (`-` for none).
pub fn text_table() -> String {
    let rows: Vec<[&str; 3]> = FAMILIES
        .iter()
        .flat_map(|family| {
            family
                .model_types
                .iter()
                .map(|t| [family.name, t.name, t.genai_type.unwrap_or("-")])
        })
        .collect();
    let header = ["FAMILY", "MODEL_TYPE", "GENAI_TYPE"];
    let width = |c: usize| {
        rows.iter()
            .map(|r| r[c].len())
            .chain([header[c].len()])
            .max()
            .unwrap_or(0)
    };
    let (w0, w1) = (width(0), width(1));
    std::iter::once(header)
        .chain(rows.iter().copied())
        .map(|[family, name, genai]| format!("{family:w0$}  {name:w1$}  {genai}\n"))
        .collect()
}

/// The registry as a Markdown table (family, model types with their genai `model.type`,
/// summary): `mobius list models --markdown` prints it and docs/families.md holds it.
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| family | `model_type` → onnxruntime-genai `model.type` | what sets it apart |\n\
         |---|---|---|\n",
    );
    for family in FAMILIES {
        let types: Vec<String> = family
            .model_types
            .iter()
            .map(|t| match t.genai_type {
                Some(genai) => format!("`{}` → `{genai}`", t.name),
                None => format!("`{}` (no genai_config.json)", t.name),
            })
            .collect();
        out += &format!(
            "| {} | {} | {} |\n",
            family.name,
            types.join(", "),
            family.summary
        );
    }
    out
}

/// The registry as the README's short list: each family in bold, followed by the `model_type`s
/// it answers to unless that is its name alone, families separated by ` · `, words wrapped
/// into lines of at most 100 characters, never between a family's name and its first model
/// type (`mobius list models --markdown --short` prints it).
pub fn markdown_short_list() -> String {
    const WIDTH: usize = 100;
    let mut words: Vec<String> = Vec::new();
    for (i, family) in FAMILIES.iter().enumerate() {
        let names: Vec<&str> = family.model_types.iter().map(|t| t.name).collect();
        let bold = format!("**{}**", family.name);
        if names == [family.name] {
            words.push(bold);
        } else {
            // The bold name and the first model type stay on one line.
            let last = names.len() - 1;
            words.extend(names.iter().enumerate().map(|(j, n)| {
                let n = match j == last {
                    true => n.to_string(),
                    false => format!("{n},"),
                };
                match j {
                    0 => format!("{bold} {n}"),
                    _ => n,
                }
            }));
        }
        if i + 1 < FAMILIES.len() {
            let end = words.len() - 1;
            words[end] += " ·";
        }
    }
    let mut out = String::new();
    let mut line = String::new();
    for word in words {
        if !line.is_empty() && line.len() + 1 + word.len() > WIDTH {
            out += &line;
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line += &word;
    }
    out + &line + "\n"
}

/// What config reading does with a `model_type` no family answers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unregistered {
    /// Refuse it; for a `*ForCausalLM` the error names `--assume-llama`.
    Refuse,
    /// Read a `*ForCausalLM` as llama ([`assume_llama::ASSUMED_LLAMA`], `--assume-llama`);
    /// config.json must hold no field of another family's computation, and the build checks
    /// the checkpoint tensor by tensor against the Llama layout.
    AssumeLlama,
}

/// Reads `path` (a config.json) and normalises it with the family its `model_type` names.
pub fn load_config(path: &Path) -> Result<ArchConfig> {
    load_config_with(path, Unregistered::Refuse)
}

/// [`load_config`], with `unregistered` saying what an unregistered `model_type` does.
pub fn load_config_with(path: &Path, unregistered: Unregistered) -> Result<ArchConfig> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    parse_config_with(&bytes, path, unregistered)
}

/// Parses config.json bytes and normalises them with the family their `model_type` names;
/// `path` is used in error messages only (an unregistered type lists the registered ones).
pub fn parse_config(bytes: &[u8], path: &Path) -> Result<ArchConfig> {
    parse_config_with(bytes, path, Unregistered::Refuse)
}

/// [`parse_config`], with `unregistered` saying what an unregistered `model_type` does.
pub fn parse_config_with(
    bytes: &[u8],
    path: &Path,
    unregistered: Unregistered,
) -> Result<ArchConfig> {
    let raw = HfConfig::parse(bytes, path)?;
    let name = raw.model_type_name(path)?;
    let f = Fields { path };
    let model_type = match (model_type(name), unregistered) {
        (Some(t), _) => t,
        (None, _) if !assume_llama::is_causal_lm(&raw) => {
            return Err(Error::UnsupportedModelType {
                path: path.to_path_buf(),
                found: name.to_string(),
                supported: model_types().map(|t| t.name.to_string()).collect(),
            })
        }
        (None, Unregistered::Refuse) => return Err(assume_llama::needs_the_flag(&raw, name, &f)),
        (None, Unregistered::AssumeLlama) => {
            let json: Value = serde_json::from_slice(bytes).map_err(|e| Error::json(path, &e))?;
            assume_llama::check_fields(&json, name, &f)?;
            tracing::info!(
                "{}: model_type `{name}` is read and built as llama (--assume-llama)",
                path.display()
            );
            &assume_llama::ASSUMED_LLAMA
        }
    };
    let cfg = ArchConfig::from_hf(&raw, path, model_type)?;
    refuse_unbuilt_longrope(&cfg, model_type, &f)?;
    Ok(cfg)
}

/// Refuses a LongRoPE config (`rope_type` `longrope`/`su`) for a model type whose builder does
/// not build it ([`ModelType::builds_longrope`]).
fn refuse_unbuilt_longrope(cfg: &ArchConfig, model_type: &ModelType, f: &Fields) -> Result<()> {
    if matches!(cfg.rope.scaling, RopeScaling::LongRope(_)) && !model_type.builds_longrope {
        let built: Vec<&str> = model_types()
            .filter(|t| t.builds_longrope)
            .map(|t| t.name)
            .collect();
        return Err(f.err(
            "rope_scaling",
            &format!(
                "`longrope` is built for {} only, not for model_type `{}` (its graph would \
                 rotate with the short factors alone)",
                built.join(", "),
                model_type.name
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_model_type_and_family_is_registered_once() {
        let mut names = BTreeSet::new();
        for t in model_types() {
            assert!(
                names.insert(t.name),
                "model_type `{}` registered twice",
                t.name
            );
        }
        let families: BTreeSet<&str> = FAMILIES.iter().map(|f| f.name).collect();
        assert_eq!(families.len(), FAMILIES.len(), "a family registered twice");
        assert!(FAMILIES.iter().all(|f| !f.model_types.is_empty()));
    }

    #[test]
    fn longrope_is_refused_where_it_is_not_built() {
        let json = |model_type: &str| {
            format!(
                r#"{{"model_type": "{model_type}", "hidden_size": 64, "intermediate_size": 128,
                "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
                "max_position_embeddings": 256, "original_max_position_embeddings": 64,
                "rope_scaling": {{"type": "longrope", "short_factor": [1,1,1,1,1,1,1,1],
                "long_factor": [2,2,2,2,2,2,2,2]}}}}"#
            )
        };
        let path = Path::new("config.json");
        assert!(parse_config(json("phi3").as_bytes(), path).is_ok());
        let err = parse_config(json("llama").as_bytes(), path)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("rope_scaling")
                && err.contains("`longrope` is built for phi3, phimoe only"),
            "{err}"
        );
    }

    #[test]
    fn lookup_finds_registered_names_only() {
        assert_eq!(
            model_type("qwen2").map(|t| t.genai_type),
            Some(Some("qwen2"))
        );
        assert_eq!(model_type("bert").map(|t| t.genai_type), Some(None));
        assert!(model_type("rwkv").is_none());
        assert!(model_type("").is_none());
    }
}
