//! Fault injection through the simulated Ascend runtime (`kernels/sim/`):
//! allocation failure at reservation, kernel launch failure, failure of a
//! launch stub's own buffer, aclnn operator failure (cached executors
//! included), copy failure and asynchronous (synchronisation) failure, each
//! injected at every position it can take in a training step of the main
//! example; and a refusal of `aclSetAclOpExecutorRepeatable` at every
//! operator of a first step, which is no error at all (the call runs once). Each must come back as a typed error, leave the arena usable
//! (the next step succeeds; a step that failed before its update phase
//! leaves the weights untouched) and leak nothing, by the runtime's own
//! counters. The number of faults injected is printed
//! (`cargo test --release --test api ascend_faults:: -- --nocapture`).
//!
//! Needs a C++ compiler at build time (see build.rs).

use tensor_arena::device::ascend::AscendDevice;
use tensor_arena::{Arena, Available, Error, Planner, Result};

use crate::backend::Setup;
use crate::support::sim::{self, ACLNN_RUNTIME, AICORE_EXCEPTION, COPY_DATA, OOM, sim};
use crate::{ascend, data, model, train};

/// A small model on the simulated device, ready to train.
struct Rig {
    backend: ascend::AscendBackend,
    arena: Arena<AscendDevice>,
    net: model::Net,
    train: data::Dataset,
    loader: data::Loader,
    cfg: train::Config,
}

impl Rig {
    fn new() -> Result<Rig> {
        let mut cfg = train::Config::new(0, 8, 11);
        cfg.train_samples = 64;
        cfg.eval_samples = 8;
        cfg.sizes.max_len = 32;
        cfg.sizes.hidden = 32;
        let mut sizes = cfg.sizes;
        sizes.max_batch = cfg.batch;
        let (train, _) = train::datasets(&cfg);
        sim().reset();
        let backend = ascend::AscendBackend::new(sim::config())?;
        let mut planner = Planner::new();
        let net = model::Net::declare(&mut planner, sizes, backend.workspace_bytes(&sizes)?)?;
        backend.bind_workspace(net.workspace);
        let mut arena = Arena::new(backend.device(), planner.plan()?)?;
        arena.set_seed(cfg.seed);
        net.init(&mut arena, cfg.seed)?;
        let loader = data::Loader::new(train.len(), cfg.batch, cfg.seed);
        Ok(Rig {
            backend,
            arena,
            net,
            train,
            loader,
            cfg,
        })
    }

    fn step(&mut self) -> Result<model::StepStats> {
        let batch = self.loader.next(&self.train);
        self.net.train_step(
            &self.backend,
            &mut self.arena,
            &self.train,
            &batch,
            &self.cfg.hyper,
        )
    }

    fn weights(&mut self) -> Result<Vec<f32>> {
        self.net.weights(&mut self.arena)
    }

    /// How much `counter` grows in one clean step.
    fn per_step(&mut self, counter: &str) -> Result<u64> {
        let before = sim().counter(counter);
        self.step()?;
        Ok(sim().counter(counter) - before)
    }

    /// Drops everything and checks the simulation for leaks.
    fn finish(self) {
        let Rig { backend, arena, .. } = self;
        drop(arena);
        drop(backend);
        sim().assert_clean();
    }
}

/// Injects `arm(k)` for every position `k` in a step of `calls` calls,
/// checks each failing step with `check`, and returns the faults injected.
fn sweep(
    rig: &mut Rig,
    calls: u64,
    arm: impl Fn(u64),
    check: impl Fn(&Error),
    weights_intact: impl Fn(u64) -> bool,
) -> Result<u64> {
    assert!(calls > 0);
    for k in 1..=calls {
        let before = rig.weights()?;
        arm(k);
        match rig.step() {
            Err(e) => check(&e),
            Ok(_) => panic!("fault at call {k} of {calls} was not reported"),
        }
        if weights_intact(k) {
            assert_eq!(
                rig.weights()?,
                before,
                "a step that failed at call {k} changed the weights"
            );
        }
        let s = rig.step()?;
        assert!(
            s.samples > 0 && s.loss_sum.is_finite(),
            "the step after the fault works"
        );
    }
    Ok(calls)
}

#[test]
fn allocation_failures_at_reservation_are_typed_and_leave_nothing() -> Result<()> {
    let s = sim();
    s.reset();
    let dev = AscendDevice::new(sim::config())?;
    let plan = || -> Result<tensor_arena::Plan> {
        let mut p = Planner::new();
        p.persistent::<f32>("w", &[1024])?;
        p.plan()
    };
    s.fail_malloc(1, OOM);
    let e = Arena::new(dev.clone(), plan()?).unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfMemory {
                available: Available::FreeWithHeadroom { .. },
                ..
            }
        ),
        "{e}"
    );
    s.fail_malloc(1, 507_899);
    let e = Arena::new(dev.clone(), plan()?).unwrap_err();
    assert!(
        matches!(&e, Error::Acl { code: 507_899, op, .. } if op == "aclrtMalloc"),
        "{e}"
    );
    assert_eq!(s.counter("live_allocations"), 0);
    assert_eq!(s.counter("injected_malloc_failures"), 2);
    // The device is still usable.
    let arena = Arena::new(dev.clone(), plan()?)?;
    assert_eq!(arena.stats().device.alloc_calls, 1);
    assert_eq!(arena.stats().device.failed_allocs, 2);
    drop(arena);
    drop(dev);
    s.assert_clean();
    println!("reservation: 2 allocation faults injected, 2 typed errors, 0 leaks");
    Ok(())
}

#[test]
fn kernel_launch_failures_anywhere_in_a_step() -> Result<()> {
    let mut rig = Rig::new()?;
    let launches = rig.per_step("kernel_launches")?;
    let n = sweep(
        &mut rig,
        launches,
        |k| sim().fail_launch(k, AICORE_EXCEPTION),
        |e| {
            assert!(
                matches!(e, Error::Acl { code: AICORE_EXCEPTION, op, .. } if op.starts_with("aclrtlaunch_ta_")),
                "{e}"
            )
        },
        // Kernels run before the update phase.
        |_| true,
    )?;
    assert_eq!(sim().counter("injected_launch_failures"), n);
    rig.finish();
    println!(
        "kernel launches: {n} faults injected (one per launch of a step), {n} typed errors, 0 leaks"
    );
    Ok(())
}

#[test]
fn operator_failures_anywhere_in_a_step() -> Result<()> {
    let mut rig = Rig::new()?;
    let ops = rig.per_step("aclnn_ops")?;
    // The last four operators are the AdamW updates.
    let n = sweep(
        &mut rig,
        ops,
        |k| sim().fail_op(k, ACLNN_RUNTIME),
        |e| {
            assert!(
                matches!(e, Error::Acl { code: ACLNN_RUNTIME, op, .. } if op.starts_with("aclnn")),
                "{e}"
            )
        },
        |k| k + 4 <= ops,
    )?;
    assert_eq!(sim().counter("injected_op_failures"), n);
    rig.finish();
    println!(
        "aclnn operators: {n} faults injected (one per operator of a step), {n} typed errors, 0 leaks"
    );
    Ok(())
}

#[test]
fn copy_failures_anywhere_in_a_step() -> Result<()> {
    let mut rig = Rig::new()?;
    let copies = rig.per_step("aclrtMemcpy")?;
    // The last copy writes Adam's step number: before any update runs.
    let n = sweep(
        &mut rig,
        copies,
        |k| sim().fail_memcpy(k, COPY_DATA),
        |e| {
            assert!(
                matches!(e, Error::Acl { code: COPY_DATA, op, .. } if op == "aclrtMemcpy"),
                "{e}"
            )
        },
        |_| true,
    )?;
    assert_eq!(sim().counter("injected_memcpy_failures"), n);
    rig.finish();
    println!("copies: {n} faults injected (one per copy of a step), {n} typed errors, 0 leaks");
    Ok(())
}

#[test]
fn asynchronous_failures_surface_at_the_next_synchronisation() -> Result<()> {
    let mut rig = Rig::new()?;
    let syncs = rig.per_step("aclrtSynchronizeStream")?;
    let n = sweep(
        &mut rig,
        syncs,
        |k| sim().fail_sync(k, AICORE_EXCEPTION),
        |e| {
            assert!(
                matches!(e, Error::Acl { code: AICORE_EXCEPTION, op, .. } if op == "aclrtSynchronizeStream"),
                "{e}"
            )
        },
        |_| true,
    )?;
    assert_eq!(sim().counter("injected_sync_failures"), n);
    rig.finish();
    println!(
        "stream synchronisations: {n} faults injected (one per synchronisation of a step), {n} typed errors, 0 leaks"
    );
    Ok(())
}

#[test]
fn launch_buffer_failures_anywhere_in_a_step() -> Result<()> {
    let mut rig = Rig::new()?;
    let launches = rig.per_step("launch_mallocs")?;
    let n = sweep(
        &mut rig,
        launches,
        |k| sim().fail_launch_malloc(k, OOM),
        |e| {
            assert!(
                matches!(e, Error::Acl { code: OOM, op, .. } if op.starts_with("aclrtlaunch_ta_")),
                "{e}"
            )
        },
        |_| true,
    )?;
    assert_eq!(sim().counter("injected_launch_malloc_failures"), n);
    rig.finish();
    println!(
        "launch stub buffers: {n} faults injected (one per launch of a step), {n} typed errors, 0 leaks"
    );
    Ok(())
}

#[test]
fn refused_repeatable_executors_anywhere_in_a_first_step_change_nothing() -> Result<()> {
    // The reference: a first step with every executor made repeatable.
    let mut clean = Rig::new()?;
    let before = sim().counter("repeatable_executors");
    clean.step()?;
    let calls = sim().counter("repeatable_executors") - before;
    let want = clean.weights()?;
    clean.finish();
    assert!(calls > 0);
    for k in 1..=calls {
        let mut rig = Rig::new()?;
        sim().refuse_repeatable(k);
        rig.step()?;
        assert_eq!(sim().counter("refused_repeatable"), 1, "refusal {k}");
        assert_eq!(
            rig.weights()?,
            want,
            "the refused call ran once, with the same result"
        );
        assert_eq!(rig.backend.device().executor_stats().refused, 1);
        rig.finish();
    }
    println!(
        "executor refusals: {calls} injected (one per operator call of a first step), 0 errors, same weights, 0 leaks"
    );
    Ok(())
}
