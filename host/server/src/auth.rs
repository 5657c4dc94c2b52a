//! Who may call: the token (as OpenCode's clients send it, HTTP Basic with
//! user `opencode` and the password, or as `Authorization: Bearer`), the
//! DNS-rebinding guard when there is no token, and CORS for the origins
//! named with `--cors`.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use subtle::ConstantTimeEq;

use crate::{ApiError, AppState};

/// Refuse requests from a web page of a foreign origin (token or not: a
/// browser may attach credentials it has cached for this server), then
/// requests without the token, when one is set; without one, requests not
/// addressed to this machine by name (a web page that rebinds its own
/// domain to 127.0.0.1 must not reach the API).
pub(crate) async fn authenticate(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let host = header_str(request.headers(), header::HOST).unwrap_or("");
    let origin = header_str(request.headers(), header::ORIGIN);
    let origin_ok = origin
        .is_none_or(|o| is_loopback_origin(o) || state.allows_origin(o) || same_origin(o, host));
    if !origin_ok {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden_origin",
            "this server does not answer web pages of other origins; name the page's origin with --cors to let it in",
        )
        .into_response();
    }
    let Some(token) = &state.options.token else {
        if !is_loopback_host(host) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                "without a token this server only answers requests addressed to localhost; start it with a token to serve other names",
            )
            .into_response();
        }
        return next.run(request).await;
    };
    let given = presented(
        request.headers(),
        request.uri().query(),
        &state.options.username,
    );
    if bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
        next.run(request).await
    } else {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!(
                "send the server's password: HTTP Basic with user {:?} (OpenCode's clients do this from OPENCODE_SERVER_PASSWORD), or Authorization: Bearer TOKEN",
                state.options.username
            ),
        )
        .into_response()
    }
}

/// The secret a request carries: Basic (`user:password`, the user must be
/// `username`), Bearer, or `?token=` for EventSource clients.
fn presented(headers: &HeaderMap, query: Option<&str>, username: &str) -> String {
    let auth = header_str(headers, header::AUTHORIZATION).unwrap_or("");
    if let Some(t) = auth.strip_prefix("Bearer ") {
        return t.to_string();
    }
    if let Some(b) = auth.strip_prefix("Basic ") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(b.trim())
            .ok()
            .and_then(|d| String::from_utf8(d).ok());
        return match decoded.as_deref().and_then(|d| d.split_once(':')) {
            Some((user, password)) if user == username => password.to_string(),
            _ => String::new(),
        };
    }
    query
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("token=")))
        .unwrap_or("")
        .to_string()
}

/// CORS for the `--cors` origins: their requests get the
/// `Access-Control-Allow-*` headers, and their preflights are answered here,
/// before authentication (browsers send preflights without credentials).
pub(crate) async fn cors(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let origin = header_str(request.headers(), header::ORIGIN)
        .filter(|o| state.allows_origin(o))
        .and_then(|o| HeaderValue::from_str(o).ok());
    let Some(origin) = origin else {
        return next.run(request).await;
    };
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut response = if preflight {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, PUT, PATCH, DELETE, OPTIONS"),
        );
        let asked = request
            .headers()
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .cloned()
            .unwrap_or(HeaderValue::from_static("authorization, content-type"));
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        r
    } else {
        next.run(request).await
    };
    let h = response.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    h.append(header::VARY, HeaderValue::from_static("origin"));
    response
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `localhost`, `127.0.0.1` or `[::1]`, with any port.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    matches!(
        name.to_ascii_lowercase().as_str(),
        "localhost" | "127.0.0.1" | "::1"
    )
}

/// A page served by this server itself, under the name it was reached by.
fn same_origin(origin: &str, host: &str) -> bool {
    !host.is_empty()
        && origin.split_once("://").is_some_and(|(scheme, h)| {
            matches!(scheme, "http" | "https") && h.eq_ignore_ascii_case(host)
        })
}

pub(crate) fn is_loopback_origin(origin: &str) -> bool {
    origin
        .split_once("://")
        .is_some_and(|(scheme, host)| matches!(scheme, "http" | "https") && is_loopback_host(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_pass_without_a_token() {
        for ok in [
            "localhost",
            "localhost:4096",
            "127.0.0.1:80",
            "[::1]:4096",
            "LOCALHOST",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.example",
            "evil.example:4096",
            "127.0.0.1.nip.io",
            "10.0.0.1:4096",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
        assert!(is_loopback_origin("http://localhost:3000"));
        assert!(!is_loopback_origin("https://evil.example"));
        assert!(!is_loopback_origin("null"));
    }

    #[test]
    fn the_secret_comes_from_basic_bearer_or_the_query() {
        let mut h = HeaderMap::new();
        // base64("opencode:s3cret")
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic b3BlbmNvZGU6czNjcmV0"),
        );
        assert_eq!(presented(&h, None, "opencode"), "s3cret");
        assert_eq!(presented(&h, None, "someone"), "");
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer tok"),
        );
        assert_eq!(presented(&h, None, "opencode"), "tok");
        assert_eq!(
            presented(&HeaderMap::new(), Some("a=1&token=q"), "opencode"),
            "q"
        );
        assert_eq!(presented(&HeaderMap::new(), None, "opencode"), "");
    }
}
