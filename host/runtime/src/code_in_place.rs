//! Running the built-in plugins' compiled code where it lies in the binary.
//!
//! `build.rs` embeds each built-in's compiled artifact as a page-aligned
//! static. Deserialising one the usual way copies it (about 5 MB for the
//! six built-ins a session loads) into fresh memory, and reading it to copy
//! it makes every page of it resident too: two copies of code of which a
//! session runs a few pages. With this engine setting, wasmtime uses the
//! static in place instead ([`Component::deserialize_raw`]): only the pages
//! the engine reads or a call runs are ever loaded.
//!
//! wasmtime then asks this module to make the code executable. The static
//! lives in the binary's read-only data and is never made writable: the
//! `mprotect` here makes its text read+execute, and JIT-compiled code
//! (which wasmtime has already made read-only) read+execute likewise, and
//! nothing is ever turned back (see `unpublish_executable`).
//!
//! x86_64 Linux only: other targets need instruction-cache maintenance
//! this module does not do, so there the artifact is copied as before.
//!
//! [`Component::deserialize_raw`]: wasmtime::component::Component::deserialize_raw

use std::ptr::NonNull;
use std::sync::Arc;

use wasmtime::component::Component;
use wasmtime::{Config, CustomCodeMemory, Engine};

/// Whether this build runs embedded code in place.
pub const SUPPORTED: bool = cfg!(all(target_arch = "x86_64", target_os = "linux"));

const PAGE: usize = 4096;

/// Makes code pages executable with `mprotect`.
struct InPlace;

impl CustomCodeMemory for InPlace {
    fn required_alignment(&self) -> usize {
        PAGE
    }

    fn publish_executable(&self, ptr: *const u8, len: usize) -> wasmtime::Result<()> {
        protect(ptr, len, libc::PROT_READ | libc::PROT_EXEC)
    }

    /// Nothing: wasmtime calls this when code memory is dropped, and an
    /// embedded artifact's text is shared by every component loaded from it
    /// in the process, so it stays executable (and never becomes writable)
    /// for as long as the process runs. Memory wasmtime owns is unmapped
    /// after this anyway. (wasmtime also calls it to patch code for guest
    /// debugging, which warden does not enable.)
    fn unpublish_executable(&self, _ptr: *const u8, _len: usize) -> wasmtime::Result<()> {
        Ok(())
    }
}

fn protect(ptr: *const u8, len: usize, prot: libc::c_int) -> wasmtime::Result<()> {
    if len == 0 {
        return Ok(());
    }
    if !(ptr as usize).is_multiple_of(PAGE) {
        return Err(wasmtime::format_err!("code at {ptr:p} is not page-aligned"));
    }
    // SAFETY: wasmtime hands over a page-aligned range of code memory it
    // owns (or, for an embedded artifact, a range of a static that lives as
    // long as the process); changing its protection touches nothing else.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::mprotect(ptr as *mut libc::c_void, len, prot) };
    if rc != 0 {
        return Err(wasmtime::format_err!(
            "mprotect of {len} bytes of code failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Set `config` up to run embedded artifacts in place, where supported.
pub fn configure(config: &mut Config) {
    if SUPPORTED {
        config.with_custom_code_memory(Some(Arc::new(InPlace)));
    }
}

/// Load an embedded artifact: in place where supported, else copied.
///
/// # Safety
///
/// `artifact` must be what `Engine::precompile_component` produced, for
/// this wasmtime and engine settings, and unchanged since.
#[allow(unsafe_code)]
pub unsafe fn deserialize(engine: &Engine, artifact: &'static [u8]) -> wasmtime::Result<Component> {
    if SUPPORTED && (artifact.as_ptr() as usize).is_multiple_of(PAGE) {
        // SAFETY: as the caller promises; the static lives for the rest of
        // the process and is read-only, so it is never modified.
        unsafe { Component::deserialize_raw(engine, NonNull::from(artifact)) }
    } else {
        // SAFETY: as the caller promises.
        unsafe { Component::deserialize(engine, artifact) }
    }
}
