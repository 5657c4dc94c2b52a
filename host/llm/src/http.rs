//! The HTTP side every adapter shares: one client per provider, a POST that
//! either yields a streaming response or a [`ProviderError`], and the
//! timeouts that turn a silent server into a clear error instead of a hang.

use std::time::{Duration, SystemTime};

use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use warden_protocol::ProviderError;
use warden_protocol::llm::ErrorKind;

use super::failure;

/// An error body longer than this is cut: it is only read for its message.
const MAX_ERROR_BODY: usize = 1024 * 1024;

/// Where and how to reach one provider.
#[derive(Clone)]
pub struct EndpointSettings {
    /// The provider's name, used in every message.
    pub provider: String,
    /// The base URL, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Headers sent with every request (authentication included).
    pub headers: Vec<(String, String)>,
    /// The environment variable the key came from, named in auth errors.
    pub key_env: Option<String>,
    /// How long a TCP/TLS connection may take.
    pub connect_timeout: Duration,
    /// How long the server may stay silent: before its response headers, and
    /// between two pieces of a stream.
    pub idle_timeout: Duration,
}

/// Keys stay out of logs and panics: secret header values are not printed.
impl std::fmt::Debug for EndpointSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    if is_secret(k) {
                        "<redacted>"
                    } else {
                        v.as_str()
                    },
                )
            })
            .collect();
        f.debug_struct("EndpointSettings")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("headers", &headers)
            .field("key_env", &self.key_env)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .finish()
    }
}

/// A provider's endpoint with its HTTP client.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub settings: EndpointSettings,
    headers: HeaderMap,
    client: reqwest::Client,
}

impl Endpoint {
    /// Build the client. Fails on a header that is not valid HTTP, or a base
    /// URL that cannot be parsed.
    pub fn new(settings: EndpointSettings) -> Result<Endpoint, String> {
        let url = reqwest::Url::parse(&settings.base_url)
            .map_err(|e| format!("base_url {:?} is not a URL: {e}", settings.base_url))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "base_url {:?} must start with http:// or https://",
                settings.base_url
            ));
        }
        let mut headers = HeaderMap::new();
        for (k, v) in &settings.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| format!("header name {k:?}: {e}"))?;
            let mut value = HeaderValue::from_str(v).map_err(|_| {
                format!(
                    "header {k:?}: the value is not valid in HTTP (a key with a newline in it?)"
                )
            })?;
            value.set_sensitive(is_secret(k));
            headers.insert(name, value);
        }
        let mut builder = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .user_agent(concat!("warden/", env!("CARGO_PKG_VERSION")));
        // A server on this machine is never reached through a proxy.
        if matches!(
            url.host_str(),
            Some("localhost" | "127.0.0.1" | "[::1]" | "::1")
        ) {
            builder = builder.no_proxy();
        }
        let client = builder
            .build()
            .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
        Ok(Endpoint {
            settings,
            headers,
            client,
        })
    }

    /// The full URL of `path` under the base URL.
    pub fn url(&self, path: &str) -> String {
        format!(
            "{}/{}",
            self.settings.base_url.trim_end_matches('/'),
            path.trim_start_matches('/')
        )
    }

    /// POST a JSON body and wait for the response headers. A non-2xx status
    /// becomes a [`ProviderError`] with the body's message and the wait the
    /// provider asked for; so does a 200 that carries a JSON error instead of
    /// an event stream.
    pub async fn post(
        &self,
        path: &str,
        body: &(impl serde::Serialize + ?Sized),
    ) -> Result<reqwest::Response, ProviderError> {
        let url = self.url(path);
        let provider = &self.settings.provider;
        let bytes = serde_json::to_vec(body).map_err(|e| {
            ProviderError::new(
                ErrorKind::Other,
                format!("{provider}: cannot encode the request: {e}"),
            )
        })?;
        let request = self
            .client
            .post(&url)
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "text/event-stream")
            .body(bytes);
        let idle = self.settings.idle_timeout;
        let response = match tokio::time::timeout(idle, request.send()).await {
            Err(_) => {
                return Err(ProviderError::new(
                    ErrorKind::Network,
                    format!(
                        "{provider}: no response from {url} within {}; the server may be overloaded or stuck",
                        seconds(idle)
                    ),
                ));
            }
            Ok(Err(e)) => return Err(self.send_error(&url, &e)),
            Ok(Ok(r)) => r,
        };
        let status = response.status().as_u16();
        if !response.status().is_success() {
            let headers = response.headers().clone();
            let text = self.read_capped(response).await;
            let wait = failure::retry_after(
                header(&headers, "retry-after-ms"),
                header(&headers, "retry-after"),
                SystemTime::now(),
            );
            return Err(failure::from_response(
                provider,
                status,
                &text,
                wait,
                self.settings.key_env.as_deref(),
            ));
        }
        let is_json = header(response.headers(), CONTENT_TYPE.as_str())
            .is_some_and(|ct| ct.trim_start().starts_with("application/json"));
        if is_json {
            // We asked for a stream; a JSON body here is an error or a server ignoring `stream`.
            let text = self.read_capped(response).await;
            return Err(match serde_json::from_str::<Value>(&text) {
                Ok(v) if failure::describe(&v).is_some() => failure::in_band(provider, &v),
                _ => ProviderError::new(
                    ErrorKind::Malformed,
                    format!(
                        "{provider}: expected an event stream from {url} but got a JSON body: {}",
                        failure::clip(&text, 300)
                    ),
                ),
            });
        }
        Ok(response)
    }

    fn send_error(&self, url: &str, e: &reqwest::Error) -> ProviderError {
        let provider = &self.settings.provider;
        let chain = error_chain(e);
        let message = if e.is_connect() {
            format!(
                "{provider}: cannot connect to {url}: {chain}; is the server running, and is base_url right?"
            )
        } else if e.is_timeout() {
            format!(
                "{provider}: connecting to {url} timed out after {}: {chain}",
                seconds(self.settings.connect_timeout)
            )
        } else {
            format!("{provider}: the request to {url} failed: {chain}")
        };
        ProviderError::new(ErrorKind::Network, message)
    }

    /// Read an error body, at most [`MAX_ERROR_BODY`] bytes and within the idle timeout.
    async fn read_capped(&self, response: reqwest::Response) -> String {
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        let read = async {
            while let Some(Ok(chunk)) = stream.next().await {
                let room = MAX_ERROR_BODY.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if body.len() >= MAX_ERROR_BODY {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(self.settings.idle_timeout, read).await;
        String::from_utf8_lossy(&body).into_owned()
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn is_secret(header: &str) -> bool {
    let h = header.to_ascii_lowercase();
    h == "authorization" || h.contains("key") || h.contains("token")
}

/// An error and its causes, e.g. "error sending request: client error
/// (Connect): tcp connect error: Connection refused (os error 111)".
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// "2s", "1.5s", "300ms".
pub fn seconds(d: Duration) -> String {
    if d.as_millis() < 1000 {
        format!("{}ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_not_printed() {
        let s = EndpointSettings {
            provider: "p".into(),
            base_url: "http://127.0.0.1:1".into(),
            headers: vec![
                ("authorization".into(), "Bearer sk-secret".into()),
                ("x-api-key".into(), "sk-secret".into()),
                ("x-team".into(), "infra".into()),
            ],
            key_env: None,
            connect_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
        };
        let shown = format!("{:?}", Endpoint::new(s).unwrap());
        assert!(!shown.contains("sk-secret"), "{shown}");
        assert!(shown.contains("infra"), "{shown}");
    }

    #[test]
    fn urls_join_and_bad_ones_are_refused() {
        let mk = |base: &str| {
            Endpoint::new(EndpointSettings {
                provider: "p".into(),
                base_url: base.into(),
                headers: vec![],
                key_env: None,
                connect_timeout: Duration::from_secs(1),
                idle_timeout: Duration::from_secs(1),
            })
        };
        assert_eq!(
            mk("http://h:1/v1/").unwrap().url("/chat/completions"),
            "http://h:1/v1/chat/completions"
        );
        assert!(mk("ftp://h").unwrap_err().contains("http:// or https://"));
        assert!(mk("h:1").is_err());
    }
}
