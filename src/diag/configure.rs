//! The modelled allocator's settings for a trace: what the user's flags
//! give, else what the memory snapshot was recorded with, else the
//! defaults, each with where it came from.

use serde::Serialize;

use super::trace::{Source, Trace};
use crate::caching::{CachingConfig, Platform};
use crate::error::Result;

/// Settings given explicitly (command-line flags); each one given wins
/// over the snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    /// The platform to model.
    pub platform: Option<Platform>,
    /// `max_split_size`, `garbage_collection_threshold` and
    /// `expandable_segments` (its capacity and platform are ignored).
    pub settings: Option<CachingConfig>,
    /// Device memory for the model.
    pub capacity: Option<u64>,
}

/// The configuration a diagnosis runs with, and the source of each part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Configured {
    /// The settings, capacity and platform included.
    pub config: CachingConfig,
    /// The platform modelled.
    pub platform: Source<Platform>,
    /// The allocator settings as the platform's variable would carry them
    /// (`""`: the defaults).
    pub alloc_conf: Source<String>,
    /// Device memory modelled (`None`: unlimited).
    pub capacity: Source<Option<u64>>,
}

/// Resolves the configuration of `trace`'s diagnosis: each of platform,
/// allocator settings and capacity from `overrides` where given, else
/// from the snapshot the trace came from (`allocator_settings`, its stack
/// frames, the recorded out-of-memory error's reserved and free bytes),
/// else the defaults (torch_npu, its default settings, unlimited memory).
/// Fails on settings the platform's allocator would refuse.
///
/// ```
/// use tensor_arena::caching::Platform;
/// use tensor_arena::diag::{Overrides, Trace, configure};
/// let t = Trace::from_csv("t", "alloc,a,4096\n")?;
/// let c = configure(&t, &Overrides { platform: Some(Platform::Cuda), ..Overrides::default() })?;
/// assert_eq!(c.config.platform, Platform::Cuda);
/// assert_eq!(c.platform.source, "flag --platform");
/// assert_eq!(c.capacity.value, None);
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn configure(trace: &Trace, overrides: &Overrides) -> Result<Configured> {
    let snapshot = trace.snapshot();
    let platform = match (
        overrides.platform,
        snapshot.and_then(|s| s.platform.clone()),
    ) {
        (Some(p), _) => Source {
            value: p,
            source: "flag --platform".to_owned(),
        },
        (None, Some(p)) => p,
        (None, None) => Source {
            value: Platform::Npu,
            source: if snapshot.is_some() {
                "default: the snapshot names no platform".to_owned()
            } else {
                "default".to_owned()
            },
        },
    };
    let settings = match (
        overrides.settings,
        snapshot.and_then(|s| s.settings.clone()),
    ) {
        (Some(c), _) => Source {
            value: c,
            source: "flags".to_owned(),
        },
        (None, Some(s)) => s,
        (None, None) => Source {
            value: CachingConfig::default(),
            source: if snapshot.is_some() {
                "default: the snapshot has no allocator_settings".to_owned()
            } else {
                "default".to_owned()
            },
        },
    };
    let capacity = match (
        overrides.capacity,
        snapshot.and_then(|s| s.capacity.clone()),
    ) {
        (Some(c), _) => Source {
            value: Some(c),
            source: "flag --capacity".to_owned(),
        },
        (None, Some(c)) => Source {
            value: Some(c.value),
            source: c.source,
        },
        (None, None) => Source {
            value: None,
            source: "default: unlimited".to_owned(),
        },
    };
    let config = CachingConfig {
        capacity: capacity.value,
        platform: platform.value,
        ..settings.value
    };
    config.validate()?;
    Ok(Configured {
        config,
        alloc_conf: Source {
            value: config.to_alloc_conf(),
            source: settings.source,
        },
        platform,
        capacity,
    })
}
