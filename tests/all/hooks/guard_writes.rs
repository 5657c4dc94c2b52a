//! The `guard-writes` example hook: writes only where the operator allows.

use serde_json::{Value, json};

use super::*;

#[test]
fn guard_writes_allows_only_the_granted_globs_and_protects_by_default() {
    let env = Env::new();
    env.file("src/lib.rs", "old\n");
    let guard = json!({"name": "guard-writes", "path": plugin_wasm("warden_hook_guard_writes.wasm"),
                       "grants": {"env": ["WARDEN_GUARD_ALLOW"]}});
    let config = |guard: &Value| json!({"plugins": [guard], "experimental": {"continue_loop_on_deny": true}});
    env.config(config(&guard));
    let calls: &[(&str, &str, Value)] = &[
        (
            "src",
            "write",
            json!({"filePath": "src/new.rs", "content": "new"}),
        ),
        (
            "edit",
            "edit",
            json!({"filePath": "src/lib.rs", "oldString": "old", "newString": "edited"}),
        ),
        (
            "docs",
            "write",
            json!({"filePath": "docs/guide.md", "content": "g"}),
        ),
        (
            "root",
            "write",
            json!({"filePath": "build.rs", "content": "b"}),
        ),
        (
            "env",
            "write",
            json!({"filePath": ".env", "content": "KEY=1"}),
        ),
    ];
    script(&env, &[calls]);
    let (_, results) = run(&env, &[("WARDEN_GUARD_ALLOW", Some("src/**, docs/**"))]);
    for id in ["src", "edit", "docs"] {
        assert!(!result(&results, id).1, "{:?}", result(&results, id));
    }
    for (id, path) in [("root", "build.rs"), ("env", ".env")] {
        assert_eq!(
            result(&results, id).2,
            format!(
                "Error: blocked by hook guard-writes: {path} may not be changed: files may be \
                 written only where src/**, docs/** match; choose a path there"
            )
        );
        assert!(!env.project().join(path).exists());
    }
    assert_eq!(
        std::fs::read_to_string(env.project().join("src/lib.rs")).unwrap(),
        "edited\n"
    );

    // Without the variable: anything but version-control data, .env files and the config.
    let env = Env::new();
    env.config(config(&guard));
    let config_before = std::fs::read_to_string(env.project().join("warden.json")).unwrap();
    script(
        &env,
        &[&[
            (
                "any",
                "write",
                json!({"filePath": "build.rs", "content": "b"}),
            ),
            (
                "env",
                "write",
                json!({"filePath": "app/.env.local", "content": "KEY=1"}),
            ),
            (
                "git",
                "write",
                json!({"filePath": ".git/config", "content": "x"}),
            ),
            (
                "cfg",
                "edit",
                json!({"filePath": "warden.json", "oldString": "plugins", "newString": "x"}),
            ),
            (
                "out",
                "write",
                json!({"filePath": "../outside.txt", "content": "x"}),
            ),
        ]],
    );
    let (_, results) = run(&env, &[("WARDEN_GUARD_ALLOW", None)]);
    assert_eq!(
        result(&results, "any").2,
        "Created build.rs (1 byte, 1 line)."
    );
    assert_eq!(
        result(&results, "env").2,
        "Error: blocked by hook guard-writes: app/.env.local is protected (it matches **/.env.*); \
         `write` may not change version-control data, .env files or warden's config"
    );
    for id in ["git", "out"] {
        assert!(
            result(&results, id)
                .2
                .starts_with("Error: blocked by hook guard-writes: "),
            "{id}"
        );
    }
    // The active config is refused by the host itself, before any hook runs.
    assert!(
        result(&results, "cfg")
            .2
            .contains("is warden's own configuration and no tool may change it"),
        "{:?}",
        result(&results, "cfg")
    );
    assert!(
        result(&results, "out")
            .2
            .contains("is outside the working directory")
    );
    assert_eq!(
        std::fs::read_to_string(env.project().join("warden.json")).unwrap(),
        config_before
    );
    assert!(!env.project().join(".git").exists());
}
