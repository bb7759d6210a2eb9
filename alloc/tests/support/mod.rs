//! Shared helpers of the allocator's integration tests.
#![allow(dead_code)]

/// A synthetic loop whose shapes grow every step.
pub mod growing;
/// The recorded loops of the allocator suite.
pub mod loops;
/// A shadow map of live host blocks, tagged at both ends.
pub mod tagged;
/// Live host blocks written whole and checked whole.
pub mod written;
use tensor_arena_alloc::replay::{Prediction, ReplayConfig, replay};
use tensor_arena_alloc::{Config, PlannedAllocator};

/// A CPU allocator with the given policy keys (JSON object body).
pub fn cpu(policy: &str) -> PlannedAllocator {
    let json = format!(
        r#"{{"backend": "cpu", "log_errors": false {}{policy}}}"#,
        if policy.is_empty() { "" } else { "," }
    );
    PlannedAllocator::new(Config::from_json(&json).expect("test config")).expect("cpu backing")
}

/// One training-like step: `acts` activations of `act` bytes alive through
/// the step, a temporary per activation, `grads` gradients allocated late
/// and carried into the next step (the caller frees the previous step's
/// first, as `zero_grad(set_to_none=True)` does).
pub struct ToyStep {
    pub acts: Vec<usize>,
    pub grads: Vec<usize>,
}

pub fn toy_step(a: &mut PlannedAllocator, prev_grads: &mut Vec<usize>, act: usize, n: usize) {
    a.step_begin().expect("begin");
    for g in prev_grads.drain(..) {
        a.free(g);
    }
    let mut acts = Vec::new();
    for i in 0..n {
        acts.push(a.alloc(act * (i % 3 + 1), 0, 0).expect("act"));
        let t = a.alloc(act / 2 + 100, 0, 0).expect("tmp");
        a.free(t);
    }
    // backward: grads appear while activations go
    for (i, x) in acts.into_iter().enumerate().rev() {
        prev_grads.push(a.alloc(4096 * (i + 1), 0, 0).expect("grad"));
        a.free(x);
    }
    a.step_end().expect("end");
}

/// The trace at `path` replayed under the default policy; every free
/// found its block.
pub fn replay_default(path: &std::path::Path) -> Prediction {
    replay_with(path, Config::default())
}

/// The generated loop `name` (`tests/data/generated`) replayed under the
/// default policy: its whole-run peak reserved over its live lower bound.
pub fn generated_over_bound(name: &str) -> f64 {
    let p = replay_default(&generated(name));
    p.peak_reserved_bytes as f64 / p.live_lower_bound_bytes as f64
}

/// The trace at `path` replayed under `policy`; every free found its
/// block.
pub fn replay_with(path: &std::path::Path, policy: Config) -> Prediction {
    let config = ReplayConfig {
        policy,
        ..ReplayConfig::default()
    };
    let p = replay(&loops::read_gz(path), &config).expect("replay");
    let s = &p.stats;
    assert_eq!(s.errors.double_free + s.errors.unknown_free, 0, "{s:?}");
    assert!(p.peak_reserved_bytes >= p.live_lower_bound_bytes);
    p
}

/// Asserts that the replay's whole-run peak reserved is at most `percent`
/// percent of its live lower bound.
pub fn assert_peak_within(p: &Prediction, percent: u64) {
    assert!(
        p.peak_reserved_bytes * 100 <= p.live_lower_bound_bytes * percent,
        "peak {} for a live lower bound of {} (at most {percent}%)",
        p.peak_reserved_bytes,
        p.live_lower_bound_bytes
    );
}

/// A CPU allocator as the C ABI opens it, its trace on: written to
/// `t.csv` in a fresh directory of the temp directory named after `tag`
/// and the process. Returns the allocator and the file's path (the caller
/// removes its parent directory).
pub fn traced(tag: &str) -> (PlannedAllocator, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("ta-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("t.csv");
    let json = format!(
        r#"{{"backend": "cpu", "log_errors": false, "trace": "{}"}}"#,
        path.display()
    );
    let a =
        PlannedAllocator::new(Config::from_json(&json).expect("test config")).expect("cpu backing");
    (a, path)
}

/// A generated loop's trace kept in `tests/data/generated/` (see its
/// README).
pub fn generated(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/data/generated/{name}.csv.gz"))
}
