//! Turning what a provider says went wrong into a [`ProviderError`]: the
//! HTTP status and error body before a stream, the error objects inside one,
//! and how long the provider asked us to wait. The kind decides whether the
//! processor retries (see `ProviderError::retryable`).

use std::time::{Duration, SystemTime};

use serde_json::Value;
use warden_protocol::ProviderError;
use warden_protocol::llm::ErrorKind;

/// Words providers use when a request does not fit the context window:
/// OpenAI `context_length_exceeded` / "maximum context length", Anthropic
/// "prompt is too long", vLLM "maximum context length", llama.cpp
/// "exceeds the available context size", Groq/Mistral "context window".
const OVERFLOW_MARKERS: [&str; 7] = [
    "context_length_exceeded",
    "context length",
    "context window",
    "context size",
    "prompt is too long",
    "input is too long",
    "exceed_context_size",
];

/// Whether an error message or code says the request overflows the context.
pub fn is_context_overflow(text: &str) -> bool {
    let t = text.to_lowercase();
    OVERFLOW_MARKERS.iter().any(|m| t.contains(m))
}

/// What an error object says: its message, its type or code, and the
/// numeric status some providers put inside (Groq `status_code`, OpenRouter `code`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Described {
    pub message: String,
    /// The error's names, most specific first: its `code`, then its `type`.
    pub codes: Vec<String>,
    pub status: Option<u16>,
}

/// Read the error out of a JSON error body or in-band error object. Knows
/// `{"error": {"message", "type"|"code", "metadata": {"raw", "provider_name"}}}`
/// (OpenAI, Anthropic, OpenRouter, Groq), `{"error": "text"}` (Ollama),
/// `{"message", "type", "code"}` (vLLM) and `{"detail": ...}` (FastAPI servers).
pub fn describe(body: &Value) -> Option<Described> {
    let obj = match body.get("error") {
        Some(Value::String(s)) => {
            return Some(Described {
                message: s.clone(),
                ..Described::default()
            });
        }
        Some(e @ Value::Object(_)) => e,
        _ => body,
    };
    let mut message = match (obj.get("message"), obj.get("detail")) {
        (Some(Value::String(m)), _) => m.clone(),
        (_, Some(Value::String(d))) => d.clone(),
        (_, Some(d @ (Value::Array(_) | Value::Object(_)))) => d.to_string(),
        _ => return None,
    };
    let meta = obj.get("metadata");
    // OpenRouter hides the useful part (which upstream, and what it said) in metadata.
    if let Some(raw) = meta.and_then(|m| m.get("raw")).and_then(Value::as_str) {
        let who = meta
            .and_then(|m| m.get("provider_name"))
            .and_then(Value::as_str);
        message = match who {
            Some(who) => format!("{message} ({who}): {raw}"),
            None => format!("{message}: {raw}"),
        };
    }
    let mut codes: Vec<String> = Vec::new();
    for v in [obj.get("code"), obj.get("type")].into_iter().flatten() {
        if let Some(c) = v.as_str().filter(|c| !c.is_empty())
            && !codes.iter().any(|x| x == c)
        {
            codes.push(c.to_string());
        }
    }
    let status = [obj.get("status_code"), obj.get("code"), obj.get("status")]
        .into_iter()
        .flatten()
        .find_map(|v| v.as_u64())
        .and_then(|n| u16::try_from(n).ok());
    Some(Described {
        message,
        codes,
        status,
    })
}

/// The kind for an error named by type or code, if the name is known.
fn kind_for_code(code: &str) -> Option<ErrorKind> {
    Some(match code {
        "overloaded_error" | "overloaded" => ErrorKind::Overloaded,
        "rate_limit_error" | "rate_limit_exceeded" | "rate_limited" | "too_many_requests" => {
            ErrorKind::RateLimited
        }
        "api_error"
        | "server_error"
        | "internal_server_error"
        | "internal_error"
        | "service_unavailable"
        | "timeout" => ErrorKind::Server,
        // Quota and billing: waiting does not help; the operator must act.
        "authentication_error"
        | "permission_error"
        | "invalid_api_key"
        | "insufficient_quota"
        | "billing_error"
        | "billing_hard_limit_reached" => ErrorKind::Auth,
        "context_length_exceeded" | "string_above_max_length" => ErrorKind::ContextOverflow,
        "invalid_request_error"
        | "not_found_error"
        | "request_too_large"
        | "tool_use_failed"
        | "invalid_prompt"
        | "model_not_found"
        | "invalid_value" => ErrorKind::BadRequest,
        _ => return None,
    })
}

/// The kind for an HTTP status.
pub fn kind_for_status(status: u16) -> ErrorKind {
    match status {
        401..=403 => ErrorKind::Auth,
        // The OpenAI and Anthropic SDKs retry these two: a timeout or a lock conflict on their side.
        408 | 409 => ErrorKind::Server,
        429 => ErrorKind::RateLimited,
        529 => ErrorKind::Overloaded,
        500..=599 => ErrorKind::Server,
        _ => ErrorKind::BadRequest,
    }
}

/// Decide the kind from everything known, in this order: an account that
/// is refused (by code, or 401/403) stays refused whatever else is said; a
/// request that overflows the context says so in its code or message; a
/// status that says "try again" (429, 5xx) is not made permanent by a vague
/// code, though a more precise retryable code (overloaded) refines it;
/// otherwise a known code wins over the status.
fn classify(status: Option<u16>, d: &Described) -> ErrorKind {
    let by_code: Vec<ErrorKind> = d.codes.iter().filter_map(|c| kind_for_code(c)).collect();
    let by_status = status.map(kind_for_status);
    let has = |k: ErrorKind| by_code.contains(&k);
    if has(ErrorKind::Auth) || by_status == Some(ErrorKind::Auth) {
        return ErrorKind::Auth;
    }
    let overflow = has(ErrorKind::ContextOverflow)
        || is_context_overflow(&d.message)
        || d.codes.iter().any(|c| is_context_overflow(c));
    if overflow && !by_status.is_some_and(retryable) {
        return ErrorKind::ContextOverflow;
    }
    let kind = match (by_code.iter().copied().find(|k| retryable(*k)), by_status) {
        (Some(c), Some(s)) if retryable(s) => c,
        (_, Some(s)) if retryable(s) => s,
        _ => by_code
            .first()
            .copied()
            .or(by_status)
            .unwrap_or(ErrorKind::Other),
    };
    if kind == ErrorKind::Server && d.message.to_lowercase().contains("overloaded") {
        return ErrorKind::Overloaded;
    }
    kind
}

fn retryable(kind: ErrorKind) -> bool {
    ProviderError::new(kind, "").retryable()
}

/// An error object found inside a stream (an `error` event or an `error`
/// field in a chunk). `provider` names who said it.
pub fn in_band(provider: &str, body: &Value) -> ProviderError {
    let d = describe(body).unwrap_or_else(|| Described {
        message: format!(
            "an error without a message: {}",
            clip(&body.to_string(), 300)
        ),
        ..Described::default()
    });
    let kind = classify(d.status, &d);
    let mut e = ProviderError::new(kind, compose(provider, &d, kind, None));
    e.status = d.status;
    e
}

/// An HTTP error response before any stream. `key_env` names the variable
/// holding the key, so an auth failure can say what to check.
pub fn from_response(
    provider: &str,
    status: u16,
    body: &str,
    retry_after_ms: Option<u64>,
    key_env: Option<&str>,
) -> ProviderError {
    let parsed = serde_json::from_str::<Value>(body).ok();
    let d = parsed
        .as_ref()
        .and_then(describe)
        .unwrap_or_else(|| Described {
            message: if body.trim().is_empty() {
                "the response had no body".to_string()
            } else {
                clip(body.trim(), 500)
            },
            ..Described::default()
        });
    let kind = classify(Some(status), &d);
    let mut e = ProviderError::new(kind, compose(provider, &d, kind, key_env));
    e.status = Some(status);
    e.retry_after_ms = retry_after_ms;
    e
}

fn compose(provider: &str, d: &Described, kind: ErrorKind, key_env: Option<&str>) -> String {
    let mut m = format!("{provider}: {}", d.message);
    if let Some(code) = d.codes.first()
        && !d.message.contains(code.as_str())
    {
        m.push_str(&format!(" ({code})"));
    }
    match kind {
        ErrorKind::Auth => match key_env {
            Some(var) => m.push_str(&format!(
                "; check the key in ${var} and the account's access"
            )),
            None => m.push_str("; check the provider's API key and the account's access"),
        },
        ErrorKind::ContextOverflow => {
            m.push_str("; the conversation is longer than the model's context window")
        }
        _ => {}
    }
    m
}

/// How long the provider asked us to wait: `retry-after-ms` (OpenAI, in
/// ms), else `retry-after` in seconds or as an HTTP date (RFC 9110 §10.2.3).
/// A date in the past means now.
pub fn retry_after(ms: Option<&str>, header: Option<&str>, now: SystemTime) -> Option<u64> {
    if let Some(ms) = ms.and_then(|v| v.trim().parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(ms.round() as u64);
    }
    let v = header?.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| (secs * 1000.0).round() as u64);
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .as_millis()
            .min(u64::MAX as u128) as u64,
    )
}

pub use warden_protocol::text::clip;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn retry_after_in_ms_seconds_or_a_date() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(retry_after(Some("250"), Some("9"), now), Some(250));
        assert_eq!(retry_after(Some("12.6"), None, now), Some(13));
        assert_eq!(retry_after(None, Some("2"), now), Some(2000));
        assert_eq!(retry_after(None, Some(" 0.5 "), now), Some(500));
        assert_eq!(
            retry_after(None, Some("Sun, 06 Nov 1994 08:49:47 GMT"), now),
            Some(10_000)
        );
        assert_eq!(
            retry_after(None, Some("Sun, 06 Nov 1994 08:49:00 GMT"), now),
            Some(0),
            "a date in the past means now"
        );
        assert_eq!(retry_after(Some("soon"), Some("later"), now), None);
        assert_eq!(retry_after(None, Some("-3"), now), None);
        assert_eq!(retry_after(None, None, now), None);
    }

    #[test]
    fn statuses_map_to_kinds() {
        let k = |status, body: &str| from_response("p", status, body, None, None).kind;
        assert_eq!(k(429, ""), ErrorKind::RateLimited);
        assert_eq!(k(500, ""), ErrorKind::Server);
        assert_eq!(k(503, ""), ErrorKind::Server);
        assert_eq!(k(529, ""), ErrorKind::Overloaded);
        assert_eq!(
            k(
                503,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            ErrorKind::Overloaded
        );
        assert_eq!(k(401, ""), ErrorKind::Auth);
        assert_eq!(k(403, ""), ErrorKind::Auth);
        assert_eq!(k(400, ""), ErrorKind::BadRequest);
        assert_eq!(k(404, ""), ErrorKind::BadRequest);
        assert_eq!(k(422, ""), ErrorKind::BadRequest);
        assert_eq!(
            k(
                429,
                r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota"}}"#
            ),
            ErrorKind::Auth,
            "an empty quota is not cured by waiting"
        );
        // OpenAI's refused key: type invalid_request_error, code invalid_api_key, HTTP 401.
        assert_eq!(
            k(
                401,
                r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#
            ),
            ErrorKind::Auth
        );
        assert_eq!(
            k(
                403,
                r#"{"error":{"message":"no","type":"invalid_request_error"}}"#
            ),
            ErrorKind::Auth,
            "the status says refused whatever the type"
        );
        // A vague code never makes a 503 permanent.
        assert_eq!(
            k(
                503,
                r#"{"error":{"message":"try later","type":"invalid_request_error"}}"#
            ),
            ErrorKind::Server
        );
    }

    #[test]
    fn context_overflow_is_recognised_in_each_providers_words() {
        let k = |status, body: &str| from_response("p", status, body, None, None).kind;
        assert_eq!(
            k(
                400,
                r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#
            ),
            ErrorKind::ContextOverflow
        );
        assert_eq!(
            k(
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#
            ),
            ErrorKind::ContextOverflow
        );
        assert_eq!(
            k(
                400,
                r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#
            ),
            ErrorKind::ContextOverflow
        );
        assert_eq!(
            k(
                400,
                r#"{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","code":400}"#
            ),
            ErrorKind::ContextOverflow
        );
        // Not on a rate limit, whatever it says about tokens.
        assert_eq!(
            k(
                429,
                r#"{"error":{"message":"Request too large for context length budget per minute"}}"#
            ),
            ErrorKind::RateLimited
        );
    }

    #[test]
    fn messages_come_from_every_body_shape() {
        let m = |body: &str| from_response("p", 400, body, None, None).message;
        assert_eq!(
            m(r#"{"error":"model 'x' not found"}"#),
            "p: model 'x' not found"
        );
        assert_eq!(
            m(r#"{"detail":"Not Found"}"#),
            "p: Not Found",
            "FastAPI-style"
        );
        assert_eq!(
            m(r#"{"error":{"message":"bad","type":"invalid_request_error"}}"#),
            "p: bad (invalid_request_error)"
        );
        assert_eq!(m("<html>bad gateway</html>"), "p: <html>bad gateway</html>");
        assert_eq!(m("   "), "p: the response had no body");
        let auth = from_response("openai", 401, "{}", None, Some("OPENAI_API_KEY"));
        assert_eq!(auth.kind, ErrorKind::Auth);
        assert!(auth.message.contains("$OPENAI_API_KEY"), "{}", auth.message);
    }

    #[test]
    fn in_band_errors_take_kind_from_type_then_status() {
        let e = in_band(
            "anthropic",
            &json!({"type":"error","error":{"details":null,"type":"overloaded_error","message":"Overloaded"}}),
        );
        assert_eq!(e.kind, ErrorKind::Overloaded);
        assert_eq!(e.message, "anthropic: Overloaded (overloaded_error)");
        let e = in_band(
            "openrouter",
            &json!({"error": {"code": 502, "message": "Upstream error"}}),
        );
        assert_eq!((e.kind, e.status), (ErrorKind::Server, Some(502)));
        let e = in_band("x", &json!({"error": {"weird": true}}));
        assert_eq!(e.kind, ErrorKind::Other);
        assert!(e.message.contains("without a message"), "{}", e.message);
    }
}
