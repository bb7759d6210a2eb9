//! Fuzzing of spec and plan inputs: arbitrary names, shapes (zero, huge,
//! too many dimensions), element types, roundings, lifetimes (including
//! phases of another planner and reversed spans), offset alignments, device
//! limits and view shapes. Whatever the input, the crate returns a value or
//! an error; it never panics and never hands out an invalid plan.
//!
//! `cargo test` runs a few hundred cases. The long run (the figures in the
//! README's "Reliability" section) is:
//!
//! ```sh
//! PROPTEST_CASES=100000 cargo test --release --test api fuzz_specs::
//! ```

use proptest::prelude::*;
use tensor_arena::{
    Arena, BufferSpec, DType, HostDevice, Lifetime, Planner, PlannerConfig, Rounding,
};

#[derive(Debug, Clone)]
struct FuzzSpec {
    name: String,
    dtype: DType,
    dims: Vec<usize>,
    rounding: Option<Rounding>,
    lifetime: u8,
    span: (usize, usize),
}

fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        24 => 1usize..70,
        1 => Just(0usize),
        1 => Just(usize::MAX),
        1 => Just(usize::MAX / 2),
        1 => (1usize << 20)..(1usize << 40),
        1 => any::<usize>(),
    ]
}

fn spec() -> impl Strategy<Value = FuzzSpec> {
    (
        prop_oneof![3 => "[a-z]{1,6}", 1 => Just(String::new()), 1 => ".{0,4}"],
        prop::sample::select(vec![DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8]),
        prop_oneof![8 => prop::collection::vec(dim(), 1..4), 1 => prop::collection::vec(dim(), 0..11)],
        prop::option::of(prop::sample::select(vec![
            Rounding::None,
            Rounding::Inner16,
            Rounding::Inner32,
            Rounding::Tile16,
            Rounding::Tile32,
        ])),
        0u8..4,
        (0usize..8, 0usize..8),
    )
        .prop_map(|(name, dtype, dims, rounding, lifetime, span)| FuzzSpec {
            name,
            dtype,
            dims,
            rounding,
            lifetime,
            span,
        })
}

fn config() -> ProptestConfig {
    // Honours PROPTEST_CASES for the long run; a quick pass otherwise.
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    ProptestConfig::with_cases(cases)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_specs_never_panic(
        specs in prop::collection::vec(spec(), 0..24),
        phases in 0usize..5,
        align in prop_oneof![Just(512usize), Just(64), any::<usize>(), 0usize..5000],
        limit in prop_oneof![Just(None), (0usize..(64 << 20)).prop_map(Some)],
        views in prop::collection::vec(prop::collection::vec(dim(), 0..10), 0..8),
    ) {
        let config = PlannerConfig { offset_align: align, ..PlannerConfig::default() };
        let Ok(mut p) = Planner::with_config(config) else {
            prop_assert!(!align.is_power_of_two() || align < 64);
            return Ok(());
        };
        let mut other = Planner::new();
        let foreign = other.phase("elsewhere").ok();
        let ph: Vec<_> = (0..phases).filter_map(|i| p.phase(&format!("phase{i}")).ok()).collect();
        let mut declared = Vec::new();
        for s in &specs {
            let lifetime = match (s.lifetime, ph.len()) {
                (0, _) => Lifetime::Persistent,
                (1, _) | (_, 0) => Lifetime::Step,
                (2, n) => Lifetime::span(ph[s.span.0 % n], ph[s.span.1 % n]),
                (_, n) => match foreign {
                    Some(f) => Lifetime::span(ph[s.span.0 % n], f),
                    None => Lifetime::Step,
                },
            };
            let mut spec = BufferSpec::new(s.name.clone(), s.dtype, &s.dims).lifetime(lifetime);
            if let Some(r) = s.rounding {
                spec = spec.rounding(r);
            }
            let before = p.len();
            match p.declare_dyn(spec) {
                Ok(id) => declared.push(id),
                Err(e) => {
                    prop_assert_eq!(p.len(), before, "a failed declaration changed the planner");
                    prop_assert!(!e.to_string().is_empty());
                }
            }
        }
        let plan = match p.plan() {
            Ok(plan) => plan,
            Err(e) => {
                prop_assert!(!e.to_string().is_empty());
                return Ok(());
            }
        };
        plan.validate()?;
        prop_assert!(plan.slab_bytes() >= plan.lower_bound());
        let device = match limit {
            Some(l) => HostDevice::with_limit(l),
            None => HostDevice::with_limit(256 << 20),
        };
        let Ok(mut arena) = Arena::new(device, plan) else {
            return Ok(());
        };
        arena.step(|s| -> Result<(), TestCaseError> {
            for (id, view) in declared.iter().zip(views.iter().cycle()) {
                if let Some(b) = id.typed::<f32>()
                    && let Ok(mut lease) = s.lease(b)
                {
                    let fits = lease.set_shape(view).is_ok();
                    prop_assert!(lease.len() <= lease.capacity());
                    if fits {
                        lease.as_mut_slice().fill(1.0);
                    }
                }
            }
            Ok(())
        })?;
    }
}
