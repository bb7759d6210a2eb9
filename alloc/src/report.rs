//! What the allocator tells: the text report, the report JSON and a memory
//! snapshot in the shape of `torch.cuda.memory._snapshot()`.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{Value, json};
use tensor_arena::caching::BlockState;
use tensor_arena::units::format_bytes;

use crate::allocator::PlannedAllocator;
use crate::fallback::Fallback;
use crate::stats::Stats;

/// The report as text, for people.
pub fn text(s: &Stats, platform: &str) -> String {
    let mut out = String::new();
    let pct = |x: f64| format!("{:.2}%", x * 100.0);
    let _ = writeln!(
        out,
        "tensor-arena planned allocator: backing {}, fallback rules {platform}, phase {}, checked {}",
        s.backing, s.phase, s.checked
    );
    let _ = writeln!(
        out,
        "steps {}, requests {}; in steps after warm-up {}, served from the plan {} ({})",
        s.steps,
        s.requests,
        s.requests_after_warmup,
        s.served_from_plan,
        s.served_share
            .map_or_else(|| "no request served yet".to_owned(), pct)
    );
    let m = &s.misses;
    let _ = writeln!(
        out,
        "misses: size {}, order {}, unmatched {}, overlap {}, other stream {}, outside a step {}",
        m.size, m.order, m.unmatched, m.overlap, m.stream, m.outside_step
    );
    let _ = writeln!(
        out,
        "plans {} (re-plans {}), {} sites; slab {} = {:.4} x the recorded steps' lower bound ({})",
        s.plans,
        s.replans,
        s.plan_sites,
        format_bytes(s.slab_bytes),
        s.slab_ratio,
        format_bytes(s.lower_bound)
    );
    let _ = writeln!(
        out,
        "reserved now {} (slab region {}, fallback {})",
        format_bytes(s.reserved_bytes),
        format_bytes(s.region_bytes),
        format_bytes(s.fallback_reserved_bytes),
    );
    match &s.current_plan {
        Some(w) if w.peak_reserved_bytes > 0 => {
            let _ = writeln!(
                out,
                "current plan, steps {} on: peak reserved {}, peak live {}: fragmentation {}",
                w.since_step,
                format_bytes(w.peak_reserved_bytes),
                format_bytes(w.peak_live_bytes),
                pct(w.fragmentation)
            );
        }
        _ => {
            let _ = writeln!(out, "current plan: no whole step served yet");
        }
    }
    let _ = writeln!(out, "{}", whole_run_line(s));
    if s.peak_reserved_bytes > 0 {
        let (c, e) = (&s.caching_model, &s.expandable_model);
        let _ = writeln!(
            out,
            "whole run, fragmentation: {} planned (peak live {}) vs {} caching allocator model ({} rules), {} with expandable segments",
            pct(s.fragmentation),
            format_bytes(s.peak_live_bytes),
            pct(c.fragmentation),
            c.platform,
            pct(e.fragmentation),
        );
    }
    let calls = &s.backing_calls;
    let _ = writeln!(
        out,
        "device calls over the whole run: {} ({} regions reserved, {} released, {} maps, {} unmaps, {} address ranges, {} event calls), {} in the last step, at most {} in a steady step ({} steady steps with any); estimated {:.3} ms on the device{}",
        calls.memory(),
        calls.reserve,
        calls.release,
        calls.map,
        calls.unmap,
        calls.reserve_address + calls.release_address,
        calls.event_record + calls.event_query + calls.event_destroy,
        s.backing_calls_last_step,
        s.backing_calls_max_steady_step,
        s.steady_steps_with_backing_calls,
        1000.0 * s.device_call_seconds_estimate,
        s.map_granularity.map_or_else(
            || ", whole regions".to_owned(),
            |g| format!(", one mapped range of {} pages", format_bytes(g))
        ),
    );
    let _ = writeln!(
        out,
        "backing reservations {} ({} in the last step); fallback allocations in the last serving step {} (most in one: {})",
        s.backing_reservations,
        s.backing_reservations_last_step,
        s.fallback_allocations_last_step,
        s.fallback_allocations_max_step
    );
    let e = &s.errors;
    let _ = writeln!(
        out,
        "errors: unknown free {}, double free {}, size 0 {}, too large {}, out of memory {}, guard {}, step order {}, re-plan failed {}",
        e.unknown_free,
        e.double_free,
        e.zero_size,
        e.too_large,
        e.out_of_memory,
        e.guard_violations,
        e.step_order,
        e.replan_failed
    );
    out
}

/// The line that compares the whole run with the caching allocator: the
/// same window (every request from the first on) for all three figures.
///
/// ```
/// use tensor_arena_alloc::{Config, PlannedAllocator, report};
/// let mut a = PlannedAllocator::new(Config::default())?;
/// let x = a.alloc(3 << 20, 0, 0).unwrap();
/// a.free(x);
/// let line = report::whole_run_line(&a.stats());
/// assert!(line.starts_with("whole run: peak reserved 3.00 MiB planned vs 20.00 MiB caching allocator model"));
/// # Ok::<(), tensor_arena_alloc::Error>(())
/// ```
pub fn whole_run_line(s: &Stats) -> String {
    let mib = |b: u64| format!("{:.2}", b as f64 / (1u64 << 20) as f64);
    format!(
        "whole run: peak reserved {} MiB planned vs {} MiB caching allocator model ({} MiB with expandable segments), lower bound {} MiB",
        mib(s.peak_reserved_bytes),
        mib(s.caching_model.peak_reserved_bytes),
        mib(s.expandable_model.peak_reserved_bytes),
        mib(s.lower_bound_bytes),
    )
}

/// The report JSON: the stats, the text and the plan's figures.
pub fn json(a: &PlannedAllocator) -> Value {
    let stats = a.stats();
    let text = text(&stats, a.platform().name());
    let plan = a.slab().map(|s| {
        json!({
            "steps": s.plan.steps,
            "sites": s.plan.sites.len(),
            "stream": s.plan.stream,
            "slab_bytes": s.plan.slab_bytes,
            "lower_bound": s.plan.lower_bound,
            "union_lower_bound": s.plan.union_lower_bound,
            "optimal": s.plan.optimal,
            "placement_seconds": s.plan.placement_seconds,
            "unplanned_sites": s.plan.sites.iter().filter(|x| x.unplanned.is_some()).count(),
        })
    });
    json!({ "stats": stats, "plan": plan, "text": text })
}

/// A snapshot in the shape of `torch.cuda.memory._snapshot()`: the slab
/// (and any retiring slab) as one segment each, the fallback's segments
/// as the model lays them out, at their real addresses. Traces are not
/// kept (`device_traces` holds one empty list).
pub fn snapshot(a: &PlannedAllocator, device: i32) -> Value {
    // Host memory has no device index; snapshot readers (torch's, the
    // doctor) expect device 0.
    let device = device.max(0);
    let mut segments = Vec::new();
    if let Some(slab) = a.slab() {
        let mut live: Vec<(usize, u64, u64)> = slab.live_blocks().collect();
        live.sort_unstable();
        // One segment per region of the slab (more than one after a re-plan
        // grew it), its live blocks and the gaps between them.
        for (base, len) in slab.regions() {
            let end = base + len as usize;
            let mut blocks = Vec::new();
            let mut at = base;
            let (mut allocated, mut requested) = (0u64, 0u64);
            for &(addr, slot, size) in live.iter().filter(|b| b.0 >= base && b.0 < end) {
                if addr > at {
                    blocks.push(block(at, (addr - at) as u64, 0, "inactive"));
                }
                blocks.push(block(addr, slot, size, "active_allocated"));
                allocated += slot;
                requested += size;
                at = addr + slot as usize;
            }
            if end > at {
                blocks.push(block(at, (end - at) as u64, 0, "inactive"));
            }
            segments.push(segment(
                device, base, len, allocated, requested, "large", blocks,
            ));
        }
    }
    for fallback in [a.fallback(), a.scratch()] {
        fallback_segments(fallback, device, &mut segments);
    }
    for (addr, requested, bytes) in a.exact().regions() {
        let b = vec![block(addr, bytes, requested, "active_allocated")];
        segments.push(segment(device, addr, bytes, bytes, requested, "large", b));
    }
    json!({
        "segments": segments,
        "device_traces": [[]],
        "allocator_settings": { "tensor_arena_planned_allocator": a.config() },
    })
}

fn fallback_segments(fallback: &Fallback, device: i32, segments: &mut Vec<Value>) {
    let requested: HashMap<usize, u64> = fallback.live().map(|(&addr, b)| (addr, b.size)).collect();
    for (real, seg) in fallback.segments() {
        let Some(start) = seg.blocks.first().map(|b| b.address) else {
            continue;
        };
        let (mut allocated, mut req_total, mut total) = (0u64, 0u64, 0u64);
        let mut blocks = Vec::new();
        for b in &seg.blocks {
            let addr = real + (b.address - start) as usize;
            total += b.size;
            match b.state {
                BlockState::Allocated(_) => {
                    let r = requested.get(&addr).copied().unwrap_or(b.size);
                    allocated += b.size;
                    req_total += r;
                    blocks.push(block(addr, b.size, r, "active_allocated"));
                }
                BlockState::Free => blocks.push(block(addr, b.size, 0, "inactive")),
                BlockState::Unmapped => {}
            }
        }
        let pool = if seg.small { "small" } else { "large" };
        segments.push(segment(
            device, real, total, allocated, req_total, pool, blocks,
        ));
    }
}

fn block(addr: usize, size: u64, requested: u64, state: &str) -> Value {
    json!({
        "address": addr,
        "size": size,
        "requested_size": requested,
        "state": state,
        "frames": [],
    })
}

fn segment(
    device: i32,
    addr: usize,
    total: u64,
    allocated: u64,
    requested: u64,
    pool: &str,
    blocks: Vec<Value>,
) -> Value {
    json!({
        "device": device,
        "address": addr,
        "total_size": total,
        "allocated_size": allocated,
        "active_size": allocated,
        "requested_size": requested,
        "stream": 0,
        "segment_type": pool,
        "segment_pool_id": [0, 0],
        "is_expandable": false,
        "frames": [],
        "blocks": blocks,
    })
}
