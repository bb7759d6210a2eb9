//! Property tests for planner and arena invariants.
//!
//! Plans: for random specs and lifetimes, buffers alive together never share
//! a byte, every offset is aligned, the slab is at least the lower bound and
//! every buffer holds its declared shape with the ACL padding.
//!
//! Arenas: random sequences of lease / reshape / write / drop / phase change
//! / step end, checked against a simple model: the arena grants a lease
//! exactly when the model says it may, live leases never overlap, data in
//! live leases and persistent buffers is never clobbered, stats add up.

use proptest::prelude::*;
use tensor_arena::{
    Arena, BufferSpec, DType, Error, HostDevice, Lease, Lifetime, Phase, Plan, Planner,
    PlannerConfig, Rounding,
};

#[derive(Debug, Clone)]
struct SpecGen {
    dtype: DType,
    shape: Vec<usize>,
    rounding: Rounding,
    /// 0 persistent, 1 step, 2 span
    kind: u8,
    span: (usize, usize),
}

fn spec_strategy(max_dim: usize) -> impl Strategy<Value = SpecGen> {
    (
        prop::sample::select(vec![
            DType::F32,
            DType::F16,
            DType::BF16,
            DType::I32,
            DType::U8,
        ]),
        prop::collection::vec(1usize..max_dim, 1..4),
        prop::sample::select(vec![
            Rounding::None,
            Rounding::Inner16,
            Rounding::Inner32,
            Rounding::Tile16,
            Rounding::Tile32,
        ]),
        0u8..3,
        (0usize..6, 0usize..6),
    )
        .prop_map(|(dtype, shape, rounding, kind, span)| SpecGen {
            dtype,
            shape,
            rounding,
            kind,
            span,
        })
}

/// Declares `specs` on a planner with `phase_count` phases.
fn build(
    specs: &[SpecGen],
    phase_count: usize,
    align: usize,
) -> (Planner, Vec<Phase>, Vec<tensor_arena::BufferId>) {
    let mut p = Planner::with_config(PlannerConfig {
        offset_align: align,
        ..PlannerConfig::default()
    })
    .expect("valid alignment");
    let phases: Vec<Phase> = (0..phase_count)
        .map(|i| p.phase(&format!("p{i}")).expect("fresh phase name"))
        .collect();
    let ids = specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let lifetime = match (s.kind, phases.len()) {
                (0, _) => Lifetime::Persistent,
                (1, _) | (_, 0) => Lifetime::Step,
                _ => {
                    let a = s.span.0 % phases.len();
                    let b = s.span.1 % phases.len();
                    Lifetime::span(phases[a.min(b)], phases[a.max(b)])
                }
            };
            let spec = BufferSpec::new(format!("b{i}"), s.dtype, &s.shape)
                .lifetime(lifetime)
                .rounding(s.rounding);
            p.declare_dyn(spec).expect("valid spec")
        })
        .collect();
    (p, phases, ids)
}

fn check_plan(plan: &Plan, specs: &[SpecGen]) -> Result<(), TestCaseError> {
    plan.validate()?;
    prop_assert!(plan.slab_bytes() >= plan.lower_bound());
    let bufs = plan.buffers();
    for (b, s) in bufs.iter().zip(specs) {
        prop_assert_eq!(b.offset() % plan.offset_align(), 0);
        prop_assert!(b.offset() + b.size() <= plan.slab_bytes());
        let declared: usize = s.shape.iter().product();
        prop_assert!(b.capacity() >= declared);
        let bytes = b.capacity() * s.dtype.size();
        prop_assert!(b.size() >= bytes.div_ceil(32) * 32 + 32);
        prop_assert_eq!(b.shape().dims(), &s.shape[..]);
    }
    for (i, a) in bufs.iter().enumerate() {
        for b in &bufs[i + 1..] {
            let share = a.range().start < b.range().end && b.range().start < a.range().end;
            if share {
                prop_assert!(
                    !a.overlaps_in_time(b),
                    "{} and {} alive together share bytes",
                    a.name(),
                    b.name()
                );
                prop_assert!(a.lifetime() != tensor_arena::plan::LifetimeKind::Persistent);
                prop_assert!(b.lifetime() != tensor_arena::plan::LifetimeKind::Persistent);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn plans_never_overlap_live_buffers(
        specs in prop::collection::vec(spec_strategy(300), 1..40),
        phase_count in 0usize..6,
        align in prop::sample::select(vec![64usize, 128, 512, 4096]),
    ) {
        let (planner, _, _) = build(&specs, phase_count, align);
        let plan = planner.plan().expect("plan");
        check_plan(&plan, &specs)?;
    }
}

#[derive(Debug, Clone)]
enum Op {
    Lease(usize),
    Drop(usize),
    Reshape(usize, usize),
    Write(usize),
    /// `mul_scalar_(2)` on a live lease: the model doubles its tag.
    Scale(usize),
    /// `dropout_(0)` on a live lease: values unchanged, stream advanced.
    Dropout(usize),
    Enter(usize),
    EndStep,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..64).prop_map(Op::Lease),
        2 => (0usize..64).prop_map(Op::Drop),
        1 => (0usize..64, 0usize..10_000).prop_map(|(a, b)| Op::Reshape(a, b)),
        2 => (0usize..64).prop_map(Op::Write),
        1 => (0usize..64).prop_map(Op::Scale),
        1 => (0usize..64).prop_map(Op::Dropout),
        1 => (0usize..8).prop_map(Op::Enter),
        1 => Just(Op::EndStep),
    ]
}

/// A live lease in the model: which buffer, the value it was filled with.
struct Held<'s> {
    buffer: usize,
    tag: f32,
    lease: Lease<'s, f32, HostDevice>,
}

fn run_ops(
    specs: &[SpecGen],
    phase_count: usize,
    ops: &[Op],
    checked: bool,
) -> Result<(), TestCaseError> {
    // f32 everywhere so every lease can be tagged with a value.
    let specs: Vec<SpecGen> = specs
        .iter()
        .map(|s| SpecGen {
            dtype: DType::F32,
            ..s.clone()
        })
        .collect();
    let (planner, phases, ids) = build(&specs, phase_count, 512);
    let plan = planner.plan().expect("plan");
    let bufs = plan.buffers().to_vec();
    let options = tensor_arena::ArenaOptions { checked };
    let mut arena = Arena::with_options(HostDevice::new(), plan, options).expect("arena");
    let mut rng_offset = 0u64;
    let persistent: Vec<usize> = (0..bufs.len())
        .filter(|&i| bufs[i].lifetime() == tensor_arena::plan::LifetimeKind::Persistent)
        .collect();
    for &i in &persistent {
        let h = ids[i].typed::<f32>().expect("f32");
        arena
            .write_prefix(h, &vec![1000.0 + i as f32; bufs[i].capacity()])
            .expect("write");
    }
    let shares = |a: usize, b: usize| {
        let (x, y) = (bufs[a].range(), bufs[b].range());
        x.start < y.end && y.start < x.end
    };
    let mut ops = ops.iter().peekable();
    let mut next_tag = 0.0f32;
    let mut expected_leases = 0u64;
    let mut touched = vec![false; bufs.len()];
    while ops.peek().is_some() {
        let step = arena.begin_step();
        let mut phase = 0usize;
        let mut held: Vec<Held<'_>> = Vec::new();
        for op in ops.by_ref() {
            match *op {
                Op::EndStep => break,
                Op::Lease(k) => {
                    let i = k % bufs.len();
                    let (first, last) = bufs[i].phases();
                    let in_phase = bufs[i].lifetime() != tensor_arena::plan::LifetimeKind::Phases
                        || (first..=last).contains(&phase);
                    let free = held.iter().all(|h| h.buffer != i && !shares(h.buffer, i));
                    let got = step.lease_dyn::<f32>(ids[i]);
                    prop_assert_eq!(
                        got.is_ok(),
                        in_phase && free,
                        "lease {} in phase {}: {:?}",
                        i,
                        phase,
                        got.as_ref().err()
                    );
                    if let Ok(mut lease) = got {
                        for h in &held {
                            prop_assert!(!shares(h.buffer, i));
                        }
                        next_tag += 1.0;
                        let cap = lease.capacity();
                        lease.set_shape(&[cap]).expect("capacity fits");
                        lease.as_mut_slice().fill(next_tag);
                        touched[i] = true;
                        held.push(Held {
                            buffer: i,
                            tag: next_tag,
                            lease,
                        });
                        expected_leases += 1;
                    } else if let Err(e) = got {
                        let ok_kind = matches!(
                            e,
                            Error::AlreadyLeased { .. }
                                | Error::OutsidePhase { .. }
                                | Error::LeaseOverlap { .. }
                        );
                        prop_assert!(ok_kind, "unexpected error {e}");
                    }
                }
                Op::Drop(k) => {
                    if !held.is_empty() {
                        held.swap_remove(k % held.len());
                    }
                }
                Op::Reshape(k, n) => {
                    let count = held.len().max(1);
                    if let Some(h) = held.get_mut(k % count) {
                        let cap = h.lease.capacity();
                        let r = h.lease.set_shape(&[n]);
                        prop_assert_eq!(r.is_ok(), n <= cap);
                        // Writing the whole capacity keeps the tag check exact.
                        if r.is_ok() {
                            h.lease.set_shape(&[cap]).expect("capacity fits");
                        }
                    }
                }
                Op::Write(k) => {
                    let count = held.len().max(1);
                    if let Some(h) = held.get_mut(k % count) {
                        next_tag += 1.0;
                        h.tag = next_tag;
                        h.lease.as_mut_slice().fill(next_tag);
                    }
                }
                Op::Scale(k) => {
                    let count = held.len().max(1);
                    if let Some(h) = held.get_mut(k % count) {
                        h.lease.mul_scalar_(2.0).expect("mul_scalar_");
                        h.tag *= 2.0;
                    }
                }
                Op::Dropout(k) => {
                    let count = held.len().max(1);
                    if let Some(h) = held.get_mut(k % count) {
                        let mask = h.lease.dropout_(0.0).expect("dropout_");
                        prop_assert_eq!(mask.rng.offset, rng_offset);
                        rng_offset += (h.lease.len() as u64).next_multiple_of(4);
                    }
                }
                Op::Enter(k) => {
                    if phases.is_empty() {
                        continue;
                    }
                    let target = k % phases.len();
                    let stale = held.iter().any(|h| {
                        bufs[h.buffer].lifetime() == tensor_arena::plan::LifetimeKind::Phases
                            && bufs[h.buffer].phases().1 < target
                    });
                    let r = step.enter(phases[target]);
                    prop_assert_eq!(
                        r.is_ok(),
                        target >= phase && !stale,
                        "enter {} from {}",
                        target,
                        phase
                    );
                    if r.is_ok() {
                        phase = target;
                    }
                }
            }
            // Nobody clobbered anybody.
            for h in &held {
                prop_assert!(
                    h.lease.as_slice().iter().all(|&v| v == h.tag),
                    "lease of b{} clobbered",
                    h.buffer
                );
            }
            let st = step.stats();
            prop_assert_eq!(st.live_leases, held.len() as u64);
            // Active bytes are the step-scoped leases' (persistent buffers
            // count as allocated whether leased or not).
            let active: usize = held
                .iter()
                .filter(|h| {
                    bufs[h.buffer].lifetime() != tensor_arena::plan::LifetimeKind::Persistent
                })
                .map(|h| bufs[h.buffer].size())
                .sum();
            prop_assert_eq!(st.active_bytes, active as u64);
            prop_assert_eq!(st.total_leases, expected_leases);
            prop_assert_eq!(st.total_releases, expected_leases - held.len() as u64);
        }
        drop(held);
        drop(step);
    }
    // Step-scoped work never altered a persistent buffer: those not leased
    // themselves still hold their initial contents.
    for &i in persistent.iter().filter(|&&i| !touched[i]) {
        let mut back = vec![0.0f32; bufs[i].capacity()];
        arena
            .read_prefix(ids[i].typed::<f32>().expect("f32"), &mut back)
            .expect("read");
        prop_assert!(
            back.iter().all(|&v| v == 1000.0 + i as f32),
            "persistent b{} altered",
            i
        );
    }
    let st = arena.stats();
    prop_assert_eq!(st.total_leases, st.total_releases);
    prop_assert_eq!(arena.rng_state().offset, rng_offset);
    // Valid work never trips a guard.
    prop_assert!(arena.verify().is_ok(), "{:?}", arena.take_violations());
    prop_assert_eq!(st.device.alloc_calls, 1);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_lease_sequences_match_the_model(
        specs in prop::collection::vec(spec_strategy(40), 1..12),
        phase_count in 0usize..5,
        ops in prop::collection::vec(op_strategy(), 1..120),
        checked in any::<bool>(),
    ) {
        run_ops(&specs, phase_count, &ops, checked)?;
    }
}
