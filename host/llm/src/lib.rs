//! `warden-llm`: the model providers, behind one seam. It depends on
//! `warden-protocol` only; the core reaches models through [`ModelResolver`]
//! → [`ResolvedModel`] → [`Provider`] and never sees a wire protocol.
//!
//! A [`Provider`] turns one [`LlmRequest`] into a stream of [`LlmEvent`]s.
//! The request carries only what the model is shown; a provider that keeps
//! something per session (the [`scripted`] one: its place in a cassette)
//! hands out a view of itself per conversation ([`Provider::conversation`]).
//!
//! Where to start reading: this file (the seam, [`Models`], model metadata),
//! then [`scripted`] (the cassette player, for the offline demo and tests),
//! then one adapter. The real adapters speak HTTP: [`openai`] (Chat
//! Completions, also for compatible local servers, and the Responses API)
//! and [`anthropic`] (Messages). Each is a request builder plus a stream
//! [`stream::Decoder`] over [`sse`] events; [`http`] and [`failure`] hold what
//! they share (the client, timeouts, HTTP errors classified, retry-after),
//! and [`retry`] the policy the core's turn applies. [`providers`] holds their
//! configuration, which the core's config file fills in.

pub mod anthropic;
mod error;
pub mod failure;
pub mod http;
pub mod openai;
pub mod providers;
pub mod retry;
pub mod scripted;
pub mod sse;
pub mod stream;

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::Stream;
use serde::{Deserialize, Serialize};
use warden_protocol::{LlmEvent, LlmRequest, ModelRef, ProviderError, Tokens};

pub use providers::ProviderConfig;
pub use retry::RetryPolicy;

pub use error::{ModelError, Result};

/// The events of one model request.
pub type EventStream = Pin<Box<dyn Stream<Item = LlmEvent> + Send>>;

/// One model provider: a wire protocol and an endpoint.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// Start one request. Errors before the stream starts (HTTP status,
    /// connection refused) are returned here; errors after it started arrive
    /// as [`LlmEvent::Error`]. Dropping the stream cancels the request.
    async fn stream(&self, request: LlmRequest) -> std::result::Result<EventStream, ProviderError>;

    /// This provider as one conversation (a session, named by `id`) sees it,
    /// for a provider that keeps something per conversation; `None` (the
    /// default) when every conversation sees the same provider, as with
    /// every HTTP adapter. The request itself carries no session.
    fn conversation(&self, id: &str) -> Option<Arc<dyn Provider>> {
        let _ = id;
        None
    }
}

/// Prices in dollars per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    #[serde(default)]
    pub input: f64,
    #[serde(default)]
    pub output: f64,
    #[serde(default)]
    pub cache_read: f64,
    #[serde(default)]
    pub cache_write: f64,
}

impl Prices {
    /// The cost of a step's tokens.
    pub fn cost(&self, t: &Tokens) -> f64 {
        (t.input as f64 * self.input
            + t.output as f64 * self.output
            + t.reasoning as f64 * self.output
            + t.cache.read as f64 * self.cache_read
            + t.cache.write as f64 * self.cache_write)
            / 1_000_000.0
    }
}

/// What the loop needs to know about a model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    pub reference: ModelRef,
    /// The context window in tokens; `None` when unknown (no overflow check).
    pub context_limit: Option<u64>,
    /// The most tokens it may answer with; also the reserve kept free in the context.
    pub output_limit: Option<u32>,
    pub prices: Prices,
}

/// A model ready to be asked.
#[derive(Clone)]
pub struct ResolvedModel {
    pub info: ModelInfo,
    pub provider: Arc<dyn Provider>,
}

impl ResolvedModel {
    /// The provider to stream the conversation `id`'s requests through.
    pub fn provider_for(&self, id: &str) -> Arc<dyn Provider> {
        self.provider
            .conversation(id)
            .unwrap_or_else(|| self.provider.clone())
    }
}

/// Finds the provider and metadata for a model reference.
pub trait ModelResolver: Send + Sync {
    fn resolve(&self, model: &ModelRef) -> Result<ResolvedModel>;
}

/// Builds a provider for a model of one provider name.
pub type ProviderFactory = Arc<dyn Fn(&ModelRef) -> Result<ResolvedModel> + Send + Sync>;

/// The default resolver: `scripted` plus whatever providers are registered.
/// Resolved models are cached, so a cassette keeps its place across rounds.
#[derive(Clone, Default)]
pub struct Models {
    factories: Arc<Mutex<HashMap<String, ProviderFactory>>>,
    cache: Arc<Mutex<HashMap<ModelRef, ResolvedModel>>>,
}

impl Models {
    /// A resolver that knows the `scripted` provider.
    pub fn new() -> Self {
        let m = Models::default();
        m.register("scripted", Arc::new(scripted::resolve));
        m
    }

    /// A resolver for everything a config can name: `scripted`, the
    /// built-in `openai` and `anthropic` (which work from environment
    /// variables alone), and every provider in `providers` (the config
    /// file's `provider` table).
    pub fn from_providers(providers: &BTreeMap<String, ProviderConfig>) -> Self {
        Self::from_providers_with_env(providers, providers::process_env())
    }

    /// [`Models::from_providers`], reading environment variables through `env`.
    pub fn from_providers_with_env(
        providers: &BTreeMap<String, ProviderConfig>,
        env: providers::EnvLookup,
    ) -> Self {
        let m = Models::new();
        let mut names: Vec<&str> = vec!["openai", "anthropic"];
        names.extend(providers.keys().map(String::as_str));
        for name in names {
            m.register(
                name,
                providers::factory(name, providers.get(name), env.clone()),
            );
        }
        m
    }

    /// Add (or replace) the factory for a provider name.
    pub fn register(&self, provider: &str, factory: ProviderFactory) {
        self.factories
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(provider.to_string(), factory);
    }

    /// Parse `provider/model` or `scripted:PATH`.
    pub fn parse(text: &str) -> Result<ModelRef> {
        if let Some(path) = text.strip_prefix("scripted:") {
            if path.is_empty() {
                return Err(ModelError::Model {
                    model: text.into(),
                    reason: "give the cassette's path: scripted:PATH".into(),
                });
            }
            return Ok(ModelRef {
                provider: "scripted".into(),
                model: path.into(),
            });
        }
        match text.split_once('/') {
            Some((p, m)) if !p.is_empty() && !m.is_empty() => Ok(ModelRef {
                provider: p.into(),
                model: m.into(),
            }),
            _ => Err(ModelError::Model {
                model: text.into(),
                reason: "write models as provider/model (e.g. openai/gpt-4o) or scripted:PATH"
                    .into(),
            }),
        }
    }
}

impl ModelResolver for Models {
    fn resolve(&self, model: &ModelRef) -> Result<ResolvedModel> {
        if let Some(m) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(model)
        {
            return Ok(m.clone());
        }
        let factory = {
            let f = self.factories.lock().unwrap_or_else(|p| p.into_inner());
            match f.get(&model.provider) {
                Some(f) => f.clone(),
                None => {
                    let mut known: Vec<&String> = f.keys().collect();
                    known.sort();
                    let known: Vec<&str> = known.iter().map(|s| s.as_str()).collect();
                    return Err(ModelError::Model {
                        model: model.to_string(),
                        reason: format!(
                            "unknown provider {:?}; known: {}",
                            model.provider,
                            known.join(", ")
                        ),
                    });
                }
            }
        };
        let resolved = factory(model)?;
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(model.clone(), resolved.clone());
        Ok(resolved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_parse() {
        assert_eq!(
            Models::parse("openai/gpt-4o").unwrap(),
            ModelRef {
                provider: "openai".into(),
                model: "gpt-4o".into()
            }
        );
        assert_eq!(
            Models::parse("scripted:/a/b.json").unwrap().model,
            "/a/b.json"
        );
        assert!(Models::parse("gpt-4o").is_err());
        assert!(Models::parse("scripted:").is_err());
    }

    #[test]
    fn unknown_providers_are_named() {
        let m = Models::new();
        let err = m
            .resolve(&ModelRef {
                provider: "nope".into(),
                model: "x".into(),
            })
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .contains("unknown provider \"nope\"; known: scripted"),
            "{err}"
        );
    }
}
