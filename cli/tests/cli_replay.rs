//! The `tensor-arena replay` command, run as a user runs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensor-arena"))
        .arg("replay")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_replay");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir.join(name)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn synthetic_trace_to_json_and_svg() {
    let svg = scratch("synthetic.svg");
    let csv = scratch("synthetic.csv");
    let o = run(&[
        "--synthetic",
        "30",
        "--capacity",
        "4GiB",
        "--json",
        "--svg",
        svg.to_str().unwrap(),
        "--save-trace",
        csv.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("valid JSON");
    let peak_reserved = j["model"]["stats"]["reserved_bytes"]["peak"]
        .as_u64()
        .unwrap();
    let slab = j["arena"]["slab_bytes"].as_u64().unwrap();
    assert!(
        slab > 0 && slab < peak_reserved,
        "{slab} vs {peak_reserved}"
    );
    assert_eq!(j["model"]["config"]["capacity"].as_u64(), Some(4 << 30));
    assert!(j["model"]["oom"].is_null());
    assert!(j["model_min_capacity"].as_u64().unwrap() <= peak_reserved);
    assert!(!j["timeline"].as_array().unwrap().is_empty());
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"));
    // Labels are SVG text, written without any font file.
    assert!(text.contains("<text") && text.contains("planned arena (one slab)"));
    // The saved trace replays to the same figures.
    let again = run(&[csv.to_str().unwrap(), "--json", "--no-search"]);
    assert!(again.status.success());
    let k: serde_json::Value = serde_json::from_str(&stdout(&again)).unwrap();
    assert_eq!(k["model"]["stats"], j["model"]["stats"]);
    assert!(k["model_min_capacity"].is_null());
}

#[test]
fn snapshot_table_and_settings() {
    let snap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/snapshot_small.pickle");
    let o = run(&[snap.to_str().unwrap(), "--capacity", "40MiB"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    assert!(out.contains("trace: snapshot_small.pickle"), "{out}");
    // d (event 7) needs a second 20 MiB segment: 2 + 20 + 20 > 40, and
    // neither segment can be released (P and a, c hold them).
    assert!(out.contains("runs out of memory at event 7"), "{out}");
    assert!(out.contains("largest cached free block 6.0 MiB"), "{out}");
    assert!(out.contains("slab fits in 40.0 MiB"), "{out}");
    let o = run(&[snap.to_str().unwrap(), "--expandable-segments", "--json"]);
    assert!(o.status.success());
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["model"]["config"]["expandable_segments"], true);
    assert_eq!(j["recorded_reserved"][0][1].as_u64(), Some(2 << 20));
}

#[test]
fn bad_input_is_reported_not_panicked() {
    let bad = scratch("bad.csv");
    std::fs::write(&bad, "alloc,a,10\nfree,b\n").unwrap();
    let o = run(&[bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("trace 'bad.csv', line 2: free of id b, which is not allocated"),
        "{err}"
    );
    let o = run(&["--synthetic", "5", "--max-split-size-mb", "20"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("must be more than 20"));
    let o = run(&[
        "--synthetic",
        "5",
        "--max-split-size-mb",
        "64",
        "--expandable-segments",
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot be combined"));
    let o = run(&["--synthetic", "5", "--capacity", "lots"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a byte count"));
    let o = run(&[]);
    assert!(!o.status.success(), "a trace or --synthetic is required");
    for (args, want) in [
        (
            &[
                "--synthetic",
                "5",
                "--alloc-conf",
                "expandable_segments:True,garbage_collection_threshold:0.6",
            ][..],
            "cannot be combined",
        ),
        (
            &["--synthetic", "5", "--garbage-collection-threshold", "1.5"][..],
            "must lie strictly between 0.0 and 1.0",
        ),
        (
            &["--synthetic", "5", "--sweep", "--sweep-gc", "0"][..],
            "garbage_collection_threshold:0",
        ),
        (
            &[
                "--synthetic",
                "5",
                "--alloc-conf",
                "roundup_power2_divisions:4",
            ][..],
            "not modelled",
        ),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// The hand-checked non-monotone trace of tests/replay.rs, with the header
/// line and sized frees a user's export has.
const NON_MONOTONE: &str = "op,id,size\nalloc,a,20971008\nfree,a,20971008\nalloc,b,25165312\n\
                            alloc,p,10485248\nfree,b,25165312\nalloc,d,31456768\n";

#[test]
fn sweep_json_keys_and_recommendation() {
    let csv = scratch("non_monotone.csv");
    std::fs::write(&csv, NON_MONOTONE).unwrap();
    let o = run(&[
        csv.to_str().unwrap(),
        "--sweep",
        "--json",
        "--window",
        "16MiB",
        "--sweep-max-split-mb",
        "22,128",
        "--sweep-gc",
        "0.5",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("valid JSON");
    let sweep = j["sweep"].as_array().expect("sweep is an array");
    assert_eq!(sweep.len(), 7);
    let mib = 1u64 << 20;
    let default = &sweep[0];
    assert_eq!(default["conf"], "");
    assert_eq!(default["peak_reserved"].as_u64(), Some(74 * mib));
    assert_eq!(default["min_capacity"].as_u64(), Some(40 * mib));
    let above: Vec<u64> = default["oom_above_min"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(above, vec![44 * mib, 46 * mib, 48 * mib]);
    assert_eq!(default["safe_capacity"].as_u64(), Some(50 * mib));
    assert_eq!(sweep[6]["conf"], "expandable_segments:True");
    assert_eq!(sweep[6]["safe_capacity"].as_u64(), Some(60 * mib));
    assert_eq!(j["recommendation"]["conf"], "");
    assert_eq!(j["recommendation"]["capacity"].as_u64(), Some(50 * mib));
    assert_eq!(
        j["recommendation"]["headroom_bytes"].as_u64(),
        Some(10 * mib)
    );
    assert_eq!(j["arena"]["slab_bytes"].as_u64(), Some(40 * mib));
    assert_eq!(j["arena"]["lower_bound"].as_u64(), Some(40 * mib));
    assert_eq!(j["capacity_scan"]["min_capacity"].as_u64(), Some(40 * mib));
    // The explanation at the peak, with the three parts.
    let peak = &j["explain"][0];
    assert_eq!(peak["moment"], "peak_reserved");
    assert_eq!(peak["gap"].as_u64(), Some(34 * mib));
    assert_eq!(peak["soft_fragmentation"].as_u64(), Some(24 * mib));
    // Without --sweep the keys are absent, the capacity scan is not.
    let o = run(&[csv.to_str().unwrap(), "--json"]);
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(j.get("sweep").is_none() && j.get("recommendation").is_none());
    assert_eq!(j["capacity_scan"]["safe_capacity"].as_u64(), Some(50 * mib));
}

#[test]
fn default_report_shows_the_capacities_that_fail_above_the_smallest() {
    let csv = scratch("non_monotone_report.csv");
    std::fs::write(&csv, NON_MONOTONE).unwrap();
    let o = run(&[csv.to_str().unwrap(), "--capacity", "44MiB"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    for want in [
        "smallest capacity that survives: 40.0 MiB",
        "out of memory again above it at (MiB): 44, 46, 48",
        "safe from 50 MiB",
        "at the model's out-of-memory error (event 5):",
        "hard fragmentation 10.0 MiB, soft 0 B, stream 0 B",
        "the cause is hard fragmentation",
    ] {
        assert!(out.contains(want), "missing '{want}' in\n{out}");
    }
    let o = run(&[csv.to_str().unwrap(), "--sweep", "--window", "16MiB"]);
    let out = stdout(&o);
    assert!(
        out.contains("recommended: unset PYTORCH_NPU_ALLOC_CONF"),
        "{out}"
    );
    assert!(out.contains("a planned arena of 40.0 MiB"), "{out}");
}

#[test]
fn gzip_oom_snapshot_names_the_site() {
    let snap =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/oom_snapshot_sites.pickle.gz");
    let o = run(&[snap.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    assert!(
        out.contains("at the recorded out-of-memory error (event 4):"),
        "{out}"
    );
    assert!(
        out.contains("in 1 segment(s) with 2 live block(s): model.py:12 in forward"),
        "{out}"
    );
}
