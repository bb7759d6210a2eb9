//! Record, then plan: learn buffer specs from recorded steps instead of
//! declaring each by hand.
//!
//! A [`Recorder`] runs a training step written once against
//! [`RecordStep`]: temporaries are requested by a stable site name with the
//! shape this step needs. While recording, requests are served from a
//! growable host pool (allocation allowed and counted) and each site's
//! element type, largest shape (per dimension, over all recorded steps) and
//! phase span (from the phase of its first lease to the phase of its last
//! release) are kept. [`Recorder::freeze`] declares the learned specs on a
//! [`Planner`](crate::Planner), plans them, reserves the slab once, and
//! serves the same requests from the plan with no allocation.
//!
//! The learned specs export as a [`SpecSet`]: TOML to check in
//! ([`SpecSet::save`]), Rust declarations to paste ([`SpecSet::to_rust`]);
//! loaded back ([`SpecSet::load`]) they are declared at startup on a
//! planner ([`SpecSet::declare_on`]) or a recorder ([`Recorder::preload`]),
//! so production runs need no recording pass.
//!
//! The bookkeeping itself, without the pools, is a [`SiteBook`]: the
//! `Recorder` keeps its host memory beside one, and bindings that record on
//! a device of their own (the Python package, on a torch device) use it
//! alone, so they learn the same specs with the same errors.
//!
//! ```
//! use tensor_arena::{HostDevice, record::{Recorder, SpecSet}};
//! let mut rec = Recorder::new(HostDevice::new());
//! let fwd = rec.phase("forward")?;
//! let bwd = rec.phase("backward")?;
//! for batch in [32, 17, 32] {
//!     rec.step(|s| {
//!         let mut x = s.temp::<f32>("x", &[batch, 100])?;
//!         x.as_mut_slice().fill(1.0);
//!         let mut keep = s.temp::<f32>("keep", &[batch, 100])?;
//!         keep.bernoulli_(0.9)?;
//!         x.apply_mask_(&keep, 1.0 / 0.9)?;
//!         drop(keep);
//!         s.enter(bwd)?;
//!         let mut g = s.temp::<f32>("g", &[batch, 100])?;
//!         g.as_mut_slice().copy_from_slice(x.as_slice());
//!         Ok::<_, tensor_arena::Error>(())
//!     })?;
//! }
//! let specs = rec.specs();
//! assert_eq!(specs.get("x").map(|e| e.shape.clone()), Some(vec![32, 100]));
//! let plan = rec.freeze()?;
//! // keep (forward) and g (backward) are never alive together.
//! assert_eq!(plan.buffers()[1].offset(), plan.buffers()[2].offset());
//! assert_eq!(SpecSet::from_toml(&specs.to_toml()?)?, specs);
//! # let _ = fwd;
//! # Ok::<(), tensor_arena::Error>(())
//! ```
#![deny(unsafe_code, clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod lease;
mod lease_ops;
mod recorder;
mod rule;
mod rust_code;
mod shared_state;
mod site;
mod site_book;
mod specs;
mod step;
mod toml_file;

pub use lease::SiteLease;
pub use recorder::{Persistent, RecordStats, Recorder};
pub use rule::{SiteShape, check_frozen_request};
pub use site_book::{Granted, SiteBook, SiteInfo};
pub use specs::{Declared, SpecEntry, SpecLifetime, SpecMode, SpecSet};
pub use step::RecordStep;
pub use step::Recorded;
pub use toml_file::SPEC_FILE_VERSION;

/// A site name for the calling line: `"file:line:column"`, a `&'static
/// str` made at compile time. Handy while exploring; names that survive
/// edits are better for spec files that are checked in.
///
/// ```
/// use tensor_arena::{HostDevice, call_site, record::Recorder};
/// let mut rec = Recorder::new(HostDevice::new());
/// rec.step(|s| {
///     let t = s.temp::<f32>(call_site!(), &[8])?;
///     assert!(t.name().contains(".rs:"));
///     Ok::<_, tensor_arena::Error>(())
/// })?;
/// # Ok::<(), tensor_arena::Error>(())
/// ```
#[macro_export]
macro_rules! call_site {
    () => {
        concat!(file!(), ":", line!(), ":", column!())
    };
}
