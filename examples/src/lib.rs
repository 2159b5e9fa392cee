//! # mesh-examples
//!
//! Example agents, linked into the `mesh` binary so that `mesh agent <name>` runs any of them.
