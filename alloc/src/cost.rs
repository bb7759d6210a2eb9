//! What the backing calls of a run would cost on a device: per-call
//! figures for each kind of call, multiplied by the calls counted
//! ([`BackingCalls`]). The CPU hides these costs (a host region is a
//! `mmap`), a GPU or an NPU does not: a `cudaFree` synchronises the device,
//! an `aclrtMalloc` per miss stalls the stream. Every figure here is an
//! **estimate** with its source in docs/device-costs.md; none is a
//! measurement of the run it is applied to (the CUDA figures were
//! measured once, on an H200; the Ascend ones are estimates).

use crate::config::Platform;
use crate::metered::BackingCalls;

/// Seconds per call, by kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallCosts {
    /// A whole region reserved (`cudaMalloc`, `aclrtMalloc`).
    pub reserve: f64,
    /// A whole region released (`cudaFree`, which also waits for the
    /// device to finish the work queued so far: the wait is not counted
    /// here, see [`CallCosts::release_synchronises`]).
    pub release: f64,
    /// Whether a release synchronises the device (`cudaFree` does).
    pub release_synchronises: bool,
    /// Address space reserved.
    pub reserve_address: f64,
    /// Address space released.
    pub release_address: f64,
    /// Physical memory created and mapped (`cuMemCreate` + `cuMemMap` +
    /// `cuMemSetAccess`; `aclrtMallocPhysical` + `aclrtMapMem`).
    pub map: f64,
    /// Physical memory unmapped and released.
    pub unmap: f64,
    /// An event recorded.
    pub event_record: f64,
    /// An event queried.
    pub event_query: f64,
    /// An event destroyed.
    pub event_destroy: f64,
}

impl CallCosts {
    /// The estimates for `platform` (docs/device-costs.md gives each
    /// figure's source).
    pub fn of(platform: Platform) -> CallCosts {
        match platform {
            Platform::Cuda => CUDA,
            Platform::Npu => NPU,
        }
    }

    /// Seconds the `calls` would take, the synchronisations not counted.
    pub fn seconds(&self, calls: &BackingCalls) -> f64 {
        calls.reserve as f64 * self.reserve
            + calls.release as f64 * self.release
            + calls.reserve_address as f64 * self.reserve_address
            + calls.release_address as f64 * self.release_address
            + calls.map as f64 * self.map
            + calls.unmap as f64 * self.unmap
            + calls.event_record as f64 * self.event_record
            + calls.event_query as f64 * self.event_query
            + calls.event_destroy as f64 * self.event_destroy
    }
}

/// CUDA per-call figures measured on one NVIDIA H200 (medians, idle
/// device; docs/device-costs.md): applied to another run they are
/// estimates. A release (`cudaFree`) also waits for the work queued on the
/// device: 20 ms with a 20 ms kernel queued there, not counted here.
const CUDA: CallCosts = CallCosts {
    reserve: 54e-6,
    release: 43e-6,
    release_synchronises: true,
    reserve_address: 3.7e-6,
    release_address: 2.0e-6,
    map: 54e-6,
    unmap: 37e-6,
    event_record: 1.6e-6,
    event_query: 1.3e-6,
    event_destroy: 1.1e-6,
};

/// Ascend: `aclrtMalloc` / `aclrtFree` are estimates (50 / 45 µs, no
/// published timing found; CANN documents that neither synchronises);
/// the mapped-range and event calls take CUDA's measured figures, an
/// assumption named in docs/device-costs.md.
const NPU: CallCosts = CallCosts {
    reserve: 50e-6,
    release: 45e-6,
    release_synchronises: false,
    ..CUDA
};

/// The estimated seconds of `calls` on `platform`'s device.
pub fn estimate(platform: Platform, calls: &BackingCalls) -> f64 {
    CallCosts::of(platform).seconds(calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_per_request_costs_what_a_map_per_growth_does_not() {
        let per_request = BackingCalls {
            reserve: 1000,
            release: 1000,
            ..BackingCalls::default()
        };
        let mapped = BackingCalls {
            reserve_address: 1,
            map: 10,
            ..BackingCalls::default()
        };
        let (a, b) = (
            estimate(Platform::Cuda, &per_request),
            estimate(Platform::Cuda, &mapped),
        );
        assert!(a > 50.0 * b, "{a} vs {b}");
        assert_eq!(estimate(Platform::Npu, &BackingCalls::default()), 0.0);
    }
}
