//! `tensor-arena replay TRACE --planned`, run as a user runs it: the
//! prediction from a trace the planned allocator wrote equals the live
//! run; steps found or a clear error; bad trace files named by line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tensor_arena_alloc::replay;
use tensor_arena_alloc::trace::{self, TraceEvent};
use tensor_arena_alloc::{Config, PlannedAllocator, Stats};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensor-arena"))
        .arg("replay")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_planned");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir.join(name)
}

fn data(name: &str) -> String {
    format!("{}/../{name}", env!("CARGO_MANIFEST_DIR"))
}

fn ok_json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("valid JSON")
}

fn failure(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// A live run: `events` driven through the allocator as the C ABI opens
/// it, with its `trace` option on; returns its stats and the trace's path.
fn live_run(name: &str, events: &[TraceEvent]) -> (Stats, PathBuf) {
    let path = scratch(name);
    let json = format!(
        r#"{{"backend": "cpu", "log_errors": false, "trace": "{}"}}"#,
        path.display()
    );
    let mut a = PlannedAllocator::new(Config::from_json(&json).unwrap()).unwrap();
    replay::drive(&mut a, events).unwrap();
    let stats = a.stats();
    drop(a); // flushes the trace
    (stats, path)
}

/// A loop whose sequence length changes per step: activations scale with
/// it, a temporary per layer, the loss kept to the next step.
fn changing_loop(steps: usize) -> Vec<TraceEvent> {
    let mut e = Vec::new();
    let mut id = 1usize;
    let mut next = || {
        id += 1;
        id
    };
    let weights = next();
    e.push(TraceEvent::Alloc {
        addr: weights,
        size: 1 << 20,
        stream: 0,
    });
    let mut kept = None;
    for s in 0..steps {
        // Longer sequences arrive after the first plan: misses, re-plans.
        let len = if s < 12 {
            [32usize, 48, 64, 40][s % 4]
        } else {
            [96, 72][s % 2]
        };
        e.push(TraceEvent::StepBegin);
        let mut acts = Vec::new();
        for layer in 0..4 {
            let a = next();
            e.push(TraceEvent::Alloc {
                addr: a,
                size: len * 1024 * (layer + 1),
                stream: 0,
            });
            let t = next();
            e.push(TraceEvent::Alloc {
                addr: t,
                size: len * 512,
                stream: 0,
            });
            e.push(TraceEvent::Free {
                addr: t,
                size: 0,
                stream: 0,
            });
            acts.push(a);
        }
        for a in acts.into_iter().rev() {
            e.push(TraceEvent::Free {
                addr: a,
                size: 0,
                stream: 0,
            });
        }
        if let Some(k) = kept.take() {
            e.push(TraceEvent::Free {
                addr: k,
                size: 0,
                stream: 0,
            });
        }
        let loss = next();
        e.push(TraceEvent::Alloc {
            addr: loss,
            size: 4,
            stream: 0,
        });
        kept = Some(loss);
        e.push(TraceEvent::StepEnd);
    }
    e
}

fn assert_matches_live(stats: &Stats, path: &Path) {
    let written = trace::read(path).unwrap();
    let (_, peak) = trace::reserved_from_segments(&written).unwrap();
    let j = ok_json(&run(&[
        path.to_str().unwrap(),
        "--planned",
        "--platform",
        "cuda",
        "--json",
        "--no-search",
    ]));
    let p = &j["planned"];
    assert!((p["served_share"].as_f64().unwrap() - stats.served_share.unwrap()).abs() < 1e-12);
    // The live lower bound and the device calls: the live run's own.
    assert_eq!(
        p["live_lower_bound_bytes"].as_u64().unwrap(),
        stats.lower_bound_bytes
    );
    assert_eq!(
        p["device_calls"].as_u64().unwrap(),
        stats.backing_calls.memory()
    );
    assert!(p["live_lower_bound_bytes"].as_u64().unwrap() <= peak);
    assert_eq!(p["replans"].as_u64().unwrap(), stats.replans);
    assert_eq!(p["steps"].as_u64().unwrap(), stats.steps);
    assert_eq!(p["slab_bytes"].as_u64().unwrap(), stats.slab_bytes);
    assert_eq!(p["lower_bound"].as_u64().unwrap(), stats.lower_bound);
    assert_eq!(
        p["fallback_allocations_max_step"].as_u64().unwrap(),
        stats.fallback_allocations_max_step
    );
    // The whole-run peak: the live run's segment lines, the replay's
    // backing.
    assert_eq!(p["peak_reserved_bytes"].as_u64().unwrap(), peak);
    assert_eq!(p["recorded_peak_reserved_bytes"].as_u64().unwrap(), peak);
    assert!(p["fits"].is_null(), "no capacity given");
}

#[test]
fn the_prediction_from_a_fixed_shape_trace_equals_the_live_run() {
    let gpt2 = trace::read(Path::new(&data("alloc/tests/data/gpt2_cpu_trace.csv"))).unwrap();
    let (stats, path) = live_run("gpt2_live.csv", &gpt2);
    assert_eq!(stats.served_share, Some(1.0));
    assert_matches_live(&stats, &path);
    let text = run(&[path.to_str().unwrap(), "--planned", "--no-search"]);
    assert!(text.status.success());
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(out.contains("planned allocator (predicted)"), "{out}");
    assert!(out.contains("from the trace's step markers"), "{out}");
}

#[test]
fn the_prediction_from_a_changing_shape_trace_equals_the_live_run() {
    let (stats, path) = live_run("changing_live.csv", &changing_loop(24));
    assert!(
        stats.replans > 0 || stats.served_share.is_some_and(|s| s < 1.0),
        "{stats:?}"
    );
    assert_matches_live(&stats, &path);
}

#[test]
fn policy_flags_reach_the_policy() {
    let path = data("alloc/tests/data/gpt2_cpu_trace.csv");
    let j = ok_json(&run(&[
        &path,
        "--planned",
        "--warmup-steps",
        "3",
        "--no-exact-before-plan",
        "--json",
        "--no-search",
    ]));
    assert_eq!(j["planned"]["policy"]["warmup_steps"], 3);
    assert_eq!(j["planned"]["policy"]["exact_before_plan"], false);
    let e = failure(&run(&[&path, "--planned", "--record-steps", "0"]));
    assert!(e.contains("record_steps"), "{e}");
    let e = failure(&run(&[&path, "--planned", "--policy", r#"{"warmup": 1}"#]));
    assert!(e.contains("warmup"), "{e}");
}

#[test]
fn a_saved_trace_is_the_allocator_format_and_replays_the_same() {
    let saved = scratch("saved.csv");
    let first = ok_json(&run(&[
        &data("tests/data/snapshot_small.pickle"),
        "--planned",
        "--step-every",
        "2",
        "--json",
        "--no-search",
        "--save-trace",
        saved.to_str().unwrap(),
    ]));
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.starts_with("event,addr,size,stream\n"), "{text}");
    assert!(text.contains("step_begin,0,0,0"));
    let again = ok_json(&run(&[
        saved.to_str().unwrap(),
        "--planned",
        "--json",
        "--no-search",
    ]));
    assert_eq!(again["model"]["stats"], first["model"]["stats"]);
    assert_eq!(again["planned"]["steps"], first["planned"]["steps"]);
    assert_eq!(
        again["planned"]["peak_reserved_bytes"],
        first["planned"]["peak_reserved_bytes"]
    );
}

#[test]
fn a_trace_without_step_boundaries_is_a_clear_error() {
    let e = failure(&run(&[
        &data("tests/data/snapshot_small.pickle"),
        "--planned",
    ]));
    assert!(
        e.contains("no step boundary") && e.contains("--step-frame") && e.contains("--step-every"),
        "{e}"
    );
    let e = failure(&run(&[
        &data("tests/data/snapshots/flexgen_oom_snapshot_torch20.pickle.gz"),
        "--planned",
    ]));
    assert!(e.contains("no Python stack frames"), "{e}");
    // A function of the snapshot's own frames ends the steps.
    let j = ok_json(&run(&[
        &data("tests/data/oom_snapshot_sites.pickle.gz"),
        "--planned",
        "--step-frame",
        "in forward$",
        "--json",
        "--no-search",
    ]));
    assert!(j["planned"]["steps"].as_u64().unwrap() >= 1);
    let e = failure(&run(&[
        &data("tests/data/snapshot_small.pickle"),
        "--planned",
        "--step-frame",
        "(",
    ]));
    assert!(e.contains("--step-frame"), "{e}");
}

#[test]
fn bad_allocator_traces_name_the_line() {
    let cases = [
        (
            "order.csv",
            "event,addr,size,stream\nalloc,4096,10,0\nstep_end,0,0,0\n",
            "line 3",
            "outside any step",
        ),
        (
            "nested.csv",
            "event,addr,size,stream\nstep_begin,0,0,0\nstep_begin,0,0,0\n",
            "line 3",
            "inside a step",
        ),
        (
            "truncated.csv",
            "event,addr,size,stream\nstep_begin,0,0,0\nalloc,4096,10,0\nallo",
            "line 4",
            "truncated",
        ),
        (
            "field.csv",
            "event,addr,size,stream\nalloc,4096,ten,0\n",
            "line 2",
            "size",
        ),
    ];
    for (name, text, line, why) in cases {
        let path = scratch(name);
        std::fs::write(&path, text).unwrap();
        for planned in [true, false] {
            let mut args = vec![path.to_str().unwrap()];
            if planned {
                args.push("--planned");
            }
            let e = failure(&run(&args));
            assert!(e.contains(line) && e.contains(why), "{name}: {e}");
        }
    }
    // Markers are the steps of an allocator trace; the snapshot flags are
    // refused rather than ignored.
    let e = failure(&run(&[
        &data("alloc/tests/data/gpt2_cpu_trace.csv"),
        "--planned",
        "--step-every",
        "10",
    ]));
    assert!(e.contains("marks its own steps"), "{e}");
}

/// A public snapshot nobody here wrote (tests/data/snapshots/SOURCES.md):
/// its two training steps are found from the optimizer's frames (Python's
/// pickle module sees two runs of `torch/optim/optimizer.py` frames), and
/// a policy that plans at the boundary after one recorded step serves the
/// second; one that plans it off the training thread (its steps hold more
/// requests than `background_plan_requests`) serves none of the two.
#[test]
fn a_public_snapshot_has_its_steps_found_and_a_prediction() {
    let path = data("tests/data/snapshots/cs336_notHanmin_memory_snapshot.pickle.gz");
    let j = ok_json(&run(&[&path, "--planned", "--json", "--no-search"]));
    let p = &j["planned"];
    assert_eq!(p["steps"], 2);
    assert!(p["peak_reserved_bytes"].as_u64().unwrap() > 0);
    assert_eq!(
        p["requests_after_warmup"], 0,
        "warm-up and recording take both steps"
    );
    assert!(
        p["recommendation"]
            .as_str()
            .unwrap()
            .contains("no step was served")
    );
    let off_thread = ok_json(&run(&[
        &path,
        "--planned",
        "--warmup-steps",
        "0",
        "--record-steps",
        "1",
        "--json",
        "--no-search",
    ]));
    let p = &off_thread["planned"];
    assert_eq!(p["policy"]["background_plan_requests"], 1024);
    assert_eq!(p["served_from_plan"], 0, "the plan lands after step 2");
    let r = p["recommendation"].as_str().unwrap();
    assert!(r.contains("made while the next step runs"), "{r}");
    let j = ok_json(&run(&[
        &path,
        "--planned",
        "--warmup-steps",
        "0",
        "--record-steps",
        "1",
        "--policy",
        r#"{"background_plan_requests": 4000000000}"#,
        "--json",
        "--no-search",
    ]));
    let p = &j["planned"];
    assert!(p["requests_after_warmup"].as_u64().unwrap() > 0);
    assert!(p["served_from_plan"].as_u64().unwrap() > 0);
    let model = j["model"]["stats"]["reserved_bytes"]["peak"]
        .as_u64()
        .unwrap();
    assert!(p["caching_model_peak_reserved_bytes"].as_u64().unwrap() > 0 && model > 0);
    // Whatever it predicts, the recommendation says why it is or is not
    // the planned allocator.
    let r = p["recommendation"].as_str().unwrap();
    assert!(
        r.starts_with("use the planned allocator") || r.contains("not recommended"),
        "{r}"
    );
}
