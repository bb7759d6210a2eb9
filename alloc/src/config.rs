//! The allocator's settings: which memory backs it and the policy that
//! decides when it records, plans and re-plans.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Where the slab and the fallback's regions live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Host pages (torch's CPU allocator; tests).
    Cpu,
    /// CUDA device memory through the CUDA runtime, loaded at run time.
    Cuda,
    /// Ascend device memory through ACL (`aclrtMalloc`), loaded at run
    /// time, within the arena's headroom rule.
    Npu,
}

impl Backend {
    /// The name used in configurations and reports.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
            Backend::Npu => "npu",
        }
    }
}

/// Whose caching-allocator rules the fallback follows (and the report's
/// comparison models).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    /// PyTorch's CUDACachingAllocator: 512-byte rounding.
    Cuda,
    /// torch_npu's NPUCachingAllocator: a 32-byte pad, then 512-byte
    /// rounding.
    Npu,
}

impl Platform {
    /// The name used in configurations and reports.
    pub fn name(self) -> &'static str {
        match self {
            Platform::Cuda => "cuda",
            Platform::Npu => "npu",
        }
    }

    /// Bytes a planned slot adds to a request before rounding to 512: the
    /// 32-byte pad ACL needs after a piece carved from one allocation on
    /// the NPU; none on CUDA.
    pub fn pad(self) -> usize {
        match self {
            Platform::Cuda => 0,
            Platform::Npu => 32,
        }
    }
}

/// The allocator's settings. Every field has a default; a JSON object with
/// any subset of these keys configures it (unknown keys are refused).
///
/// ```
/// use tensor_arena_alloc::{Backend, Config};
/// let c = Config::from_json(r#"{"backend": "cpu", "record_steps": 3}"#)?;
/// assert_eq!(c.backend, Backend::Cpu);
/// assert_eq!(c.record_steps, 3);
/// assert_eq!(c.warmup_steps, 1);
/// assert!(Config::from_json(r#"{"warmup": 2}"#).is_err());
/// # Ok::<(), tensor_arena_alloc::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Which memory backs the slab and the fallback.
    pub backend: Backend,
    /// Rules of the fallback and of the comparison model; from the
    /// backend when absent (`npu` for the NPU, `cuda` otherwise).
    pub platform: Option<Platform>,
    /// Device index the backing reserves on (CUDA, NPU); when absent, the
    /// device of the first request through the C ABI (torch passes the
    /// current device), else the current CUDA device, else 0.
    pub device: Option<i32>,
    /// Steps served by the fallback and not used for planning: the first
    /// step of a training loop creates optimizer state and so differs from
    /// the later ones.
    pub warmup_steps: u32,
    /// Steps recorded (served by the fallback) before the first plan.
    pub record_steps: u32,
    /// Steps recorded before the first plan when the recorded steps'
    /// shapes differ (at least `record_steps`).
    pub record_steps_changing: u32,
    /// Serving steps with misses (size, order, overlap) since the last
    /// re-plan, consecutive or not, after which the allocator re-plans at
    /// the next step boundary (2: a one-off miss is served from the gaps
    /// and borrowed pages, a pass that recurs or a shape that stays is
    /// re-planned at its second missing step; docs/allocator.md, "How
    /// long to wait before a re-plan").
    pub replan_miss_steps: u32,
    /// Steps kept for re-planning (the recent ones, the missing step
    /// included).
    pub recent_steps: u32,
    /// Plans of steps that made at least this many requests in all are
    /// made on a thread of their own while the next step runs, and swapped
    /// in at the end of that step (waiting for the planner there only if it
    /// has not finished), so that planning never stalls a step. Smaller
    /// plans are made at the step boundary itself (the step that ended
    /// merged in as it ended, the boundary merging one step at most and
    /// placing). The default is 1,024; 0 makes every plan on the thread.
    pub background_plan_requests: u32,
    /// Before the first plan, give requests outside steps and in warm-up
    /// steps a backing region each (one device call per request, before
    /// the plan only) instead of a caching pool, so that what the loop
    /// keeps (weights, optimizer state) pins no cached segment beside the
    /// slab later. Off: they share the caching pools.
    pub exact_before_plan: bool,
    /// Poison freed planned blocks and verify guard bytes after each one;
    /// when absent, `TENSOR_ARENA_CHECKED=1` turns it on.
    pub checked: Option<bool>,
    /// Log the first error of each kind to standard error.
    pub log_errors: bool,
    /// Write every event (`step_begin`, `step_end`, `alloc`, `free` with
    /// the block's size, `segment_alloc` / `segment_free` for the backing's
    /// reservations) to this CSV file (`event,addr,size,stream`,
    /// [`crate::trace`]): a trace to replay or to send with a bug report.
    /// Off by default; it costs a buffered write per request.
    pub trace: Option<String>,
    /// The CUDA runtime library to load, instead of the usual sonames.
    pub cuda_runtime_lib: Option<String>,
    /// The ACL runtime library to load (the simulated runtime of the tests
    /// is asked for by its path here), instead of the CANN search.
    pub npu_runtime_lib: Option<String>,
    /// Take every region from one reserved address range whose pages are
    /// mapped as they are needed and unmapped when idle (CUDA's driver
    /// VMM, Ascend's `aclrtReserveMemAddress` / `aclrtMapMem`, host pages
    /// under a `PROT_NONE` reservation), so that a region costs no device
    /// call, the slab grows in place, and the memory held is the pages in
    /// use. On by default where the backing has mapped ranges; off: a
    /// device region per region, as before.
    pub mapped_range: bool,
    /// In a mapped range, before a request the plan misses and no gap of
    /// the slab holds maps pages past the run's peak, unmap the slab's
    /// idle pages first (mapped again as blocks land on them and at the
    /// step's end): a step that outgrows the plan then holds its excess
    /// only, for a few device calls in that step. With it, a loose re-plan
    /// (more than 2.5% over its own lower bound) that would raise the run's
    /// peak is declined and the plan in place serves on. On by default;
    /// off: the slab stays mapped whole and every re-plan goes in.
    pub lend_slab_pages: bool,
    /// Every site gets one offset for even steps and one for odd steps
    /// where that gives a lower slab than one offset per site: a doubled
    /// site (its block of one step still alive when the next step makes
    /// its own) otherwise keeps both its slots reserved all the time. On
    /// by default; off: one offset per site (a doubled site's two).
    pub parity_offsets: bool,
    /// Bytes of address space the range reserves (no memory: address
    /// space only); when absent, the device's capacity (the host's memory
    /// for the CPU backend), else 1 TiB.
    pub range_bytes: Option<u64>,
    /// A replay's mapping unit (bytes): `tensor-arena replay --planned`
    /// predicts a device whose pages are this large (CUDA's and Ascend's
    /// are 2 MiB: 2097152); when absent, the host's page (what the CPU
    /// backend maps), 0 for no mapped ranges. Live runs use their
    /// backing's own unit and ignore it.
    pub map_granularity: Option<u64>,
    /// A step that makes this many requests without ending is cut: its
    /// record is dropped, the rest of it is served as requests outside
    /// steps, and it is never planned from (a loop with no step end, a
    /// worker that inherited an open step). When absent: four times the
    /// most requests a step that ended made, at least 65,536.
    pub step_request_cap: Option<u64>,
    /// A step open this many seconds is cut likewise (looked at once per
    /// 1,024 requests); absent (the default): no time cap.
    pub step_time_cap_s: Option<f64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            backend: Backend::Cpu,
            platform: None,
            device: None,
            warmup_steps: 1,
            record_steps: 2,
            record_steps_changing: 6,
            replan_miss_steps: 2,
            recent_steps: 4,
            background_plan_requests: 1_024,
            exact_before_plan: true,
            checked: None,
            log_errors: true,
            trace: None,
            cuda_runtime_lib: None,
            npu_runtime_lib: None,
            mapped_range: true,
            lend_slab_pages: true,
            parity_offsets: true,
            range_bytes: None,
            map_granularity: None,
            step_request_cap: None,
            step_time_cap_s: None,
        }
    }
}

impl Config {
    /// Parses a JSON object of settings; an empty string is the default.
    pub fn from_json(text: &str) -> Result<Config> {
        let bad = |reason: String| Error::Config {
            config: text.to_owned(),
            reason,
        };
        let config: Config = if text.trim().is_empty() {
            Config::default()
        } else {
            serde_json::from_str(text).map_err(|e| bad(e.to_string()))?
        };
        if config.record_steps == 0 {
            return Err(bad("record_steps must be at least 1".to_owned()));
        }
        if config.recent_steps == 0 {
            return Err(bad("recent_steps must be at least 1".to_owned()));
        }
        if config.step_request_cap == Some(0) {
            return Err(bad("step_request_cap must be at least 1".to_owned()));
        }
        if config
            .step_time_cap_s
            .is_some_and(|t| t.is_nan() || t <= 0.0)
        {
            return Err(bad(
                "step_time_cap_s must be a positive number of seconds".to_owned()
            ));
        }
        if config.replan_miss_steps == 0 {
            return Err(bad("replan_miss_steps must be at least 1".to_owned()));
        }
        Ok(config)
    }

    /// The fallback's rules.
    pub fn platform(&self) -> Platform {
        self.platform.unwrap_or(match self.backend {
            Backend::Npu => Platform::Npu,
            Backend::Cpu | Backend::Cuda => Platform::Cuda,
        })
    }

    /// Whether checked mode is on (the setting, else `TENSOR_ARENA_CHECKED`).
    pub fn checked(&self) -> bool {
        self.checked.unwrap_or_else(|| {
            std::env::var("TENSOR_ARENA_CHECKED").is_ok_and(|v| v == "1" || v == "true")
        })
    }
}
