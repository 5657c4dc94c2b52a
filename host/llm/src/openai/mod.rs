//! OpenAI's two wire protocols: Chat Completions (also spoken by Groq,
//! OpenRouter and the local servers: Ollama, llama.cpp, vLLM, LM Studio)
//! and the Responses API (OpenAI, LM Studio).

pub mod chat;
pub mod chat_stream;
pub mod responses;
pub mod responses_stream;

use serde_json::{Map, Value};
use warden_protocol::{LlmRequest, ProviderError};

use super::http::Endpoint;
use super::stream::drive;
use super::{EventStream, Provider};
pub use chat::MaxTokensField;
use chat_stream::ChatDecoder;
use responses_stream::ResponsesDecoder;

/// A model behind a Chat Completions endpoint.
pub struct ChatProvider {
    pub endpoint: Endpoint,
    pub max_tokens_field: MaxTokensField,
    /// The model's configured request options.
    pub options: Option<Map<String, Value>>,
    /// The conversation's messages as already encoded.
    pub encoded: chat::Encoded,
}

#[async_trait::async_trait]
impl Provider for ChatProvider {
    async fn stream(&self, request: LlmRequest) -> Result<EventStream, ProviderError> {
        let body = chat::body(&request, self.max_tokens_field, self.options.as_ref())
            .with_encoded(&self.encoded);
        let response = self.endpoint.post("chat/completions", &body).await?;
        let provider = &self.endpoint.settings.provider;
        Ok(drive(
            provider,
            response,
            ChatDecoder::new(provider),
            self.endpoint.settings.idle_timeout,
        ))
    }
}

/// A model behind a Responses endpoint.
pub struct ResponsesProvider {
    pub endpoint: Endpoint,
    pub options: Option<Map<String, Value>>,
}

#[async_trait::async_trait]
impl Provider for ResponsesProvider {
    async fn stream(&self, request: LlmRequest) -> Result<EventStream, ProviderError> {
        let body = responses::body(&request, self.options.as_ref());
        let response = self.endpoint.post("responses", &body).await?;
        let provider = &self.endpoint.settings.provider;
        Ok(drive(
            provider,
            response,
            ResponsesDecoder::new(provider),
            self.endpoint.settings.idle_timeout,
        ))
    }
}
