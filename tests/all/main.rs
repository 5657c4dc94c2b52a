//! Integration tests: the real `warden` binary, real SQLite ledgers, real
//! wasm components. One binary of modules, so the build happens once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod mock_provider;

mod acp;
mod adversarial;
mod bad_input;
mod builtin_tools;
mod cli;
mod conformance;
mod contract;
mod control_plane;
mod crash;
mod full_disk;
mod hooks;
mod hostile_clients;
mod hosts;
mod layout;
mod lease_fence;
mod ledger_damage;
mod loop_fidelity;
mod loop_rules;
mod mcp;
mod opencode;
mod operator;
mod plugin_deps;
mod plugin_dev;
mod plugin_new;
mod postgres;
mod prepared;
mod provider_faults;
mod providers;
mod read_tool;
mod runtime;
mod sandbox;
mod server;
