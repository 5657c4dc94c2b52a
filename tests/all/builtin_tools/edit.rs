//! `edit`: exact replacement that must be unambiguous, line endings kept.

use serde_json::json;

use super::*;

fn disk(env: &Env, rel: &str) -> Vec<u8> {
    std::fs::read(env.project().join(rel)).unwrap()
}

#[tokio::test]
async fn edit_replaces_a_unique_string_and_says_where() {
    let env = Env::new();
    env.file("a.rs", "fn one() {}\nfn two() {}\nfn three() {}\n");
    let (run, results) = run_calls(
        &env,
        vec![(
            "e1",
            "edit",
            json!({"filePath": "a.rs", "oldString": "fn two() {}", "newString": "fn two() { 2 }"}),
        )],
    );
    assert_eq!(
        ok(&results, "e1"),
        "Edited a.rs: replaced 1 occurrence (line 2)."
    );
    assert_eq!(
        disk(&env, "a.rs"),
        b"fn one() {}\nfn two() { 2 }\nfn three() {}\n"
    );
    let (title, metadata) = completed(&env, &run, "e1").await;
    assert_eq!(title, "a.rs");
    assert_eq!(
        metadata,
        json!({"path": "a.rs", "created": false, "replacements": 1, "lines": [2],
               "bytesBefore": 38, "bytesAfter": 41, "lineEnding": "lf"})
    );
    assert_ends(&env, &run, &results).await;
}

#[tokio::test]
async fn edit_refuses_what_is_missing_ambiguous_or_unchanged_and_leaves_the_file() {
    let env = Env::new();
    env.file("b.txt", "x = 1\nx = 1\ny\nx = 1\n");
    env.file("c.py", "def f():\n    return 1\n");
    env.file("src/lib.rs", "\n");
    env.file("data.bin", [1u8, 2, 0, 4, 5]);
    env.file("latin1.txt", [0xffu8, 0xfe, b'a', b'\n']);
    let secret = outside_secret(&env);
    let (run, results) = run_calls(
        &env,
        vec![
            (
                "many",
                "edit",
                json!({"filePath": "b.txt", "oldString": "x = 1", "newString": "x = 2"}),
            ),
            (
                "missing",
                "edit",
                json!({"filePath": "c.py", "oldString": "def f():\n  return 1", "newString": "z"}),
            ),
            (
                "same",
                "edit",
                json!({"filePath": "c.py", "oldString": "f", "newString": "f"}),
            ),
            (
                "nofile",
                "edit",
                json!({"filePath": "nope.rs", "oldString": "a", "newString": "b"}),
            ),
            (
                "dir",
                "edit",
                json!({"filePath": "src", "oldString": "a", "newString": "b"}),
            ),
            (
                "binary",
                "edit",
                json!({"filePath": "data.bin", "oldString": "a", "newString": "b"}),
            ),
            (
                "latin1",
                "edit",
                json!({"filePath": "latin1.txt", "oldString": "a", "newString": "b"}),
            ),
            (
                "full",
                "edit",
                json!({"filePath": "c.py", "oldString": "", "newString": "new"}),
            ),
            (
                "dotdot",
                "edit",
                json!({"filePath": "../secret.txt", "oldString": "top", "newString": "no"}),
            ),
            (
                "symlink",
                "edit",
                json!({"filePath": "escape.txt", "oldString": "top", "newString": "no"}),
            ),
            (
                "typo",
                "edit",
                json!({"filePath": "c.py", "old_string": "f", "newString": "g"}),
            ),
        ],
    );
    assert_eq!(
        err(&results, "many"),
        "Error: oldString occurs 3 times in b.txt (at lines 1, 2, 4); include more of the \
         surrounding lines so it matches exactly one place, or set replaceAll to true to replace all 3"
    );
    assert_eq!(
        err(&results, "missing"),
        "Error: oldString was not found in c.py. It must match the file exactly, including \
         whitespace, indentation and line breaks; read the file and copy the text to replace. Its \
         first line appears, perhaps with other whitespace, at line 1; read the file there and \
         copy the text exactly."
    );
    assert_eq!(
        err(&results, "same"),
        "Error: invalid arguments: oldString and newString are identical, so nothing would change; \
         put the text to replace in oldString and what it should become in newString"
    );
    assert_eq!(
        err(&results, "nofile"),
        "Error: file not found: nope.rs. To create a new file, use write (or edit with an empty oldString)"
    );
    assert_eq!(
        err(&results, "dir"),
        "Error: src is a directory, not a file; give edit the path of a file inside it"
    );
    assert_eq!(
        err(&results, "binary"),
        "Error: data.bin is a binary file (5 bytes); edit only changes text files"
    );
    assert_eq!(
        err(&results, "latin1"),
        "Error: latin1.txt is not UTF-8 text; edit only changes UTF-8 text files"
    );
    assert_eq!(
        err(&results, "full"),
        "Error: invalid arguments: oldString is empty, but c.py already has content; give the \
         exact text to replace, or use write to replace the whole file"
    );
    assert!(err(&results, "dotdot").contains("is outside the working directory"));
    assert!(
        err(&results, "symlink").contains("is outside what `edit` was granted"),
        "{}",
        err(&results, "symlink")
    );
    assert!(
        err(&results, "typo").contains("unknown field `old_string`"),
        "{}",
        err(&results, "typo")
    );
    // Every file is as it was.
    assert_eq!(disk(&env, "b.txt"), b"x = 1\nx = 1\ny\nx = 1\n");
    assert_eq!(disk(&env, "c.py"), b"def f():\n    return 1\n");
    assert_eq!(std::fs::read_to_string(secret).unwrap(), "top secret\n");
    assert!(!env.project().join("nope.rs").exists());
    assert_ends(&env, &run, &results).await;
}

#[tokio::test]
async fn edit_replace_all_keeps_line_endings_and_creates_with_an_empty_old_string() {
    let env = Env::new();
    env.file("b.txt", "x = 1\nx = 1\ny\nx = 1\n");
    env.file("crlf.txt", "one\r\ntwo\r\nthree\r\n");
    env.file("blank.txt", "");
    let (run, results) = run_calls(
        &env,
        vec![
            (
                "all",
                "edit",
                json!({"filePath": "b.txt", "oldString": "x = 1", "newString": "x = 2", "replaceAll": true}),
            ),
            (
                "crlf",
                "edit",
                json!({"filePath": "crlf.txt", "oldString": "one\ntwo", "newString": "1\n2\n2.5"}),
            ),
            (
                "create",
                "edit",
                json!({"filePath": "new/file.txt", "oldString": "", "newString": "hello\n"}),
            ),
            (
                "fill",
                "edit",
                json!({"filePath": "blank.txt", "oldString": "", "newString": "filled"}),
            ),
        ],
    );
    assert_eq!(
        ok(&results, "all"),
        "Edited b.txt: replaced 3 occurrences (lines 1, 2, 4)."
    );
    assert_eq!(disk(&env, "b.txt"), b"x = 2\nx = 2\ny\nx = 2\n");
    assert_eq!(
        ok(&results, "crlf"),
        "Edited crlf.txt: replaced 1 occurrence (line 1)."
    );
    assert_eq!(disk(&env, "crlf.txt"), b"1\r\n2\r\n2.5\r\nthree\r\n");
    assert_eq!(completed(&env, &run, "crlf").await.1["lineEnding"], "crlf");
    assert_eq!(ok(&results, "create"), "Created new/file.txt (6 bytes).");
    assert_eq!(disk(&env, "new/file.txt"), b"hello\n");
    assert_eq!(
        ok(&results, "fill"),
        "Edited blank.txt: replaced 1 occurrence (line 1)."
    );
    assert_eq!(disk(&env, "blank.txt"), b"filled");
    let (_, metadata) = completed(&env, &run, "all").await;
    assert_eq!(metadata["replacements"], 3);
    assert_eq!(metadata["lines"], json!([1, 2, 4]));
}
