//! `tensor-arena replay TRACE --planned`: the trace's requests replayed
//! through the planned allocator's own policy (the alloc crate's
//! `replay`, over a backing that holds no memory: the code a live run
//! runs), step by step, beside the caching-allocator model of the same
//! trace, and a recommendation.

use clap::Args;
use regex::Regex;
use serde::Serialize;
use tensor_arena::caching::{CachingConfig, Platform};
use tensor_arena::diag::{
    Diagnosis, OPTIMIZER_FRAME, StepRule, StepSpan, Trace, TraceEvent, find_steps, optimizer_frame,
    replay_model,
};
use tensor_arena::units::format_bytes;
use tensor_arena::{Error, Result};
use tensor_arena_alloc::replay::{self, Prediction, ReplayConfig};
use tensor_arena_alloc::trace::TraceEvent as AllocEvent;
use tensor_arena_alloc::{Config, Misses};

use super::alloc_trace::{self, AllocatorTrace};

/// The planned allocator's policy, as the launcher's flags name it
/// (`python -m tensor_arena.run --warmup-steps ...`). Every field is a key
/// of the allocator's configuration (`tensor_arena_alloc::Config`,
/// docs/allocator.md) under the same name: a new key is one more field.
#[derive(Debug, Clone, Default, Args, Serialize)]
pub struct PolicyArgs {
    /// Planned allocator: steps served by the fallback, not recorded.
    #[arg(long, value_name = "N", requires = "planned")]
    #[serde(skip_serializing_if = "Option::is_none")]
    warmup_steps: Option<u32>,
    /// Planned allocator: steps recorded before the first plan.
    #[arg(long, value_name = "N", requires = "planned")]
    #[serde(skip_serializing_if = "Option::is_none")]
    record_steps: Option<u32>,
    /// Planned allocator: steps recorded before the first plan while the
    /// recorded sizes differ.
    #[arg(long, value_name = "N", requires = "planned")]
    #[serde(skip_serializing_if = "Option::is_none")]
    record_steps_changing: Option<u32>,
    /// Planned allocator: consecutive steps with misses before a re-plan.
    #[arg(long, value_name = "N", requires = "planned")]
    #[serde(skip_serializing_if = "Option::is_none")]
    replan_miss_steps: Option<u32>,
    /// Planned allocator: recent steps a re-plan is made from.
    #[arg(long, value_name = "N", requires = "planned")]
    #[serde(skip_serializing_if = "Option::is_none")]
    recent_steps: Option<u32>,
    /// Planned allocator: the device's mapping unit in bytes, for the
    /// prediction (2097152 for CUDA's and Ascend's 2 MiB pages; default
    /// the host page, what the CPU backend maps; 0: whole regions, no
    /// mapped range).
    #[arg(long, value_name = "BYTES", requires = "planned")]
    #[serde(skip_serializing_if = "Option::is_none")]
    map_granularity: Option<u64>,
    /// Planned allocator: exact regions before the first plan (default).
    #[arg(long, overrides_with = "no_exact_before_plan", requires = "planned")]
    #[serde(skip)]
    exact_before_plan: bool,
    /// Planned allocator: caching pools before the first plan.
    #[arg(long, overrides_with = "exact_before_plan", requires = "planned")]
    #[serde(skip)]
    no_exact_before_plan: bool,
    /// Planned allocator: any configuration keys as a JSON object
    /// (docs/allocator.md); the flags above override its keys.
    #[arg(long, value_name = "JSON", requires = "planned")]
    #[serde(skip)]
    policy: Option<String>,
}

impl PolicyArgs {
    /// The allocator's configuration: `--policy`, then the flags, on the
    /// replay's platform; checked as the allocator checks it.
    fn config(&self, platform: Platform) -> Result<Config> {
        let bad = |reason: String| Error::InvalidArgument {
            what: "planned allocator policy",
            value: self.policy.clone().unwrap_or_default(),
            reason,
        };
        let mut object = match &self.policy {
            Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
                Ok(serde_json::Value::Object(m)) => m,
                Ok(_) => return Err(bad("--policy must be a JSON object".to_owned())),
                Err(e) => return Err(bad(e.to_string())),
            },
            None => serde_json::Map::new(),
        };
        if let Ok(serde_json::Value::Object(flags)) = serde_json::to_value(self) {
            object.extend(flags);
        }
        if self.exact_before_plan || self.no_exact_before_plan {
            object.insert(
                "exact_before_plan".to_owned(),
                serde_json::Value::Bool(self.exact_before_plan),
            );
        }
        object
            .entry("platform")
            .or_insert_with(|| platform_name(platform).into());
        let mut config = Config::from_json(&serde_json::Value::Object(object).to_string())
            .map_err(|e| bad(e.to_string()))?;
        // The replay holds no memory; what the live run would be told to
        // trace or load does not apply.
        config.trace = None;
        Ok(config)
    }
}

/// How steps are found in a trace without step markers.
#[derive(Debug, Clone, Default, Args)]
pub struct StepArgs {
    /// With --planned, for a snapshot: a step ends after the last
    /// allocation or free whose stack has a frame matching REGEX (matched
    /// against `FILE:LINE in FUNCTION`), e.g. `in train_step$`. Default:
    /// after the optimizer's step (`torch/optim/optimizer.py` frames) or
    /// `zero_grad`.
    #[arg(long, value_name = "REGEX", requires = "planned")]
    step_frame: Option<String>,
    /// With --planned: a step every N allocations (the last resort, for
    /// traces without frames or markers).
    #[arg(
        long,
        value_name = "N",
        requires = "planned",
        conflicts_with = "step_frame"
    )]
    step_every: Option<usize>,
}

fn platform_name(p: Platform) -> &'static str {
    match p {
        Platform::Cuda => "cuda",
        Platform::Npu => "npu",
    }
}

/// The `planned` object of the JSON and the section of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Planned {
    /// Most bytes reserved at once over the whole replayed run (warm-up,
    /// recording, every re-plan).
    pub peak_reserved_bytes: u64,
    /// In-step requests of serving steps served from the plan (`null`
    /// when no serving step made a request).
    pub served_share: Option<f64>,
    /// The live lower bound: the most bytes live at once over the whole
    /// run, each request rounded to 512 bytes. No allocator holds less.
    pub live_lower_bound_bytes: u64,
    /// `peak_reserved_bytes / live_lower_bound_bytes` (`null` for an
    /// empty trace).
    pub lower_bound_ratio: Option<f64>,
    /// Device calls the planned run would make (regions reserved and
    /// released, pages mapped and unmapped, address ranges), whole run.
    pub device_calls: u64,
    /// The most such calls in one steady serving step.
    pub device_calls_max_steady_step: u64,
    /// What those calls would cost on the platform's device, in seconds:
    /// an estimate from documented per-call costs (docs/device-costs.md),
    /// never a measurement.
    pub device_call_seconds_estimate: f64,
    /// The caching allocator model's device allocations over the same run
    /// (`cudaMalloc` / `aclrtMalloc` calls), for comparison.
    pub caching_model_device_allocations: u64,
    /// The mapping unit the prediction assumed (`null`: whole regions).
    pub map_granularity: Option<u64>,
    /// Plans after the first.
    pub replans: u64,
    /// Steps replayed.
    pub steps: u64,
    /// The final plan's slab.
    pub slab_bytes: u64,
    /// The final plan's lower bound.
    pub lower_bound: u64,
    /// Most fallback allocations in one serving step.
    pub fallback_allocations_max_step: u64,
    /// Whether the planned run fits `capacity` (`null` without one).
    pub fits: Option<bool>,
    /// The capacity checked: the one the snapshot ran out of, or
    /// --capacity.
    pub capacity: Option<u64>,
    /// Requests answered NULL under `capacity`.
    pub out_of_memory: u64,
    /// Requests inside serving steps, and of those served from the plan.
    pub requests_after_warmup: u64,
    /// Of `requests_after_warmup`, served from the plan.
    pub served_from_plan: u64,
    /// Misses by reason.
    pub misses: Misses,
    /// Where the steps came from.
    pub steps_from: String,
    /// The policy replayed (the allocator's configuration keys).
    pub policy: Config,
    /// Whole-run peak reserved of the traced run from its segment lines
    /// (a planned allocator trace), if it has them.
    pub recorded_peak_reserved_bytes: Option<u64>,
    /// The caching-allocator model of the same trace, platform defaults,
    /// no device limit: peak reserved.
    pub caching_model_peak_reserved_bytes: u64,
    /// The same with `expandable_segments:True`.
    pub expandable_segments_peak_reserved_bytes: u64,
    /// Sites of the allocations the plan did not serve in serving steps,
    /// most requests first (snapshots with frames).
    pub fallback_sites: Vec<(String, usize)>,
    /// Whether the prediction beats every caching-allocator setting
    /// compared (the sweep's, else the defaults and expandable segments).
    pub recommended: bool,
    /// The recommendation, in words.
    pub recommendation: String,
}

/// The allocator's calls a planned replay makes, and where its steps
/// came from.
pub struct PlannedEvents {
    /// The events, steps marked.
    pub events: Vec<AllocEvent>,
    /// Where the steps came from, in words.
    pub steps_from: String,
    /// Whole-run peak reserved of the traced run (an allocator trace with
    /// segment lines).
    pub recorded_peak_reserved: Option<u64>,
}

/// The events to replay: an allocator trace's own (its markers), else the
/// doctor's trace split into steps by [`StepArgs`]; an error when no step
/// boundary can be found.
pub fn planned_events(
    doctor: &Trace,
    allocator: Option<&AllocatorTrace>,
    steps: &StepArgs,
) -> Result<PlannedEvents> {
    match allocator {
        Some(a) => {
            if steps.step_every.is_some() || steps.step_frame.is_some() {
                return Err(Error::InvalidArgument {
                    what: "--step-every / --step-frame",
                    value: a.trace.name().to_owned(),
                    reason: "the planned allocator's trace marks its own steps (step_begin / step_end); these flags are for snapshots and other traces".to_owned(),
                });
            }
            find_steps(&a.trace, &StepRule::Markers)?;
            Ok(PlannedEvents {
                events: a.events.clone(),
                steps_from: "the trace's step markers".to_owned(),
                recorded_peak_reserved: a.recorded_peak_reserved,
            })
        }
        None => {
            let (spans, steps_from) = steps_of(doctor, steps)?;
            Ok(PlannedEvents {
                events: alloc_trace::to_allocator_events(doctor, &spans),
                steps_from,
                recorded_peak_reserved: None,
            })
        }
    }
}

/// Runs the planned replay of `planned` (made from `trace`) and compares
/// it with the diagnosis of the same trace.
pub fn predict(
    trace: &Trace,
    planned: PlannedEvents,
    policy: &PolicyArgs,
    platform: Platform,
    capacity: Option<u64>,
    d: &Diagnosis,
) -> Result<Planned> {
    let config = policy.config(platform)?;
    let PlannedEvents {
        events,
        steps_from,
        recorded_peak_reserved: recorded,
    } = planned;
    let run = |capacity: Option<u64>| {
        replay::replay(
            &events,
            &ReplayConfig {
                policy: config.clone(),
                capacity,
            },
        )
        .map_err(|e| alloc_trace::alloc_error(trace.name(), e))
    };
    let free = run(None)?;
    // Unlimited, the run reserved at most its peak: under a capacity at
    // least that large it is the same run. Below it, the limited run says
    // whether the allocator's out-of-memory path (cache release, retry)
    // still gets through.
    let (fits, oom) = match capacity {
        None => (None, 0),
        Some(c) if free.peak_reserved_bytes <= c => (Some(true), 0),
        Some(c) => {
            let limited = run(Some(c))?;
            (limited.fits, limited.out_of_memory)
        }
    };
    let model = |expandable: bool| {
        let config = CachingConfig {
            expandable_segments: expandable,
            ..CachingConfig::default().on(platform)
        };
        replay_model(trace, config, false).stats.reserved_bytes.peak
    };
    let (defaults, expandable) = (model(false), model(true));
    let fallback_sites = sites_of(trace, &events, &free);
    let mut p = Planned {
        peak_reserved_bytes: free.peak_reserved_bytes,
        served_share: free.served_share,
        live_lower_bound_bytes: free.live_lower_bound_bytes,
        lower_bound_ratio: free.stats.lower_bound_ratio,
        device_calls: free.backing_calls.memory(),
        device_calls_max_steady_step: free.stats.backing_calls_max_steady_step,
        device_call_seconds_estimate: free.stats.device_call_seconds_estimate,
        caching_model_device_allocations: free.stats.caching_model.device_allocations,
        map_granularity: free.stats.map_granularity,
        replans: free.replans,
        steps: free.steps,
        slab_bytes: free.slab_bytes,
        lower_bound: free.lower_bound,
        fallback_allocations_max_step: free.fallback_allocations_max_step,
        fits,
        capacity,
        out_of_memory: oom,
        requests_after_warmup: free.stats.requests_after_warmup,
        served_from_plan: free.stats.served_from_plan,
        misses: free.misses,
        steps_from,
        policy: config,
        recorded_peak_reserved_bytes: recorded,
        caching_model_peak_reserved_bytes: defaults,
        expandable_segments_peak_reserved_bytes: expandable,
        fallback_sites,
        recommended: false,
        recommendation: String::new(),
    };
    recommend(&mut p, d, platform);
    Ok(p)
}

/// The steps of a doctor's trace: its markers, else `--step-every`, else
/// frames (`--step-frame`, or the optimizer's step by default).
fn steps_of(t: &Trace, args: &StepArgs) -> Result<(Vec<StepSpan>, String)> {
    if !t.marked_steps().is_empty() {
        return Ok((
            t.marked_steps().to_vec(),
            "the trace's step markers".to_owned(),
        ));
    }
    if let Some(n) = args.step_every {
        let spans = find_steps(t, &StepRule::Every(n))?;
        return Ok((
            spans,
            format!("--step-every {n}: a step every {n} allocations"),
        ));
    }
    match &args.step_frame {
        Some(pattern) => {
            let re = Regex::new(pattern).map_err(|e| Error::InvalidArgument {
                what: "--step-frame",
                value: pattern.clone(),
                reason: e.to_string(),
            })?;
            let matches = |f: &str| re.is_match(f);
            let what = format!("--step-frame {pattern}");
            let spans = find_steps(
                t,
                &StepRule::Frames {
                    matches: &matches,
                    what: &what,
                },
            )?;
            Ok((spans, format!("stack frames matching {pattern}")))
        }
        None => {
            let spans = find_steps(
                t,
                &StepRule::Frames {
                    matches: &optimizer_frame,
                    what: OPTIMIZER_FRAME,
                },
            )?;
            Ok((
                spans,
                format!("stack frames: a step ends after {OPTIMIZER_FRAME}"),
            ))
        }
    }
}

/// Sites of the allocations the plan did not serve, most first.
fn sites_of(trace: &Trace, events: &[AllocEvent], p: &Prediction) -> Vec<(String, usize)> {
    if !trace.has_sites() {
        return Vec::new();
    }
    // Replayed alloc event -> the doctor's allocation: the k-th alloc
    // event of the replay is the k-th alloc of the trace (NULL answers
    // are not in either for a doctor's trace).
    let mut alloc_number = vec![usize::MAX; events.len()];
    let mut k = 0;
    for (i, e) in events.iter().enumerate() {
        if matches!(e, AllocEvent::Alloc { addr, .. } if *addr != 0) {
            alloc_number[i] = k;
            k += 1;
        }
    }
    let allocs: Vec<usize> = trace
        .events()
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Alloc(i) => Some(*i),
            TraceEvent::Free(_) => None,
        })
        .collect();
    let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for &i in &p.fallback_events {
        let site = alloc_number
            .get(i)
            .and_then(|&k| allocs.get(k))
            .and_then(|&a| trace.site(a))
            .unwrap_or("(no site recorded)");
        *counts.entry(site).or_default() += 1;
    }
    let mut v: Vec<(String, usize)> = counts.into_iter().map(|(s, n)| (s.to_owned(), n)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(5);
    v
}

/// The recommendation: the planned allocator when its predicted peak is
/// below every caching-allocator setting compared and it fits; otherwise
/// why not.
fn recommend(p: &mut Planned, d: &Diagnosis, platform: Platform) {
    let mut compared: Vec<(String, u64)> = match &d.sweep {
        Some(rows) if !rows.is_empty() => rows
            .iter()
            .map(|r| {
                let conf = if r.conf.is_empty() {
                    "defaults".to_owned()
                } else {
                    r.conf.clone()
                };
                (conf, r.peak_reserved)
            })
            .collect(),
        _ => vec![
            ("defaults".to_owned(), p.caching_model_peak_reserved_bytes),
            (
                "expandable_segments:True".to_owned(),
                p.expandable_segments_peak_reserved_bytes,
            ),
        ],
    };
    compared.sort_by_key(|c| c.1);
    let Some((best_conf, best)) = compared.first().cloned() else {
        return;
    };
    let device = platform_name(platform);
    let fits = p.fits != Some(false);
    // A prediction without a serving step predicts the caching pools of
    // warm-up and recording, not the plan: never a recommendation.
    let served = p.requests_after_warmup > 0;
    if p.peak_reserved_bytes < best && fits && served {
        p.recommended = true;
        p.recommendation = format!(
            "use the planned allocator: predicted whole-run peak reserved {} against {} for the best caching-allocator setting compared ({best_conf}{}). Switch it on: `python -m tensor_arena.run --device {device} train.py ARGS` (or `torchrun --nproc-per-node N -m tensor_arena.run --device {device} train.py ARGS`)",
            format_bytes(p.peak_reserved_bytes),
            format_bytes(best),
            if d.sweep.is_some() {
                ", of the sweep"
            } else {
                ""
            },
        );
        return;
    }
    let mut why = Vec::new();
    if p.peak_reserved_bytes >= best {
        why.push(format!(
            "its predicted whole-run peak reserved {} is not below {} ({best_conf})",
            format_bytes(p.peak_reserved_bytes),
            format_bytes(best)
        ));
    }
    if !fits {
        why.push(format!(
            "it does not fit the capacity of {} ({} requests answered NULL)",
            format_bytes(p.capacity.unwrap_or(0)),
            p.out_of_memory
        ));
    }
    let m = p.misses;
    if p.requests_after_warmup == 0 {
        why.push(format!(
            "no step was served from a plan ({} steps; the policy records {} warm-up and {} recorded steps first, and a plan of {} requests or more is made while the next step runs and serves the step after it)",
            p.steps, p.policy.warmup_steps, p.policy.record_steps, p.policy.background_plan_requests
        ));
    } else if p.served_from_plan < p.requests_after_warmup {
        why.push(format!(
            "{} of {} requests after warm-up went to the fallback (misses: size {}, order {}, overlap {}, stream {}, outside a step {}; the rest outlive their step); {} re-plans",
            p.requests_after_warmup - p.served_from_plan,
            p.requests_after_warmup,
            m.size,
            m.order,
            m.overlap,
            m.stream,
            m.outside_step,
            p.replans
        ));
    }
    if !p.fallback_sites.is_empty() {
        let sites: Vec<String> = p
            .fallback_sites
            .iter()
            .map(|(s, n)| format!("{s} ({n})"))
            .collect();
        why.push(format!("fallback requests at: {}", sites.join("; ")));
    }
    p.recommendation = format!(
        "the planned allocator is not recommended for this trace: {}",
        why.join("; ")
    );
}

/// The report's section.
pub fn section(p: &Planned) -> String {
    use std::fmt::Write;
    let mut s = String::from("\nplanned allocator (predicted)\n");
    let b = format_bytes;
    let pol = &p.policy;
    let _ = writeln!(
        s,
        "  steps: {} (from {}); policy: warm-up {}, record {} ({} while shapes change), re-plan after {} missing step(s) from {} recent, exact regions before the plan: {}",
        p.steps,
        p.steps_from,
        pol.warmup_steps,
        pol.record_steps,
        pol.record_steps_changing,
        pol.replan_miss_steps,
        pol.recent_steps,
        if pol.exact_before_plan { "yes" } else { "no" }
    );
    let _ = writeln!(
        s,
        "  whole-run peak reserved: {} planned vs {} caching allocator model ({} with expandable segments){}",
        b(p.peak_reserved_bytes),
        b(p.caching_model_peak_reserved_bytes),
        b(p.expandable_segments_peak_reserved_bytes),
        p.recorded_peak_reserved_bytes
            .map(|r| format!("; the traced run: {}", b(r)))
            .unwrap_or_default()
    );
    let m = p.misses;
    if p.requests_after_warmup == 0 {
        let _ = writeln!(
            s,
            "  no step was served from a plan: {} steps replayed, the policy plans after {} warm-up and {} recorded steps (a plan of {} requests or more is made while the next step runs and serves the step after it)",
            p.steps, pol.warmup_steps, pol.record_steps, pol.background_plan_requests
        );
    }
    if p.live_lower_bound_bytes > 0 {
        let _ = writeln!(
            s,
            "  live lower bound: {} (the most bytes live at once); planned peak reserved = {:.3}x it",
            b(p.live_lower_bound_bytes),
            p.peak_reserved_bytes as f64 / p.live_lower_bound_bytes as f64
        );
    }
    let _ = writeln!(
        s,
        "  device calls: {} over the whole run ({} in the worst steady step; the caching allocator model: {} allocations), estimated {:.3} ms on a {} device{}",
        p.device_calls,
        p.device_calls_max_steady_step,
        p.caching_model_device_allocations,
        1000.0 * p.device_call_seconds_estimate,
        pol.platform().name(),
        p.map_granularity
            .map(|g| format!(", one mapped range of {g}-byte pages"))
            .unwrap_or_else(|| ", whole regions".to_owned())
    );
    let served = p.served_share.map_or_else(
        || "no request served yet".to_owned(),
        |x| format!("{:.2}%", 100.0 * x),
    );
    let _ = writeln!(
        s,
        "  served from the plan after warm-up: {served} ({} of {} requests); misses: size {}, order {}, overlap {}, stream {}, outside a step {}",
        p.served_from_plan,
        p.requests_after_warmup,
        m.size,
        m.order,
        m.overlap,
        m.stream,
        m.outside_step
    );
    let ratio = if p.lower_bound == 0 {
        String::new()
    } else {
        format!(", {:.3}x", p.slab_bytes as f64 / p.lower_bound as f64)
    };
    let _ = writeln!(
        s,
        "  re-plans: {}; slab {} (lower bound {}{ratio}); fallback allocations in the worst serving step: {}",
        p.replans,
        b(p.slab_bytes),
        b(p.lower_bound),
        p.fallback_allocations_max_step
    );
    match (p.capacity, p.fits) {
        (Some(c), Some(true)) => {
            let _ = writeln!(s, "  capacity {}: fits", b(c));
        }
        (Some(c), _) => {
            let _ = writeln!(
                s,
                "  capacity {}: does not fit ({} requests answered NULL)",
                b(c),
                p.out_of_memory
            );
        }
        (None, _) => {}
    }
    let _ = writeln!(s, "  recommendation: {}", p.recommendation);
    s
}
