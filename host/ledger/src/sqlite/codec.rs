//! How rows are kept small: what a column already says is left out of the
//! row's JSON when it is written and put back when it is read. serde writes
//! an enum's tag first and a struct's fields in order, so what is left out
//! is always a prefix of the text; a body that does not start with it (a row
//! carried over from schema 1) is stored and read as it is.

use warden_protocol::PartBody;

/// The part kinds as stored (`part.kind`).
const KINDS: [&str; 6] = [
    "text",
    "reasoning",
    "tool",
    "step-start",
    "step-finish",
    "compaction",
];

pub fn kind_code(body: &PartBody) -> i64 {
    KINDS
        .iter()
        .position(|k| *k == body.kind())
        .map_or(0, |i| i as i64 + 1)
}

pub fn kind_name(code: i64) -> Option<&'static str> {
    usize::try_from(code - 1)
        .ok()
        .and_then(|i| KINDS.get(i).copied())
}

/// The tool states as stored (`part_event.status`).
const STATUSES: [&str; 4] = ["pending", "running", "completed", "error"];

pub fn status_code(status: &str) -> i64 {
    STATUSES
        .iter()
        .position(|s| *s == status)
        .map_or(3, |i| i as i64)
}

pub fn status_name(code: i64) -> Option<&'static str> {
    usize::try_from(code)
        .ok()
        .and_then(|i| STATUSES.get(i).copied())
}

/// The audit words stored as their index (`audit.entries`). Append only:
/// a stored number means the word at that place for good.
pub const STAGES: &[&str] = &[
    "permission",
    "before",
    "tool",
    "after",
    "ask",
    "request",
    "stdout",
    "stderr",
    "audit",
];
pub const DECISIONS: &[&str] = &[
    "allowed",
    "denied",
    "asked:once",
    "asked:always",
    "asked:reject",
    "ran",
    "printed",
    "truncated",
];
pub const OUTCOMES: &[&str] = &["ok", "refused", "skipped", "allow", "keep", "rewrite"];

/// `word` as its number in `words`, or as text when it is not one of them.
pub fn word(words: &[&str], word: &str) -> serde_json::Value {
    match words.iter().position(|w| *w == word) {
        Some(i) => i.into(),
        None => word.into(),
    }
}

/// A stored word back: a number names its place in `words`, text is itself.
pub fn word_of(words: &[&str], stored: &serde_json::Value) -> Option<String> {
    match stored {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => n
            .as_u64()
            .and_then(|i| words.get(usize::try_from(i).ok()?))
            .map(|w| w.to_string()),
        _ => None,
    }
}

/// `{"k1":v1,"k2":v2,` for `fields` (values already JSON).
fn prefix(fields: &[(&str, &str)]) -> String {
    let mut p = String::from("{");
    for (k, v) in fields {
        p.push('"');
        p.push_str(k);
        p.push_str("\":");
        p.push_str(v);
        p.push(',');
    }
    p
}

/// `json` without its leading `fields`, when it starts with exactly them.
pub fn strip(json: String, fields: &[(&str, &str)]) -> String {
    let p = prefix(fields);
    if let Some(rest) = json.strip_prefix(&p) {
        return format!("{{{rest}");
    }
    // The fields were all there was: `{"k":v}`.
    let whole = format!("{}}}", &p[..p.len() - 1]);
    if json == whole {
        return "{}".into();
    }
    json
}

/// `json` with `fields` put back in front, unless it already has the first.
pub fn splice(json: &str, fields: &[(&str, &str)]) -> String {
    let Some(rest) = json.strip_prefix('{') else {
        return json.to_string();
    };
    if let Some((first, _)) = fields.first()
        && rest.starts_with(&format!("\"{first}\":"))
    {
        return json.to_string();
    }
    let p = prefix(fields);
    if rest.trim_start() == "}" {
        format!("{}}}", &p[..p.len() - 1])
    } else {
        format!("{p}{rest}")
    }
}

/// Token counts without the fields that are zero and default when read
/// (`reasoning`, `cache`): a scripted or cache-less step stores 40 bytes
/// less. Only for headers and step-finish bodies, whose only object named
/// `tokens` is a `Tokens`.
pub fn slim_tokens(json: String) -> String {
    const AT: &str = "\"tokens\":{\"input\":";
    const ZEROS: [&str; 2] = [",\"reasoning\":0", ",\"cache\":{\"read\":0,\"write\":0}"];
    let Some(i) = json.find(AT) else {
        return json;
    };
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let mut end = i + AT.len();
    end += digits(&json[end..]);
    let Some(rest) = json[end..].strip_prefix(",\"output\":") else {
        return json;
    };
    end = json.len() - rest.len();
    end += digits(&json[end..]);
    let mut out = json[..end].to_string();
    let mut tail = &json[end..];
    for zero in ZEROS {
        if let Some(t) = tail.strip_prefix(zero) {
            tail = t;
        }
    }
    out.push_str(tail);
    out
}

/// A string as JSON.
pub fn quoted(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripped_fields_come_back() {
        let tag = quoted("tool");
        let fields = [("type", tag.as_str())];
        let body = r#"{"type":"tool","call_id":"c"}"#.to_string();
        let stored = strip(body.clone(), &fields);
        assert_eq!(stored, r#"{"call_id":"c"}"#);
        assert_eq!(splice(&stored, &fields), body);
        let empty = r#"{"type":"tool"}"#.to_string();
        assert_eq!(strip(empty.clone(), &fields), "{}");
        assert_eq!(splice("{}", &fields), empty);
        // A body that still has its tag (schema 1) is read as it is.
        assert_eq!(splice(&body, &fields), body);
        assert_eq!(strip(r#"{"other":1}"#.into(), &fields), r#"{"other":1}"#);
    }

    #[test]
    fn zero_token_fields_are_left_out_and_read_back() {
        let t = warden_protocol::Tokens {
            input: 5,
            output: 7,
            ..Default::default()
        };
        let body = serde_json::to_string(&PartBody::StepFinish {
            reason: warden_protocol::FinishReason::Stop,
            tokens: t,
            cost: 0.0,
        })
        .unwrap();
        let slim = slim_tokens(body);
        assert!(
            slim.contains(r#""tokens":{"input":5,"output":7},"cost""#),
            "{slim}"
        );
        let back: PartBody = serde_json::from_str(&slim).unwrap();
        assert!(matches!(back, PartBody::StepFinish { tokens, .. } if tokens == t));
        // Counts that are not zero stay.
        let mut t2 = t;
        t2.cache.read = 3;
        let kept = serde_json::to_string(&t2).unwrap();
        let wrapped = format!(r#"{{"tokens":{kept}}}"#);
        assert!(slim_tokens(wrapped).contains("\"read\":3"));
    }

    #[test]
    fn audit_words_are_numbers_and_other_text_stays_text() {
        for words in [STAGES, DECISIONS, OUTCOMES] {
            for w in words {
                let stored = word(words, w);
                assert!(stored.is_number(), "{w}");
                assert_eq!(word_of(words, &stored).as_deref(), Some(*w));
            }
        }
        // A guest's own words, even one that looks like a number, stay text.
        for free in ["block: not on main", "3", ""] {
            let stored = word(OUTCOMES, free);
            assert_eq!(stored, serde_json::Value::from(free));
            assert_eq!(word_of(OUTCOMES, &stored).as_deref(), Some(free));
        }
        assert_eq!(word_of(STAGES, &99.into()), None);
    }

    #[test]
    fn codes_round_trip() {
        for (i, k) in KINDS.iter().enumerate() {
            assert_eq!(kind_name(i as i64 + 1), Some(*k));
        }
        assert_eq!(kind_code(&PartBody::StepStart {}), 4);
        for s in STATUSES {
            assert_eq!(status_name(status_code(s)), Some(s));
        }
        assert_eq!(kind_name(0), None);
        assert_eq!(status_name(9), None);
    }
}
