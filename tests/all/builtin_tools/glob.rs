//! `glob`: names at any depth or paths from the root, newest first, capped.

use std::time::{Duration, SystemTime};

use serde_json::json;

use super::*;

/// Write `rel` with a modification time `age` seconds ago.
fn aged(env: &Env, rel: &str, age: u64) {
    let path = env.file(rel, "x\n");
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(age))
        .unwrap();
}

#[tokio::test]
async fn glob_matches_names_anywhere_and_paths_from_the_root_newest_first() {
    let env = Env::new();
    aged(&env, "src/a.rs", 30);
    aged(&env, "src/deep/b.rs", 10);
    aged(&env, "lib.rs", 20);
    aged(&env, "same1.rs", 40);
    aged(&env, "same0.rs", 40);
    aged(&env, "web/x.ts", 5);
    aged(&env, "web/y.tsx", 6);
    aged(&env, "web/z.js", 1);
    aged(&env, "node_modules/pkg/index.rs", 1);
    let (run, results) = run_calls(
        &env,
        vec![
            ("names", "glob", json!({"pattern": "*.rs"})),
            ("paths", "glob", json!({"pattern": "src/**/*.rs"})),
            ("under", "glob", json!({"pattern": "*.rs", "path": "src"})),
            ("alts", "glob", json!({"pattern": "web/*.{ts,tsx}"})),
            ("heavy", "glob", json!({"pattern": "node_modules/**/*.rs"})),
            ("none", "glob", json!({"pattern": "*.go", "path": "web"})),
        ],
    );
    let note = "(not searched: node_modules; name one in the glob or as path to search it)\n";
    assert_eq!(
        ok(&results, "names"),
        format!("src/deep/b.rs\nlib.rs\nsrc/a.rs\nsame0.rs\nsame1.rs\n{note}")
    );
    assert_eq!(
        ok(&results, "paths"),
        format!("src/deep/b.rs\nsrc/a.rs\n{note}")
    );
    assert_eq!(ok(&results, "under"), "src/deep/b.rs\nsrc/a.rs\n");
    assert_eq!(ok(&results, "alts"), format!("web/x.ts\nweb/y.tsx\n{note}"));
    assert_eq!(ok(&results, "heavy"), "node_modules/pkg/index.rs\n");
    assert_eq!(ok(&results, "none"), "No files match \"*.go\" in web.\n");
    let (title, metadata) = completed(&env, &run, "names").await;
    assert_eq!(title, "*.rs in .");
    assert_eq!(
        metadata,
        json!({"pattern": "*.rs", "path": ".", "count": 5, "shown": 5, "truncated": false,
               "skipped": ["node_modules"]})
    );
    assert_ends(&env, &run, &results).await;
}

#[tokio::test]
async fn glob_caps_long_lists_and_refuses_bad_globs_and_paths() {
    let env = Env::new();
    for n in 0..150 {
        aged(&env, &format!("many/f{n:03}.txt"), 1000 - n);
    }
    env.file("README.md", "r\n");
    let secret = outside_secret(&env);
    let (run, results) = run_calls(
        &env,
        vec![
            ("many", "glob", json!({"pattern": "many/*.txt"})),
            ("empty", "glob", json!({"pattern": ""})),
            ("dotdot", "glob", json!({"pattern": "../*.txt"})),
            ("absolute", "glob", json!({"pattern": "/etc/*"})),
            ("bad", "glob", json!({"pattern": "a["})),
            ("file", "glob", json!({"pattern": "*", "path": "README.md"})),
            ("outside", "glob", json!({"pattern": "*", "path": "../"})),
            ("missing", "glob", json!({"pattern": "*", "path": "nope"})),
            ("links", "glob", json!({"pattern": "**/*.txt", "path": "."})),
        ],
    );
    let many = ok(&results, "many");
    let lines: Vec<&str> = many.lines().collect();
    assert_eq!(lines[0], "many/f149.txt", "newest first");
    assert_eq!(lines[99], "many/f050.txt");
    assert_eq!(
        lines[100..],
        [
            "",
            "(showing the 100 most recently modified of 150 matching files; use a more specific \
             pattern or path to see the others)"
        ]
    );
    assert_eq!(
        err(&results, "empty"),
        "Error: invalid arguments: the glob is empty; give one such as **/*.rs or src/**/*.ts"
    );
    assert!(err(&results, "dotdot").contains("climbs out with `..`"));
    assert!(err(&results, "absolute").contains("is absolute"));
    assert_eq!(
        err(&results, "bad"),
        "Error: invalid arguments: not a valid glob: \"a[\" has a `[` without a closing `]`"
    );
    assert_eq!(
        err(&results, "file"),
        "Error: README.md is a file, not a directory; pass a directory as path"
    );
    assert!(err(&results, "outside").contains("is outside the working directory"));
    assert_eq!(err(&results, "missing"), "Error: nope does not exist");
    // Symlinks are not followed: the file beside the project stays unseen.
    let links = ok(&results, "links");
    assert!(
        !links.contains("secret") && !links.contains("escape"),
        "{links}"
    );
    assert!(secret.exists());
    let (_, metadata) = completed(&env, &run, "many").await;
    assert_eq!(
        (metadata["count"].clone(), metadata["shown"].clone()),
        (json!(150), json!(100))
    );
    assert_eq!(metadata["truncated"], true);
}
