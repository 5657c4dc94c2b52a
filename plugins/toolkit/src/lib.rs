//! Shared code of the built-in file tools (`write`, `edit`, `list`, `glob`,
//! `grep`): resolving the directory a call is about, walking it without
//! wandering into dependency or build folders, turning I/O errors into
//! messages a model can act on, and capping what a call returns.
//!
//! Start with [`walk`]; [`text`] holds the output caps and the binary sniff,
//! [`fsx`] the path and error helpers, [`pathglob`] file globs. Each tool crate stays a thin layer of
//! its own rules over these.

pub mod fsx;
pub mod pathglob;
pub mod text;
pub mod walk;
