//! Glob patterns over `/`-separated relative paths, the dialect the built-in
//! tools and hooks share, small enough to cost a guest almost nothing (a
//! regex-based glob engine adds most of a megabyte to every component that
//! links it, and the host compiles each component on first load).
//!
//! - `*` matches any run of characters except `/`; `?` one character except `/`;
//! - `**` as a whole path component matches any number of components:
//!   `**/x`, `a/**/b`, `a/**` (everything under `a`), `**` (everything);
//! - `[abc]`, `[a-z]`, `[!a-z]` (or `[^a-z]`) match one character except `/`;
//! - `{a,b}` matches either alternative (they may nest);
//! - `\` makes the next character literal.

/// A compiled glob. Matching is case-sensitive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    /// One token list per expansion of `{…}` alternatives.
    alternatives: Vec<Vec<Tok>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Char(char),
    /// `?`
    One,
    /// `*`
    Star,
    /// `**/` at the start of a component: zero or more whole components.
    Dirs,
    /// `**` as the last component: anything at all.
    Rest,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// Expansions of `{…}` allowed for one pattern: a bound on work and memory
/// for patterns a model writes.
const MAX_ALTERNATIVES: usize = 256;

impl Glob {
    /// Compile `pattern`; the error says what is wrong with it.
    pub fn new(pattern: &str) -> Result<Glob, String> {
        let expanded = expand(pattern)?;
        let alternatives = expanded
            .iter()
            .map(|p| tokens(p))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Glob { alternatives })
    }

    /// Whether `path` matches.
    pub fn matches(&self, path: &str) -> bool {
        let text: Vec<char> = path.chars().collect();
        self.alternatives.iter().any(|toks| {
            let mut failed = vec![false; (toks.len() + 1) * (text.len() + 1)];
            matches_at(toks, &text, 0, 0, &mut failed)
        })
    }
}

/// Expand `{a,b}` alternatives (innermost first, so they may nest).
fn expand(pattern: &str) -> Result<Vec<String>, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut open = None;
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '{' => open = Some(i),
            '}' => {
                let Some(start) = open else {
                    return Err(format!("{pattern:?} has a `}}` without a `{{`"));
                };
                let head: String = chars[..start].iter().collect();
                let tail: String = chars[i + 1..].iter().collect();
                let inner: String = chars[start + 1..i].iter().collect();
                let mut out = Vec::new();
                for alt in split_top(&inner) {
                    for e in expand(&format!("{head}{alt}{tail}"))? {
                        out.push(e);
                        if out.len() > MAX_ALTERNATIVES {
                            return Err(format!(
                                "{pattern:?} expands to more than {MAX_ALTERNATIVES} alternatives"
                            ));
                        }
                    }
                }
                return Ok(out);
            }
            _ => {}
        }
        i += 1;
    }
    if open.is_some() {
        return Err(format!("{pattern:?} has a `{{` without a closing `}}`"));
    }
    Ok(vec![pattern.to_string()])
}

/// `a,b` split on commas that are not escaped (the innermost group has no
/// nested braces left).
fn split_top(inner: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(last), Some(n)) = (parts.last_mut(), chars.next()) {
                    last.push('\\');
                    last.push(n);
                }
            }
            ',' => parts.push(String::new()),
            c => {
                if let Some(last) = parts.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    parts
}

fn tokens(pattern: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                let Some(&n) = chars.get(i + 1) else {
                    return Err(format!("{pattern:?} ends with a lone `\\`"));
                };
                toks.push(Tok::Char(n));
                i += 2;
            }
            '?' => {
                toks.push(Tok::One);
                i += 1;
            }
            '*' if chars.get(i + 1) == Some(&'*') => {
                let at_start = i == 0 || chars[i - 1] == '/';
                match chars.get(i + 2) {
                    Some('/') if at_start => {
                        toks.push(Tok::Dirs);
                        i += 3;
                    }
                    None if at_start => {
                        toks.push(Tok::Rest);
                        i += 2;
                    }
                    // `a**b`: not a whole component, so an ordinary `*`.
                    _ => {
                        toks.push(Tok::Star);
                        i += 2;
                    }
                }
            }
            '*' => {
                toks.push(Tok::Star);
                i += 1;
            }
            '[' => {
                let (tok, next) = class(&chars, i)
                    .ok_or_else(|| format!("{pattern:?} has a `[` without a closing `]`"))?;
                toks.push(tok);
                i = next;
            }
            c => {
                toks.push(Tok::Char(c));
                i += 1;
            }
        }
    }
    Ok(toks)
}

/// The class starting at `chars[start] == '['`, and the index after it.
fn class(chars: &[char], start: usize) -> Option<(Tok, usize)> {
    let mut i = start + 1;
    let negated = matches!(chars.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    loop {
        let c = *chars.get(i)?;
        if c == ']' && !first {
            return Some((Tok::Class { negated, ranges }, i + 1));
        }
        first = false;
        let c = if c == '\\' {
            i += 1;
            *chars.get(i)?
        } else {
            c
        };
        if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|&e| e != ']') {
            let end = *chars.get(i + 2)?;
            ranges.push((c, end));
            i += 3;
        } else {
            ranges.push((c, c));
            i += 1;
        }
    }
}

/// Whether `toks[p..]` matches `text[s..]`; `failed` remembers positions
/// already known not to match, which keeps `*` and `**` from backtracking
/// exponentially.
fn matches_at(toks: &[Tok], text: &[char], p: usize, s: usize, failed: &mut [bool]) -> bool {
    let key = p * (text.len() + 1) + s;
    if failed[key] {
        return false;
    }
    let ok = match toks.get(p) {
        None => s == text.len(),
        Some(Tok::Char(c)) => {
            text.get(s) == Some(c) && matches_at(toks, text, p + 1, s + 1, failed)
        }
        Some(Tok::One) => {
            text.get(s).is_some_and(|&c| c != '/') && matches_at(toks, text, p + 1, s + 1, failed)
        }
        Some(Tok::Class { negated, ranges }) => {
            text.get(s).is_some_and(|&c| {
                c != '/' && ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
            }) && matches_at(toks, text, p + 1, s + 1, failed)
        }
        Some(Tok::Star) => {
            let mut end = s;
            loop {
                if matches_at(toks, text, p + 1, end, failed) {
                    break true;
                }
                if end == text.len() || text[end] == '/' {
                    break false;
                }
                end += 1;
            }
        }
        Some(Tok::Dirs) => (s..=text.len())
            .filter(|&i| i == s || text[i - 1] == '/')
            .any(|i| matches_at(toks, text, p + 1, i, failed)),
        Some(Tok::Rest) => true,
    };
    if !ok {
        failed[key] = true;
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        Glob::new(p).unwrap().matches(s)
    }

    #[test]
    fn stars_stay_within_a_component() {
        assert!(m("*.rs", "main.rs"));
        assert!(!m("*.rs", "src/main.rs"));
        assert!(m("src/*.rs", "src/main.rs"));
        assert!(!m("src/*.rs", "src/a/main.rs"));
        assert!(m("a**b", "axxb"));
        assert!(!m("a**b", "ax/xb"));
        assert!(m("?.md", "a.md"));
        assert!(!m("?", "/"));
    }

    #[test]
    fn double_stars_span_components() {
        assert!(m("**/*.rs", "main.rs"));
        assert!(m("**/*.rs", "a/b/main.rs"));
        assert!(m("src/**/*.rs", "src/main.rs"));
        assert!(m("src/**/*.rs", "src/a/b/main.rs"));
        assert!(!m("src/**/*.rs", "lib/main.rs"));
        assert!(m("src/**", "src/a/b"));
        assert!(!m("src/**", "srcx/a"));
        assert!(m("**", "anything/at/all"));
        assert!(m("a/**/b", "a/b"));
        assert!(m("a/**/b", "a/x/y/b"));
        assert!(!m("a/**/b", "a/xb"));
    }

    #[test]
    fn classes_alternatives_and_escapes() {
        assert!(m("[abc].txt", "b.txt"));
        assert!(!m("[!abc].txt", "b.txt"));
        assert!(m("[^abc].txt", "d.txt"));
        assert!(m("file[0-9]", "file7"));
        assert!(!m("file[0-9]", "filex"));
        assert!(m("[]]", "]"));
        assert!(m("*.{ts,tsx}", "a.tsx"));
        assert!(m("*.{ts,tsx}", "a.ts"));
        assert!(!m("*.{ts,tsx}", "a.js"));
        assert!(m("{src,lib/{a,b}}/*.rs", "lib/b/x.rs"));
        assert!(m("\\*.rs", "*.rs"));
        assert!(!m("\\*.rs", "a.rs"));
    }

    #[test]
    fn bad_patterns_say_why() {
        assert!(
            Glob::new("a[")
                .unwrap_err()
                .contains("without a closing `]`")
        );
        assert!(Glob::new("{a,b").unwrap_err().contains("without a closing"));
        assert!(Glob::new("a}").unwrap_err().contains("without a `{`"));
        assert!(Glob::new("a\\").unwrap_err().contains("lone"));
        let many = "{a,b,c,d}{a,b,c,d}{a,b,c,d}{a,b,c,d}{a,b}";
        assert!(Glob::new(many).unwrap_err().contains("more than 256"));
    }

    #[test]
    fn matching_is_not_exponential() {
        let g = Glob::new("**/*a*a*a*a*a*a*a*a*b").unwrap();
        let long = format!("{}/{}", "a/".repeat(30), "a".repeat(60));
        assert!(!g.matches(&long));
    }
}
