//! The main example's `--record N` and `--specs FILE` paths, shortened: the
//! plan learned from N recorded training steps and one held-out pass holds
//! every later step of both modes with zero allocation, the learned specs
//! are the hand-written ones, and the training is bit for bit the
//! hand-written path's: one model, written once, on both step types.

#[path = "../examples/mask_and_train/backend.rs"]
#[allow(dead_code)]
mod backend;
#[path = "../examples/mask_and_train/data.rs"]
mod data;
#[path = "../examples/mask_and_train/model.rs"]
#[allow(dead_code)]
mod model;
#[path = "../examples/mask_and_train/record_train.rs"]
mod record_train;
#[path = "../examples/mask_and_train/train.rs"]
#[allow(dead_code)]
mod train;

use record_train::{Note, Source};
use tensor_arena::ops::bit_mask_bytes;
use tensor_arena::record::SpecLifetime;
use tensor_arena::{CountingAllocator, DType, Plan, SpecSet};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

/// The configuration of `tests/mask_and_train.rs`, shorter still.
fn small(seed: u64) -> train::Config {
    let mut cfg = train::Config::new(60, 16, seed);
    cfg.train_samples = 600;
    cfg.eval_samples = 200;
    cfg.sizes.max_len = 32;
    cfg.sizes.hidden = 32;
    cfg.log_every = 20;
    cfg.eval_every = 30;
    cfg.eval_batch = 64;
    cfg.hyper.lr = 1e-2;
    cfg
}

/// Held-out batches per evaluation pass.
fn eval_batches(cfg: &train::Config) -> u64 {
    cfg.eval_samples.div_ceil(cfg.eval_batch) as u64
}

#[test]
fn a_plan_learned_from_recorded_steps_trains_like_the_hand_written_one() -> tensor_arena::Result<()>
{
    let cfg = small(11);
    let record = 4;
    let mut plans: Vec<Plan> = Vec::new();
    let mut learned: Vec<(SpecSet, u64)> = Vec::new();
    let (rec, stats) = record_train::train_recorded(
        &cfg,
        Source::Record(record),
        |e| {
            if let train::Event::Plan(p) = e {
                plans.push(p.clone());
            }
        },
        |n| match n {
            Note::Specs(specs, steps) => learned.push((specs.clone(), steps)),
            Note::Rerecord(e) => panic!("unexpected re-plan: {e}"),
        },
    )?;

    // Learned once, from the first `record` training steps and one
    // held-out pass; everything after is steady state, in both modes, and
    // allocates nothing.
    let probe = eval_batches(&cfg);
    assert_eq!(
        (stats.recorded_steps, stats.plans),
        (record as u64 + probe, 1)
    );
    assert!(stats.pool_allocations > 0 && stats.pool_requests > 0);
    let evals = (cfg.steps / cfg.eval_every) as u64 * probe;
    assert_eq!(rec.steady_steps, (cfg.steps - record) as u64 + evals);
    assert_eq!(rec.steady_heap_allocs, 0, "heap allocations after freezing");
    assert_eq!(
        rec.steady_device_allocs, 0,
        "device allocations after freezing"
    );
    assert!(rec.memory_summary.contains("device malloc calls: 1"));

    // The learned specs: the temporaries of the hand-written model, at the
    // largest batch and bucketed length, with its lifetimes.
    let [(specs, steps)] = &learned[..] else {
        panic!("specs reported {} times", learned.len());
    };
    assert_eq!(*steps, record as u64 + probe);
    let (b, l, f, h) = (16, 32, cfg.sizes.features, cfg.sizes.hidden);
    let eb = cfg.eval_batch;
    let phases = |first, last| SpecLifetime::Phases { first, last };
    for (mode, name, shape, lifetime, dtype) in [
        ("train", "x", vec![b * l, f], phases(0, 1), DType::F32),
        (
            "train",
            "input_keep_mask",
            vec![b * l, f],
            phases(0, 0),
            DType::U8,
        ),
        ("train", "h", vec![b * l, h], phases(0, 1), DType::F32),
        (
            "train",
            "h.keep_bits",
            vec![bit_mask_bytes(b * l * h)],
            phases(0, 1),
            DType::U8,
        ),
        ("train", "dh", vec![b * l, h], phases(1, 1), DType::F32),
        ("train", "w1.grad", vec![f, h], phases(1, 2), DType::F32),
        ("train", "token_mask", vec![b * l], phases(0, 1), DType::F32),
        (
            "train",
            "onehot",
            vec![b, cfg.sizes.classes],
            phases(0, 1),
            DType::F32,
        ),
        (
            "train",
            "logits",
            vec![b, cfg.sizes.classes],
            phases(0, 0),
            DType::F32,
        ),
        ("eval", "x", vec![eb * l, f], phases(0, 0), DType::F32),
        ("eval", "h", vec![eb * l, h], phases(0, 0), DType::F32),
    ] {
        let e = specs
            .get_in(Some(mode), name)
            .map(|e| (e.shape.clone(), e.lifetime, e.dtype));
        assert_eq!(e, Some((shape, lifetime, dtype)), "{mode} {name}");
    }
    assert!(specs.get_in(Some("eval"), "input_keep_mask").is_none());
    assert!(specs.get_in(Some("eval"), "h.keep_bits").is_none());
    let plan = &plans[0];
    let text = plan.to_string();
    assert!(
        text.contains(&format!("recorded, {} steps", record as u64 + probe)),
        "{text}"
    );
    assert!(text.contains("24 of 37 learned by recording"), "{text}");

    // The hand-written specs give a plan of the same size, and the same
    // training, bit for bit.
    let mut declared = None;
    let hand = train::train_arena(&cfg, |e| {
        if let train::Event::Plan(p) = e {
            declared = Some(p.clone());
        }
    })?;
    assert_eq!(declared.map(|p| p.slab_bytes()), Some(plan.slab_bytes()));
    assert_eq!(hand.window_losses, rec.window_losses);
    assert_eq!(hand.checksum.to_bits(), rec.checksum.to_bits());
    assert_eq!(hand.eval_accuracy, rec.eval_accuracy);
    assert!(rec.last_loss < rec.first_loss);

    // Production: the learned specs from a file, no recording step.
    let text = specs.to_toml()?;
    let (pre, stats) = record_train::train_recorded(
        &cfg,
        Source::Preload(SpecSet::from_toml(&text)?),
        |_| {},
        |_| {},
    )?;
    assert_eq!(stats.recorded_steps, 0);
    assert_eq!(pre.steady_steps, cfg.steps as u64 + evals);
    assert_eq!((pre.steady_heap_allocs, pre.steady_device_allocs), (0, 0));
    assert_eq!(pre.checksum.to_bits(), hand.checksum.to_bits());
    Ok(())
}

#[test]
fn a_step_beyond_the_learned_plan_is_recorded_again() -> tensor_arena::Result<()> {
    let cfg = small(3);
    // A plan learned with shorter sequences than the data has: the first
    // longer batch is refused, recorded again, and the recorder re-plans.
    let mut short = SpecSet::default();
    let (_, _) = record_train::train_recorded(
        &cfg,
        Source::Record(1),
        |_| {},
        |n| {
            if let Note::Specs(s, _) = n {
                short = s.clone();
            }
        },
    )?;
    let buffers: Vec<_> = short
        .buffers()
        .iter()
        .cloned()
        .map(|mut e| {
            if e.shape.first() == Some(&(16 * 32)) {
                e.shape[0] = 16 * 16;
            }
            e
        })
        .collect();
    let short = SpecSet::with_modes(short.phases().to_vec(), short.modes().to_vec(), buffers)?;
    let mut replans = Vec::new();
    let (run, stats) = record_train::train_recorded(
        &cfg,
        Source::Preload(short),
        |_| {},
        |n| {
            if let Note::Rerecord(e) = n {
                replans.push(e.to_string());
            }
        },
    )?;
    assert_eq!(stats.plans, 2, "{replans:?}");
    // The refused training step, recorded again, and a held-out pass.
    assert_eq!(stats.recorded_steps, 1 + eval_batches(&cfg));
    assert!(
        replans[0].contains("site 'x' in mode 'train'")
            && replans[0].contains("exceeds the recorded maximum [256, 32]")
            && replans[0].contains("element-count rule"),
        "{replans:?}"
    );
    // The refused step changed nothing: training matches the plain run.
    let hand = train::train_arena(&cfg, |_| {})?;
    assert_eq!(run.checksum.to_bits(), hand.checksum.to_bits());
    Ok(())
}
