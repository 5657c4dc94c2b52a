//! `write`: create or overwrite, inside the working directory only.

use serde_json::json;

use super::*;

#[tokio::test]
async fn write_creates_files_and_folders_then_overwrites() {
    let env = Env::new();
    let abs = env.project().join("top.txt").display().to_string();
    let (run, results) = run_turns(
        &env,
        vec![
            vec![
                (
                    "w1",
                    "write",
                    json!({"filePath": "notes/a/b.txt", "content": "one\ntwo\n"}),
                ),
                ("abs", "write", json!({"filePath": abs, "content": "x"})),
                (
                    "empty",
                    "write",
                    json!({"filePath": "empty.txt", "content": ""}),
                ),
            ],
            vec![(
                "w2",
                "write",
                json!({"filePath": "./notes/a/../a/b.txt", "content": "three"}),
            )],
        ],
    );
    assert_eq!(
        ok(&results, "w1"),
        "Created notes/a/b.txt (8 bytes, 2 lines)."
    );
    assert_eq!(ok(&results, "abs"), "Created top.txt (1 byte, 1 line).");
    assert_eq!(
        ok(&results, "empty"),
        "Created empty.txt (0 bytes, 0 lines)."
    );
    assert_eq!(
        ok(&results, "w2"),
        "Overwrote notes/a/b.txt (5 bytes, 1 line; it had 8 bytes)."
    );
    let read = |rel: &str| std::fs::read_to_string(env.project().join(rel)).unwrap();
    assert_eq!(read("notes/a/b.txt"), "three");
    assert_eq!(read("top.txt"), "x");
    assert_eq!(read("empty.txt"), "");

    let (title, metadata) = completed(&env, &run, "w1").await;
    assert_eq!(title, "notes/a/b.txt");
    assert_eq!(
        metadata,
        json!({"path": "notes/a/b.txt", "created": true, "bytes": 8, "lines": 2,
               "previousBytes": null, "createdDirs": true})
    );
    let (_, metadata) = completed(&env, &run, "w2").await;
    assert_eq!(metadata["created"], false);
    assert_eq!(metadata["previousBytes"], 8);
    assert_ends(&env, &run, &results).await;

    // The boundary checked `edit` (write's permission) on the file's path, then ran the guest.
    let audit: Vec<(String, String, String, Option<String>)> = env
        .ledger()
        .audit_trail(&run.session())
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.call_id.as_deref() == Some("w1"))
        .map(|a| (a.stage, a.subject, a.decision, a.outcome))
        .collect();
    assert_eq!(
        audit,
        [
            (
                "permission".into(),
                "write".into(),
                "allowed".into(),
                Some("ok".into())
            ),
            (
                "tool".into(),
                "write".into(),
                "ran".into(),
                Some("ok".into())
            ),
        ]
    );
}

#[tokio::test]
async fn write_refuses_paths_outside_the_working_directory_and_says_what_to_do() {
    let env = Env::new();
    env.file("src/main.rs", "fn main() {}\n");
    env.file("a.txt", "a\n");
    let secret = outside_secret(&env);
    let beside = env.root.path().join("beside.txt");
    let (run, results) = run_calls(
        &env,
        vec![
            (
                "dotdot",
                "write",
                json!({"filePath": "../beside.txt", "content": "x"}),
            ),
            (
                "absolute",
                "write",
                json!({"filePath": beside.display().to_string(), "content": "x"}),
            ),
            (
                "symlink",
                "write",
                json!({"filePath": "escape.txt", "content": "pwned"}),
            ),
            (
                "symlinked_dir",
                "write",
                json!({"filePath": "up/beside.txt", "content": "x"}),
            ),
            ("dir", "write", json!({"filePath": "src", "content": "x"})),
            ("root", "write", json!({"filePath": ".", "content": "x"})),
            (
                "under_file",
                "write",
                json!({"filePath": "a.txt/b.txt", "content": "x"}),
            ),
            (
                "empty_path",
                "write",
                json!({"filePath": "", "content": "x"}),
            ),
            ("no_content", "write", json!({"filePath": "b.txt"})),
        ],
    );
    for id in ["dotdot", "absolute"] {
        assert!(
            err(&results, id).contains("is outside the working directory"),
            "{id}: {}",
            err(&results, id)
        );
    }
    for id in ["symlink", "symlinked_dir"] {
        assert!(
            err(&results, id).contains("is outside what `write` was granted"),
            "{id}: {}",
            err(&results, id)
        );
    }
    assert_eq!(
        err(&results, "dir"),
        "Error: src is a directory; give write the path of a file (e.g. src/name.ext)"
    );
    assert_eq!(
        err(&results, "root"),
        "Error: invalid arguments: filePath is the working directory itself; give the path of a file inside it"
    );
    assert!(
        err(&results, "under_file").contains("a part of the path is a file"),
        "{}",
        err(&results, "under_file")
    );
    assert!(err(&results, "empty_path").contains("the path is empty"));
    assert!(
        err(&results, "no_content").contains("missing field `content`"),
        "{}",
        err(&results, "no_content")
    );
    // Nothing was written anywhere.
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "top secret\n");
    assert!(!beside.exists());
    assert!(!env.project().join("b.txt").exists());
    assert_eq!(
        std::fs::read_to_string(env.project().join("a.txt")).unwrap(),
        "a\n"
    );
    assert_ends(&env, &run, &results).await;
}

#[tokio::test]
async fn write_and_edit_are_ruled_by_the_edit_permission_on_the_path() {
    let env = Env::new();
    env.file("secret/keep.txt", "keep\n");
    // A denial stops the loop by default; going on lets the model see every result.
    env.config(json!({
        "permission": {"edit": {"*": "allow", "secret/*": "deny"}},
        "experimental": {"continue_loop_on_deny": true}
    }));
    let (run, results) = run_calls(
        &env,
        vec![
            (
                "w",
                "write",
                json!({"filePath": "secret/new.txt", "content": "x"}),
            ),
            (
                "e",
                "edit",
                json!({"filePath": "secret/keep.txt", "oldString": "keep", "newString": "gone"}),
            ),
            (
                "fine",
                "write",
                json!({"filePath": "open/new.txt", "content": "x"}),
            ),
        ],
    );
    assert_eq!(
        err(&results, "w"),
        "Error: permission denied: `edit` on `secret/new.txt` is denied by the rule `edit secret/* deny`; the call did not run"
    );
    assert!(err(&results, "e").contains("`edit` on `secret/keep.txt` is denied"));
    assert!(!env.project().join("secret/new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(env.project().join("secret/keep.txt")).unwrap(),
        "keep\n"
    );
    // The denied calls never reached a guest.
    let audit = env.ledger().audit_trail(&run.session()).await.unwrap();
    for id in ["w", "e"] {
        let stages: Vec<&str> = audit
            .iter()
            .filter(|a| a.call_id.as_deref() == Some(id))
            .map(|a| a.stage.as_str())
            .collect();
        assert_eq!(stages, ["permission"], "{id}");
    }
    assert!(ok(&results, "fine").starts_with("Created open/new.txt"));

    // Denying `edit` outright takes both tools off the model's list.
    let env = Env::new();
    env.config(json!({"permission": {"edit": "deny"}}));
    run_calls(&env, vec![("r", "list", json!({}))]);
    assert_eq!(
        offered(&env.requests()[0]),
        ["read", "list", "glob", "grep"]
    );
}

#[test]
fn a_read_only_grant_for_write_holds_inside_the_guest() {
    // The operator replaces write's default grant: the working directory, read-only.
    let env = Env::new();
    env.file("a.txt", "a\n");
    env.config(json!({"builtin_grants": {"write": {"dirs": [{"path": ".", "mode": "ro"}]}}}));
    let (_, results) = run_calls(
        &env,
        vec![
            (
                "over",
                "write",
                json!({"filePath": "a.txt", "content": "changed"}),
            ),
            (
                "new",
                "write",
                json!({"filePath": "b.txt", "content": "new"}),
            ),
        ],
    );
    for id in ["over", "new"] {
        assert!(
            err(&results, id).contains("is outside what `write` was granted"),
            "{id}: {}",
            err(&results, id)
        );
    }
    assert_eq!(
        std::fs::read_to_string(env.project().join("a.txt")).unwrap(),
        "a\n"
    );
    assert!(!env.project().join("b.txt").exists());
}
