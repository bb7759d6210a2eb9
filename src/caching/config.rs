//! Settings of the modelled allocator, as `PYTORCH_NPU_ALLOC_CONF` gives
//! them, with the combination rules torch_npu enforces.

use serde::{Serialize, Serializer};

use super::rules::MIN_MAX_SPLIT_SIZE_MB;
use crate::error::{Error, Result};

/// Options torch_npu accepts in `PYTORCH_NPU_ALLOC_CONF` that the model
/// does not model: a setting naming one is refused rather than silently
/// replayed as if it were absent.
const NOT_MODELLED: [&str; 16] = [
    "roundup_power2_divisions",
    "max_non_split_rounding_mb",
    "large_segment_size_mb",
    "segment_size_mb",
    "base_addr_aligned_kb",
    "page_size",
    "per_process_memory_fraction",
    "multi_stream_lazy_reclaim",
    "release_lock_on_npumalloc",
    "throw_on_npumalloc_oom",
    "pinned_use_background_threads",
    "pin_memory_expandable_segments",
    "pinned_mem_register",
    "pinned_reserve_segment_size_mb",
    "pinned_max_round_threshold_mb",
    "pinned_max_cached_size_mb",
];

/// A `garbage_collection_threshold`: a fraction strictly between 0 and 1
/// (torch_npu refuses anything else).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GcThreshold(f64);

impl GcThreshold {
    /// Checks `value` as torch_npu does: `0.0 < value < 1.0`.
    ///
    /// ```
    /// use tensor_arena::caching::GcThreshold;
    /// assert_eq!(GcThreshold::new(0.8)?.get(), 0.8);
    /// assert!(GcThreshold::new(1.0).is_err());
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn new(value: f64) -> Result<GcThreshold> {
        if value > 0.0 && value < 1.0 {
            Ok(GcThreshold(value))
        } else {
            Err(Error::InvalidAllocConf {
                option: "garbage_collection_threshold".to_owned(),
                value: value.to_string(),
                reason: "must lie strictly between 0.0 and 1.0".to_owned(),
            })
        }
    }

    /// The fraction.
    pub fn get(self) -> f64 {
        self.0
    }
}

// A GcThreshold is never NaN, so equality of values is an equivalence.
impl Eq for GcThreshold {}

impl Serialize for GcThreshold {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl std::fmt::Display for GcThreshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Which caching allocator the model follows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    /// torch_npu's `NPUCachingAllocator.cpp`: a 32-byte ACL pad on every
    /// request, large blocks of expandable segments 16 KiB aligned;
    /// configured by `PYTORCH_NPU_ALLOC_CONF`.
    #[default]
    Npu,
    /// PyTorch's `c10/cuda/CUDACachingAllocator.cpp`: no pad, no
    /// alignment beyond 512 bytes; configured by `PYTORCH_CUDA_ALLOC_CONF`.
    Cuda,
}

impl Platform {
    /// The environment variable that carries the allocator's settings.
    ///
    /// ```
    /// use tensor_arena::caching::Platform;
    /// assert_eq!(Platform::Cuda.alloc_conf_var(), "PYTORCH_CUDA_ALLOC_CONF");
    /// ```
    pub fn alloc_conf_var(self) -> &'static str {
        match self {
            Platform::Npu => "PYTORCH_NPU_ALLOC_CONF",
            Platform::Cuda => "PYTORCH_CUDA_ALLOC_CONF",
        }
    }

    /// `"npu"` or `"cuda"`.
    pub fn name(self) -> &'static str {
        match self {
            Platform::Npu => "npu",
            Platform::Cuda => "cuda",
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Platform {
    type Err = Error;

    fn from_str(s: &str) -> Result<Platform> {
        match s.to_ascii_lowercase().as_str() {
            "npu" | "ascend" => Ok(Platform::Npu),
            "cuda" | "gpu" => Ok(Platform::Cuda),
            _ => Err(Error::InvalidArgument {
                what: "platform",
                value: s.to_owned(),
                reason: "expected npu or cuda".to_owned(),
            }),
        }
    }
}

/// Settings of the modelled allocator (`PYTORCH_NPU_ALLOC_CONF`, or
/// `PYTORCH_CUDA_ALLOC_CONF` with [`Platform::Cuda`]).
///
/// The default is torch_npu's default with expandable segments off and no
/// device limit; [`CachingConfig::cuda`] is PyTorch's CUDA default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CachingConfig {
    /// Device memory available to the allocator; `None` is unlimited.
    /// With a garbage-collection threshold it is also the allowed maximum
    /// the threshold is a fraction of (torch_npu's
    /// `set_per_process_memory_fraction` times the device memory).
    pub capacity: Option<u64>,
    /// `max_split_size_mb` in bytes: cached blocks at least this large are
    /// never split, and only serve requests less than 20 MiB smaller.
    pub max_split_size: Option<u64>,
    /// `garbage_collection_threshold`: when a request finds no cached block
    /// and the reserved bytes exceed this fraction of the capacity, whole
    /// cached large segments that waited longer than average are freed
    /// first. Acts only with a capacity, as torch_npu's acts only with a
    /// memory fraction below 1.
    pub garbage_collection_threshold: Option<GcThreshold>,
    /// `expandable_segments:True`: one segment per pool and stream that
    /// grows by mapping pages (2 MiB small, 20 MiB large).
    pub expandable_segments: bool,
    /// The allocator modelled: torch_npu's (default) or PyTorch's CUDA one.
    pub platform: Platform,
}

impl CachingConfig {
    /// torch_npu's defaults (the same as [`CachingConfig::default`]).
    pub fn npu() -> CachingConfig {
        CachingConfig::default()
    }

    /// PyTorch's CUDA caching allocator with its defaults.
    ///
    /// ```
    /// use tensor_arena::caching::{CachingAllocator, CachingConfig, Platform};
    /// let c = CachingConfig::cuda();
    /// assert_eq!(c.platform, Platform::Cuda);
    /// let mut a = CachingAllocator::new(c);
    /// let x = a.malloc(512 << 20)?;
    /// assert_eq!(a.block_size(x), Some(512 << 20)); // no 32-byte pad
    /// # Ok::<(), tensor_arena::caching::OutOfMemory>(())
    /// ```
    pub fn cuda() -> CachingConfig {
        CachingConfig {
            platform: Platform::Cuda,
            ..CachingConfig::default()
        }
    }

    /// The same settings for another platform.
    pub fn on(self, platform: Platform) -> CachingConfig {
        CachingConfig { platform, ..self }
    }

    /// Reads an allocator setting string such as
    /// `"max_split_size_mb:128,garbage_collection_threshold:0.6"` or
    /// `"expandable_segments:True"`, with the checks torch_npu makes:
    /// `max_split_size_mb` above 20, `garbage_collection_threshold`
    /// strictly between 0 and 1, and `expandable_segments:True` combined
    /// with neither. Options torch_npu knows but the model does not (such
    /// as `roundup_power2_divisions`) are refused, so that a replay never
    /// silently ignores one. A later occurrence of an option overrides an
    /// earlier one, as in torch_npu. `capacity` is left unlimited.
    ///
    /// ```
    /// use tensor_arena::caching::CachingConfig;
    /// let c = CachingConfig::from_alloc_conf("max_split_size_mb:128")?;
    /// assert_eq!(c.max_split_size, Some(128 << 20));
    /// assert!(CachingConfig::from_alloc_conf("max_split_size_mb:16").is_err());
    /// let both = "expandable_segments:True,garbage_collection_threshold:0.6";
    /// assert!(CachingConfig::from_alloc_conf(both).is_err());
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn from_alloc_conf(conf: &str) -> Result<CachingConfig> {
        CachingConfig::from_alloc_conf_on(Platform::Npu, conf)
    }

    /// [`CachingConfig::from_alloc_conf`] for `platform`'s variable
    /// (`PYTORCH_CUDA_ALLOC_CONF` for [`Platform::Cuda`], whose allocator
    /// allows expandable segments beside the other two options).
    ///
    /// ```
    /// use tensor_arena::caching::{CachingConfig, Platform};
    /// let both = "expandable_segments:True,max_split_size_mb:128";
    /// assert!(CachingConfig::from_alloc_conf_on(Platform::Cuda, both).is_ok());
    /// assert!(CachingConfig::from_alloc_conf_on(Platform::Npu, both).is_err());
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn from_alloc_conf_on(platform: Platform, conf: &str) -> Result<CachingConfig> {
        let mut config = CachingConfig::default().on(platform);
        for item in conf.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once(':')
                .ok_or_else(|| Error::InvalidAllocConf {
                    option: item.to_owned(),
                    value: String::new(),
                    reason: "expected OPTION:VALUE".to_owned(),
                })?;
            let (key, value) = (key.trim(), value.trim());
            let invalid = |reason: &str| Error::InvalidAllocConf {
                option: key.to_owned(),
                value: value.to_owned(),
                reason: reason.to_owned(),
            };
            match key {
                "max_split_size_mb" => {
                    let mb: u64 = value
                        .parse()
                        .map_err(|_| invalid("not a whole number of MiB"))?;
                    config.max_split_size = Some(max_split_size_bytes(mb)?);
                }
                "expandable_segments" => {
                    config.expandable_segments = match value {
                        "True" => true,
                        "False" => false,
                        _ => return Err(invalid("expected True or False")),
                    }
                }
                "garbage_collection_threshold" => {
                    let t: f64 = value.parse().map_err(|_| invalid("not a number"))?;
                    config.garbage_collection_threshold = Some(GcThreshold::new(t)?);
                }
                _ if NOT_MODELLED.contains(&key) => {
                    return Err(invalid(
                        "an allocator option (torch_npu or PyTorch) that tensor-arena has not modelled",
                    ));
                }
                _ => return Err(invalid("unknown option")),
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks what torch_npu refuses: a `max_split_size` of 20 MiB or less,
    /// and expandable segments together with `max_split_size_mb` or
    /// `garbage_collection_threshold` ("cannot be enabled with
    /// `expandable_segments`, please set `expandable_segments` to `False`").
    /// PyTorch's CUDA allocator ([`Platform::Cuda`]) accepts that
    /// combination and refuses only the first.
    pub fn validate(&self) -> Result<()> {
        if let Some(bytes) = self.max_split_size {
            max_split_size_bytes(bytes >> 20)?;
        }
        if self.platform == Platform::Npu
            && self.expandable_segments
            && (self.max_split_size.is_some() || self.garbage_collection_threshold.is_some())
        {
            return Err(Error::InvalidAllocConf {
                option: "expandable_segments".to_owned(),
                value: "True".to_owned(),
                reason: "cannot be combined with max_split_size_mb or \
                         garbage_collection_threshold; set expandable_segments:False"
                    .to_owned(),
            });
        }
        Ok(())
    }

    /// The setting as a `PYTORCH_NPU_ALLOC_CONF` value (`""` for the
    /// defaults), the inverse of [`CachingConfig::from_alloc_conf`]; the
    /// capacity is not part of it.
    ///
    /// ```
    /// use tensor_arena::caching::CachingConfig;
    /// let conf = "max_split_size_mb:128,garbage_collection_threshold:0.6";
    /// assert_eq!(CachingConfig::from_alloc_conf(conf)?.to_alloc_conf(), conf);
    /// assert_eq!(CachingConfig::default().to_alloc_conf(), "");
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn to_alloc_conf(&self) -> String {
        let mut parts = Vec::new();
        if let Some(bytes) = self.max_split_size {
            parts.push(format!("max_split_size_mb:{}", bytes >> 20));
        }
        if let Some(t) = self.garbage_collection_threshold {
            parts.push(format!("garbage_collection_threshold:{t}"));
        }
        if self.expandable_segments {
            parts.push("expandable_segments:True".to_owned());
        }
        parts.join(",")
    }
}

/// `max_split_size_mb` in bytes, checked as torch_npu checks it (> 20 MiB).
pub fn max_split_size_bytes(mb: u64) -> Result<u64> {
    if mb <= MIN_MAX_SPLIT_SIZE_MB {
        return Err(Error::InvalidAllocConf {
            option: "max_split_size_mb".to_owned(),
            value: mb.to_string(),
            reason: format!("must be more than {MIN_MAX_SPLIT_SIZE_MB}"),
        });
    }
    mb.checked_mul(1 << 20).ok_or(Error::InvalidAllocConf {
        option: "max_split_size_mb".to_owned(),
        value: mb.to_string(),
        reason: format!("must be at most {}", u64::MAX >> 20),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_options() {
        let c = CachingConfig::from_alloc_conf("expandable_segments:True").unwrap();
        assert!(c.expandable_segments);
        let c = CachingConfig::from_alloc_conf(
            "max_split_size_mb:21, garbage_collection_threshold:0.6",
        )
        .unwrap();
        assert_eq!(c.max_split_size, Some(21 << 20));
        assert_eq!(
            c.garbage_collection_threshold.map(GcThreshold::get),
            Some(0.6)
        );
        assert!(!c.expandable_segments);
        assert_eq!(
            CachingConfig::from_alloc_conf("").unwrap(),
            CachingConfig::default()
        );
        // False is allowed beside the other two; the last value wins.
        let c = CachingConfig::from_alloc_conf(
            "expandable_segments:True,expandable_segments:False,max_split_size_mb:64",
        )
        .unwrap();
        assert!(!c.expandable_segments);
        assert_eq!(c.to_alloc_conf(), "max_split_size_mb:64");
    }

    #[test]
    fn refuses_what_torch_npu_refuses() {
        for bad in [
            "max_split_size_mb:20",
            "max_split_size_mb:x",
            "expandable_segments:yes",
            "expandable_segments:True,max_split_size_mb:128",
            "max_split_size_mb:128,expandable_segments:True",
            "garbage_collection_threshold:0.5,expandable_segments:True",
            "garbage_collection_threshold:1.5",
            "garbage_collection_threshold:0",
            "garbage_collection_threshold:1.0",
            "garbage_collection_threshold:nan",
            "roundup_bypass:1",
            "max_split_size_mb",
        ] {
            let err = CachingConfig::from_alloc_conf(bad).unwrap_err();
            assert!(
                matches!(err, Error::InvalidAllocConf { .. }),
                "{bad}: {err}"
            );
        }
        let err = CachingConfig::from_alloc_conf("roundup_power2_divisions:4").unwrap_err();
        assert!(err.to_string().contains("not modelled"), "{err}");
    }

    #[test]
    fn round_trips_through_the_setting_string() {
        for conf in [
            "",
            "max_split_size_mb:128",
            "garbage_collection_threshold:0.8",
            "max_split_size_mb:512,garbage_collection_threshold:0.6",
            "expandable_segments:True",
        ] {
            let c = CachingConfig::from_alloc_conf(conf).unwrap();
            assert_eq!(c.to_alloc_conf(), conf);
        }
    }
}
