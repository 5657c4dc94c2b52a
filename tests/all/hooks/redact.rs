//! The `redact` example hook: secrets never reach the model or the ledger.

use serde_json::json;

use super::*;

const SECRETS: &str = "OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx12\n\
GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ\n\
AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n\
SLACK=xoxb-1234567890-abcdefghij\n\
curl -H 'Authorization: Bearer eyJhbGciOi.eyJzdWIi.c2ln'\n\
-----BEGIN OPENSSH PRIVATE KEY-----\n\
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n\
-----END OPENSSH PRIVATE KEY-----\n\
name = demo\n";

#[tokio::test]
async fn redact_replaces_secrets_in_what_the_model_and_the_ledger_see() {
    let env = Env::new();
    env.file("config.txt", SECRETS);
    env.file("clean.txt", "nothing to hide\n");
    let redact = json!({"name": "redact", "path": plugin_wasm("warden_hook_redact.wasm")});
    env.config(json!({"plugins": [redact]}));
    script(
        &env,
        &[&[
            ("r1", "read", json!({"filePath": "config.txt"})),
            (
                "g1",
                "grep",
                json!({"pattern": "KEY|TOKEN", "include": "*.txt"}),
            ),
            ("c1", "read", json!({"filePath": "clean.txt"})),
        ]],
    );
    let (run, results) = run(&env, &[]);
    let r1 = &result(&results, "r1").2;
    assert_eq!(
        r1,
        "     1\tOPENAI_API_KEY=[REDACTED]\n     2\tGITHUB_TOKEN=[REDACTED]\n     3\t\
         AWS_ACCESS_KEY_ID=[REDACTED]\n     4\tSLACK=[REDACTED]\n     5\tcurl -H 'Authorization: \
         Bearer [REDACTED]'\n     6\t[REDACTED]\n     9\tname = demo\n"
    );
    let g1 = &result(&results, "g1").2;
    assert_eq!(
        g1,
        "config.txt:1: OPENAI_API_KEY=[REDACTED]\nconfig.txt:2: GITHUB_TOKEN=[REDACTED]\n\
         config.txt:3: AWS_ACCESS_KEY_ID=[REDACTED]\nconfig.txt:6: [REDACTED]\n",
        "a BEGIN…END span goes whole, the lines between it included"
    );
    assert_eq!(result(&results, "c1").2, "     1\tnothing to hide\n");

    // The ledger holds the redacted output, and the metadata says what went.
    match state(&env, &run, "r1").await {
        ToolState::Completed {
            output, metadata, ..
        } => {
            assert_eq!(&output, r1);
            assert_eq!(
                metadata["redacted"],
                json!({"count": 6, "kinds": {"api-key": 1, "aws-access-key": 1, "bearer-token": 1,
                        "github-token": 1, "private-key": 1, "slack-token": 1}})
            );
            assert_eq!(
                metadata["path"], "config.txt",
                "the tool's own metadata stays"
            );
        }
        other => panic!("{other:?}"),
    }
    let export = env
        .warden(&["session", "export", run.session().as_str()])
        .output()
        .unwrap();
    let export = String::from_utf8_lossy(&export.stdout);
    for secret in [
        "sk-proj-abc",
        "ghp_abc",
        "AKIAIOSFODNN7EXAMPLE",
        "xoxb-123",
        "eyJhbGciOi",
        "b3BlbnNzaC1rZXkt",
    ] {
        assert!(!export.contains(secret), "{secret} leaked into the ledger");
    }
    // Nothing to redact: the output is kept as it was.
    assert_eq!(
        audit(&env, &run, "c1").await.last().unwrap(),
        &row("after", "hook:redact", "ran", "keep")
    );
    assert_eq!(
        audit(&env, &run, "r1").await.last().unwrap(),
        &row("after", "hook:redact", "ran", "rewrite")
    );
    // The file itself is untouched.
    assert_eq!(
        std::fs::read_to_string(env.project().join("config.txt")).unwrap(),
        SECRETS
    );
}
