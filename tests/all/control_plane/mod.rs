//! The control plane, tried as an attacker would: nobody but the operator
//! sets policy. A cloned project's own config, an API client, another host
//! on the same ledger, a plugin project or manifest, an MCP server and a
//! second local user each try to widen what warden allows; each attempt is
//! refused (or ignored and named), and the ordinary call beside it still
//! works.

mod checkout;
mod clients;
mod hosts;
mod manifests;
mod mcp_servers;
mod terminal;

use std::path::PathBuf;

use serde_json::Value;

use crate::common::Env;

/// Write the operator's own config (`$XDG_CONFIG_HOME/warden/warden.json`,
/// which `Env::warden` points at the test's root).
pub fn user_config(env: &Env, config: Value) -> PathBuf {
    let dir = env.root.path().join("user-config").join("warden");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("warden.json");
    std::fs::write(&file, config.to_string()).unwrap();
    file
}

/// `python3 tests/mcp/hostile_server.py MODE [MARKER]` as an MCP command.
pub fn hostile_mcp(mode: &str, marker: Option<&std::path::Path>) -> Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/mcp/hostile_server.py"
    );
    let mut command = vec![
        Value::from("python3"),
        Value::from(script),
        Value::from(mode),
    ];
    if let Some(m) = marker {
        command.push(Value::from(m.display().to_string()));
    }
    serde_json::json!({"type": "local", "command": command})
}
