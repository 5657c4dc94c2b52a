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

/// The code of `step-start` parts, for queries.
pub const STEP_START: i64 = 4;

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
    fn codes_round_trip() {
        for (i, k) in KINDS.iter().enumerate() {
            assert_eq!(kind_name(i as i64 + 1), Some(*k));
        }
        assert_eq!(kind_code(&PartBody::StepStart {}), STEP_START);
        for s in STATUSES {
            assert_eq!(status_name(status_code(s)), Some(s));
        }
        assert_eq!(kind_name(0), None);
        assert_eq!(status_name(9), None);
    }
}
