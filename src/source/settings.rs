//! Hugging Face hub settings (endpoint, cache folder, offline mode, token) from the environment.

use std::fmt;
use std::path::PathBuf;

/// The hub endpoint used when `HF_ENDPOINT` is not set.
const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// How to reach the Hugging Face hub and where its cache lives.
#[derive(Clone, PartialEq, Eq)]
pub struct HubSettings {
    /// Base URL of the hub, without a trailing slash.
    pub endpoint: String,
    /// The hub cache folder (holding `models--org--name` folders).
    pub cache_dir: PathBuf,
    /// When true, only the cache is used and nothing is downloaded.
    pub offline: bool,
    /// Access token for private or gated repos.
    pub token: Option<String>,
}

impl HubSettings {
    /// Reads the settings the Hugging Face tools use.
    ///
    /// `HF_ENDPOINT` (default `https://huggingface.co`); the cache is `HF_HUB_CACHE`, else
    /// `HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`,
    /// else `~/.cache/huggingface/hub`; `HF_HUB_OFFLINE` set to 1/true/yes/on means offline;
    /// `HF_TOKEN` is the token. Empty variables count as unset.
    pub fn from_env() -> HubSettings {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`HubSettings::from_env`] with `var` standing in for the environment.
    fn from_lookup(var: impl Fn(&str) -> Option<String>) -> HubSettings {
        let var = |name: &str| var(name).filter(|value| !value.trim().is_empty());
        let endpoint = var("HF_ENDPOINT")
            .map(|e| e.trim().trim_end_matches('/').to_string())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let cache_dir = var("HF_HUB_CACHE")
            .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .or_else(|| var("HF_HOME").map(|home| PathBuf::from(home).join("hub")))
            .or_else(|| var("XDG_CACHE_HOME").map(|xdg| PathBuf::from(xdg).join("huggingface/hub")))
            .unwrap_or_else(|| {
                // Without a home folder the cache falls back to one relative to the current
                // folder, which still works.
                let home = var("HOME")
                    .or_else(|| var("USERPROFILE"))
                    .unwrap_or_default();
                PathBuf::from(home).join(".cache/huggingface/hub")
            });
        let offline = var("HF_HUB_OFFLINE").is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        });
        let token = var("HF_TOKEN").map(|t| t.trim().to_string());
        HubSettings {
            endpoint,
            cache_dir,
            offline,
            token,
        }
    }
}

impl fmt::Debug for HubSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubSettings")
            .field("endpoint", &self.endpoint)
            .field("cache_dir", &self.cache_dir)
            .field("offline", &self.offline)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> HubSettings {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        HubSettings::from_lookup(|name| vars.get(name).cloned())
    }

    #[test]
    fn defaults_use_home_cache() {
        let s = settings(&[("HOME", "/home/u")]);
        assert_eq!(s.endpoint, "https://huggingface.co");
        assert_eq!(s.cache_dir, PathBuf::from("/home/u/.cache/huggingface/hub"));
        assert!(!s.offline);
        assert_eq!(s.token, None);
    }

    #[test]
    fn cache_dir_precedence() {
        let all = [
            ("HF_HUB_CACHE", "/a"),
            ("HUGGINGFACE_HUB_CACHE", "/b"),
            ("HF_HOME", "/c"),
            ("XDG_CACHE_HOME", "/d"),
            ("HOME", "/e"),
        ];
        let expected = [
            "/a",
            "/b",
            "/c/hub",
            "/d/huggingface/hub",
            "/e/.cache/huggingface/hub",
        ];
        for (skip, want) in expected.iter().enumerate() {
            assert_eq!(settings(&all[skip..]).cache_dir, PathBuf::from(want));
        }
    }

    #[test]
    fn empty_variables_count_as_unset() {
        let s = settings(&[
            ("HF_HUB_CACHE", ""),
            ("HF_HOME", "/h"),
            ("HF_ENDPOINT", " "),
        ]);
        assert_eq!(s.cache_dir, PathBuf::from("/h/hub"));
        assert_eq!(s.endpoint, "https://huggingface.co");
    }

    #[test]
    fn endpoint_loses_trailing_slash() {
        let s = settings(&[("HF_ENDPOINT", "http://127.0.0.1:8080/")]);
        assert_eq!(s.endpoint, "http://127.0.0.1:8080");
    }

    #[test]
    fn offline_accepts_truthy_values_only() {
        for on in ["1", "true", "TRUE", "yes", "On"] {
            assert!(settings(&[("HF_HUB_OFFLINE", on)]).offline, "{on}");
        }
        for off in ["0", "false", "no", "off", "2"] {
            assert!(!settings(&[("HF_HUB_OFFLINE", off)]).offline, "{off}");
        }
    }

    #[test]
    fn token_is_read_and_redacted_in_debug() {
        let s = settings(&[("HF_TOKEN", "hf_secret\n")]);
        assert_eq!(s.token.as_deref(), Some("hf_secret"));
        let debug = format!("{s:?}");
        assert!(!debug.contains("hf_secret"), "{debug}");
        assert!(debug.contains("<redacted>"), "{debug}");
    }
}
