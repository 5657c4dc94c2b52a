//! A damaged ledger is named as such, with what to do, before anything is
//! written to it; `warden ledger check` runs SQLite's integrity checks and
//! says plainly whether the file is sound.

use serde_json::json;

use crate::common::*;

/// A ledger with one answered session in it, its log folded into the file.
async fn sound_ledger(env: &Env) -> std::path::PathBuf {
    env.cassette(json!([{"text": "hello"}]));
    let run = env.run_json("hi");
    assert!(run.status.success(), "{}", run.stderr);
    let path = env.data().join("ledger.db");
    env.ledger().checkpoint().await.unwrap();
    path
}

fn check(env: &Env, path: &std::path::Path) -> (i32, String) {
    let out = env
        .warden(&["ledger", "check", &path.display().to_string()])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Every command that opens the ledger refuses it, naming the file, the
/// damage and what to do, and leaves the file as it was.
fn refused(env: &Env, path: &std::path::Path) {
    let before = std::fs::read(path).unwrap();
    for args in [
        vec!["session", "list"],
        vec!["run", "--model", "scripted:x", "hi"],
    ] {
        let out = env.warden(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{args:?} succeeded on a damaged ledger"
        );
        let shown = path.display().to_string();
        assert!(
            stderr.contains(&format!("the ledger at {shown} is damaged: "))
                && stderr.contains(&format!("run `warden ledger check {shown}`"))
                && stderr.contains("restore it from a backup or move it aside"),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(
        std::fs::read(path).unwrap(),
        before,
        "the damaged file was written to"
    );
}

#[tokio::test]
async fn a_sound_ledger_checks_out() {
    let env = Env::new();
    let path = sound_ledger(&env).await;
    let (code, out) = check(&env, &path);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        format!(
            "{}: ok (integrity and foreign keys check out)\n",
            path.display()
        )
    );
    // Without a path: the data dir's ledger.
    let out = env.warden(&["ledger", "check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_file_that_is_not_a_ledger_is_named_damaged() {
    let env = Env::new();
    std::fs::create_dir_all(env.data()).unwrap();
    let path = env.data().join("ledger.db");
    std::fs::write(&path, "these are notes, not a database\n".repeat(200)).unwrap();
    refused(&env, &path);
    let (code, out) = check(&env, &path);
    assert_eq!(code, 2, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], format!("{}: damaged", path.display()));
    assert_eq!(lines[1], "  file is not a database");
}

#[tokio::test]
async fn bytes_overwritten_mid_file_are_found_and_named() {
    let env = Env::new();
    let path = sound_ledger(&env).await;
    let mut bytes = std::fs::read(&path).unwrap();
    let page = 4096;
    assert!(bytes.len() >= 6 * page, "{} bytes", bytes.len());
    // Three pages in the middle turn to noise (a fixed pseudo-random run).
    let start = (bytes.len() / page / 2) * page;
    let mut x: u32 = 0x2545_f491;
    for b in &mut bytes[start..start + 3 * page] {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    std::fs::write(&path, &bytes).unwrap();
    refused(&env, &path);
    let (code, out) = check(&env, &path);
    assert_eq!(code, 2, "{out}");
    assert_eq!(
        out.lines().next().unwrap(),
        format!("{}: damaged", path.display())
    );
    assert!(
        out.lines().count() >= 3,
        "names at least one problem: {out}"
    );
}

#[tokio::test]
async fn a_truncated_ledger_is_named_damaged() {
    let env = Env::new();
    let path = sound_ledger(&env).await;
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    refused(&env, &path);
    let (code, out) = check(&env, &path);
    assert_eq!(code, 2, "{out}");
}
