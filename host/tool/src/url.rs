//! The one URL canonicaliser: what the permission rules and the HTTP gate
//! both see of a URL, so a rule is never beaten by another spelling of the
//! same place.
//!
//! - the scheme is `http` or `https`, lowercased;
//! - credentials (`user:pass@`) are refused: they only serve to make a URL
//!   read as one host and go to another;
//! - the host is lowercased, one trailing dot dropped; percent signs, back
//!   slashes and non-ASCII names are refused (give IDNs in punycode);
//! - an IPv4 address in any spelling a resolver accepts (`2130706433`,
//!   `0x7f000001`, `0177.0.0.1`, `127.1`) becomes dotted decimal; an IPv6
//!   address is compressed (RFC 5952), and an IPv4-mapped one (`::ffff:a.b.c.d`)
//!   becomes its IPv4 address; the unspecified addresses (`0.0.0.0`, `::`),
//!   which reach the local machine, become loopback;
//! - a missing port becomes the scheme's default.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A URL reduced to where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    pub scheme: String,
    pub host: Host,
    pub port: u16,
    /// Path, query and fragment as given (they do not decide where it goes).
    pub rest: String,
}

/// A canonical host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    V4(Ipv4Addr),
    V6(Ipv6Addr),
}

impl fmt::Display for Host {
    /// The form rules are matched against: a name, dotted IPv4, or IPv6
    /// without brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::V4(a) => write!(f, "{a}"),
            Host::V6(a) => write!(f, "{a}"),
        }
    }
}

impl fmt::Display for Canonical {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::V6(a) => write!(f, "{}://[{a}]:{}{}", self.scheme, self.port, self.rest),
            h => write!(f, "{}://{h}:{}{}", self.scheme, self.port, self.rest),
        }
    }
}

/// Canonicalise `url`; the error says what is wrong with it.
pub fn canonical(url: &str) -> Result<Canonical, String> {
    let url = url.trim();
    let (scheme, after) = url
        .split_once("://")
        .ok_or_else(|| format!("{url:?} is not an absolute http(s) URL"))?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        other => return Err(format!("scheme {other:?} is not http or https")),
    };
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, rest) = after.split_at(end);
    if authority.contains('@') {
        return Err("URLs with credentials (user@host) are refused".into());
    }
    if authority.contains(['\\', '%']) || authority.chars().any(|c| c.is_whitespace()) {
        return Err(format!(
            "the host part {authority:?} is not a plain host[:port]"
        ));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("unclosed [ in {authority:?}"))?;
        let addr: Ipv6Addr = h
            .parse()
            .map_err(|_| format!("{h:?} is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| format!("junk after ] in {authority:?}"))?,
            ),
        };
        (v6_host(addr), port)
    } else {
        let (h, p) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        (host(h)?, p)
    };
    let port = match port {
        None | Some("") => default_port,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("port {p:?} is not a port number"))?,
    };
    Ok(Canonical {
        scheme,
        host,
        port,
        rest: rest.to_string(),
    })
}

/// A host name or IPv4 literal, canonical.
pub fn host(raw: &str) -> Result<Host, String> {
    let h = raw.to_ascii_lowercase();
    let h = h.strip_suffix('.').unwrap_or(&h);
    if h.is_empty() {
        return Err("the URL has no host".into());
    }
    if !h.is_ascii() {
        return Err(format!(
            "host {raw:?} is not ASCII; give it in punycode (xn--...)"
        ));
    }
    if let Some(v4) = ipv4(h)? {
        return Ok(if v4.is_unspecified() {
            Host::V4(Ipv4Addr::LOCALHOST)
        } else {
            Host::V4(v4)
        });
    }
    if !h
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        || h.starts_with('.')
        || h.contains("..")
    {
        return Err(format!("host {raw:?} is not a valid host name"));
    }
    Ok(Host::Name(h.to_string()))
}

fn v6_host(addr: Ipv6Addr) -> Host {
    if let Some(v4) = addr.to_ipv4_mapped() {
        return if v4.is_unspecified() {
            Host::V4(Ipv4Addr::LOCALHOST)
        } else {
            Host::V4(v4)
        };
    }
    if addr.is_unspecified() {
        return Host::V6(Ipv6Addr::LOCALHOST);
    }
    Host::V6(addr)
}

/// A host read as IPv4 the way resolvers do (WHATWG / inet_aton): one to
/// four parts, each decimal, `0x` hex or `0`-led octal, the last filling the
/// remaining bytes. `None` when it is a name; an error when it looks numeric
/// but is not a valid address.
fn ipv4(h: &str) -> Result<Option<Ipv4Addr>, String> {
    let parts: Vec<&str> = h.split('.').collect();
    let last_numeric = parts
        .last()
        .is_some_and(|p| number(p).is_some() || p.starts_with("0x"));
    if !last_numeric {
        return Ok(None);
    }
    let bad = || format!("host {h:?} looks like an IPv4 address but is not a valid one");
    if parts.len() > 4 {
        return Err(bad());
    }
    let nums = parts
        .iter()
        .map(|p| number(p).ok_or_else(bad))
        .collect::<Result<Vec<u64>, _>>()?;
    let (last, init) = nums.split_last().ok_or_else(bad)?;
    if init.iter().any(|n| *n > 255) || *last >= 1u64 << (8 * (5 - nums.len())) {
        return Err(bad());
    }
    let mut value: u64 = *last;
    for (i, n) in init.iter().enumerate() {
        value |= n << (8 * (3 - i));
    }
    Ok(Some(Ipv4Addr::from(value as u32)))
}

fn number(p: &str) -> Option<u64> {
    if p.is_empty() {
        return None;
    }
    if let Some(hex) = p.strip_prefix("0x") {
        return if hex.is_empty() {
            Some(0)
        } else {
            u64::from_str_radix(hex, 16)
                .ok()
                .filter(|n| *n <= u32::MAX as u64)
        };
    }
    if p.len() > 1 && p.starts_with('0') {
        return u64::from_str_radix(&p[1..], 8)
            .ok()
            .filter(|n| *n <= u32::MAX as u64);
    }
    p.parse::<u64>().ok().filter(|n| *n <= u32::MAX as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(url: &str) -> String {
        let c = canonical(url).unwrap();
        format!("{}:{}", c.host, c.port)
    }

    #[test]
    fn every_spelling_of_loopback_is_loopback() {
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0x7F.0.0.1/",
            "http://0177.0.0.1/",
            "http://127.1/",
            "http://127.0.1/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::FFFF:7f00:1]/",
            "http://0.0.0.0/",
            "http://0/",
            "HTTP://127.0.0.1.:80/",
        ] {
            assert_eq!(at(url), "127.0.0.1:80", "{url}");
        }
        assert_eq!(at("https://[0:0::1]/x"), "::1:443");
        assert_eq!(at("https://[::]/x"), "::1:443");
    }

    #[test]
    fn names_are_lowercased_and_ports_defaulted() {
        let c = canonical("HTTPS://API.Example.COM/v1?q=1").unwrap();
        assert_eq!(c.to_string(), "https://api.example.com:443/v1?q=1");
        assert_eq!(at("http://example.com:8080"), "example.com:8080");
        assert_eq!(at("http://example.com:"), "example.com:80");
    }

    #[test]
    fn tricks_are_refused() {
        for (url, why) in [
            ("http://127.0.0.1:80@api.example.com/", "credentials"),
            ("http://user@api.example.com/", "credentials"),
            ("ftp://x/", "not http"),
            ("http://%31%32%37.0.0.1/", "plain host"),
            ("http://a\\b/", "plain host"),
            ("http://256.0.0.1/", "not a valid one"),
            ("http://1.2.3.4.5/", "not a valid one"),
            ("http://0x100000000/", "not a valid one"),
            ("http://exa mple.com/", "plain host"),
            ("http://ex..com/", "not a valid host"),
            ("http://bücher.de/", "punycode"),
            ("http://a.com:99999/", "not a port"),
            ("http:///x", "no host"),
            ("/relative", "not an absolute"),
        ] {
            let e = canonical(url).unwrap_err();
            assert!(e.contains(why), "{url}: {e}");
        }
    }
}
