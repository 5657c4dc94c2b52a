//! Which imports a guest's component gets: the WASI interfaces a sandbox
//! may offer (never sockets; wasi:http only for a plugin granted hosts), the
//! warden host interface, and a trap for every other import.

use wasmtime::Engine;
use wasmtime::component::{Component, HasData, Linker, ResourceTable};

use super::GuestState;
use crate::bindings::Contract;

struct HasIo;

impl HasData for HasIo {
    type Data<'a> = &'a mut ResourceTable;
}

pub use crate::bindings::World;

/// A linker for one component: the WASI interfaces a sandbox may offer (not
/// sockets; wasi:http only when `http`, i.e. the plugin was granted hosts),
/// the warden host interface, and traps for everything else.
pub fn linker(
    engine: &Engine,
    component: &Component,
    contract: &dyn Contract,
    world: World,
    http: bool,
) -> wasmtime::Result<Linker<GuestState>> {
    use wasmtime_wasi::cli::{WasiCli, WasiCliView};
    use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
    use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView};
    use wasmtime_wasi::p2::bindings::{cli, clocks, filesystem, random};
    use wasmtime_wasi::random::{WasiRandom, WasiRandomView};

    let mut l = Linker::<GuestState>::new(engine);
    wasmtime_wasi_io::bindings::wasi::io::error::add_to_linker::<GuestState, HasIo>(&mut l, |t| {
        &mut t.table
    })?;
    wasmtime_wasi_io::bindings::wasi::io::poll::add_to_linker::<GuestState, HasIo>(&mut l, |t| {
        &mut t.table
    })?;
    wasmtime_wasi_io::bindings::wasi::io::streams::add_to_linker::<GuestState, HasIo>(
        &mut l,
        |t| &mut t.table,
    )?;
    clocks::wall_clock::add_to_linker::<GuestState, WasiClocks>(&mut l, GuestState::clocks)?;
    clocks::monotonic_clock::add_to_linker::<GuestState, WasiClocks>(&mut l, GuestState::clocks)?;
    filesystem::types::add_to_linker::<GuestState, WasiFilesystem>(&mut l, GuestState::filesystem)?;
    filesystem::preopens::add_to_linker::<GuestState, WasiFilesystem>(
        &mut l,
        GuestState::filesystem,
    )?;
    crate::fs_gate::add_to_linker(&mut l)?;
    random::random::add_to_linker::<GuestState, WasiRandom>(&mut l, GuestState::random)?;
    random::insecure::add_to_linker::<GuestState, WasiRandom>(&mut l, GuestState::random)?;
    random::insecure_seed::add_to_linker::<GuestState, WasiRandom>(&mut l, GuestState::random)?;
    cli::exit::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::environment::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::stdin::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::stdout::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::stderr::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::terminal_input::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::terminal_output::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::terminal_stdin::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::terminal_stdout::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    cli::terminal_stderr::add_to_linker::<GuestState, WasiCli>(&mut l, GuestState::cli)?;
    // Outgoing HTTP exists only for a plugin granted hosts (the gate then
    // refuses what is not granted); for any other, wasi:http traps on use.
    if http {
        wasmtime_wasi_http::p2::add_only_http_to_linker_async::<GuestState>(&mut l)?;
    }
    contract.add_to_linker(&mut l, world)?;
    stub_missing(&mut l, engine, component, http)?;
    Ok(l)
}

/// The interfaces [`linker`] provides to a plugin granted hosts, besides [`PROVIDED`].
const PROVIDED_HTTP: &[&str] = &["wasi:http/outgoing-handler", "wasi:http/types"];

/// The interfaces [`linker`] provides, by name without version (the linker
/// matches versions semver-compatibly: a guest built against wasi 0.2.6 is
/// served by the host's 0.2.x).
const PROVIDED: &[&str] = &[
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:cli/exit",
    "wasi:cli/environment",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "warden:plugin/host",
    "warden:plugin/types",
];

/// Define every import the host does not provide (wasi:sockets above all) as
/// functions that trap with a message naming the import, so such a guest
/// still loads and fails only if it really uses one.
fn stub_missing(
    l: &mut Linker<GuestState>,
    engine: &Engine,
    component: &Component,
    http: bool,
) -> wasmtime::Result<()> {
    use wasmtime::component::types::ComponentItem;
    for (name, item) in component.component_type().imports(engine) {
        let unversioned = name.split('@').next().unwrap_or(name);
        if PROVIDED.contains(&unversioned) || (http && PROVIDED_HTTP.contains(&unversioned)) {
            continue;
        }
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            anyhow_bail(format!(
                "the component imports {name}, which is not an interface warden can provide"
            ))?;
            continue;
        };
        let mut li = l.instance(name)?;
        for (export, ty) in instance.exports(engine) {
            let qualified = format!("{name}#{export}");
            match ty.ty {
                ComponentItem::ComponentFunc(_) => li.func_new(export, move |_, _, _, _| {
                    Err(wasmtime::format_err!(
                        "the plugin called `{qualified}`, which warden does not provide to plugins{}",
                        if qualified.starts_with("wasi:sockets") {
                            " (raw sockets are never available; outgoing HTTP goes through wasi:http and the plugin's host grants)"
                        } else if qualified.starts_with("wasi:http") {
                            " (the plugin was granted no hosts, so it has no wasi:http at all; grant hosts to use it)"
                        } else {
                            ""
                        }
                    ))
                })?,
                // A stubbed interface may re-export resources of interfaces the
                // host does provide (a socket's `pollable`, `input-stream`...);
                // those must keep the host's own type. Its own resources get a
                // placeholder type: nothing can ever create one.
                ComponentItem::Resource(_) => {
                    use wasmtime::component::ResourceType;
                    let ty = match export {
                        "pollable" => ResourceType::host::<wasmtime_wasi_io::poll::DynPollable>(),
                        "input-stream" => ResourceType::host::<wasmtime_wasi_io::streams::DynInputStream>(),
                        "output-stream" => ResourceType::host::<wasmtime_wasi_io::streams::DynOutputStream>(),
                        "error" => ResourceType::host::<wasmtime_wasi_io::streams::Error>(),
                        _ => ResourceType::host::<()>(),
                    };
                    li.resource(export, ty, |_, _| Ok(()))?
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn anyhow_bail(message: String) -> wasmtime::Result<()> {
    Err(wasmtime::format_err!("{message}"))
}
