//! Wildcard patterns for permission rules: `*` matches any run of characters
//! (including `/`), `?` matches one character, everything else is literal.
//! Rules are few and checked on every call, so matching is a small
//! backtracking walk with no compilation step.

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    // Where the last `*` was, and how much of the text it has eaten so far.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn stars_questions_and_literals() {
        assert!(matches("*", ""));
        assert!(matches("*", "src/a.rs"));
        assert!(matches("*.example.com", "api.example.com"));
        assert!(!matches("*.example.com", "example.com"));
        assert!(matches("src/*", "src/deep/a.rs"));
        assert!(matches("*.env", "config/.env"));
        assert!(!matches("*.env", "config/.env.example"));
        assert!(matches("a?c", "abc"));
        assert!(!matches("a?c", "ac"));
        assert!(matches("read", "read"));
        assert!(!matches("read", "reads"));
        assert!(matches("*a*b*", "xxaxxbxx"));
        assert!(!matches("*a*b", "xxbxxa"));
    }
}
