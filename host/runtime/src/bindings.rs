//! Generated bindings of the WIT contract, one module per supported package
//! version. They stay private: the rest of the crate converts to the core's
//! own types, so a new contract version adds a module here and nothing else
//! changes.

pub mod v0_1_0 {
    pub mod tool {
        wasmtime::component::bindgen!({
            world: "tool-plugin",
            path: "../../wit",
            imports: {
                "warden:plugin/host.ask": async,
                default: trappable,
            },
            exports: { default: async },
        });
    }

    pub mod hook {
        wasmtime::component::bindgen!({
            world: "hook-plugin",
            path: "../../wit",
            exports: { default: async },
            with: {
                "warden:plugin/host": super::tool::warden::plugin::host,
                "warden:plugin/types": super::tool::warden::plugin::types,
            },
        });
    }
}
