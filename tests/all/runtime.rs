//! The plugin runtime as a library: properties that need the host's own
//! async runtime in view.

use std::sync::{Arc, Mutex};

use serde_json::json;
use warden_core::Config;
use warden_core::tool::{CallContext, ToolSource, Unattended};
use warden_runtime::WasmHost;

use crate::common::*;

/// On a single-threaded runtime, a guest that never returns must still let
/// other work run: it yields at every epoch tick. If it blocked the thread,
/// the echo could only finish after the spin had been stopped.
#[test]
fn a_busy_guest_does_not_block_the_async_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let config = Config::parse(
            &json!({"builtins": false, "plugins": [Env::fixtures_plugin(json!({"timeout_ms": 3000}))]}).to_string(),
        )
        .unwrap();
        let host = WasmHost::load(&config.plugin_set(), None, None).await.unwrap();
        let tools = host.tools();
        let spin = tools.iter().find(|t| t.id == "spin").unwrap();
        let echo = tools.iter().find(|t| t.id == "echo").unwrap();
        let ctx = CallContext {
            session_id: "ses_x".into(),
            message_id: "msg_x".into(),
            call_id: "c".into(),
            agent: "build".into(),
            directory: std::env::temp_dir().display().to_string(),
        };
        let done = Arc::new(Mutex::new(Vec::new()));
        let spinning = async {
            let r = host.execute(spin, &ctx, "{}", Arc::new(Unattended)).await;
            done.lock().unwrap().push(("spin", r.map(|o| o.output).map_err(|e| e.to_string())));
        };
        let echoing = async {
            let r = host.execute(echo, &ctx, r#"{"hi":1}"#, Arc::new(Unattended)).await;
            done.lock().unwrap().push(("echo", r.map(|o| o.output).map_err(|e| e.to_string())));
        };
        tokio::join!(spinning, echoing);
        let done = done.lock().unwrap();
        assert_eq!(done[0], ("echo", Ok(r#"{"hi":1}"#.to_string())));
        assert_eq!(done[1].0, "spin");
        assert!(done[1].1.as_ref().unwrap_err().ends_with("ran past its time limit of 3000 ms and was stopped"));
    });
}
