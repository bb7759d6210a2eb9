//! The doctor on public memory snapshots (tests/data/snapshots, sources in
//! SOURCES.md there), held to an independent reading of the same files by
//! Python's pickle module (`expected.py` wrote `expected.json`): the
//! recorded state, the recorded reserved peak, the device read; and the
//! model's peak reserved within 1% of the recorded one where the trace
//! has segment events.
#![cfg(feature = "pickle")]

use std::path::{Path, PathBuf};

use serde_json::Value;
use tensor_arena::caching::Platform;
use tensor_arena::diag::{
    DiagnoseOptions, Diagnosis, Moment, Overrides, ReadOptions, Trace, configure, diagnose,
};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/snapshots")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(dir().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The doctor with its defaults: what `tensor-arena replay FILE` does.
fn doctor(path: &Path) -> Diagnosis {
    let trace = Trace::read(path, ReadOptions::default()).unwrap();
    let configured = configure(&trace, &Overrides::default()).unwrap();
    diagnose(
        &trace,
        &DiagnoseOptions {
            config: configured.config,
            configured: Some(configured),
            search_min_capacity: false,
            ..DiagnoseOptions::default()
        },
    )
    .unwrap()
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[test]
fn every_public_snapshot_reads_as_python_reads_it() {
    let expected = expected();
    let files = expected.as_object().unwrap();
    assert!(files.len() >= 3, "{files:?}");
    for (name, want) in files {
        let d = doctor(&dir().join(name));
        let snap = d.snapshot.as_ref().unwrap();
        let dev = want["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| u(x, "device") == snap.device as u64)
            .unwrap();
        let s = &snap.state;
        assert_eq!(s.segments as u64, u(dev, "segments"), "{name}");
        assert_eq!(s.reserved, u(dev, "reserved"), "{name}");
        assert_eq!(s.allocated, u(dev, "allocated"), "{name}");
        assert_eq!(
            s.allocated_blocks as u64,
            u(dev, "allocated_blocks"),
            "{name}"
        );
        assert_eq!(s.requested, u(dev, "requested"), "{name}");
        assert_eq!(s.free, u(dev, "free"), "{name}");
        assert_eq!(s.largest_free_block, u(dev, "largest_free_block"), "{name}");
        assert_eq!(
            s.free_by_size.iter().map(|c| c.bytes).sum::<u64>(),
            s.free,
            "{name}"
        );
        // Every live block is an allocation of the trace, made in it or
        // before it.
        assert!(
            d.trace.allocations as u64 >= u(dev, "allocated_blocks"),
            "{name}"
        );
        match dev.get("recorded_peak_reserved") {
            Some(peak) => {
                let peak = peak.as_u64().unwrap();
                let r = d.recorded_vs_model.unwrap();
                assert_eq!(r.recorded_peak_reserved, peak, "{name}");
                assert_eq!(
                    r.recorded_initial_reserved,
                    u(dev, "recorded_initial_reserved"),
                    "{name}"
                );
                assert_eq!(r.recorded_end_reserved, u(dev, "reserved"), "{name}");
                let ratio = d.model.stats.reserved_bytes.peak as f64 / peak as f64;
                assert!(
                    (ratio - 1.0).abs() <= 0.01,
                    "{name}: modelled peak {} vs recorded {peak} ({ratio:.4})",
                    d.model.stats.reserved_bytes.peak
                );
            }
            None => assert!(d.recorded_vs_model.is_none(), "{name}"),
        }
        if want["allocator_settings"].is_string() {
            let c = d.configuration.as_ref().unwrap();
            assert_eq!(c.platform.value, Platform::Cuda, "{name}");
            assert!(c.platform.source.starts_with("snapshot:"), "{name}");
        }
    }
}

#[test]
fn a_torch_2_0_oom_state_reports_its_live_bytes_and_segments() {
    let name = "flexgen_oom_snapshot_torch20.pickle.gz";
    let want = &expected()[name]["devices"][0];
    let d = doctor(&dir().join(name));
    let snap = d.snapshot.as_ref().unwrap();
    assert!(snap.layout.starts_with("torch 2.0"), "{}", snap.layout);
    assert!(snap.state_only);
    assert_eq!(snap.state.allocated, u(want, "allocated"));
    assert_eq!(snap.state.segments as u64, u(want, "segments"));
    // Every live block becomes an allocation, none is dropped.
    assert_eq!(d.trace.allocations as u64, u(want, "allocated_blocks"));
    assert_eq!(d.trace.peak_live_requested, u(want, "requested"));
    let text = d.to_string();
    assert!(
        text.contains("recorded state (the snapshot holds no trace of allocations)"),
        "{text}"
    );
    assert!(text.contains("in 176 segment(s)"), "{text}");
    // The torch 2.0 blocks' frames (under history) name the Python site.
    assert!(
        text.contains("flexgen/pytorch_backend.py:190 in allocate"),
        "{text}"
    );
}

#[test]
fn a_state_only_snapshot_reports_its_recorded_free_cache() {
    let name = "attention_state_only.pickle.gz";
    let want = &expected()[name]["devices"][0];
    let d = doctor(&dir().join(name));
    let snap = d.snapshot.as_ref().unwrap();
    assert!(snap.state_only);
    assert_eq!(snap.state.free, u(want, "free"));
    let text = d.to_string();
    let free = tensor_arena::units::format_bytes(u(want, "free"));
    let at = text.find("recorded state").unwrap();
    let model = text.find("caching allocator ").unwrap();
    assert!(at < model, "the recorded state comes first:\n{text}");
    assert!(
        text.contains(&format!("free in the cache {free}")),
        "{text}"
    );
    assert!(text.contains("re-pack"), "{text}");
}

#[test]
fn a_multi_device_snapshot_shows_its_oom_without_flags() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/snapshot_three_devices_oom.pickle");
    let d = doctor(&path);
    let snap = d.snapshot.as_ref().unwrap();
    assert_eq!(snap.device, 1);
    assert!(snap.device_reason.contains("out-of-memory"));
    let others: Vec<usize> = snap
        .devices
        .iter()
        .map(|x| x.device)
        .filter(|&x| x != 1)
        .collect();
    assert_eq!(others, vec![0, 2]);
    assert!(
        d.explain
            .iter()
            .any(|e| e.moment == Moment::RecordedOutOfMemory)
    );
    let c = d.configuration.as_ref().unwrap();
    assert_eq!(c.platform.value, Platform::Cuda);
    // Reserved at the error (20 MiB) plus the 2 MiB the device had free.
    assert_eq!(c.capacity.value, Some(22 << 20));
    let text = d.to_string();
    assert!(
        text.contains("at the recorded out-of-memory error"),
        "{text}"
    );
    assert!(
        text.contains("other devices (read one with --device N): 0"),
        "{text}"
    );
}

#[test]
fn flags_override_the_snapshot_and_say_so() {
    let path = dir().join("cs336_silmont2000_mem_snapshot.pickle.gz");
    let trace = Trace::read(&path, ReadOptions::default()).unwrap();
    let c = configure(
        &trace,
        &Overrides {
            platform: Some(Platform::Npu),
            capacity: Some(8 << 30),
            ..Overrides::default()
        },
    )
    .unwrap();
    assert_eq!(c.config.platform, Platform::Npu);
    assert_eq!(c.platform.source, "flag --platform");
    assert_eq!(c.capacity.source, "flag --capacity");
    assert!(
        c.alloc_conf
            .source
            .starts_with("snapshot: allocator_settings")
    );
    // torch_npu's 32-byte pad turns the 512 MiB tensors into bigger
    // segments than the CUDA run recorded.
    let npu = diagnose(
        &trace,
        &DiagnoseOptions {
            config: c.config,
            search_min_capacity: false,
            ..DiagnoseOptions::default()
        },
    )
    .unwrap();
    let cuda = doctor(&path);
    assert!(npu.model.stats.reserved_bytes.peak > cuda.model.stats.reserved_bytes.peak);
}

#[test]
fn a_device_with_segments_and_no_trace_reports_its_state() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/snapshot_three_devices_oom.pickle");
    let trace = Trace::read(
        &path,
        ReadOptions {
            device: Some(2),
            ..ReadOptions::default()
        },
    )
    .unwrap();
    let snap = trace.snapshot().unwrap();
    assert_eq!(snap.device, 2);
    assert_eq!(snap.device_reason, "flag --device");
    assert!(snap.state_only);
    assert_eq!(snap.state.reserved, 20 << 20);
    assert_eq!(snap.state.allocated, 2 << 20);
    assert_eq!(snap.state.free, 18 << 20);
    // Its live block is an allocation made before the (empty) trace.
    assert_eq!(trace.allocations().len(), 1);
    let err = Trace::read(
        &path,
        ReadOptions {
            device: Some(7),
            ..ReadOptions::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("data for device(s) 0, 1, 2"), "{err}");
}
