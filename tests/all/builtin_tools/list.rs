//! `list`: a sorted tree, level by level, capped, heavy folders not entered.

use serde_json::json;

use super::*;

fn tree(env: &Env) {
    env.file("a.txt", "a\n");
    env.file("zeta.md", "z\n");
    env.file("b/c.txt", "c\n");
    env.file("b/d/e.txt", "e\n");
    env.file("node_modules/x/y.js", "y\n");
    env.file(".git/HEAD", "ref\n");
    std::os::unix::fs::symlink("a.txt", env.project().join("link")).unwrap();
    std::fs::create_dir_all(env.project().join("emptydir")).unwrap();
}

#[tokio::test]
async fn list_shows_a_sorted_tree_folders_first_without_entering_heavy_folders() {
    let env = Env::new();
    tree(&env);
    let (run, results) = run_calls(
        &env,
        vec![
            ("root", "list", json!({})),
            ("sub", "list", json!({"path": "b", "ignore": ["*.txt"]})),
            ("heavy", "list", json!({"path": "node_modules"})),
            (
                "ignored",
                "list",
                json!({"path": ".", "ignore": ["b", "*.md", "./link"]}),
            ),
            ("empty", "list", json!({"path": "emptydir"})),
        ],
    );
    assert_eq!(
        ok(&results, "root"),
        "./\n  .git/ (not entered)\n  b/\n    d/\n      e.txt\n    c.txt\n  emptydir/\n  \
         node_modules/ (not entered)\n  a.txt\n  link -> a.txt\n  zeta.md\n"
    );
    assert_eq!(ok(&results, "sub"), "b/\n  d/\n");
    assert_eq!(ok(&results, "heavy"), "node_modules/\n  x/\n    y.js\n");
    assert_eq!(
        ok(&results, "ignored"),
        "./\n  .git/ (not entered)\n  emptydir/\n  node_modules/ (not entered)\n  a.txt\n"
    );
    assert_eq!(ok(&results, "empty"), "emptydir/\n(emptydir is empty)\n");
    let (title, metadata) = completed(&env, &run, "root").await;
    assert_eq!(title, ".");
    assert_eq!(
        metadata,
        json!({"path": ".", "entries": 10, "more": 0, "truncated": false,
               "skipped": [".git", "node_modules"]})
    );
    assert_ends(&env, &run, &results).await;
}

#[tokio::test]
async fn list_caps_a_big_tree_keeping_its_top_and_says_where_the_rest_is() {
    let env = Env::new();
    env.file("top.txt", "t\n");
    for n in 0..300 {
        env.file(&format!("many/f{n:03}.txt"), "");
    }
    let (run, results) = run_calls(&env, vec![("big", "list", json!({}))]);
    let out = ok(&results, "big");
    assert!(
        out.starts_with("./\n  many/\n    f000.txt\n    f001.txt\n"),
        "{out}"
    );
    assert!(
        out.contains("    f197.txt\n    … 102 more\n  top.txt\n"),
        "{out}"
    );
    assert!(!out.contains("f198.txt"));
    assert!(out.ends_with(
        "\n(showing 200 entries; 102 more are in the folders marked \"…\". List a folder by its \
         path, or pass ignore patterns, to see the rest)\n"
    ));
    let (_, metadata) = completed(&env, &run, "big").await;
    assert_eq!(metadata["entries"], 200);
    assert_eq!(metadata["more"], 102);
    assert_eq!(metadata["truncated"], true);
}

#[tokio::test]
async fn list_refuses_files_missing_and_outside_paths_and_bad_globs() {
    let env = Env::new();
    tree(&env);
    outside_secret(&env);
    let (run, results) = run_calls(
        &env,
        vec![
            ("file", "list", json!({"path": "a.txt"})),
            ("missing", "list", json!({"path": "nope"})),
            ("dotdot", "list", json!({"path": ".."})),
            ("absolute", "list", json!({"path": "/etc"})),
            ("symlinked_dir", "list", json!({"path": "up"})),
            ("bad_glob", "list", json!({"ignore": ["a["]})),
            ("bad_arg", "list", json!({"dir": "b"})),
        ],
    );
    assert_eq!(
        err(&results, "file"),
        "Error: a.txt is a file, not a directory; use read to see its content"
    );
    assert_eq!(err(&results, "missing"), "Error: nope does not exist");
    for id in ["dotdot", "absolute"] {
        assert!(
            err(&results, id).contains("is outside the working directory"),
            "{id}"
        );
    }
    assert!(
        err(&results, "symlinked_dir").contains("is outside what `list` was granted"),
        "{}",
        err(&results, "symlinked_dir")
    );
    assert_eq!(
        err(&results, "bad_glob"),
        "Error: invalid arguments: in ignore: not a valid glob: \"a[\" has a `[` without a closing `]`"
    );
    assert!(err(&results, "bad_arg").contains("unknown field `dir`"));
    for (_, _, out) in &results {
        assert!(!out.contains("secret.txt"), "{out}");
    }
    assert_ends(&env, &run, &results).await;
}
