//! Record, then plan, through the public API: learned specs equal the
//! hand-declared ones, maxima and lifetimes unite over steps, frozen steps
//! compute what planned ones do, and misuse is a clear error.

use ndarray::Ix2;
use tensor_arena::ops::gemm;
use tensor_arena::record::{RecordStep, SpecLifetime};
use tensor_arena::{
    DType, Error, HostDevice, Persistent, Phase, Planner, Recorder, ShapeRule, SpecSet,
    plan::PlanReport,
};

type R = tensor_arena::Result<()>;

/// A small model step: sizes vary with `batch` and `len`.
struct Workload {
    bwd: Phase,
    upd: Phase,
    w: Persistent<f32>,
    acc: Persistent<f32>,
}

const F: usize = 24;

impl Workload {
    fn declare(rec: &mut Recorder<HostDevice>) -> tensor_arena::Result<Workload> {
        rec.phase("forward")?;
        let bwd = rec.phase("backward")?;
        let upd = rec.phase("update")?;
        let w = rec.persistent::<f32>("w", &[F, F])?;
        let acc = rec.persistent::<f32>("acc", &[F])?;
        let weights: Vec<f32> = (0..F * F).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
        rec.write(w, &weights)?;
        Ok(Workload { bwd, upd, w, acc })
    }

    /// One step: masks, dropout, a product through views, a gradient kept
    /// from backward to update, and a persistent accumulator.
    fn step(&self, s: &RecordStep<'_, HostDevice>, batch: usize, len: usize) -> R {
        let rows = batch * len;
        let mut x = s.temp::<f32>("x", &[rows, F])?;
        for (i, v) in x.as_mut_slice().iter_mut().enumerate() {
            *v = ((i * 31) % 17) as f32 * 0.125 - 1.0;
        }
        {
            let mut keep = s.temp::<f32>("keep", &[rows, F])?;
            keep.bernoulli_(0.8)?;
            x.apply_mask_(&keep, 1.25)?;
        }
        let w = s.lease(self.w)?;
        let mut h = s.temp::<f32>("h", &[rows, F])?;
        gemm(
            1.0,
            x.view::<Ix2>()?,
            w.view::<Ix2>()?,
            0.0,
            h.view_mut::<Ix2>()?,
        )?;
        let mask = h.dropout_(0.25)?;
        let mut lens = s.temp::<i32>("lens", &[batch])?;
        lens.as_mut_slice().fill(len as i32);
        s.enter(self.bwd)?;
        let mut dh = s.temp::<f32>("dh", &[rows, F])?;
        dh.as_mut_slice().copy_from_slice(h.as_slice());
        dh.dropout_backward_(&mask)?;
        dh.mul_(&h)?;
        dh.mul_scalar_(0.5)?;
        let mut g = s.temp::<f32>("g", &[F])?;
        g.as_mut_slice().fill(0.0);
        for row in dh.as_slice().chunks_exact(F) {
            g.as_mut_slice()
                .iter_mut()
                .zip(row)
                .for_each(|(a, b)| *a += b);
        }
        drop((g, dh, h, x, lens, w));
        s.enter(self.upd)?;
        let g = s.temp::<f32>("g", &[F])?;
        let mut acc = s.lease(self.acc)?;
        acc.as_mut_slice()
            .iter_mut()
            .zip(g.as_slice())
            .for_each(|(a, b)| *a += b);
        Ok(())
    }
}

const SIZES: [(usize, usize); 4] = [(4, 16), (3, 32), (4, 32), (2, 16)];

/// The report without provenance, to compare learned and declared plans.
fn stripped(mut r: PlanReport) -> PlanReport {
    r.buffers.iter_mut().for_each(|b| b.recorded_steps = None);
    r
}

#[test]
fn a_recorded_step_and_a_hand_declared_step_give_the_same_plan() -> R {
    let mut rec = Recorder::new(HostDevice::new());
    let work = Workload::declare(&mut rec)?;
    for (b, l) in SIZES {
        rec.step(|s| work.step(s, b, l))?;
    }
    let learned = rec.freeze()?.clone();

    // The same workload, declared by hand at its largest sizes, in the
    // order the step first asks for each buffer.
    let mut p = Planner::new();
    let fwd = p.phase("forward")?;
    let bwd = p.phase("backward")?;
    let upd = p.phase("update")?;
    p.persistent::<f32>("w", &[F, F])?;
    p.persistent::<f32>("acc", &[F])?;
    p.span::<f32>("x", &[128, F], fwd, bwd)?;
    p.span::<f32>("keep", &[128, F], fwd, fwd)?;
    p.span::<f32>("h", &[128, F], fwd, bwd)?;
    p.span::<i32>("lens", &[4], fwd, bwd)?;
    p.span::<f32>("dh", &[128, F], bwd, bwd)?;
    p.span::<f32>("g", &[F], bwd, upd)?;
    let declared = p.plan()?;

    assert_eq!(stripped(learned.report()), stripped(declared.report()));
    assert_eq!(learned.slab_bytes(), declared.slab_bytes());
    assert_eq!(learned.validate(), Ok(()));
    // Provenance: persistent buffers were declared, the rest learned.
    let origin: Vec<Option<u64>> = learned
        .buffers()
        .iter()
        .map(|b| b.recorded_steps())
        .collect();
    assert_eq!(
        origin,
        [
            None,
            None,
            Some(4),
            Some(4),
            Some(4),
            Some(4),
            Some(4),
            Some(4)
        ]
    );
    let text = learned.to_string();
    assert!(
        text.contains("specs: 6 of 8 learned by recording (4 steps), 2 declared by hand"),
        "{text}"
    );
    assert!(!declared.to_string().contains("origin"));
    Ok(())
}

#[test]
fn sites_are_sized_by_element_count_unless_they_opt_in_per_dimension() -> R {
    let mut rec = Recorder::new(HostDevice::new());
    let fwd = rec.phase("forward")?;
    let bwd = rec.phase("backward")?;
    let m = rec.default_mode();
    rec.per_dimension::<f32>(m, "d")?;
    // (rows, cols) whose per-dimension maxima come from different steps;
    // padded (to 16 columns) they hold 240, 144 and 160 elements.
    let steps = [(5usize, 40usize, false), (9, 12, true), (2, 70, false)];
    for (r, c, late) in steps {
        rec.step(|s| -> R {
            let a = s.temp::<f32>("a", &[r, c])?;
            let d = s.temp::<f32>("d", &[r, c])?;
            let t = s.temp::<u8>("t", &[c])?;
            drop((t, d));
            s.enter(bwd)?;
            // `a` lives into backward only in one step; its span unites.
            if !late {
                drop(a);
            }
            Ok(())
        })?;
    }
    let specs = rec.specs();
    let get = |name: &str| {
        specs
            .get(name)
            .map(|e| (e.shape.clone(), e.lifetime, e.shape_rule))
    };
    // By element count: the request with the most (padded) elements.
    assert_eq!(
        get("a"),
        Some((
            vec![5, 40],
            SpecLifetime::Phases { first: 0, last: 1 },
            ShapeRule::Elements
        ))
    );
    // Opted in: the largest of each dimension.
    assert_eq!(
        get("d"),
        Some((
            vec![9, 70],
            SpecLifetime::Phases { first: 0, last: 0 },
            ShapeRule::Dims
        ))
    );
    assert_eq!(
        specs.get("t").map(|e| (e.shape.clone(), e.dtype)),
        Some((vec![70], DType::U8))
    );
    let plan = rec.freeze()?;
    let padded = |name: &str| {
        let b = plan.buffers().iter().find(|b| b.name() == name);
        b.map(|b| b.padded_shape().to_vec())
    };
    assert_eq!(padded("a"), Some(vec![5, 48]));
    assert_eq!(padded("d"), Some(vec![9, 80]));
    rec.step(|s| -> R {
        // Every shape seen while recording fits, and any shape of no more
        // elements, whatever its dimensions: the one shape rule.
        for (r, c, _) in steps {
            drop(s.temp::<f32>("a", &[r, c])?);
            drop(s.temp::<f32>("d", &[r, c])?);
        }
        drop(s.temp::<f32>("a", &[2, 120])?);
        drop(s.temp::<f32>("a", &[240])?);
        let e = s.temp::<f32>("a", &[241]).unwrap_err();
        assert!(
            matches!(&e, Error::ExceedsRecorded(x) if !x.per_dimension && x.capacity == 240),
            "{e}"
        );
        assert!(e.to_string().contains("element-count rule"), "{e}");
        // The opted-in site refuses a dimension beyond its maximum, and a
        // new rank, though the elements would fit.
        drop(s.temp::<f32>("d", &[9, 80])?);
        for shape in [&[10, 1][..], &[2, 2, 2]] {
            let e = s.temp::<f32>("d", shape).unwrap_err();
            assert!(
                matches!(&e, Error::ExceedsRecorded(x) if x.per_dimension),
                "{e}"
            );
            assert!(e.to_string().contains("per-dimension rule"), "{e}");
        }
        drop(s.temp::<u8>("t", &[1])?);
        Ok(())
    })?;
    let _ = fwd;
    Ok(())
}

#[test]
fn oversize_requests_after_freezing_name_site_maximum_and_shape() -> R {
    let mut rec = Recorder::new(HostDevice::new());
    let w = rec.persistent::<f32>("w", &[8])?;
    rec.write(w, &[1.5; 8])?;
    rec.set_seed(99);
    rec.step(|s| s.temp::<f32>("x", &[6, 20]).map(drop))?;
    rec.freeze()?;
    let err = rec
        .step(|s| s.temp::<f32>("x", &[7, 32]).map(drop))
        .unwrap_err();
    assert_eq!(
        err,
        Error::ExceedsRecorded(Box::new(tensor_arena::ExceedsRecorded {
            site: "x".into(),
            mode: "default".into(),
            requested: vec![7, 32],
            recorded: vec![6, 20],
            padded: vec![6, 32],
            capacity: 192,
            per_dimension: false,
        }))
    );
    let text = err.to_string();
    assert!(
        text.contains("'x'")
            && text.contains("[7, 32]")
            && text.contains("recorded maximum [6, 20]")
            && text.contains("224 elements")
            && text.contains("rerecord"),
        "{text}"
    );
    // Within the padding is within the plan, and so is any shape of no
    // more elements: [7, 20] and a new rank.
    rec.step(|s| s.temp::<f32>("x", &[6, 32]).map(drop))?;
    rec.step(|s| s.temp::<f32>("x", &[7, 20]).map(drop))?;
    rec.step(|s| s.temp::<f32>("x", &[6, 2, 16]).map(drop))?;

    // Re-record, then re-plan: contents and the random stream carry over.
    rec.step(|s| -> R {
        let mut w = s.lease(w)?;
        w.as_mut_slice()[0] = 2.5;
        Ok(())
    })?;
    let rng = rec.rng_state();
    rec.rerecord()?;
    assert!(!rec.is_frozen());
    assert_eq!(rec.rng_state(), rng);
    rec.step(|s| s.temp::<f32>("x", &[7, 32]).map(drop))?;
    let plan = rec.freeze()?;
    assert_eq!(plan.buffers()[1].shape().dims(), &[7, 32]);
    assert_eq!(plan.buffers()[1].recorded_steps(), Some(2));
    let mut back = [0.0; 8];
    rec.read(w, &mut back)?;
    assert_eq!(back, [2.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5]);
    assert_eq!(rec.rng_state(), rng);
    assert_eq!(rec.stats().plans, 2);
    assert_eq!(rec.stats().recorded_steps, 2);
    Ok(())
}

/// Runs `steps` steps of the workload, freezing after `record` of them
/// (never, if `record` is `None`), and returns the accumulator's bits.
fn run_recorded(record: Option<usize>, sizes: &[(usize, usize)]) -> tensor_arena::Result<Vec<u32>> {
    let mut rec = Recorder::new(HostDevice::new());
    let work = Workload::declare(&mut rec)?;
    rec.set_seed(7);
    for (i, &(b, l)) in sizes.iter().enumerate() {
        if record == Some(i) {
            rec.freeze()?;
        }
        rec.step(|s| work.step(s, b, l))?;
    }
    let mut acc = vec![0.0f32; F];
    rec.read(work.acc, &mut acc)?;
    Ok(acc.iter().map(|v| v.to_bits()).collect())
}

#[test]
fn recorded_and_frozen_steps_compute_the_same_bits() -> R {
    let sizes: Vec<(usize, usize)> = SIZES.iter().chain(SIZES.iter()).copied().collect();
    let recorded_only = run_recorded(None, &sizes)?;
    let frozen_half = run_recorded(Some(4), &sizes)?;
    assert_eq!(recorded_only, frozen_half);
    assert!(recorded_only.iter().any(|&b| f32::from_bits(b) != 0.0));

    Ok(())
}

#[test]
fn misuse_is_an_error_not_a_panic() -> R {
    let mut rec = Recorder::new(HostDevice::new());
    let fwd = rec.phase("forward")?;
    let bwd = rec.phase("backward")?;
    let w = rec.persistent::<f32>("w", &[4])?;
    assert!(matches!(rec.phase("w"), Err(Error::DuplicateName { .. })));
    assert!(matches!(
        rec.persistent::<f32>("forward", &[4]),
        Err(Error::DuplicateName { .. })
    ));
    assert!(matches!(
        rec.persistent::<i32>("w", &[4]),
        Err(Error::DuplicateName { .. })
    ));
    assert_eq!(
        rec.persistent::<f32>("w", &[4])?,
        w,
        "same declaration, same handle"
    );
    rec.step(|s| -> R {
        let a = s.temp::<f32>("a", &[3, 4])?;
        assert!(matches!(
            s.temp::<f32>("a", &[3, 4]),
            Err(Error::AlreadyLeased { .. })
        ));
        drop(a);
        assert!(matches!(
            s.temp::<i32>("a", &[3, 4]),
            Err(Error::DTypeMismatch { .. })
        ));
        // By element count a site may change its number of dimensions.
        drop(s.temp::<f32>("a", &[12])?);
        assert!(matches!(
            s.temp::<f32>("b", &[0]),
            Err(Error::EmptyShape { .. })
        ));
        assert!(matches!(s.temp::<f32>("", &[1]), Err(Error::EmptyName)));
        assert!(matches!(
            s.temp::<f32>("forward", &[1]),
            Err(Error::DuplicateName { .. })
        ));
        let e = s.temp::<f32>("w", &[4]).unwrap_err();
        assert!(e.to_string().contains("persistent"), "{e}");
        s.enter(bwd)?;
        assert!(matches!(s.enter(fwd), Err(Error::PhaseOrder { .. })));
        let mut other = Planner::new();
        let foreign = other.phase("forward")?;
        assert!(matches!(s.enter(foreign), Err(Error::ForeignPhase { .. })));
        // A view within the request's own padded shape, not beyond.
        let mut a = s.temp::<f32>("a", &[3, 4])?;
        a.set_shape(&[3, 16])?;
        assert!(matches!(
            a.set_shape(&[3, 17]),
            Err(Error::ViewTooLarge { .. })
        ));
        Ok(())
    })?;
    // Failed requests recorded nothing: 'b' and the f32/i32 mix are absent.
    let specs = rec.specs();
    assert!(specs.get("b").is_none());
    assert_eq!(specs.get("a").map(|e| e.dtype), Some(DType::F32));

    let mut other = Recorder::new(HostDevice::new());
    let foreign = other.persistent::<f32>("w", &[4])?;
    assert!(matches!(
        rec.write(foreign, &[0.0; 4]),
        Err(Error::ForeignHandle { .. })
    ));
    // Whole-buffer copies must match the shape; prefixes fit the capacity.
    let e = rec.write(w, &[0.0; 3]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::CopyLength {
                given: 3,
                expected: 4,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("write_prefix"), "{e}");
    rec.write_prefix(w, &[0.0; 3])?;
    assert!(matches!(
        rec.write_prefix(w, &[0.0; 17]),
        Err(Error::ViewTooLarge { .. })
    ));
    assert!(matches!(
        rec.read(w, &mut [0.0; 5]),
        Err(Error::CopyLength { .. })
    ));

    rec.freeze()?;
    rec.step(|s| -> R {
        let e = s.temp::<f32>("never", &[1]).unwrap_err();
        assert_eq!(
            e,
            Error::UnrecordedSite {
                site: "never".into(),
                mode: "default".into(),
            }
        );
        assert!(
            e.to_string()
                .contains("never requested in mode 'default' while recording"),
            "{e}"
        );
        assert!(matches!(
            s.temp::<u8>("a", &[3, 4]),
            Err(Error::DTypeMismatch { .. })
        ));
        assert!(matches!(
            s.temp::<f32>("a", &[0, 4]),
            Err(Error::EmptyShape { .. })
        ));
        assert!(matches!(s.lease(foreign), Err(Error::ForeignHandle { .. })));
        let x = s.temp::<f32>("a", &[3, 4])?;
        assert!(!x.is_recording() && x.as_lease().is_some());
        Ok(())
    })?;
    let e = rec.persistent::<f32>("late", &[4]).unwrap_err();
    assert!(e.to_string().contains("frozen"), "{e}");
    assert!(matches!(
        rec.preload(&SpecSet::default()),
        Err(Error::InvalidSpecs { .. })
    ));
    Ok(())
}

#[test]
fn operands_from_different_recorders_do_not_mix() -> R {
    let mut a = Recorder::new(HostDevice::new());
    let mut b = Recorder::new(HostDevice::new());
    a.step(|sa| -> R {
        b.step(|sb| -> R {
            let mut x = sa.temp::<f32>("x", &[4])?;
            let y = sb.temp::<f32>("y", &[4])?;
            assert!(matches!(x.mul_(&y), Err(Error::ArenaMismatch { .. })));
            let z = sa.temp::<f32>("z", &[5])?;
            assert!(matches!(
                x.apply_mask_(&z, 1.0),
                Err(Error::ShapeMismatch { .. })
            ));
            Ok(())
        })
    })
}

#[test]
fn without_phases_every_site_lives_a_whole_step() -> R {
    let mut rec = Recorder::new(HostDevice::new());
    rec.step(|s| -> R {
        s.temp::<f32>("a", &[10])?;
        s.temp::<f32>("b", &[10])?;
        assert_eq!(s.phase(), "step");
        Ok(())
    })?;
    let specs = rec.specs();
    assert!(
        specs
            .buffers()
            .iter()
            .all(|e| e.lifetime == SpecLifetime::Step)
    );
    let plan = rec.freeze()?;
    assert_ne!(plan.buffers()[0].offset(), plan.buffers()[1].offset());
    Ok(())
}

#[test]
fn preloaded_specs_plan_without_a_recording_step() -> R {
    let mut first = Recorder::new(HostDevice::new());
    let work = Workload::declare(&mut first)?;
    for (b, l) in SIZES {
        first.step(|s| work.step(s, b, l))?;
    }
    let text = first.specs().to_toml()?;
    let learned = first.freeze()?.report();

    // Production: same startup code, specs from the file, no recording.
    let mut rec = Recorder::new(HostDevice::new());
    let work = Workload::declare(&mut rec)?;
    rec.preload(&SpecSet::from_toml(&text)?)?;
    let plan = rec.freeze()?.report();
    assert_eq!(plan, learned);
    assert_eq!(rec.stats().recorded_steps, 0);
    assert_eq!(rec.stats().learned_steps, 4);
    for (b, l) in SIZES {
        rec.step(|s| work.step(s, b, l))?;
    }

    // Phases must agree.
    let mut odd = Recorder::new(HostDevice::new());
    odd.phase("forward")?;
    let e = odd.preload(&SpecSet::from_toml(&text)?).unwrap_err();
    assert!(e.to_string().contains("phases"), "{e}");
    Ok(())
}

#[test]
fn the_recorder_learns_each_mode_apart() -> R {
    let mut rec = Recorder::new(HostDevice::new());
    let train = rec.mode("train")?;
    let eval = rec.mode("eval")?;
    let fwd = rec.phase_in(train, "forward")?;
    let bwd = rec.phase_in(train, "backward")?;
    rec.phase_in(eval, "forward")?;
    assert!(matches!(rec.mode("eval"), Err(Error::DuplicateName { .. })));
    let w = rec.persistent::<f32>("w", &[32])?;
    for batch in [4, 16] {
        rec.step_in(train, |s| -> R {
            drop(s.lease(w)?);
            let h = s.temp::<f32>("h", &[batch, 32])?;
            s.enter(bwd)?;
            let g = s.temp::<f32>("g", &[batch, 32])?;
            drop((h, g));
            // Phases only move forward, in a mode as without one.
            assert!(matches!(s.enter(fwd), Err(Error::PhaseOrder { .. })));
            Ok(())
        })?;
    }
    // The same site name in eval: its own site, its own size.
    rec.step_in(eval, |s| -> R {
        let e = s.enter(bwd).unwrap_err();
        assert!(matches!(e, Error::WrongMode { what: "phase", .. }), "{e}");
        s.temp::<f32>("h", &[256, 32]).map(drop)
    })?;
    let specs = rec.specs();
    let h_train = specs.get_in(Some("train"), "h").map(|e| e.shape.clone());
    let h_eval = specs.get_in(Some("eval"), "h").map(|e| e.shape.clone());
    assert_eq!((h_train, h_eval), (Some(vec![16, 32]), Some(vec![256, 32])));
    assert_eq!(specs.modes().len(), 2);
    let plan = rec.freeze()?.clone();
    // Eval's h shares bytes with train's h and g: the modes never run together.
    let by_name = |mode: Option<usize>, name: &str| {
        plan.buffers()
            .iter()
            .find(|b| b.mode() == mode && b.name() == name)
            .map(|b| b.range())
    };
    let eh = by_name(Some(2), "h").ok_or(Error::EmptyPlan)?;
    let th = by_name(Some(1), "h").ok_or(Error::EmptyPlan)?;
    assert!(eh.start < th.end && th.start < eh.end, "{eh:?} {th:?}");
    // Frozen: each mode serves its own sizes and refuses the other's.
    rec.step_in(train, |s| -> R {
        let e = s.temp::<f32>("h", &[256, 32]).unwrap_err();
        assert!(
            matches!(&e, Error::ExceedsRecorded(x) if x.mode == "train"),
            "{e}"
        );
        let e = s.temp::<f32>("x", &[1]).unwrap_err();
        assert!(e.to_string().contains("in mode 'train'"), "{e}");
        Ok(())
    })?;
    rec.step_in(eval, |s| s.temp::<f32>("h", &[256, 32]).map(drop))?;
    // A spec file carries the modes; a recorder with the same modes
    // preloads it, one with other modes refuses it.
    let text = specs.to_toml()?;
    assert!(
        text.contains("[[mode]]") && text.contains("mode = \"eval\""),
        "{text}"
    );
    let mut again = Recorder::new(HostDevice::new());
    let t2 = again.mode("train")?;
    let e2 = again.mode("eval")?;
    again.phase_in(t2, "forward")?;
    again.phase_in(t2, "backward")?;
    again.phase_in(e2, "forward")?;
    again.persistent::<f32>("w", &[32])?;
    again.preload(&SpecSet::from_toml(&text)?)?;
    assert_eq!(again.freeze()?.slab_bytes(), plan.slab_bytes());
    let mut other = Recorder::new(HostDevice::new());
    other.mode("train")?;
    let e = other.preload(&SpecSet::from_toml(&text)?).unwrap_err();
    assert!(e.to_string().contains("modes"), "{e}");
    let foreign = Planner::new().default_mode();
    assert!(matches!(
        rec.step_in(foreign, |_| Ok::<_, Error>(())),
        Err(Error::ForeignMode { .. })
    ));
    Ok(())
}

#[test]
fn bounds_declared_up_front_need_not_be_recorded() -> R {
    let mut rec = Recorder::new(HostDevice::new());
    let m = rec.default_mode();
    // The worst case: 32 sequences of 128, flattened; a per-dimension site
    // bounded at [32, 128, 128].
    rec.bound::<f32>(m, "flat", &[32 * 128, 64])?;
    rec.per_dimension::<f32>(m, "att")?;
    rec.bound::<f32>(m, "att", &[32, 128, 128])?;
    assert!(matches!(
        rec.bound::<i32>(m, "flat", &[1, 1]),
        Err(Error::DTypeMismatch { .. })
    ));
    // Steps with the batch maximum and the sequence maximum apart.
    for (b, l) in [(32, 17), (1, 128)] {
        rec.step(|s| -> R {
            drop(s.temp::<f32>("flat", &[b * l, 64])?);
            drop(s.temp::<f32>("att", &[b, l, l])?);
            Ok(())
        })?;
    }
    let specs = rec.specs();
    assert_eq!(
        specs.get("flat").map(|e| e.shape.clone()),
        Some(vec![32 * 128, 64])
    );
    let att = specs.get("att").map(|e| (e.shape.clone(), e.shape_rule));
    assert_eq!(att, Some((vec![32, 128, 128], ShapeRule::Dims)));
    let e = rec.per_dimension::<f32>(m, "flat").unwrap_err();
    assert!(
        e.to_string().contains("before the site's first request"),
        "{e}"
    );
    rec.freeze()?;
    // The never-recorded combination fits: it is within the bounds.
    rec.step(|s| -> R {
        drop(s.temp::<f32>("flat", &[32 * 128, 64])?);
        drop(s.temp::<f32>("att", &[32, 128, 128])?);
        let e = s.temp::<f32>("att", &[2, 130, 130]).unwrap_err();
        assert!(
            matches!(&e, Error::ExceedsRecorded(x) if x.per_dimension),
            "{e}"
        );
        Ok(())
    })?;
    // A bounded site never requested is planned for the whole step.
    let mut rec = Recorder::new(HostDevice::new());
    let m = rec.default_mode();
    rec.phase("forward")?;
    rec.bound::<u8>(m, "spare", &[100])?;
    rec.freeze()?;
    rec.step(|s| s.temp::<u8>("spare", &[50]).map(drop))?;
    let spare = rec
        .specs()
        .get("spare")
        .map(|e| (e.lifetime, e.recorded_steps));
    assert_eq!(spare, Some((SpecLifetime::Step, None)));
    Ok(())
}
