//! `warden plugin verify` flags what would quietly not work.

use serde_json::{Value, json};

use crate::common::*;

fn verify(env: &Env, strict: bool) -> (bool, Value) {
    let mut args = vec!["plugin", "verify", "--format", "json"];
    if strict {
        args.push("--strict");
    }
    let out = env.warden(&args).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), v)
}

fn kinds(v: &Value) -> Vec<(String, Value)> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["kind"].as_str().unwrap().to_string(), f["plugin"].clone()))
        .collect()
}

#[test]
fn dead_rules_unmapped_tools_unpinned_plugins_and_grants_over_warden_s_files_are_flagged() {
    let env = Env::new();
    // A plugin granted the whole temporary root (which holds the data dir),
    // without a pin, with one tool left unmapped.
    let mut plugin = Env::fixtures_plugin(
        json!({"dirs": [{"path": env.root.path().display().to_string(), "mode": "ro"}]}),
    );
    plugin["tools"].as_object_mut().unwrap().remove("echo");
    env.config(json!({
        "permission": {"bash": "deny", "read": {"*.env": "deny"}, "echo": "allow"},
        "plugins": [plugin]
    }));
    let (ok, v) = verify(&env, false);
    assert!(ok, "findings are warnings unless --strict");
    assert_eq!(
        kinds(&v),
        [
            ("dead-rule".to_string(), Value::Null),
            ("unpinned".into(), json!("fixtures")),
            ("unmapped-tool".into(), json!("fixtures")),
            ("covers-warden-files".into(), json!("fixtures")),
        ]
    );
    let message = |i: usize| v["findings"][i]["message"].as_str().unwrap().to_string();
    assert!(
        message(0).contains("the rule `bash * deny` names a permission no loaded tool uses"),
        "{}",
        message(0)
    );
    assert!(message(1).contains("add \"sha256\""), "{}", message(1));
    assert!(
        message(2).starts_with("tool echo of fixtures has no permission mapping"),
        "{}",
        message(2)
    );
    assert!(
        message(3).contains("covers warden's own files"),
        "{}",
        message(3)
    );
    let fixtures = v["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "fixtures")
        .unwrap();
    assert_eq!(
        fixtures["findings"],
        json!(["unpinned", "unmapped-tool", "covers-warden-files"])
    );
    let (ok, _) = verify(&env, true);
    assert!(!ok, "--strict fails on findings");

    // The text form says so too, not a plain `ok`.
    let out = env.warden(&["plugin", "verify"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains(" fixtures ")).unwrap();
    assert!(
        line.trim_start()
            .starts_with("covers-warden-files,unmapped-tool,unpinned"),
        "{text}"
    );

    // Pinned, mapped, narrowly granted, live rules: nothing to flag.
    let hash = fixtures["sha256"].as_str().unwrap();
    let mut clean = Env::fixtures_plugin(json!({"dirs": [{"path": ".", "mode": "ro"}]}));
    clean["sha256"] = json!(hash);
    env.config(
        json!({"permission": {"read": {"*.env": "deny"}, "echo": "allow"}, "plugins": [clean]}),
    );
    let (ok, v) = verify(&env, true);
    assert!(ok, "{v}");
    assert_eq!(kinds(&v), []);
}
