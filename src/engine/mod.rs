//! The engine: walks a plan's graph with bounded parallelism and applies it.
//!
//! [`walk`] is the generic graph walker, [`exec`] turns plan changes into
//! resource calls and state writes, [`progress`] shows what runs.

pub mod exec;
pub mod interrupt;
pub mod progress;
pub mod store;
pub mod walk;

pub use exec::{execute, ApplyReport, ExecError, ExecOptions, ResourceResult};
pub use store::SharedStore;
pub use walk::Outcome;
