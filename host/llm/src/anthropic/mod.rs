//! Anthropic's Messages API.

pub mod request;
pub mod stream;

use serde_json::{Map, Value};
use warden_protocol::{LlmRequest, ProviderError};

use super::http::Endpoint;
use super::{EventStream, Provider};
use stream::AnthropicDecoder;

/// The API version this adapter speaks (sent as `anthropic-version`).
pub const API_VERSION: &str = "2023-06-01";

/// A model behind the Messages API.
pub struct AnthropicProvider {
    pub endpoint: Endpoint,
    /// `max_tokens` when the request names no limit.
    pub default_max_tokens: Option<u32>,
    pub options: Option<Map<String, Value>>,
}

#[async_trait::async_trait]
impl Provider for AnthropicProvider {
    async fn stream(&self, request: LlmRequest) -> Result<EventStream, ProviderError> {
        let body = request::body(&request, self.default_max_tokens, self.options.as_ref());
        let response = self.endpoint.post("v1/messages", &body).await?;
        let provider = &self.endpoint.settings.provider;
        Ok(super::stream::drive(
            provider,
            response,
            AnthropicDecoder::new(provider),
            self.endpoint.settings.idle_timeout,
        ))
    }
}

/// Limits of the Claude families, for models the config does not describe:
/// (context window, output limit). Conservative where a family varies.
pub fn known_limits(model: &str) -> (Option<u64>, Option<u32>) {
    if !model.starts_with("claude-") {
        return (None, None);
    }
    let output = if model.starts_with("claude-3-5") {
        8192
    } else if model.starts_with("claude-3-7") {
        64000
    } else if model.starts_with("claude-3-") {
        4096
    } else {
        // Claude 4 and later: Opus 4 allows 32000, Sonnet and Haiku more.
        32000
    };
    (Some(200_000), Some(output))
}
