//! What an operator sees and steers (issue 14): asks that end, a trace with
//! every phase and a picture of it, the audit across sessions, `plugin
//! verify`'s findings, and the command line's manners.

mod asks;
mod audit;
mod cli;
mod trace;
mod verify;
