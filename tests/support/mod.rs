//! Helpers shared by the integration tests.

pub mod elem;
pub mod shim;
pub mod sim;
