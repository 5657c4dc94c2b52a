//! The built-in `read` tool, through the whole loop: normal use and every
//! bad input, each checked in what the model is shown.

use serde_json::json;

use crate::common::*;

/// Run one turn of `read` calls (id → arguments) and return the results by id.
fn read_calls(env: &Env, calls: &[(&str, serde_json::Value)]) -> Vec<(String, bool, String)> {
    let calls: Vec<serde_json::Value> = calls
        .iter()
        .map(|(id, args)| json!({"id": id, "name": "read", "arguments": args}))
        .collect();
    env.cassette(json!([{"tool_calls": calls}, {"text": "ok"}]));
    let run = env.run_json("read things");
    assert!(run.status.success(), "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"));
    let reqs = env.requests();
    tool_results(reqs.last().unwrap())
}

fn result<'a>(results: &'a [(String, bool, String)], id: &str) -> &'a (String, bool, String) {
    results
        .iter()
        .find(|r| r.0 == id)
        .unwrap_or_else(|| panic!("no result for {id}"))
}

#[test]
fn reads_number_lines_and_honour_offset_and_limit() {
    let env = Env::new();
    let text: String = (1..=10).map(|n| format!("line {n}\n")).collect();
    env.file("ten.txt", &text);
    env.file("src/deep/b.rs", "fn main() {}\n");
    env.file("empty.txt", "");
    env.file("crlf.txt", "one\r\ntwo\r\n");
    let abs = env.project().join("ten.txt").display().to_string();
    let results = read_calls(
        &env,
        &[
            ("all", json!({"filePath": "ten.txt"})),
            (
                "window",
                json!({"filePath": "ten.txt", "offset": 4, "limit": 2}),
            ),
            (
                "zero",
                json!({"filePath": "ten.txt", "offset": 0, "limit": 1}),
            ),
            ("deep", json!({"filePath": "./src/../src/deep/b.rs"})),
            ("absolute", json!({"filePath": abs})),
            ("empty", json!({"filePath": "empty.txt"})),
            ("crlf", json!({"filePath": "crlf.txt"})),
            ("past", json!({"filePath": "ten.txt", "offset": 11})),
        ],
    );
    let all = result(&results, "all");
    assert!(!all.1);
    assert!(
        all.2.starts_with("     1\tline 1\n     2\tline 2\n"),
        "{}",
        all.2
    );
    assert!(all.2.ends_with("    10\tline 10\n"), "{}", all.2);
    assert_eq!(
        result(&results, "window").2,
        "     4\tline 4\n     5\tline 5\n\n(showing lines 4-5 of 10; use offset=6 to read on)\n"
    );
    assert!(
        result(&results, "zero")
            .2
            .starts_with("     1\tline 1\n\n(showing lines 1-1 of 10")
    );
    assert_eq!(result(&results, "deep").2, "     1\tfn main() {}\n");
    assert_eq!(result(&results, "absolute").2, all.2);
    assert_eq!(result(&results, "empty").2, "(empty.txt is empty)");
    assert_eq!(result(&results, "crlf").2, "     1\tone\n     2\ttwo\n");
    let past = result(&results, "past");
    assert!(past.1);
    assert!(
        past.2
            .contains("offset 11 is past the end of ten.txt, which has 10 lines"),
        "{}",
        past.2
    );
}

#[test]
fn bad_paths_and_files_get_errors_that_say_what_to_do() {
    let env = Env::new();
    env.file("package.json", "{}\n");
    env.file("src/main.rs", "fn main() {}\n");
    env.file("image.png", [0x89, b'P', b'N', b'G', 0, 0, 0, 13]);
    env.file("data.bin", [1u8, 2, 0, 4, 5]);
    let secret = env.root.path().join("secret.txt");
    std::fs::write(&secret, "top secret\n").unwrap();
    std::os::unix::fs::symlink(&secret, env.project().join("escape.txt")).unwrap();
    std::os::unix::fs::symlink(env.root.path(), env.project().join("up")).unwrap();
    let results = read_calls(
        &env,
        &[
            ("missing", json!({"filePath": "package.jsn"})),
            ("dir", json!({"filePath": "src"})),
            ("png", json!({"filePath": "image.png"})),
            ("binary", json!({"filePath": "data.bin"})),
            ("dotdot", json!({"filePath": "../secret.txt"})),
            (
                "absolute",
                json!({"filePath": secret.display().to_string()}),
            ),
            ("etc", json!({"filePath": "/etc/passwd"})),
            ("symlink", json!({"filePath": "escape.txt"})),
            ("symlinked_dir", json!({"filePath": "up/secret.txt"})),
            ("empty_path", json!({"filePath": ""})),
            (
                "zero_limit",
                json!({"filePath": "package.json", "limit": 0}),
            ),
        ],
    );
    for r in &results {
        assert!(r.1, "{} should be an error: {}", r.0, r.2);
        assert!(
            !r.2.contains("top secret"),
            "{} leaked the secret: {}",
            r.0,
            r.2
        );
    }
    assert_eq!(
        result(&results, "missing").2,
        "Error: file not found: package.jsn. Did you mean: package.json?"
    );
    assert!(
        result(&results, "dir")
            .2
            .contains("src is a directory, not a file"),
        "{:?}",
        result(&results, "dir")
    );
    assert!(
        result(&results, "png")
            .2
            .contains("image.png is a binary file (8 bytes)")
    );
    assert!(
        result(&results, "binary")
            .2
            .contains("data.bin is a binary file (5 bytes)")
    );
    for id in ["dotdot", "absolute", "etc"] {
        assert!(
            result(&results, id)
                .2
                .contains("is outside the working directory"),
            "{:?}",
            result(&results, id)
        );
    }
    // Symlinks out of the working directory are stopped by the sandbox itself.
    for id in ["symlink", "symlinked_dir"] {
        let r = result(&results, id);
        assert!(r.2.contains("cannot"), "{r:?}");
    }
    assert!(
        result(&results, "empty_path")
            .2
            .contains("the path is empty")
    );
    assert!(
        result(&results, "zero_limit")
            .2
            .contains("limit must be at least 1")
    );
}

#[test]
fn long_lines_and_large_files_are_capped() {
    let env = Env::new();
    env.file("long.txt", format!("{}\nshort\n", "y".repeat(5000)));
    let big: String = (1..=5000)
        .map(|n| format!("this is line number {n} of a big file\n"))
        .collect();
    env.file("big.txt", &big);
    let results = read_calls(
        &env,
        &[
            ("long", json!({"filePath": "long.txt"})),
            ("big", json!({"filePath": "big.txt"})),
        ],
    );
    let long = &result(&results, "long").2;
    assert!(
        long.contains("… (line cut at 2000 characters)"),
        "{}",
        &long[..100]
    );
    assert!(long.contains("     2\tshort\n"));
    let big = &result(&results, "big").2;
    assert!(big.len() <= 51 * 1024, "{} bytes", big.len());
    assert!(
        big.contains("(output capped at 50 KB; showing lines 1-"),
        "{}",
        &big[big.len() - 200..]
    );
    assert!(big.contains(" of 5000; use offset="));
}

#[test]
fn read_is_read_only_and_sees_nothing_outside_its_grant() {
    // The same directory given to a hostile guest: the grant alone decides.
    let env = Env::new();
    env.file("a.txt", "a\n");
    env.config(
        json!({"plugins": [Env::fixtures_plugin(json!({"dirs": [{"path": ".", "mode": "ro"}]}))]}),
    );
    let outside = env.root.path().join("outside.txt");
    std::fs::write(&outside, "outside\n").unwrap();
    let inside = env.project().join("a.txt");
    env.cassette(json!([
        {"tool_calls": [
            {"id": "w", "name": "write_path", "arguments": {"path": inside.display().to_string(), "content": "changed"}},
            {"id": "r", "name": "read_path", "arguments": {"path": outside.display().to_string()}},
            {"id": "ok", "name": "read_path", "arguments": {"path": inside.display().to_string()}}
        ]},
        {"text": "done"}
    ]));
    let run = env.run_json("try");
    assert!(run.status.success(), "{}", run.stderr);
    let results = tool_results(&env.requests()[1]);
    let w = result(&results, "w");
    assert!(w.1, "{w:?}");
    assert_eq!(
        std::fs::read_to_string(&inside).unwrap(),
        "a\n",
        "the read-only grant held"
    );
    let r = result(&results, "r");
    assert!(r.1 && !r.2.contains("outside\n"), "{r:?}");
    assert_eq!(result(&results, "ok").2, "a\n");
}

#[test]
fn a_pipe_is_refused_instead_of_hanging_the_call() {
    let env = Env::new();
    let fifo = env.project().join("pipe");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let results = read_calls(&env, &[("pipe", json!({"filePath": "pipe"}))]);
    let r = result(&results, "pipe");
    assert!(r.1 && r.2.contains("pipe is not a regular file"), "{r:?}");
}
