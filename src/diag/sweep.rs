//! Replaying a trace under a grid of `PYTORCH_NPU_ALLOC_CONF` (or
//! `PYTORCH_CUDA_ALLOC_CONF`) settings and
//! recommending the one that needs the least memory.
//!
//! The grid combines `max_split_size_mb` values, `garbage_collection_threshold`
//! values and `expandable_segments:True` only where torch_npu allows it:
//! expandable segments alone, the other two alone and together. Each
//! setting gets a [`capacity_scan`](super::capacity_scan); the
//! recommendation is the setting whose *safe* capacity (above which no
//! scanned capacity runs out of memory) is smallest, ties going to the
//! simpler setting (earlier in the grid).

use serde::Serialize;

use super::capacity::{CapacityScan, DEFAULT_WINDOW, Replayer};
use super::trace::Trace;
use crate::caching::{CachingConfig, GcThreshold, Platform, max_split_size_bytes};
use crate::error::Result;
use crate::units::format_bytes;

/// The settings to sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepOptions {
    /// `max_split_size_mb` values (each more than 20).
    pub max_split_size_mb: Vec<u64>,
    /// `garbage_collection_threshold` values (each in (0, 1)).
    pub garbage_collection_thresholds: Vec<f64>,
    /// Whether to include `expandable_segments:True`.
    pub expandable_segments: bool,
    /// Bytes above each smallest surviving capacity to scan, at least.
    pub window: u64,
}

impl Default for SweepOptions {
    /// `max_split_size_mb` 32, 64, 128 (the value most advice gives), 256
    /// and 512; thresholds 0.6 and 0.8 (torch_npu's documentation example
    /// and PyTorch's usual one); expandable segments; a 64 MiB window.
    fn default() -> SweepOptions {
        SweepOptions {
            max_split_size_mb: vec![32, 64, 128, 256, 512],
            garbage_collection_thresholds: vec![0.6, 0.8],
            expandable_segments: true,
            window: DEFAULT_WINDOW,
        }
    }
}

impl SweepOptions {
    /// The grid: the defaults, each `max_split_size_mb`, each threshold,
    /// each pair of the two, then expandable segments. Fails on a value
    /// torch_npu would refuse.
    ///
    /// ```
    /// use tensor_arena::diag::SweepOptions;
    /// let grid = SweepOptions::default().settings()?;
    /// assert_eq!(grid.len(), 1 + 5 + 2 + 10 + 1);
    /// assert_eq!(grid[0].to_alloc_conf(), "");
    /// assert!(grid.iter().all(|c| c.validate().is_ok()));
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn settings(&self) -> Result<Vec<CachingConfig>> {
        self.settings_on(Platform::Npu)
    }

    /// [`SweepOptions::settings`] for `platform`'s allocator.
    pub fn settings_on(&self, platform: Platform) -> Result<Vec<CachingConfig>> {
        let splits = self
            .max_split_size_mb
            .iter()
            .map(|&mb| max_split_size_bytes(mb))
            .collect::<Result<Vec<u64>>>()?;
        let gcs = self
            .garbage_collection_thresholds
            .iter()
            .map(|&t| GcThreshold::new(t))
            .collect::<Result<Vec<GcThreshold>>>()?;
        let base = CachingConfig::default().on(platform);
        let mut grid = vec![base];
        let with = |split: Option<u64>, gc: Option<GcThreshold>| CachingConfig {
            max_split_size: split,
            garbage_collection_threshold: gc,
            ..base
        };
        grid.extend(splits.iter().map(|&s| with(Some(s), None)));
        grid.extend(gcs.iter().map(|&g| with(None, Some(g))));
        for &s in &splits {
            grid.extend(gcs.iter().map(|&g| with(Some(s), Some(g))));
        }
        if self.expandable_segments {
            grid.push(CachingConfig {
                expandable_segments: true,
                ..base
            });
        }
        grid.dedup();
        Ok(grid)
    }
}

/// One setting of the sweep. Capacities are in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SweepRow {
    /// The `PYTORCH_NPU_ALLOC_CONF` value (`""` for the defaults).
    pub conf: String,
    /// Peak reserved bytes with no device limit.
    pub peak_reserved: u64,
    /// Peak allocated bytes (the same under every setting but for
    /// alignment pieces).
    pub peak_allocated: u64,
    /// The smallest capacity that survives.
    pub min_capacity: u64,
    /// Capacities above it, in the scanned window, that run out of memory.
    pub oom_above_min: Vec<u64>,
    /// The smallest capacity that is safe over the whole scanned window.
    pub safe_capacity: u64,
    /// The highest capacity scanned.
    pub window_top: u64,
    /// Replays run for this setting.
    pub replays: usize,
}

/// The setting to use, with the memory it needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    /// The `PYTORCH_NPU_ALLOC_CONF` value (`""`: keep the defaults).
    pub conf: String,
    /// Its safe capacity: the device memory the allocator needs.
    pub capacity: u64,
    /// The line to put in the training script's environment.
    pub export: String,
    /// Peak allocated bytes under it.
    pub peak_allocated: u64,
    /// Fragmentation headroom to leave above the peak allocated bytes:
    /// `capacity - peak_allocated`.
    pub headroom_bytes: u64,
    /// `headroom_bytes / peak_allocated`.
    pub headroom_fraction: f64,
    /// The planned arena's slab for the same trace.
    pub arena_slab_bytes: u64,
    /// The variable the setting goes in (`PYTORCH_NPU_ALLOC_CONF` or
    /// `PYTORCH_CUDA_ALLOC_CONF`).
    pub variable: String,
    /// `headroom_bytes` as a share of the recommended setting's peak
    /// reserved bytes with no device limit.
    pub headroom_of_peak_reserved: f64,
    /// The floor below which the headroom is within the model's error
    /// ([`headroom_floor`]).
    pub headroom_floor: u64,
    /// Whether the headroom is below that floor: the message says so.
    pub below_floor: bool,
    /// The recommendation in a sentence or two.
    pub message: String,
}

/// The least fragmentation headroom, as a share of the peak allocated
/// bytes, that a recommendation is made without a warning: the model
/// reproduces recorded peaks to within 1% (docs/replay.md), so a smaller
/// margin is within its error.
pub const HEADROOM_FLOOR_FRACTION: f64 = 0.01;

/// The least fragmentation headroom in bytes that a recommendation is
/// made without a warning (the default scan window).
pub const HEADROOM_FLOOR_BYTES: u64 = DEFAULT_WINDOW;

/// The headroom floor for a run whose peak allocated bytes are
/// `peak_allocated`: the larger of [`HEADROOM_FLOOR_FRACTION`] of it and
/// [`HEADROOM_FLOOR_BYTES`].
pub fn headroom_floor(peak_allocated: u64) -> u64 {
    ((peak_allocated as f64 * HEADROOM_FLOOR_FRACTION) as u64).max(HEADROOM_FLOOR_BYTES)
}

/// Runs the sweep (see the module docs) on torch_npu's allocator and
/// recommends a setting; `arena_slab_bytes` is the planned arena's slab
/// for the same trace, for the comparison in the message.
pub fn sweep(
    trace: &Trace,
    options: &SweepOptions,
    arena_slab_bytes: u64,
) -> Result<(Vec<SweepRow>, Recommendation)> {
    sweep_on(trace, options, Platform::Npu, arena_slab_bytes)
}

/// [`sweep`] on `platform`'s allocator: the recommendation names its
/// variable (`PYTORCH_NPU_ALLOC_CONF` or `PYTORCH_CUDA_ALLOC_CONF`).
pub fn sweep_on(
    trace: &Trace,
    options: &SweepOptions,
    platform: Platform,
    arena_slab_bytes: u64,
) -> Result<(Vec<SweepRow>, Recommendation)> {
    let grid = options.settings_on(platform)?;
    let rows: Vec<SweepRow> = grid
        .iter()
        .map(|&config| {
            let r = Replayer::new(trace, config);
            let scan = r.scan(options.window);
            row(config, r.peak_reserved, r.peak_allocated, scan)
        })
        .collect();
    let best = rows
        .iter()
        .zip(&grid)
        .min_by_key(|(r, _)| r.safe_capacity)
        .map(|(r, c)| (r.clone(), *c));
    let recommendation = match best {
        Some((r, config)) => recommend(&r, config, arena_slab_bytes),
        None => recommend(
            &row(CachingConfig::default().on(platform), 0, 0, empty_scan()),
            CachingConfig::default().on(platform),
            arena_slab_bytes,
        ),
    };
    Ok((rows, recommendation))
}

fn empty_scan() -> CapacityScan {
    CapacityScan {
        lower_limit: 0,
        min_capacity: 0,
        oom_above_min: Vec::new(),
        safe_capacity: 0,
        window_top: 0,
        replays: 0,
    }
}

fn row(
    config: CachingConfig,
    peak_reserved: u64,
    peak_allocated: u64,
    s: CapacityScan,
) -> SweepRow {
    SweepRow {
        conf: config.to_alloc_conf(),
        peak_reserved,
        peak_allocated,
        min_capacity: s.min_capacity,
        oom_above_min: s.oom_above_min,
        safe_capacity: s.safe_capacity,
        window_top: s.window_top,
        replays: s.replays,
    }
}

fn recommend(r: &SweepRow, config: CachingConfig, arena: u64) -> Recommendation {
    let headroom = r.safe_capacity.saturating_sub(r.peak_allocated);
    let fraction = if r.peak_allocated == 0 {
        0.0
    } else {
        headroom as f64 / r.peak_allocated as f64
    };
    let variable = config.platform.alloc_conf_var();
    let export = if r.conf.is_empty() {
        format!("unset {variable}")
    } else {
        format!("export {variable}={}", r.conf)
    };
    let floor = headroom_floor(r.peak_allocated);
    let below_floor = headroom < floor;
    let b = format_bytes;
    let mut message = format!(
        "a planned arena of {} ({arena} bytes) leaves no stranded memory; the best allocator setting needs {} ({} bytes): {} of fragmentation headroom above the {} peak allocated ({:.1}%).",
        b(arena),
        b(r.safe_capacity),
        r.safe_capacity,
        b(headroom),
        b(r.peak_allocated),
        100.0 * fraction
    );
    if below_floor {
        message.push_str(&format!(
            " That headroom is below the floor of {} (the larger of {:.0}% of the peak allocated and {}), within the model's error: treat the setting as a candidate to measure, not as a margin to rely on.",
            b(floor),
            100.0 * HEADROOM_FLOOR_FRACTION,
            b(HEADROOM_FLOOR_BYTES)
        ));
    }
    if config.garbage_collection_threshold.is_some() {
        message.push_str(match config.platform {
            Platform::Npu => " garbage_collection_threshold acts only with a memory fraction below 1: set torch_npu.npu.set_per_process_memory_fraction (or per_process_memory_fraction) so that the allowed memory is this capacity.",
            Platform::Cuda => " garbage_collection_threshold acts only with a memory fraction below 1: set torch.cuda.set_per_process_memory_fraction so that the allowed memory is this capacity.",
        });
    }
    Recommendation {
        conf: r.conf.clone(),
        capacity: r.safe_capacity,
        export,
        peak_allocated: r.peak_allocated,
        headroom_bytes: headroom,
        headroom_fraction: fraction,
        arena_slab_bytes: arena,
        variable: variable.to_owned(),
        headroom_of_peak_reserved: if r.peak_reserved == 0 {
            0.0
        } else {
            headroom as f64 / r.peak_reserved as f64
        },
        headroom_floor: floor,
        below_floor,
        message,
    }
}
