//! The integration tests of mesh-cli: the command line as a user meets it (usage, exit codes, every command against a real mesh) and crashes with real processes.
//!
//! One test binary for the crate (each module was a binary of its own): the heavy
//! dependencies are linked once. Run one module with `cargo test -p mesh-cli --test it <module>::`.

mod cli;
mod restart;
mod secure;
