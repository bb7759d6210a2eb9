//! Helpers shared by the integration tests.

pub mod shim;
pub mod sim;
