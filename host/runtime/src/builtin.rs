//! The built-in tools, embedded in the binary as components and run through
//! the same sandbox as any third-party plugin, with default grants the
//! operator can replace (`builtin_grants` in the config).
//!
//! Each tool is its own plugin, so each gets only what it needs: the tools
//! that change files (`write`, `edit`) get the working directory read-write,
//! the ones that look (`read`, `list`, `glob`, `grep`) get it read-only.

use std::collections::BTreeMap;

use warden_core::config::{DirGrant, DirMode, Grants, ToolSettings};

/// One embedded plugin.
pub struct Builtin {
    pub name: &'static str,
    pub bytes: &'static [u8],
    /// How the rules see its tools.
    pub tools: fn() -> BTreeMap<String, ToolSettings>,
    /// What it gets unless the operator says otherwise.
    pub grants: fn() -> Grants,
    /// Useless without network: loaded only when its grant names hosts.
    pub needs_hosts: bool,
}

/// An embedded component built by `build.rs`.
macro_rules! component {
    ($file:literal) => {
        include_bytes!(concat!(env!("WARDEN_PLUGIN_DIR"), "/", $file))
    };
}

/// Every built-in plugin, in the order the model is offered their tools.
pub fn all() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "read",
            bytes: component!("warden_tool_read.wasm"),
            tools: || settings("read", "read", "filePath"),
            grants: || working_dir(DirMode::ReadOnly),
            needs_hosts: false,
        },
        Builtin {
            name: "write",
            bytes: component!("warden_tool_write.wasm"),
            tools: || settings("write", "edit", "filePath"),
            grants: || working_dir(DirMode::ReadWrite),
            needs_hosts: false,
        },
        Builtin {
            name: "edit",
            bytes: component!("warden_tool_edit.wasm"),
            tools: || settings("edit", "edit", "filePath"),
            grants: || working_dir(DirMode::ReadWrite),
            needs_hosts: false,
        },
        Builtin {
            name: "list",
            bytes: component!("warden_tool_list.wasm"),
            tools: || settings("list", "list", "path"),
            grants: || working_dir(DirMode::ReadOnly),
            needs_hosts: false,
        },
        Builtin {
            name: "glob",
            bytes: component!("warden_tool_glob.wasm"),
            tools: || settings("glob", "glob", "path"),
            grants: || working_dir(DirMode::ReadOnly),
            needs_hosts: false,
        },
        Builtin {
            name: "grep",
            bytes: component!("warden_tool_grep.wasm"),
            tools: || settings("grep", "grep", "path"),
            grants: || working_dir(DirMode::ReadOnly),
            needs_hosts: false,
        },
        Builtin {
            name: "webfetch",
            bytes: component!("warden_tool_webfetch.wasm"),
            tools: || {
                BTreeMap::from([(
                    "webfetch".to_string(),
                    ToolSettings {
                        permission: Some("webfetch".into()),
                        path_arg: None,
                        url_arg: Some("url".into()),
                    },
                )])
            },
            // No network unless the operator grants hosts (builtin_grants.webfetch.hosts).
            grants: || Grants {
                timeout_ms: 60_000,
                ..Grants::default()
            },
            needs_hosts: true,
        },
    ]
}

/// One tool whose rules use `permission`, with its pattern taken from the
/// path argument `path_arg` (relative to the working directory; `*` when the
/// argument is absent).
fn settings(tool: &str, permission: &str, path_arg: &str) -> BTreeMap<String, ToolSettings> {
    BTreeMap::from([(
        tool.to_string(),
        ToolSettings {
            permission: Some(permission.into()),
            path_arg: Some(path_arg.into()),
            url_arg: None,
        },
    )])
}

/// The session's working directory, and nothing else.
fn working_dir(mode: DirMode) -> Grants {
    Grants {
        dirs: vec![DirGrant {
            path: ".".into(),
            mode,
        }],
        ..Grants::default()
    }
}

/// The directory the build put the guest components in (the built-ins and
/// the test fixtures).
pub fn plugin_dir() -> &'static str {
    env!("WARDEN_PLUGIN_DIR")
}
