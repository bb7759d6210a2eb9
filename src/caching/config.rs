//! Settings of the modelled allocator, as `PYTORCH_NPU_ALLOC_CONF` gives
//! them.

use serde::Serialize;

use super::rules::MIN_MAX_SPLIT_SIZE_MB;
use crate::error::{Error, Result};

/// Settings of the modelled allocator (`PYTORCH_NPU_ALLOC_CONF`).
///
/// The default is torch_npu's default with expandable segments off and no
/// device limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CachingConfig {
    /// Device memory available to the allocator; `None` is unlimited.
    pub capacity: Option<u64>,
    /// `max_split_size_mb` in bytes: cached blocks at least this large are
    /// never split, and only serve requests less than 20 MiB smaller.
    pub max_split_size: Option<u64>,
    /// `expandable_segments:True`: one segment per pool and stream that
    /// grows by mapping pages (2 MiB small, 20 MiB large).
    pub expandable_segments: bool,
}

impl CachingConfig {
    /// Reads an allocator setting string such as
    /// `"max_split_size_mb:128"` or `"expandable_segments:True"`, with the
    /// same checks torch_npu makes: `max_split_size_mb` above 20, and
    /// `expandable_segments:True` not combined with `max_split_size_mb`.
    /// `garbage_collection_threshold` is accepted and ignored (the model has
    /// no memory fraction, which it needs to act). `capacity` is left
    /// unlimited.
    ///
    /// ```
    /// use tensor_arena::caching::CachingConfig;
    /// let c = CachingConfig::from_alloc_conf("max_split_size_mb:128")?;
    /// assert_eq!(c.max_split_size, Some(128 << 20));
    /// assert!(CachingConfig::from_alloc_conf("max_split_size_mb:16").is_err());
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn from_alloc_conf(conf: &str) -> Result<CachingConfig> {
        let mut config = CachingConfig::default();
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
                    if !(t > 0.0 && t < 1.0) {
                        return Err(invalid("must lie strictly between 0.0 and 1.0"));
                    }
                }
                _ => return Err(invalid("unknown option")),
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks the combination torch_npu refuses: expandable segments with
    /// `max_split_size_mb`, and a `max_split_size` of 20 MiB or less.
    pub fn validate(&self) -> Result<()> {
        if let Some(bytes) = self.max_split_size {
            max_split_size_bytes(bytes >> 20)?;
            if self.expandable_segments {
                return Err(Error::InvalidAllocConf {
                    option: "expandable_segments".to_owned(),
                    value: "True".to_owned(),
                    reason: "cannot be combined with max_split_size_mb".to_owned(),
                });
            }
        }
        Ok(())
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
        assert!(!c.expandable_segments);
        assert_eq!(
            CachingConfig::from_alloc_conf("").unwrap(),
            CachingConfig::default()
        );
    }

    #[test]
    fn refuses_what_torch_npu_refuses() {
        for bad in [
            "max_split_size_mb:20",
            "max_split_size_mb:x",
            "expandable_segments:yes",
            "expandable_segments:True,max_split_size_mb:128",
            "garbage_collection_threshold:1.5",
            "roundup_bypass:1",
            "max_split_size_mb",
        ] {
            let err = CachingConfig::from_alloc_conf(bad).unwrap_err();
            assert!(
                matches!(err, Error::InvalidAllocConf { .. }),
                "{bad}: {err}"
            );
        }
    }
}
