//! The `tensor-arena replay` command, run as a user runs it.
#![cfg(feature = "cli")]

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
    let snap = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/snapshot_small.pickle");
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
}
