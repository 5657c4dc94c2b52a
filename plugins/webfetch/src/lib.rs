//! The built-in `webfetch` tool: GET a URL through wasi:http and return it
//! as text (HTML converted to readable text with links), markdown or raw
//! HTML, capped in size.
//!
//! The host decides where it may go: every request, redirects included,
//! passes the plugin's `hosts` grant, checked on the request's own URI.

use serde::Deserialize;
use warden_plugin_sdk::{Context, Error, Output, Tool, Value, json};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingResponse, Method, OutgoingRequest, RequestOptions, Scheme,
};
use wasip2::io::streams::StreamError;

/// Bytes read from the server at most.
const MAX_BODY: usize = 5 * 1024 * 1024;
/// Bytes of output at most.
const MAX_OUTPUT: usize = 100 * 1024;
const MAX_REDIRECTS: usize = 5;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    url: String,
    #[serde(default)]
    format: Option<String>,
    /// Seconds.
    #[serde(default)]
    timeout: Option<u64>,
}

struct WebFetch;

impl Tool for WebFetch {
    type Args = Args;
    const ID: &'static str = "webfetch";
    const DESCRIPTION: &'static str = "Fetch a URL over HTTP(S) with GET and return its content: `markdown` \
        (default; HTML converted to readable text with links), `text`, or `html` (raw). Output is capped at \
        100 KB. Only hosts the operator granted can be reached.";

    fn parameters() -> Value {
        json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "An http:// or https:// URL."},
                "format": {"type": "string", "enum": ["markdown", "text", "html"], "description": "How to return the content (default markdown)."},
                "timeout": {"type": "integer", "minimum": 1, "maximum": 120, "description": "Seconds to wait (default 30)."}
            },
            "required": ["url"],
            "additionalProperties": false
        })
    }

    fn execute(_ctx: &Context, args: Args) -> Result<Output, Error> {
        let format = args.format.as_deref().unwrap_or("markdown");
        if !matches!(format, "markdown" | "text" | "html") {
            return Err(Error::InvalidArguments(format!(
                "format must be markdown, text or html, not {format:?}"
            )));
        }
        let timeout_ns = args.timeout.unwrap_or(30).clamp(1, 120) * 1_000_000_000;
        let mut url = args.url.trim().to_string();
        let mut hops = 0;
        let (response, final_url) = loop {
            let target = Target::parse(&url)?;
            let response = get(&target, timeout_ns)?;
            let status = response.status();
            if (300..400).contains(&status) && status != 304 {
                let Some(location) = header(&response, "location") else {
                    return Err(Error::failed(format!(
                        "{url} answered HTTP {status} without a Location"
                    )));
                };
                hops += 1;
                if hops > MAX_REDIRECTS {
                    return Err(Error::failed(format!(
                        "{} redirected more than {MAX_REDIRECTS} times",
                        args.url
                    )));
                }
                url = target.join(&location);
                continue;
            }
            if !(200..300).contains(&status) {
                return Err(Error::failed(format!("GET {url} answered HTTP {status}")));
            }
            break (response, url);
        };
        let content_type = header(&response, "content-type")
            .unwrap_or_default()
            .to_ascii_lowercase();
        let (body, cut) = read_body(response)?;
        if content_type.starts_with("image/")
            || content_type.starts_with("audio/")
            || content_type.starts_with("video/")
            || body.contains(&0)
        {
            return Err(Error::failed(format!(
                "{final_url} is binary content ({}); webfetch returns text only",
                if content_type.is_empty() {
                    "no content type"
                } else {
                    &content_type
                }
            )));
        }
        let html =
            content_type.contains("html") || (content_type.is_empty() && looks_like_html(&body));
        let mut text = match (format, html) {
            ("html", _) | (_, false) => String::from_utf8_lossy(&body).into_owned(),
            (_, true) => html2text::from_read(&body[..], 100)
                .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned()),
        };
        let mut truncated = cut;
        if text.len() > MAX_OUTPUT {
            let mut end = MAX_OUTPUT;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            truncated = true;
        }
        if truncated {
            text.push_str("\n\n(content truncated at 100 KB)\n");
        }
        Ok(Output::text(text).title(final_url.clone()).metadata(json!({
            "url": final_url,
            "contentType": content_type,
            "redirects": hops,
            "truncated": truncated,
        })))
    }
}

warden_plugin_sdk::export_tools!(WebFetch);

struct Target {
    https: bool,
    authority: String,
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, Error> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            Error::InvalidArguments(format!("{url:?} is not an absolute http(s) URL"))
        })?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            other => {
                return Err(Error::InvalidArguments(format!(
                    "scheme {other:?} is not supported; use http or https"
                )));
            }
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        if authority.is_empty()
            || authority.contains('@')
            || authority.chars().any(char::is_whitespace)
        {
            return Err(Error::InvalidArguments(format!(
                "{url:?} has no usable host"
            )));
        }
        let mut path = rest[end..].split('#').next().unwrap_or("").to_string();
        if !path.starts_with('/') {
            path.insert(0, '/');
        }
        Ok(Target {
            https,
            authority: authority.to_string(),
            path,
        })
    }

    /// Resolve a Location header against this URL.
    fn join(&self, location: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        if location.contains("://") {
            location.to_string()
        } else if let Some(rest) = location.strip_prefix("//") {
            format!("{scheme}://{rest}")
        } else if location.starts_with('/') {
            format!("{scheme}://{}{location}", self.authority)
        } else {
            let dir = self.path.rsplit_once('/').map_or("", |(d, _)| d);
            format!("{scheme}://{}{dir}/{location}", self.authority)
        }
    }
}

fn get(target: &Target, timeout_ns: u64) -> Result<IncomingResponse, Error> {
    let headers = Fields::new();
    for (k, v) in [
        ("user-agent", "warden-webfetch/0.1"),
        (
            "accept",
            "text/html, text/markdown;q=0.9, text/plain;q=0.8, */*;q=0.1",
        ),
    ] {
        headers
            .append(k, v.as_bytes())
            .map_err(|e| Error::failed(format!("cannot set header {k}: {e:?}")))?;
    }
    let request = OutgoingRequest::new(headers);
    let ok = request.set_method(&Method::Get).is_ok()
        && request
            .set_scheme(Some(&if target.https {
                Scheme::Https
            } else {
                Scheme::Http
            }))
            .is_ok()
        && request.set_authority(Some(&target.authority)).is_ok()
        && request.set_path_with_query(Some(&target.path)).is_ok();
    if !ok {
        return Err(Error::InvalidArguments(format!(
            "cannot build a request for {}{}",
            target.authority, target.path
        )));
    }
    let options = RequestOptions::new();
    let _ = options.set_connect_timeout(Some(timeout_ns));
    let _ = options.set_first_byte_timeout(Some(timeout_ns));
    let _ = options.set_between_bytes_timeout(Some(timeout_ns));
    let pending =
        outgoing_handler::handle(request, Some(options)).map_err(|e| http_error(target, &e))?;
    pending.subscribe().block();
    match pending.get() {
        Some(Ok(Ok(response))) => Ok(response),
        Some(Ok(Err(e))) => Err(http_error(target, &e)),
        Some(Err(())) | None => Err(Error::failed("the HTTP response was lost".to_string())),
    }
}

fn http_error(target: &Target, e: &ErrorCode) -> Error {
    match e {
        ErrorCode::HttpRequestDenied => Error::failed(format!(
            "the request to {} was refused: this tool was not granted access to that host; the operator can add it to the plugin's \"hosts\" grant",
            target.authority
        )),
        ErrorCode::DnsError(_) => Error::failed(format!("cannot resolve {}", target.authority)),
        ErrorCode::ConnectionRefused => {
            Error::failed(format!("{} refused the connection", target.authority))
        }
        ErrorCode::ConnectionTimeout | ErrorCode::ConnectionReadTimeout => {
            Error::failed(format!("{} did not answer in time", target.authority))
        }
        other => Error::failed(format!(
            "GET {}{} failed: {other:?}",
            target.authority, target.path
        )),
    }
}

fn header(response: &IncomingResponse, name: &str) -> Option<String> {
    let values = response.headers().get(name);
    values
        .first()
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The body, up to [`MAX_BODY`]; `true` when it was cut.
fn read_body(response: IncomingResponse) -> Result<(Vec<u8>, bool), Error> {
    let body = response
        .consume()
        .map_err(|_| Error::failed("the response has no body".to_string()))?;
    let stream = body
        .stream()
        .map_err(|_| Error::failed("the response body cannot be read".to_string()))?;
    let mut out = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => {
                out.extend_from_slice(&chunk);
                if out.len() >= MAX_BODY {
                    out.truncate(MAX_BODY);
                    return Ok((out, true));
                }
            }
            Err(StreamError::Closed) => return Ok((out, false)),
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(Error::failed(format!(
                    "reading the response failed: {}",
                    e.to_debug_string()
                )));
            }
        }
    }
}

fn looks_like_html(body: &[u8]) -> bool {
    let head = String::from_utf8_lossy(&body[..body.len().min(512)]).to_ascii_lowercase();
    head.contains("<html") || head.contains("<!doctype html")
}
