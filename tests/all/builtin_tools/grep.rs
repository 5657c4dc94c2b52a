//! `grep`: `path:line: text`, binaries and heavy folders skipped, capped.

use serde_json::json;

use super::*;

fn sources(env: &Env) {
    env.file("src/main.rs", "fn main() {\n    helper();\n}\n");
    env.file("src/lib.rs", "pub fn helper() {}\n// TODO: more\n");
    env.file("notes.md", "todo: write docs\nTODO later\n");
    env.file("data.bin", b"fn binary\0\x01\x02");
    env.file("node_modules/x.js", "fn x\n");
    env.file("crlf.txt", "fn crlf\r\n");
}

#[tokio::test]
async fn grep_reports_path_line_text_in_directory_order() {
    let env = Env::new();
    sources(&env);
    let (run, results) = run_calls(
        &env,
        vec![
            ("fns", "grep", json!({"pattern": "fn \\w+"})),
            (
                "md",
                "grep",
                json!({"pattern": "(?i)todo", "include": "*.md"}),
            ),
            (
                "one",
                "grep",
                json!({"pattern": "helper", "path": "src/main.rs"}),
            ),
            (
                "sub",
                "grep",
                json!({"pattern": "helper", "path": "src", "include": "*.{rs,py}"}),
            ),
            (
                "heavy",
                "grep",
                json!({"pattern": "fn", "path": "node_modules"}),
            ),
            ("none", "grep", json!({"pattern": "zzz"})),
        ],
    );
    let skipped =
        "(1 binary file skipped)\n(not searched: node_modules; pass one as path to search it)\n";
    assert_eq!(
        ok(&results, "fns"),
        format!(
            "crlf.txt:1: fn crlf\nsrc/lib.rs:1: pub fn helper() {{}}\nsrc/main.rs:1: fn main() {{\n{skipped}"
        )
    );
    assert_eq!(
        ok(&results, "md"),
        "notes.md:1: todo: write docs\nnotes.md:2: TODO later\n(not searched: node_modules; pass one as path to search it)\n"
    );
    assert_eq!(ok(&results, "one"), "src/main.rs:2:     helper();\n");
    assert_eq!(
        ok(&results, "sub"),
        "src/lib.rs:1: pub fn helper() {}\nsrc/main.rs:2:     helper();\n"
    );
    assert_eq!(ok(&results, "heavy"), "node_modules/x.js:1: fn x\n");
    assert_eq!(
        ok(&results, "none"),
        format!("No matches for \"zzz\" in the working directory.\n{skipped}")
    );
    let (title, metadata) = completed(&env, &run, "fns").await;
    assert_eq!(title, "fn \\w+ in .");
    assert_eq!(
        metadata,
        json!({"pattern": "fn \\w+", "path": ".", "include": null, "matches": 3, "files": 3,
               "shown": 3, "truncated": false, "binarySkipped": 1, "skipped": ["node_modules"]})
    );
    assert_ends(&env, &run, &results).await;
}

#[tokio::test]
async fn grep_caps_matches_and_bytes_and_cuts_long_lines() {
    let env = Env::new();
    let many: String = (1..=300).map(|n| format!("match {n}\n")).collect();
    env.file("many.txt", &many);
    let wide: String = (1..=200)
        .map(|n| format!("w{n:03} {}\n", "y".repeat(2000)))
        .collect();
    env.file("wide/w.txt", &wide);
    env.file(
        "long.txt",
        format!("{}needle{}\n", "a".repeat(600), "b".repeat(600)),
    );
    let (run, results) = run_calls(
        &env,
        vec![
            (
                "many",
                "grep",
                json!({"pattern": "^match", "path": "many.txt"}),
            ),
            ("wide", "grep", json!({"pattern": "^w", "path": "wide"})),
            (
                "long",
                "grep",
                json!({"pattern": "needle", "include": "long.txt"}),
            ),
        ],
    );
    let many = ok(&results, "many");
    assert!(many.starts_with("many.txt:1: match 1\nmany.txt:2: match 2\n"));
    assert!(many.contains("many.txt:100: match 100\n\n(showing the first 100 of 300 matching lines in 1 file; narrow the pattern, path or include to see the rest)\n"), "{many}");
    assert!(!many.contains("match 101"));

    // 100 lines of 500 characters do not fit in 50 KB: fewer are shown, and the note says so.
    let wide = ok(&results, "wide");
    assert!(wide.len() <= 51 * 1024, "{} bytes", wide.len());
    let shown = wide
        .lines()
        .filter(|l| l.starts_with("wide/w.txt:"))
        .count();
    assert!((90..100).contains(&shown), "{shown}");
    assert!(wide.contains(&format!(
        "(showing the first {shown} of 200 matching lines in 1 file;"
    )));
    assert!(wide.contains("… (line cut at 500 characters)"));

    let long = ok(&results, "long");
    assert_eq!(
        long,
        format!(
            "long.txt:1: {}… (line cut at 500 characters)\n",
            "a".repeat(500)
        )
    );
    let (_, metadata) = completed(&env, &run, "many").await;
    assert_eq!(metadata["matches"], 300);
    assert_eq!(metadata["shown"], 100);
    assert_eq!(metadata["truncated"], true);
}

#[tokio::test]
async fn grep_refuses_bad_patterns_binary_files_and_outside_paths() {
    let env = Env::new();
    sources(&env);
    let secret = outside_secret(&env);
    let (run, results) = run_calls(
        &env,
        vec![
            ("regex", "grep", json!({"pattern": "fn ("})),
            ("empty", "grep", json!({"pattern": ""})),
            (
                "binary",
                "grep",
                json!({"pattern": "fn", "path": "data.bin"}),
            ),
            ("glob", "grep", json!({"pattern": "fn", "include": "*.{rs"})),
            (
                "outside",
                "grep",
                json!({"pattern": "top", "path": "../secret.txt"}),
            ),
            (
                "symlink",
                "grep",
                json!({"pattern": "top", "path": "escape.txt"}),
            ),
            ("missing", "grep", json!({"pattern": "x", "path": "nope"})),
            ("links", "grep", json!({"pattern": "top secret"})),
        ],
    );
    let regex = err(&results, "regex");
    assert!(
        regex.starts_with("Error: invalid arguments: pattern is not a valid regular expression: regex parse error:"),
        "{regex}"
    );
    assert!(regex.contains("unclosed group"), "{regex}");
    assert!(regex.ends_with("To match characters such as ( ) [ ] { } . * + ? | \\ literally, put a backslash before each."));
    assert_eq!(
        err(&results, "empty"),
        "Error: invalid arguments: pattern is empty; give a regular expression to search for, e.g. `TODO` or `fn\\s+\\w+`"
    );
    assert_eq!(
        err(&results, "binary"),
        "Error: data.bin is a binary file; grep searches text files"
    );
    assert_eq!(
        err(&results, "glob"),
        "Error: invalid arguments: in include: not a valid glob: \"*.{rs\" has a `{` without a closing `}`"
    );
    assert!(err(&results, "outside").contains("is outside the working directory"));
    assert!(
        err(&results, "symlink").contains("is outside what `grep` was granted"),
        "{}",
        err(&results, "symlink")
    );
    assert_eq!(err(&results, "missing"), "Error: nope does not exist");
    // Symlinks are not followed by a search: the secret beside the project is not found.
    assert!(ok(&results, "links").starts_with("No matches for \"top secret\""));
    for (_, _, out) in &results {
        assert!(
            !out.contains("top secret\n") && !out.contains(":1: top secret"),
            "{out}"
        );
    }
    assert!(secret.exists());
    assert_ends(&env, &run, &results).await;
}
