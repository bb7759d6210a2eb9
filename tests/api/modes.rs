//! Modes: train, eval, ... in one plan and one arena.
//!
//! Property tests over random modes and phases: buffers alive together
//! (in one mode, in intersecting phases, or persistent) never share a
//! byte; the slab is the persistent part plus the largest mode; no step of
//! any mode clobbers a persistent buffer or a live lease; a buffer or phase
//! of another mode is refused. Then the mode API case by case.

use proptest::prelude::*;
use tensor_arena::plan::LifetimeKind;
use tensor_arena::{
    Arena, ArenaOptions, BufferId, BufferSpec, Error, HostDevice, Lifetime, Mode, Phase, Plan,
    Planner, ShapeRule,
};

type R = tensor_arena::Result<()>;

/// A random planner: phases of the default mode and of 1 to 3 named
/// modes, and buffers of every kind in random modes.
#[derive(Debug, Clone)]
struct Case {
    /// Phases per mode, the default mode first.
    phases: Vec<usize>,
    /// (kind: 0 persistent, 1 step, 2 span; mode; span ends; elements).
    specs: Vec<(u8, usize, (usize, usize), usize)>,
    /// Steps: (mode, actions); an action leases a buffer (`Ok(i)`) or
    /// enters a phase of the step's mode (`Err(k)`).
    steps: Vec<(usize, Vec<std::result::Result<usize, usize>>)>,
    checked: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (prop::collection::vec(0usize..4, 2..5), any::<bool>()).prop_flat_map(|(phases, checked)| {
        let modes = phases.len();
        let specs = prop::collection::vec(
            (0u8..3, 0..modes, (0usize..4, 0usize..4), 1usize..3000),
            1..24,
        );
        let action = prop_oneof![
            3 => (0usize..64).prop_map(Ok),
            1 => (0usize..4).prop_map(Err),
        ];
        let steps = prop::collection::vec((0..modes, prop::collection::vec(action, 0..12)), 1..10);
        (Just(phases), specs, steps, Just(checked)).prop_map(|(phases, specs, steps, checked)| {
            Case {
                phases,
                specs,
                steps,
                checked,
            }
        })
    })
}

struct Built {
    plan: Plan,
    modes: Vec<Mode>,
    phases: Vec<Vec<Phase>>,
    ids: Vec<BufferId>,
}

fn build(c: &Case) -> tensor_arena::Result<Built> {
    let mut p = Planner::new();
    let mut modes = vec![p.default_mode()];
    for k in 1..c.phases.len() {
        modes.push(p.mode(&format!("m{k}"))?);
    }
    let mut phases = Vec::new();
    for (k, &n) in c.phases.iter().enumerate() {
        phases.push(
            (0..n)
                .map(|j| p.phase_in(modes[k], &format!("p{j}")))
                .collect::<tensor_arena::Result<Vec<_>>>()?,
        );
    }
    let mut ids = Vec::new();
    for (i, &(kind, m, (a, b), n)) in c.specs.iter().enumerate() {
        let name = format!("b{i}");
        let spec = BufferSpec::of::<f32>(name, &[n]);
        let spec = match (kind, phases[m].len()) {
            (0, _) => spec.lifetime(Lifetime::Persistent),
            (1, _) | (_, 0) => spec.lifetime(Lifetime::Step).mode(modes[m]),
            (_, len) => {
                let (a, b) = (a % len, b % len);
                spec.lifetime(Lifetime::span(phases[m][a.min(b)], phases[m][a.max(b)]))
            }
        };
        ids.push(p.declare_dyn(spec)?);
    }
    Ok(Built {
        plan: p.plan()?,
        modes,
        phases,
        ids,
    })
}

/// Whether buffers `i` and `j` of `plan` can be alive at the same time.
fn alive_together(plan: &Plan, i: usize, j: usize) -> bool {
    let (a, b) = (&plan.buffers()[i], &plan.buffers()[j]);
    if a.lifetime() == LifetimeKind::Persistent || b.lifetime() == LifetimeKind::Persistent {
        return true;
    }
    let ((a0, a1), (b0, b1)) = (a.phases(), b.phases());
    a.mode() == b.mode() && a0 <= b1 && b0 <= a1
}

fn tag(i: usize, step: usize) -> f32 {
    (i * 1000 + step) as f32
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn modes_share_bytes_only_when_never_alive_together(c in case()) {
        let b = build(&c).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let plan = &b.plan;
        plan.validate()?;
        let bufs = plan.buffers();
        for i in 0..bufs.len() {
            for j in i + 1..bufs.len() {
                let (x, y) = (bufs[i].range(), bufs[j].range());
                let share = x.start < y.end && y.start < x.end;
                prop_assert!(
                    !(share && alive_together(plan, i, j)),
                    "b{} and b{} are alive together and share bytes", i, j
                );
            }
        }
        // The slab: the persistent part and the largest mode, each mode
        // within its footprint and at least its lower bound.
        let largest = plan.modes().iter().map(|m| m.footprint()).max().unwrap_or(0);
        prop_assert_eq!(plan.slab_bytes(), largest.max(plan.persistent_bytes()));
        for m in plan.modes() {
            prop_assert!(m.lower_bound() <= m.footprint());
            prop_assert!(m.footprint() <= plan.slab_bytes());
            prop_assert!(m.lower_bound() >= plan.persistent_bytes());
        }
        let bound = plan.modes().iter().map(|m| m.lower_bound()).max().unwrap_or(0);
        prop_assert_eq!(plan.lower_bound(), bound.max(plan.persistent_bytes()));
    }

    #[test]
    fn steps_of_every_mode_respect_each_other(c in case()) {
        let b = build(&c).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let bufs = b.plan.buffers().to_vec();
        let options = ArenaOptions { checked: c.checked };
        let mut arena = Arena::with_options(HostDevice::new(), b.plan.clone(), options)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let persistent: Vec<usize> = (0..bufs.len())
            .filter(|&i| bufs[i].lifetime() == LifetimeKind::Persistent)
            .collect();
        for &i in &persistent {
            let data = vec![tag(i, 0); bufs[i].capacity()];
            arena.write_prefix(b.ids[i].typed::<f32>().expect("f32"), &data)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        for (n, (mode, actions)) in c.steps.iter().enumerate() {
            let step = arena.begin_step_in(b.modes[*mode])
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(step.mode(), b.modes[*mode]);
            let mine = b.plan.modes()[*mode].first_slot();
            let mut phase = 0usize;
            let mut held: Vec<(usize, tensor_arena::Lease<'_, f32, HostDevice>)> = Vec::new();
            for action in actions {
                match *action {
                    Ok(k) => {
                        let i = k % bufs.len();
                        let buf = &bufs[i];
                        let other_mode = buf.mode().is_some_and(|m| m != *mode);
                        let (first, last) = buf.phases();
                        let in_phase = buf.lifetime() != LifetimeKind::Phases
                            || (first..=last).contains(&(mine + phase));
                        let already = held.iter().any(|(h, _)| *h == i);
                        let got = step.lease_dyn::<f32>(b.ids[i]);
                        match got {
                            Ok(mut lease) => {
                                prop_assert!(!other_mode && in_phase && !already, "b{} granted", i);
                                if buf.lifetime() == LifetimeKind::Persistent {
                                    // Read, never written: every mode shares it.
                                    prop_assert!(lease.as_slice().iter().all(|&v| v == tag(i, 0)));
                                } else {
                                    let cap = lease.capacity();
                                    lease.set_shape(&[cap]).expect("capacity fits");
                                    lease.as_mut_slice().fill(tag(i, n + 1));
                                    held.push((i, lease));
                                }
                            }
                            Err(Error::WrongMode { what: "buffer", .. }) => prop_assert!(other_mode),
                            Err(Error::OutsidePhase { .. }) => prop_assert!(!other_mode && !in_phase),
                            Err(Error::AlreadyLeased { .. }) => prop_assert!(already),
                            Err(e) => prop_assert!(false, "unexpected {}", e),
                        }
                    }
                    Err(k) => {
                        // A phase of another mode is refused.
                        if let Some(other) = (0..b.phases.len()).find(|&m| m != *mode && !b.phases[m].is_empty()) {
                            let e = step.enter(b.phases[other][0]);
                            prop_assert!(matches!(e, Err(Error::WrongMode { what: "phase", .. })), "{:?}", e);
                        }
                        let own = &b.phases[*mode];
                        if own.is_empty() {
                            continue;
                        }
                        let target = k % own.len();
                        if target < phase {
                            continue;
                        }
                        // Drop what ends before the target, as a model would.
                        held.retain(|(h, _)| {
                            bufs[*h].lifetime() != LifetimeKind::Phases || bufs[*h].phases().1 >= mine + target
                        });
                        step.enter(own[target]).map_err(|e| TestCaseError::fail(e.to_string()))?;
                        phase = target;
                    }
                }
                for (h, lease) in &held {
                    prop_assert!(lease.as_slice().iter().all(|&v| v == tag(*h, n + 1)), "b{} clobbered", h);
                }
            }
            drop(held);
            drop(step);
        }
        for &i in &persistent {
            let mut back = vec![0.0f32; bufs[i].capacity()];
            arena.read_prefix(b.ids[i].typed::<f32>().expect("f32"), &mut back)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(back.iter().all(|&v| v == tag(i, 0)), "persistent b{} clobbered", i);
        }
        prop_assert!(arena.take_violations().is_empty());
    }
}

/// Train (two phases) and eval (one) sharing a weight.
fn train_and_eval() -> tensor_arena::Result<(Planner, Mode, Mode, Phase, Phase, Phase)> {
    let mut p = Planner::new();
    let train = p.mode("train")?;
    let eval = p.mode("eval")?;
    let fwd = p.phase_in(train, "forward")?;
    let bwd = p.phase_in(train, "backward")?;
    let efwd = p.phase_in(eval, "forward")?;
    p.persistent::<f32>("w", &[64])?;
    p.span::<f32>("h", &[32, 64], fwd, bwd)?;
    p.span::<f32>("g", &[32, 64], bwd, bwd)?;
    p.span::<f32>("h", &[256, 64], efwd, efwd)?;
    Ok((p, train, eval, fwd, bwd, efwd))
}

#[test]
fn a_step_runs_in_one_mode_and_names_both_when_refusing() -> R {
    let (mut p, train, eval, fwd, _bwd, efwd) = train_and_eval()?;
    let th = p.span::<f32>("t", &[8], fwd, fwd)?;
    let plan = p.plan()?;
    // Eval's h is the largest buffer; train's buffers share its bytes.
    let eval_mode = &plan.modes()[2];
    assert_eq!(eval_mode.name(), "eval");
    assert_eq!(plan.slab_bytes(), eval_mode.footprint());
    let mut arena = Arena::new(HostDevice::new(), plan)?;
    arena.step_in(eval, |s| -> R {
        assert_eq!(s.mode_name(), "eval");
        assert_eq!(s.phase(), "forward");
        let e = s.lease(th).unwrap_err();
        assert_eq!(
            e,
            Error::WrongMode {
                what: "buffer",
                name: "t".into(),
                mode: "train".into(),
                step_mode: "eval".into(),
            }
        );
        assert!(e.to_string().contains("mode 'train'") && e.to_string().contains("mode 'eval'"));
        let e = s.enter(fwd).unwrap_err();
        assert!(matches!(e, Error::WrongMode { what: "phase", .. }), "{e}");
        s.enter(efwd)?;
        // Names are per mode: eval's h, viewed with an eval batch.
        let h = s.temp::<f32>("h", &[256, 64])?;
        assert_eq!(h.len(), 256 * 64);
        let w = s.temp::<f32>("w", &[64]).unwrap_err();
        assert!(w.to_string().contains("persistent"), "{w}");
        let e = s.temp::<f32>("g", &[1]).unwrap_err();
        assert!(
            matches!(&e, Error::NoSuchBuffer { name, mode, .. } if name == "g" && mode == "eval"),
            "{e}"
        );
        Ok(())
    })?;
    arena.step_in(train, |s| -> R {
        let h = s.temp::<f32>("h", &[32, 64])?;
        assert!(
            s.temp::<f32>("h", &[256, 64]).is_err(),
            "train's h is smaller"
        );
        drop(h);
        // The default mode exists and has no buffers of its own.
        Ok(())
    })?;
    arena.step(|s| {
        assert_eq!(s.mode_name(), "default");
        assert!(matches!(
            s.temp::<f32>("h", &[1]),
            Err(Error::NoSuchBuffer { .. })
        ));
    });
    let foreign = Planner::new().default_mode();
    let e = arena.step_in(foreign, |_| Ok::<_, Error>(())).unwrap_err();
    assert!(matches!(e, Error::ForeignMode { .. }), "{e}");
    assert_eq!(arena.stats().steps, 3);
    Ok(())
}

#[test]
fn checked_mode_poisons_the_steps_own_mode() -> R {
    let (p, train, eval, fwd, bwd, efwd) = train_and_eval()?;
    let plan = p.plan()?;
    let mut arena = Arena::with_options(HostDevice::new(), plan, ArenaOptions::checked())?;
    arena.step_in(train, |s| -> R {
        s.enter(fwd)?;
        s.temp::<f32>("h", &[32, 64])?.as_mut_slice().fill(1.0);
        s.enter(bwd)?;
        Ok(())
    })?;
    // The eval buffer sharing train's bytes reads poison, not train's data.
    arena.step_in(eval, |s| -> R {
        s.enter(efwd)?;
        let h = s.temp::<f32>("h", &[256, 64])?;
        assert!(h.as_slice().iter().all(|v| v.is_nan()));
        Ok(())
    })?;
    arena.verify()?;
    Ok(())
}

#[test]
fn modes_report_their_footprint_and_lower_bound() -> R {
    let (p, ..) = train_and_eval()?;
    let plan = p.plan()?;
    let text = plan.to_string();
    assert!(
        text.contains("modes: train (forward -> backward), eval (forward)"),
        "{text}"
    );
    let report = plan.report();
    let names: Vec<&str> = report.modes.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        ["train", "eval"],
        "the unused default mode is left out"
    );
    let train = &report.modes[0];
    // Train: w plus h and g (alive together in backward).
    let slot = |b: usize| plan.buffers()[b].size();
    assert_eq!(train.lower_bound, slot(0) + slot(1) + slot(2));
    assert_eq!(report.modes[1].lower_bound, slot(0) + slot(3));
    assert_eq!(plan.slab_bytes(), report.modes[1].footprint);
    Ok(())
}

#[test]
fn per_dimension_limits_are_opt_in_on_planned_buffers() -> R {
    let mut p = Planner::new();
    let att = p.step::<f32>("att", &[32, 128, 128])?;
    let fixed = p.declare::<f32>(
        BufferSpec::of::<f32>("fixed", &[32, 128, 128]).shape_rule(ShapeRule::Dims),
    )?;
    let plan = p.plan()?;
    assert_eq!(plan.buffer(fixed.id())?.shape_rule(), ShapeRule::Dims);
    let mut arena = Arena::new(HostDevice::new(), plan)?;
    arena.step(|s| -> R {
        // The element-count rule: [2, 130, 130] is a fifteenth of the capacity.
        let mut a = s.lease(att)?;
        a.set_shape(&[2, 130, 130])?;
        a.set_shape(&[32 * 128, 128])?;
        let e = a.set_shape(&[33, 128, 128]).unwrap_err();
        assert!(e.to_string().contains("element-count rule"), "{e}");
        drop(a);
        let mut f = s.lease(fixed)?;
        f.set_shape(&[2, 100, 128])?;
        let e = f.set_shape(&[2, 130, 130]).unwrap_err();
        assert_eq!(
            e,
            Error::ViewExceedsDims {
                buffer: "fixed".into(),
                shape: vec![2, 130, 130],
                padded: vec![32, 128, 128],
                dim: Some(1),
            }
        );
        assert!(e.to_string().contains("per-dimension rule"), "{e}");
        assert!(matches!(
            f.set_shape(&[32 * 128, 128]),
            Err(Error::ViewExceedsDims { dim: None, .. })
        ));
        drop(f);
        // The same rule through the name lookup.
        assert!(matches!(
            s.temp::<f32>("fixed", &[1, 1, 129]),
            Err(Error::ViewExceedsDims { .. })
        ));
        s.temp::<f32>("att", &[1, 1, 129]).map(drop)
    })
}
