//! Outgoing HTTP for guests, through wasi:http only, gated by the plugin's
//! `hosts` grant.
//!
//! The gate looks at the request's own URI (scheme, host, port) as wasi:http
//! hands it to `send_request`, never at a Host header, which a guest could
//! set to anything, and reads it through the same canonicaliser as the
//! permission rules ([`warden_tool::url`]), so `2130706433` is
//! `127.0.0.1` to both. Redirects are not followed here: a guest that follows
//! one makes a new request, which passes the gate again — the grant and,
//! for a tool whose rules are written on URLs, the rules.

use std::sync::Arc;

use http_body_util::BodyExt;
use warden_tool::CallObserver;
use warden_tool::url::{self, Canonical};
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
            // The address as the canonicaliser writes it (mapped IPv4 included).
            let h = url::canonical(&format!("http://[{h}]/"))
                .map_err(|e| format!("host grant {entry:?}: {e}"))?
                .host
                .to_string();
            (h, after.strip_prefix(':').map(str::to_string))
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
        // A literal host is written the canonical way (an IP in any spelling
        // becomes the one the gate compares).
        let host = if host.contains('*') || host.contains(':') {
            host
        } else {
            url::host(&host)
                .map_err(|e| format!("host grant {entry:?}: {e}"))?
                .to_string()
        };
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
    /// Who checks each request against the call's rules (none while loading).
    pub observer: Option<Arc<dyn CallObserver>>,
    /// The instance is being made ahead of its call: every request is refused.
    pub preparing: bool,
    /// A request was refused for that.
    pub tripped: bool,
}

impl HttpGate {
    /// Whether a request to this URI may leave under the grant, and if not,
    /// why; the canonical URL when it may.
    pub fn check(&self, uri: &http::Uri) -> Result<Canonical, String> {
        let c = url::canonical(&uri.to_string())?;
        let (scheme, host, port) = (&c.scheme, c.host.to_string(), c.port);
        if self.allowed.iter().any(|p| p.matches(scheme, &host, port)) {
            Ok(c)
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
        let verdict = if self.preparing {
            self.tripped = true;
            Err(format!(
                "plugin {} made a request while its instance was being made ahead of a call, before any call was allowed",
                self.plugin
            ))
        } else {
            self.check(request.uri())
        };
        let plugin = self.plugin.clone();
        let observer = self.observer.clone();
        Box::new(async move {
            let verdict = match (verdict, observer) {
                (Ok(c), Some(o)) => o.check_url(&c).await,
                (v, _) => v.map(|_| ()),
            };
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
            observer: None,
            preparing: false,
            tripped: false,
        }
    }

    /// While an instance is made ahead of its call, no request leaves, even
    /// to a granted host, and the gate remembers one was tried.
    #[tokio::test]
    async fn a_request_while_preparing_is_refused_and_remembered() {
        let mut g = gate(&["http://127.0.0.1:9"]);
        g.preparing = true;
        let request = http::Request::builder()
            .uri("http://127.0.0.1:9/")
            .body(
                http_body_util::Empty::new()
                    .map_err(|never: std::convert::Infallible| match never {})
                    .boxed_unsync(),
            )
            .unwrap();
        let answer = Box::into_pin(g.send_request(request, None, Box::new(async { Ok(()) }))).await;
        let Err(e) = answer else {
            panic!("the request left");
        };
        assert!(format!("{e:?}").contains("Denied"), "{e:?}");
        assert!(g.tripped);
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
        // Other spellings of a granted address are that address; userinfo
        // never passes, whatever follows it.
        assert!(ok("http://2130706433:8080/"));
        assert!(ok("http://0x7f.0.0.1:8080/"));
        assert!(ok("http://[::ffff:127.0.0.1]:8080/"));
        assert!(!ok("http://127.0.0.1:8080@api.example.com/"));
        let spelled = gate(&["http://0x7f000001:8080"]);
        assert!(
            spelled
                .check(&"http://127.0.0.1:8080/".parse().unwrap())
                .is_ok()
        );
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
