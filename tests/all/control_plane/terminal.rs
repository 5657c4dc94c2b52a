//! Text from the model, a tool or a prompt reaches the operator's terminal
//! without its control sequences: a model must not be able to retitle the
//! window, clear the screen, or hide what it did behind bidi overrides.

use serde_json::json;

use crate::common::*;

/// Escape (ESC, BEL, CSI as one C1 character, a bidi override) in one string.
const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}31m\u{202e}gnp.exe";

fn clean(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for c in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'] {
        assert!(!text.contains(c), "{what} has {c:?}: {text:?}");
    }
}

#[test]
fn model_and_tool_text_reach_the_terminal_without_control_sequences() {
    let env = Env::new();
    env.file("notes.txt", format!("{HOSTILE}\n"));
    env.cassette(json!([
        {"tool_calls": [
            {"id": "c1", "name": "read", "arguments": {"filePath": "notes.txt"}},
            {"id": "c2", "name": format!("no{HOSTILE}"), "arguments": {}}
        ]},
        {"text": format!("done {HOSTILE}")}
    ]));
    let cassette = env.root.path().join("cassette.json");
    let model = format!("scripted:{}", cassette.display());
    let prompt = format!("title {HOSTILE}");
    let run = env
        .warden(&["run", "--model", &model, &prompt])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    clean("run's output", &run.stdout);
    clean("run's errors", &run.stderr);
    // The answer is still shown, its escapes made visible.
    assert!(String::from_utf8_lossy(&run.stdout).contains("done ?]0;owned??[2J?31m?gnp.exe"));

    // JSON keeps the text exactly, escaped.
    env.cassette(json!([{"text": HOSTILE}]));
    let json_run = env.run_json(&prompt);
    clean("JSON events", json_run.stdout.as_bytes());
    assert_eq!(json_run.finished()["text"], HOSTILE);
    let user = json_run
        .events
        .iter()
        .find(|e| e["part"]["type"] == "text")
        .unwrap();
    assert_eq!(user["part"]["text"], prompt);

    let said = [run.stdout.clone(), run.stderr.clone()].concat();
    let first = String::from_utf8_lossy(&said)
        .split_whitespace()
        .find(|w| w.starts_with("ses_"))
        .unwrap()
        .to_string();
    let second = json_run.session();
    let mut commands = vec![vec!["session", "list"], vec!["audit"]];
    for session in [first.as_str(), second.as_str()] {
        commands.push(vec!["session", "show", session]);
        commands.push(vec!["trace", session]);
    }
    for args in commands {
        let out = env.warden(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        clean(&args.join(" "), &out.stdout);
        clean(&args.join(" "), &out.stderr);
    }
}
