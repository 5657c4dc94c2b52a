//! Outgoing HTTP for guests, through wasi:http only, gated by the plugin's
//! `hosts` grant.
//!
//! The gate looks at the request's own URI (scheme, host, port) as wasi:http
//! hands it to `send_request`, never at a Host header, which a guest could
//! set to anything. Redirects are not followed here: a guest that follows one
//! makes a new request, which passes the gate again.

use std::sync::Arc;

use http_body_util::BodyExt;
use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttpHooks};

/// One allowed destination: `[scheme://]host[:port]`, where host may start
/// with `*.` (any subdomain) or be `*` (any host: the operator's explicit
/// choice), and a missing port or `*` means any port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    scheme: Option<String>,
    host: String,
    port: Option<u16>,
}

impl HostPattern {
    /// Parse a grant entry; the error says what is wrong with it.
    pub fn parse(entry: &str) -> Result<HostPattern, String> {
        let e = entry.trim().to_ascii_lowercase();
        let (scheme, rest) = match e.split_once("://") {
            Some((s, r)) if s == "http" || s == "https" => (Some(s.to_string()), r.to_string()),
            Some((s, _)) => {
                return Err(format!(
                    "host grant {entry:?}: scheme {s:?} is not http or https"
                ));
            }
            None => (None, e.clone()),
        };
        let rest = rest.trim_end_matches('/');
        if rest.contains('/') || rest.contains('@') || rest.is_empty() {
            return Err(format!(
                "host grant {entry:?}: give a host, optionally with a port (e.g. api.example.com:443)"
            ));
        }
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("host grant {entry:?}: unclosed ["))?;
            (h.to_string(), after.strip_prefix(':').map(str::to_string))
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p.to_string())),
                None => (rest.to_string(), None),
            }
        };
        let port = match port.as_deref() {
            None | Some("*") => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .map_err(|_| format!("host grant {entry:?}: bad port {p:?}"))?,
            ),
        };
        let wildcard_ok = host == "*"
            || !host.contains('*')
            || (host.starts_with("*.") && !host[2..].contains('*'));
        if host.is_empty() || !wildcard_ok {
            return Err(format!(
                "host grant {entry:?}: `*` may only start a host, as in *.example.com"
            ));
        }
        Ok(HostPattern { scheme, host, port })
    }

    fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        if self.scheme.as_deref().is_some_and(|s| s != scheme)
            || self.port.is_some_and(|p| p != port)
        {
            return false;
        }
        if self.host == "*" {
            return true;
        }
        match self.host.strip_prefix("*.") {
            Some(domain) => {
                host.len() > domain.len() + 1
                    && host.ends_with(domain)
                    && host[..host.len() - domain.len()].ends_with('.')
            }
            None => self.host == host,
        }
    }
}

/// The `send_request` hook of one guest call.
pub struct HttpGate {
    pub plugin: Arc<str>,
    pub allowed: Arc<[HostPattern]>,
}

impl HttpGate {
    /// Whether a request to this URI may leave, and if not, why.
    pub fn check(&self, uri: &http::Uri) -> Result<(), String> {
        let scheme = uri.scheme_str().unwrap_or("").to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(format!("scheme {scheme:?} is not allowed"));
        }
        let Some(host) = uri.host() else {
            return Err("the request has no host".into());
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = uri
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        if self.allowed.iter().any(|p| p.matches(&scheme, &host, port)) {
            Ok(())
        } else if self.allowed.is_empty() {
            Err(format!(
                "plugin {} was granted no network access ({scheme}://{host}:{port})",
                self.plugin
            ))
        } else {
            Err(format!(
                "plugin {} was not granted {scheme}://{host}:{port}",
                self.plugin
            ))
        }
    }
}

impl WasiHttpHooks for HttpGate {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = wasmtime_wasi_http::Result<(
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
                )>,
            > + Send,
    > {
        _ = fut;
        let verdict = self.check(request.uri());
        let plugin = self.plugin.clone();
        Box::new(async move {
            if let Err(why) = verdict {
                tracing::warn!(plugin = &*plugin, "outgoing request refused: {why}");
                return Err(wasmtime_wasi_http::Error::HttpRequestDenied);
            }
            let (res, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                res.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(entries: &[&str]) -> HttpGate {
        HttpGate {
            plugin: "p".into(),
            allowed: entries
                .iter()
                .map(|e| HostPattern::parse(e).unwrap())
                .collect(),
        }
    }

    #[test]
    fn the_uri_decides() {
        let g = gate(&["api.example.com", "*.docs.rs", "http://127.0.0.1:8080"]);
        let ok = |u: &str| g.check(&u.parse().unwrap()).is_ok();
        assert!(ok("https://api.example.com/v1"));
        assert!(ok("http://api.example.com:81/"));
        assert!(ok("https://serde.docs.rs/"));
        assert!(!ok("https://docs.rs/"), "*. needs a subdomain");
        assert!(!ok("https://evildocs.rs/"));
        assert!(!ok("https://api.example.com.evil.net/"));
        assert!(ok("http://127.0.0.1:8080/x"));
        assert!(!ok("https://127.0.0.1:8080/x"), "scheme pinned");
        assert!(!ok("http://127.0.0.1:8081/x"), "port pinned");
        assert!(!ok("http://localhost:8080/x"));
        assert!(!ok("ftp://api.example.com/"));
        let any = gate(&["*"]);
        assert!(
            any.check(&"https://anything.example/".parse().unwrap())
                .is_ok()
        );
        let none = gate(&[]);
        assert!(
            none.check(&"https://a.b/".parse().unwrap())
                .unwrap_err()
                .contains("no network access")
        );
    }

    #[test]
    fn bad_grants_are_named() {
        assert!(
            HostPattern::parse("ftp://x")
                .unwrap_err()
                .contains("not http or https")
        );
        assert!(HostPattern::parse("a.com/path").is_err());
        assert!(
            HostPattern::parse("a.*.com")
                .unwrap_err()
                .contains("may only start")
        );
        assert!(
            HostPattern::parse("a.com:99999")
                .unwrap_err()
                .contains("bad port")
        );
        assert_eq!(
            HostPattern::parse("[::1]:80").unwrap(),
            HostPattern {
                scheme: None,
                host: "::1".into(),
                port: Some(80)
            }
        );
    }
}
