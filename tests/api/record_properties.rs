//! Property tests for recording.
//!
//! Spec files: any valid spec set, with modes and shape rules, names of any
//! characters included, reads back from its TOML unchanged.
//!
//! Recording: for random steps of random requests, each site's learned
//! shape is the request with the most (padded) elements and its span
//! covers every phase it was leased in; the frozen plan is valid, and every
//! recorded request is served from it, with any shape no larger.

use std::collections::BTreeSet;

use proptest::prelude::*;
use tensor_arena::record::{SpecEntry, SpecLifetime, SpecMode};
use tensor_arena::{DType, HostDevice, Recorder, Rounding, ShapeRule, SpecSet};

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(vec![
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::U8,
    ])
}

fn spec_set() -> impl Strategy<Value = SpecSet> {
    (
        1usize..4,
        prop::collection::btree_set("[a-zA-Z0-9_ .:/\"\\\\é#=\\[\\]-]{1,10}", 2..10),
        0usize..3,
    )
        .prop_flat_map(|(phases, names, modes)| {
            let names: Vec<String> = names.into_iter().collect();
            let n = names.len().saturating_sub(phases).max(1);
            let entries = prop::collection::vec(
                (
                    dtype(),
                    prop::collection::vec(1usize..5000, 1..5),
                    0u8..3,
                    (0usize..phases, 0usize..phases),
                    prop::option::of(prop::sample::select(vec![
                        Rounding::None,
                        Rounding::Inner16,
                        Rounding::Inner32,
                        Rounding::Tile16,
                        Rounding::Tile32,
                    ])),
                    prop::option::of(0u64..1_000_000),
                    0usize..=modes,
                    any::<bool>(),
                ),
                n,
            );
            (Just(phases), Just(names), Just(modes), entries)
        })
        .prop_filter_map(
            "a name for every phase and buffer",
            |(phases, names, modes, entries)| {
                if names.len() < phases + entries.len() {
                    return None;
                }
                let (phase_names, buffer_names) = names.split_at(phases);
                let buffers = entries
                    .into_iter()
                    .zip(buffer_names)
                    .map(
                        |((dtype, shape, kind, (a, b), rounding, steps, mode, dims), name)| {
                            SpecEntry {
                                name: name.clone(),
                                dtype,
                                shape,
                                lifetime: match kind {
                                    0 => SpecLifetime::Persistent,
                                    1 => SpecLifetime::Step,
                                    _ => SpecLifetime::Phases {
                                        first: a.min(b),
                                        last: a.max(b),
                                    },
                                },
                                // Every mode has the default mode's phase names.
                                mode: (kind != 0 && mode > 0).then(|| format!("mode {}", mode - 1)),
                                shape_rule: if dims {
                                    ShapeRule::Dims
                                } else {
                                    ShapeRule::Elements
                                },
                                rounding,
                                recorded_steps: steps,
                            }
                        },
                    )
                    .collect();
                let modes = (0..modes)
                    .map(|k| SpecMode {
                        name: format!("mode {k}"),
                        phases: phase_names.to_vec(),
                    })
                    .collect();
                SpecSet::with_modes(phase_names.to_vec(), modes, buffers).ok()
            },
        )
}

/// One request: site, phase to be in when asking, shape, and whether the
/// lease is kept until the end of the step.
type Request = (usize, usize, Vec<usize>, bool);

fn steps() -> impl Strategy<Value = Vec<Vec<Request>>> {
    prop::collection::vec(
        prop::collection::vec(
            (
                0usize..4,
                0usize..3,
                prop::collection::vec(1usize..40, 2),
                any::<bool>(),
            ),
            1..8,
        ),
        1..5,
    )
}

const SITES: [&str; 4] = ["a", "b", "c", "d"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn spec_files_round_trip(set in spec_set()) {
        let text = set.to_toml().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back = SpecSet::from_toml(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(back, set);
    }

    #[test]
    fn recording_learns_maxima_and_spans(steps in steps()) {
        let mut rec = Recorder::new(HostDevice::new());
        let phases = [
            rec.phase("p0").map_err(|e| TestCaseError::fail(e.to_string()))?,
            rec.phase("p1").map_err(|e| TestCaseError::fail(e.to_string()))?,
            rec.phase("p2").map_err(|e| TestCaseError::fail(e.to_string()))?,
        ];
        // The model: per site, the shape with the most elements once padded
        // (the first of equals) and the phase span; and the requests that
        // were served (a site still leased is skipped).
        let mut max: [Option<(Vec<usize>, usize, usize)>; 4] = Default::default();
        let padded = |shape: &[usize]| -> usize {
            let n = shape.len();
            shape.iter().enumerate().map(|(i, &d)| if i + 1 == n { d.next_multiple_of(16) } else { d }).product()
        };
        let mut served: Vec<Vec<Request>> = Vec::new();
        for step in &steps {
            let mut requests = step.clone();
            requests.sort_by_key(|r| r.1);
            let mut done = Vec::new();
            let result = rec.step(|s| -> tensor_arena::Result<()> {
                let mut kept = Vec::new();
                let mut live = [false; 4];
                for request in &requests {
                    let (site, phase, shape, keep) = request;
                    s.enter(phases[*phase])?;
                    if live[*site] {
                        continue;
                    }
                    let lease = s.temp::<f32>(SITES[*site], shape)?;
                    done.push(request.clone());
                    let entry = max[*site].get_or_insert((shape.clone(), *phase, *phase));
                    if padded(shape) > padded(&entry.0) {
                        entry.0 = shape.clone();
                    }
                    entry.1 = entry.1.min(*phase);
                    entry.2 = entry.2.max(*phase);
                    if *keep {
                        live[*site] = true;
                        kept.push((*site, lease));
                    }
                }
                // Kept leases end in the step's last phase.
                let last = requests.last().map_or(0, |r| r.1);
                for (site, _) in &kept {
                    if let Some(e) = max[*site].as_mut() {
                        e.2 = e.2.max(last);
                    }
                }
                Ok(())
            });
            result?;
            served.push(done);
        }
        let specs = rec.specs();
        for (site, expected) in SITES.iter().zip(&max) {
            let got = specs.get(site).map(|e| (e.shape.clone(), e.lifetime));
            let want = expected.as_ref().map(|(shape, first, last)| {
                (shape.clone(), SpecLifetime::Phases { first: *first, last: *last })
            });
            prop_assert_eq!(got, want, "site {}", site);
        }
        let plan = rec.freeze().map_err(|e| TestCaseError::fail(e.to_string()))?;
        plan.validate()?;
        prop_assert!(plan.slab_bytes() >= plan.lower_bound());
        // Every recorded request is served frozen, in the phases it had.
        for requests in &served {
            let result = rec.step(|s| -> tensor_arena::Result<()> {
                for (site, phase, shape, _) in requests {
                    s.enter(phases[*phase])?;
                    let smaller: Vec<usize> = shape.iter().map(|d| d.div_ceil(2)).collect();
                    s.temp::<f32>(SITES[*site], shape)?;
                    s.temp::<f32>(SITES[*site], &smaller)?;
                }
                Ok(())
            });
            result?;
        }
        let names: BTreeSet<&str> = specs.buffers().iter().map(|b| b.name.as_str()).collect();
        prop_assert_eq!(names.len(), specs.buffers().len());
    }
}
