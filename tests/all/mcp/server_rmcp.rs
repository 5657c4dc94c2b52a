//! `warden mcp` driven by rmcp's client over stdio: the tools listed with
//! their schemas, a call that runs, a path the rules deny staying denied,
//! an `ask` turned into an elicitation (accepted, declined) or, for a
//! client that cannot answer one, a denial saying why; every call audited
//! under a session named after the MCP client.

use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, Implementation,
};
use rmcp::service::{RequestContext, RoleClient};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use super::{audit_rows, row};
use crate::common::*;

/// A client that answers warden's questions: yes for `ok.txt`, no otherwise.
#[derive(Clone)]
struct Answering;

impl rmcp::ClientHandler for Answering {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("answering-client", "2.0.0"),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        let message = match &request {
            ElicitRequestParams::FormElicitationParams { message, .. } => message.clone(),
            _ => String::new(),
        };
        Ok(if message.contains("ok.txt") {
            let mut r = ElicitResult::new(ElicitationAction::Accept);
            r.content = Some(json!({"always": false}));
            r
        } else {
            ElicitResult::new(ElicitationAction::Decline)
        })
    }
}

fn warden_mcp(env: &Env) -> TokioChildProcess {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.arg("mcp")
        .current_dir(env.project())
        .env("WARDEN_DATA_DIR", env.data())
        .env_remove("WARDEN_CONFIG")
        .env_remove("WARDEN_LOG");
    TokioChildProcess::new(cmd).unwrap()
}

fn args(v: Value) -> rmcp::model::JsonObject {
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

fn text(r: &rmcp::model::CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

fn project(env: &Env) {
    env.file("notes.txt", "hello from warden\n");
    env.file("secret.env", "TOKEN=1\n");
    env.file("ok.txt", "approved\n");
    env.file("no.txt", "refused\n");
    env.config(
        json!({"permission": {"read": {"*.env": "deny", "ok.txt": "ask", "no.txt": "ask"}}}),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_warden_plugin_over_mcp_keeps_warden_rules() {
    let env = Env::new();
    project(&env);
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("rmcp-test-client", "1.0.0"),
    )
    .serve(warden_mcp(&env))
    .await
    .unwrap();

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, BUILTIN_TOOLS);
    let read = &tools[0];
    assert_eq!(read.title.as_deref(), Some("read (read)"));
    assert_eq!(
        read.input_schema["properties"]["filePath"]["type"],
        "string"
    );
    assert!(read.output_schema.is_some());

    let ok = client
        .call_tool(
            CallToolRequestParams::new("read")
                .with_arguments(args(json!({"filePath": "notes.txt"}))),
        )
        .await
        .unwrap();
    assert_eq!(ok.is_error, Some(false), "{}", text(&ok));
    assert!(text(&ok).contains("hello from warden"), "{}", text(&ok));
    let structured = ok.structured_content.clone().unwrap();
    assert_eq!(structured["output"], Value::String(text(&ok)));

    let denied = client
        .call_tool(
            CallToolRequestParams::new("read")
                .with_arguments(args(json!({"filePath": "secret.env"}))),
        )
        .await
        .unwrap();
    assert_eq!(denied.is_error, Some(true));
    assert_eq!(
        text(&denied),
        "permission denied: `read` on `secret.env` is denied by the rule `read *.env deny`; the call did not run"
    );

    // This client cannot answer questions: an `ask` is a denial that says so.
    let asked = client
        .call_tool(
            CallToolRequestParams::new("read").with_arguments(args(json!({"filePath": "ok.txt"}))),
        )
        .await
        .unwrap();
    assert_eq!(asked.is_error, Some(true));
    assert_eq!(
        text(&asked),
        "permission denied: `read` on `ok.txt` needs approval and nobody was attached to give it; allow it in the config to run unattended"
    );
    client.cancel().await.unwrap();

    let ledger = env.ledger();
    let sessions = ledger.sessions().await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].title, "mcp: rmcp-test-client 1.0.0");
    let trail = ledger.audit_trail(&sessions[0].id).await.unwrap();
    let rows = audit_rows(&trail);
    let caller = "mcp:rmcp-test-client 1.0.0";
    assert_eq!(
        rows,
        vec![
            row("mcp_1", "caller", caller, "called", "read"),
            row("mcp_1", "permission", "read", "allowed", "ok"),
            row("mcp_1", "tool", "read", "ran", "ok"),
            row("mcp_2", "caller", caller, "called", "read"),
            row("mcp_2", "permission", "read", "denied", "refused"),
            row("mcp_3", "caller", caller, "called", "read"),
            row("mcp_3", "ask", "read", "asked:reject", "refused"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ask_becomes_an_elicitation_for_a_client_that_answers() {
    let env = Env::new();
    project(&env);
    let client = Answering.serve(warden_mcp(&env)).await.unwrap();

    let yes = client
        .call_tool(
            CallToolRequestParams::new("read").with_arguments(args(json!({"filePath": "ok.txt"}))),
        )
        .await
        .unwrap();
    assert_eq!(yes.is_error, Some(false), "{}", text(&yes));
    assert!(text(&yes).contains("approved"));

    let no = client
        .call_tool(
            CallToolRequestParams::new("read").with_arguments(args(json!({"filePath": "no.txt"}))),
        )
        .await
        .unwrap();
    assert_eq!(no.is_error, Some(true));
    assert_eq!(
        text(&no),
        "permission denied: `read` on `no.txt` needs approval and the user rejected it"
    );
    client.cancel().await.unwrap();

    let ledger = env.ledger();
    let sessions = ledger.sessions().await.unwrap();
    assert_eq!(sessions[0].title, "mcp: answering-client 2.0.0");
    let caller = "mcp:answering-client 2.0.0";
    assert_eq!(
        audit_rows(&ledger.audit_trail(&sessions[0].id).await.unwrap()),
        vec![
            row("mcp_1", "caller", caller, "called", "read"),
            row("mcp_1", "ask", "read", "asked:once", "ok"),
            row("mcp_1", "tool", "read", "ran", "ok"),
            row("mcp_2", "caller", caller, "called", "read"),
            row("mcp_2", "ask", "read", "asked:reject", "refused"),
        ]
    );
}
