//! The built-in tools, embedded in the binary as components and run through
//! the same sandbox as any third-party plugin, with default grants the
//! operator can replace (`builtin_grants` in the config).

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

/// Every built-in plugin.
pub fn all() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "read",
            bytes: include_bytes!(concat!(env!("WARDEN_PLUGIN_DIR"), "/warden_tool_read.wasm")),
            tools: || {
                BTreeMap::from([(
                    "read".to_string(),
                    ToolSettings {
                        permission: Some("read".into()),
                        path_arg: Some("filePath".into()),
                        url_arg: None,
                    },
                )])
            },
            grants: || Grants {
                dirs: vec![DirGrant {
                    path: ".".into(),
                    mode: DirMode::ReadOnly,
                }],
                ..Grants::default()
            },
            needs_hosts: false,
        },
        Builtin {
            name: "webfetch",
            bytes: include_bytes!(concat!(
                env!("WARDEN_PLUGIN_DIR"),
                "/warden_tool_webfetch.wasm"
            )),
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

/// The directory the build put the guest components in (the built-ins and
/// the test fixtures).
pub fn plugin_dir() -> &'static str {
    env!("WARDEN_PLUGIN_DIR")
}
