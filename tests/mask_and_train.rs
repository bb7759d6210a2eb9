//! The main example, shortened: it learns, it is deterministic, it
//! evaluates in mode `eval` of the same arena, and its steady-state steps
//! (training and evaluation) allocate nothing (measured, not assumed); on
//! the host and, with `--device ascend-sim`, on the simulated Ascend
//! runtime; `--device ascend` never falls back to the simulation.

mod support;

#[path = "../examples/mask_and_train/ascend.rs"]
mod ascend;
#[path = "../examples/mask_and_train/backend.rs"]
#[allow(dead_code)]
mod backend;
#[path = "../examples/mask_and_train/data.rs"]
mod data;
#[path = "../examples/mask_and_train/model.rs"]
#[allow(dead_code)]
mod model;
#[path = "../examples/mask_and_train/naive.rs"]
#[allow(dead_code)]
mod naive;
#[path = "../examples/mask_and_train/train.rs"]
mod train;

use support::sim::{self, sim};
use tensor_arena::CountingAllocator;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

/// A configuration small enough for a debug build: fewer, shorter samples
/// and a narrower hidden layer than the example's defaults.
fn small(seed: u64, threads: usize) -> train::Config {
    let mut cfg = train::Config::new(160, 16, seed);
    cfg.train_samples = 600;
    cfg.eval_samples = 200;
    cfg.sizes.max_len = 32;
    cfg.sizes.hidden = 32;
    cfg.log_every = 20;
    // Held-out batches of 64, four times the training batch: 4 per pass
    // over the 200 held-out sequences, a pass every 40 steps.
    cfg.eval_every = 40;
    cfg.eval_batch = 64;
    cfg.threads = threads;
    cfg.hyper.lr = 1e-2;
    cfg
}

/// Evaluation steps a run of `cfg` makes: passes times batches per pass.
fn eval_steps(cfg: &train::Config) -> u64 {
    let passes = cfg.steps.div_ceil(cfg.eval_every);
    (passes * cfg.eval_samples.div_ceil(cfg.eval_batch)) as u64
}

#[test]
fn learns_deterministically_without_steady_state_allocation() -> tensor_arena::Result<()> {
    let cfg = small(7, 1);
    let mut plan_text = String::new();
    let mut lines = Vec::new();
    let mut evals = Vec::new();
    let a = train::train_arena(&cfg, |e| match e {
        train::Event::Plan(p) => plan_text = p.to_string(),
        train::Event::Progress(p) => lines.push((p.step, p.loss, p.accuracy, p.steps_per_sec)),
        train::Event::Eval(e) => evals.push((e.step, e.samples, e.batch)),
    })?;
    assert!(
        plan_text.contains("dh") && plan_text.contains("backward"),
        "{plan_text}"
    );
    // Both modes in one plan: the eval buffers share the training ones'
    // bytes, and the slab is the persistent part plus the larger mode.
    assert!(
        plan_text.contains("modes: train (forward -> backward -> update), eval (forward)"),
        "{plan_text}"
    );
    assert!(plan_text.contains("mode eval ") && plan_text.contains("mode train "));
    assert!(plan_text.contains("input_keep_mask  u8"), "{plan_text}");
    assert_eq!(
        evals,
        [(40, 200, 64), (80, 200, 64), (120, 200, 64), (160, 200, 64)]
    );
    assert_eq!(a.evals.len(), 4);
    assert!(a.evals.windows(2).any(|w| w[1].1 < w[0].1), "{:?}", a.evals);
    let steps: Vec<usize> = lines.iter().map(|l| l.0).collect();
    assert_eq!(steps, (1..=8).map(|k| 20 * k).collect::<Vec<_>>());
    assert!(
        lines
            .iter()
            .all(|l| (0.0..=1.0).contains(&l.2) && l.3 > 0.0)
    );
    assert!(a.steps_per_sec > 0.0);
    let steps = cfg.steps as u64 + eval_steps(&cfg);
    assert!(
        a.memory_summary.contains(&format!("steps: {steps};")),
        "{}",
        a.memory_summary
    );

    // It learns: the loss falls and held-out accuracy is far above chance.
    assert!(
        a.last_loss < 0.7 * a.first_loss,
        "loss {} -> {}",
        a.first_loss,
        a.last_loss
    );
    let chance = 1.0 / cfg.sizes.classes as f64;
    assert!(
        a.eval_accuracy > 4.0 * chance,
        "held-out accuracy {}",
        a.eval_accuracy
    );
    assert!(a.eval_loss < a.first_loss, "held-out loss {}", a.eval_loss);

    // Measured over every step after the first, training and evaluation.
    assert_eq!(a.steady_steps, cfg.steps as u64 - 1 + eval_steps(&cfg));
    assert_eq!(
        a.steady_heap_allocs, 0,
        "host heap allocations in steady steps"
    );
    assert_eq!(
        a.steady_device_allocs, 0,
        "device allocations in steady steps"
    );

    // Same seed, same run; worker threads and checked mode change nothing.
    let mut cfg_b = small(7, 2);
    cfg_b.checked = true;
    let b = train::train_arena(&cfg_b, |_| {})?;
    assert_eq!(a.window_losses, b.window_losses);
    assert_eq!(a.checksum.to_bits(), b.checksum.to_bits());
    assert!(
        a.weights
            .iter()
            .zip(&b.weights)
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "weights differ between runs"
    );
    assert_eq!(
        (a.device_allocs, b.device_allocs),
        (1, 1),
        "one slab per run"
    );
    assert_eq!(a.eval_accuracy, b.eval_accuracy);
    assert!(b.guard_violations.is_empty(), "{:?}", b.guard_violations);
    assert_eq!(
        b.steady_heap_allocs, 0,
        "checked mode allocates nothing either"
    );
    assert!(a.guard_violations.is_empty());
    Ok(())
}

#[test]
fn the_naive_loop_trains_the_same_model_and_allocates_every_step() -> tensor_arena::Result<()> {
    let mut cfg = small(3, 1);
    cfg.steps = 40;
    let n = naive::train_naive(&cfg, |_| {})?;
    assert!(
        n.steady_heap_allocs >= n.steady_steps * 10,
        "{} allocations",
        n.steady_heap_allocs
    );
    assert!(n.steady_device_requests >= n.steady_steps * 10);
    assert!(n.last_loss.is_finite());
    Ok(())
}

#[test]
fn device_ascend_without_cann_fails_naming_the_search_and_the_setup() {
    // A machine with no CANN: nothing in an empty directory, no system
    // search. The error names what was tried and how to set CANN up, and
    // points at the simulation by its own name instead of running it.
    let empty = tempfile::tempdir().unwrap();
    let config = tensor_arena::device::ascend::AscendConfig::new()
        .search_dir(empty.path())
        .system_search(false);
    let Err(e) = ascend::AscendBackend::real(config) else {
        panic!("--device ascend opened a runtime in an empty directory");
    };
    assert!(
        e.contains(&empty.path().join("libascendcl.so").display().to_string()),
        "{e}"
    );
    assert!(e.contains("set_env.sh"), "{e}");
    assert!(e.contains("--device ascend-sim"), "{e}");
}

#[test]
fn device_ascend_sim_opens_the_simulation_built_with_the_crate() {
    let _s = sim();
    let backend = ascend::AscendBackend::simulation(Some(0)).unwrap();
    let text = backend::Setup::describe(&backend);
    assert!(text.starts_with("ascend:0"), "{text}");
    assert!(text.contains(&sim::dir().display().to_string()), "{text}");
    assert!(
        backend.runtime_allocations().is_some(),
        "not the simulated runtime"
    );
    let runtime = backend.runtime();
    drop(backend);
    runtime.finalize().unwrap();
}

#[test]
fn the_step_runs_on_the_simulated_npu_and_matches_the_host() -> tensor_arena::Result<()> {
    let cfg = small(7, 1);
    let host = train::train_arena(&cfg, |_| {})?;
    let s = sim();
    s.reset();
    let backend = ascend::AscendBackend::new(sim::config())?;
    assert!(backend::Setup::describe(&backend).starts_with("ascend:0"));
    let mut plan_text = String::new();
    let npu = train::train_on(&cfg, &backend, |e| {
        if let train::Event::Plan(p) = e {
            plan_text = p.to_string();
        }
    })?;
    // The operators' workspace was queried at startup and planned.
    assert!(plan_text.contains("aclnn.workspace"), "{plan_text}");

    // The whole run made one device allocation: the slab.
    assert_eq!(s.counter("aclrtMalloc"), 1, "{}", s.counters());
    assert_eq!(npu.device_allocs, 1);
    assert_eq!(npu.steady_device_allocs, 0);
    assert_eq!(
        npu.steady_heap_allocs, 0,
        "host heap allocations in steady steps"
    );
    // Every step ran on the device: our kernels and the aclnn operators.
    let steps = cfg.steps as u64 + eval_steps(&cfg);
    assert!(
        s.counter("kernel_launches") >= 4 * cfg.steps as u64,
        "{}",
        s.counters()
    );
    assert!(s.counter("aclnn_ops") >= 20 * steps, "{}", s.counters());

    // It learns, and it computes what the host computes. The kernels agree
    // bit for bit; the operators sum in their own order (as CANN's would),
    // so losses and weights agree to rounding.
    assert!(
        npu.last_loss < 0.7 * npu.first_loss,
        "loss {} -> {}",
        npu.first_loss,
        npu.last_loss
    );
    assert!(
        npu.eval_accuracy > 4.0 / cfg.sizes.classes as f64,
        "held-out accuracy {}",
        npu.eval_accuracy
    );
    for (h, a) in host.window_losses.iter().zip(&npu.window_losses) {
        assert!(
            (h - a).abs() <= 1e-5 * h.abs(),
            "window loss host {h} vs ascend {a}"
        );
    }
    let worst = host
        .weights
        .iter()
        .zip(&npu.weights)
        .map(|(h, a)| (h - a).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-5, "largest weight difference {worst}");
    assert!((host.eval_accuracy - npu.eval_accuracy).abs() <= 0.01);
    assert_eq!(host.evals.len(), npu.evals.len());
    for (h, a) in host.evals.iter().zip(&npu.evals) {
        assert_eq!(h.0, a.0);
        assert!(
            (h.1 - a.1).abs() <= 1e-4 * h.1,
            "eval loss host {} vs ascend {}",
            h.1,
            a.1
        );
    }

    let runtime = backend.runtime();
    drop(backend);
    s.assert_clean();
    runtime.finalize()?;
    Ok(())
}
