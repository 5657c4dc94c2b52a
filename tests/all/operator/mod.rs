//! What an operator sees and steers (issue 14): asks that end, a trace with
//! every phase and a picture of it, the audit across sessions, `plugin
//! verify`'s findings, the command line's manners, and an installed
//! plugin's life: disabled, enabled, removed.

mod asks;
mod audit;
mod cli;
mod lifecycle;
mod trace;
mod verify;
