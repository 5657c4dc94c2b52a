//! Real providers: their config, the two that work with no config at all
//! (`openai`, `anthropic`), and the factories [`super::Models`] resolves
//! `provider/model` with.
//!
//! ```json
//! "provider": {
//!   "openai": {"models": {"gpt-4o": {"context_limit": 128000, "output_limit": 16384,
//!                                    "prices": {"input": 2.5, "output": 10, "cache_read": 1.25}}}},
//!   "ollama": {"api": "openai-chat", "base_url": "http://127.0.0.1:11434/v1"},
//!   "work": {"api": "anthropic", "base_url": "https://llm-gateway.example", "api_key_env": "WORK_KEY"}
//! }
//! ```
//!
//! A key is read from the environment variable `api_key_env` names when the
//! model is resolved, so a missing key is reported before anything is written.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};
use warden_protocol::ModelRef;

use super::anthropic::{self, AnthropicProvider};
use super::http::{Endpoint, EndpointSettings};
use super::openai::{ChatProvider, MaxTokensField, ResponsesProvider};
use super::{ModelInfo, Prices, Provider, ResolvedModel};
use crate::{ModelError, Result};

/// OpenAI's own endpoint (also the default of `OPENAI_BASE_URL`).
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Anthropic's own endpoint (without `/v1`, as `ANTHROPIC_BASE_URL` is given).
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

const CONNECT_TIMEOUT_MS: u64 = 10_000;
/// Reasoning models may think for minutes before their first token.
const IDLE_TIMEOUT_MS: u64 = 300_000;

/// The wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Api {
    /// `POST /chat/completions` (OpenAI, Groq, OpenRouter, Ollama, llama.cpp, vLLM, LM Studio).
    #[serde(rename = "openai-chat", alias = "openai-chat-completions")]
    OpenaiChat,
    /// `POST /responses` (OpenAI, LM Studio).
    #[serde(rename = "openai-responses")]
    OpenaiResponses,
    /// `POST /v1/messages`.
    #[serde(rename = "anthropic", alias = "anthropic-messages")]
    Anthropic,
}

/// One provider in the config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// Required, except for `openai` and `anthropic`.
    #[serde(default)]
    pub api: Option<Api>,
    /// Required, except for `openai` (`OPENAI_BASE_URL`, else OpenAI's) and
    /// `anthropic` (`ANTHROPIC_BASE_URL`, else Anthropic's).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The environment variable holding the API key. When given, it must be
    /// set. Without it no key is sent (local servers), except for `openai` /
    /// `anthropic`, which read `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Extra headers on every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// How long connecting may take (default 10 s).
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    /// How long the server may stay silent, before its answer starts and
    /// within its stream (default 300 s).
    #[serde(default)]
    pub idle_timeout_ms: Option<u64>,
    /// What is known about its models, by the name used in `provider/model`.
    /// Models not listed still work, with no limits and no prices.
    #[serde(default)]
    pub models: BTreeMap<String, ModelConfig>,
}

/// One model of a provider.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The context window in tokens.
    #[serde(default)]
    pub context_limit: Option<u64>,
    /// The most tokens it may answer with; sent as the request's output limit.
    #[serde(default)]
    pub output_limit: Option<u32>,
    /// Dollars per million tokens.
    #[serde(default)]
    pub prices: Option<Prices>,
    /// Fields merged into every request body as given (`temperature`,
    /// `reasoning_effort`, Anthropic's `thinking`, a local server's knobs).
    #[serde(default)]
    pub options: Option<Map<String, Value>>,
}

/// Check one provider entry; the message says what to write instead.
pub fn validate(name: &str, p: &ProviderConfig) -> std::result::Result<(), String> {
    if name.is_empty() || name.contains('/') || name == "scripted" {
        return Err("provider names must be non-empty, without '/', and not \"scripted\"".into());
    }
    let builtin = matches!(name, "openai" | "anthropic");
    if p.api.is_none() && !builtin {
        return Err("set \"api\" to \"openai-chat\", \"openai-responses\" or \"anthropic\"".into());
    }
    match &p.base_url {
        Some(url) => check_url(url)?,
        None if !builtin => {
            return Err("set \"base_url\", e.g. \"http://127.0.0.1:11434/v1\"".into());
        }
        None => {}
    }
    if p.api_key_env
        .as_deref()
        .is_some_and(|v| v.trim().is_empty())
    {
        return Err("\"api_key_env\" must name an environment variable".into());
    }
    if p.connect_timeout_ms == Some(0) || p.idle_timeout_ms == Some(0) {
        return Err("timeouts must be at least 1 ms".into());
    }
    for (model, m) in &p.models {
        if m.context_limit == Some(0) || m.output_limit == Some(0) {
            return Err(format!("models.{model}: limits must be positive"));
        }
        if let (Some(c), Some(o)) = (m.context_limit, m.output_limit)
            && u64::from(o) >= c
        {
            return Err(format!(
                "models.{model}: output_limit ({o}) must be below context_limit ({c})"
            ));
        }
        if let Some(pr) = &m.prices {
            let all = [pr.input, pr.output, pr.cache_read, pr.cache_write];
            if all.iter().any(|x| !x.is_finite() || *x < 0.0) {
                return Err(format!(
                    "models.{model}.prices: prices are dollars per million tokens, zero or more"
                ));
            }
        }
    }
    Ok(())
}

fn check_url(url: &str) -> std::result::Result<(), String> {
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(()),
        Ok(_) => Err(format!(
            "base_url {url:?} must start with http:// or https://"
        )),
        Err(e) => Err(format!("base_url {url:?} is not a URL: {e}")),
    }
}

/// Reads an environment variable; injectable for tests.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The process environment.
pub fn process_env() -> EnvLookup {
    Arc::new(|k| std::env::var(k).ok())
}

/// A provider with its defaults filled in.
struct Settings {
    name: String,
    api: Api,
    base_url: String,
    key_env: Option<String>,
    key_required: bool,
    config: ProviderConfig,
}

fn settings(name: &str, config: Option<&ProviderConfig>, env: &EnvLookup) -> Result<Settings> {
    let config = config.cloned().unwrap_or_default();
    let bad = |reason: String| ModelError::Config(format!("provider.{name}: {reason}"));
    validate(name, &config).map_err(bad)?;
    let (default_api, url_env, default_url, key_var) = match name {
        "openai" => (
            Some(Api::OpenaiChat),
            "OPENAI_BASE_URL",
            OPENAI_BASE_URL,
            "OPENAI_API_KEY",
        ),
        "anthropic" => (
            Some(Api::Anthropic),
            "ANTHROPIC_BASE_URL",
            ANTHROPIC_BASE_URL,
            "ANTHROPIC_API_KEY",
        ),
        _ => (None, "", "", ""),
    };
    let api = config
        .api
        .or(default_api)
        .ok_or_else(|| bad("set \"api\"".into()))?;
    let from_env = (!url_env.is_empty())
        .then(|| env(url_env))
        .flatten()
        .filter(|u| !u.trim().is_empty());
    if let Some(u) = &from_env {
        check_url(u).map_err(|e| ModelError::Config(format!("{url_env}: {e}")))?;
    }
    let base_url = config
        .base_url
        .clone()
        .or(from_env)
        .unwrap_or_else(|| default_url.to_string());
    // The provider's own endpoint always needs its key; a compatible server
    // pointed at with a base URL gets the key only if there is one.
    let (key_env, key_required) = match (&config.api_key_env, key_var) {
        (Some(v), _) => (Some(v.clone()), true),
        (None, "") => (None, false),
        (None, v) => (
            Some(v.to_string()),
            base_url.trim_end_matches('/') == default_url,
        ),
    };
    Ok(Settings {
        name: name.to_string(),
        api,
        base_url,
        key_env,
        key_required,
        config,
    })
}

/// Build the factory for one provider name.
pub fn factory(
    name: &str,
    config: Option<&ProviderConfig>,
    env: EnvLookup,
) -> super::ProviderFactory {
    let name = name.to_string();
    let config = config.cloned();
    Arc::new(move |model: &ModelRef| {
        let s = settings(&name, config.as_ref(), &env)?;
        resolve(&s, model, &env)
    })
}

fn resolve(s: &Settings, model: &ModelRef, env: &EnvLookup) -> Result<ResolvedModel> {
    let key = s
        .key_env
        .as_deref()
        .and_then(|v| env(v))
        .filter(|k| !k.trim().is_empty());
    if s.key_required && key.is_none() {
        let var = s.key_env.as_deref().unwrap_or("");
        let hint = match s.name.as_str() {
            "openai" => " (or set OPENAI_BASE_URL to use an OpenAI-compatible server)",
            _ => "",
        };
        return Err(ModelError::Model {
            model: model.to_string(),
            reason: format!(
                "no API key: set the environment variable {var} to your {} API key{hint}",
                s.name
            ),
        });
    }
    let mut headers: Vec<(String, String)> = Vec::new();
    match (s.api, &key) {
        (Api::Anthropic, k) => {
            headers.push(("anthropic-version".into(), anthropic::API_VERSION.into()));
            if let Some(k) = k {
                headers.push(("x-api-key".into(), k.clone()));
            }
        }
        (_, Some(k)) => headers.push(("authorization".into(), format!("Bearer {k}"))),
        (_, None) => {}
    }
    for (k, v) in &s.config.headers {
        headers.retain(|(h, _)| !h.eq_ignore_ascii_case(k));
        headers.push((k.clone(), v.clone()));
    }
    let endpoint = Endpoint::new(EndpointSettings {
        provider: s.name.clone(),
        base_url: s.base_url.clone(),
        headers,
        key_env: s.key_env.clone(),
        connect_timeout: Duration::from_millis(
            s.config.connect_timeout_ms.unwrap_or(CONNECT_TIMEOUT_MS),
        ),
        idle_timeout: Duration::from_millis(s.config.idle_timeout_ms.unwrap_or(IDLE_TIMEOUT_MS)),
    })
    .map_err(|reason| ModelError::Config(format!("provider.{}: {reason}", s.name)))?;

    let m = s
        .config
        .models
        .get(&model.model)
        .cloned()
        .unwrap_or_default();
    let (known_context, known_output) = match s.api {
        Api::Anthropic => anthropic::known_limits(&model.model),
        _ => (None, None),
    };
    let info = ModelInfo {
        reference: model.clone(),
        context_limit: m.context_limit.or(known_context),
        output_limit: m.output_limit.or(known_output),
        prices: m.prices.unwrap_or_default(),
    };
    let options = m.options;
    let provider: Arc<dyn Provider> = match s.api {
        Api::OpenaiChat => {
            let official = reqwest::Url::parse(&s.base_url)
                .ok()
                .is_some_and(|u| u.host_str() == Some("api.openai.com"));
            Arc::new(ChatProvider {
                endpoint,
                max_tokens_field: if official {
                    MaxTokensField::MaxCompletionTokens
                } else {
                    MaxTokensField::MaxTokens
                },
                options,
                encoded: Default::default(),
            })
        }
        Api::OpenaiResponses => Arc::new(ResponsesProvider { endpoint, options }),
        Api::Anthropic => Arc::new(AnthropicProvider {
            endpoint,
            default_max_tokens: info.output_limit,
            options,
        }),
    };
    Ok(ResolvedModel { info, provider })
}

#[cfg(test)]
#[path = "providers_tests.rs"]
mod tests;
