//! Why reserved memory exceeds allocated memory at a given moment: the gap
//! split into hard, soft and stream fragmentation, the free blocks by
//! size, the allocation sites that pin free space, and a paragraph that
//! names the cause.
//!
//! Definitions (for the free bytes of the cache at that moment; they add
//! up to reserved minus allocated):
//!
//! - **stream fragmentation**: free bytes in segments of another stream
//!   than the request's; blocks are reused only by the stream that
//!   allocated them, so these are idle for it.
//! - **hard fragmentation**: free bytes of the request's stream that share
//!   a segment (for expandable segments, a page) with a live block: they
//!   cannot go back to the device until every live block beside them is
//!   freed, and they merge only with free neighbours.
//! - **soft fragmentation**: free bytes of the request's stream in whole
//!   free segments (or whole free pages): returnable to the device, but
//!   segments never merge, so a request larger than each of them still
//!   needs a new one. torch releases them (and retries) before it reports
//!   out of memory, so at an out-of-memory error this part is zero.

use std::collections::HashMap;

use serde::Serialize;

use super::trace::{Trace, TraceEvent};
use crate::caching::Platform;
use crate::caching::rules::{allocation_size, round_size_for};
use crate::caching::{BlockId, BlockState, CachingAllocator, CachingConfig, SegmentView};
use crate::units::format_bytes;

/// Upper ends of the free-block size classes (the last is open).
const CLASS_ENDS: [u64; 6] = [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30];

/// Free blocks of one size class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SizeClass {
    /// Smallest block size in the class.
    pub min: u64,
    /// One past the largest (`None`: no upper end).
    pub max: Option<u64>,
    /// Free blocks in it.
    pub blocks: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// Every size class, empty.
fn empty_classes() -> Vec<SizeClass> {
    (0..=CLASS_ENDS.len())
        .map(|k| SizeClass {
            min: if k == 0 { 0 } else { CLASS_ENDS[k - 1] },
            max: CLASS_ENDS.get(k).copied(),
            blocks: 0,
            bytes: 0,
        })
        .collect()
}

/// Free blocks of `sizes` by size class, the classes that hold any.
#[cfg(feature = "pickle")]
pub(super) fn size_classes(sizes: impl Iterator<Item = u64>) -> Vec<SizeClass> {
    let mut classes = empty_classes();
    for size in sizes {
        let k = CLASS_ENDS.partition_point(|&end| end <= size);
        classes[k].blocks += 1;
        classes[k].bytes += size;
    }
    classes.retain(|c| c.blocks > 0);
    classes
}

/// An allocation site and the free bytes its live blocks pin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SiteShare {
    /// `file:line in function`, from the snapshot's frames.
    pub site: String,
    /// Free bytes pinned: each segment's unreturnable free bytes, shared
    /// equally among the live blocks in it.
    pub stranded_bytes: u64,
    /// Its live blocks in such segments.
    pub blocks: usize,
    /// Segments it pins.
    pub segments: usize,
}

/// The request being explained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Request {
    /// Bytes asked for (the rounded size when only that is known).
    pub requested: u64,
    /// The rounded block size.
    pub size: u64,
    /// The segment the allocator asks the device for when no cached block
    /// fits.
    pub segment: u64,
    /// Its stream.
    pub stream: u32,
}

/// Which moment an [`Explanation`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Moment {
    /// When reserved memory reached its peak.
    PeakReserved,
    /// Where the model ran out of memory at the configured capacity.
    OutOfMemory,
    /// Where the recording allocator reported out of memory (snapshots).
    RecordedOutOfMemory,
}

/// The allocator's state at one moment, explained.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// Which moment.
    pub moment: Moment,
    /// The event index (for an out-of-memory error, the failing alloc).
    pub event: usize,
    /// The allocation made (peak) or refused (out of memory) there.
    pub request: Option<Request>,
    /// Device capacity of the model, if any.
    pub capacity: Option<u64>,
    /// `reserved_bytes` then.
    pub reserved: u64,
    /// `allocated_bytes` then (rounded block sizes).
    pub allocated: u64,
    /// `reserved - allocated`: the cache's free bytes.
    pub gap: u64,
    /// Part of `gap`: free bytes beside live blocks (see the module docs).
    pub hard_fragmentation: u64,
    /// Part of `gap`: free bytes in whole free segments or pages.
    pub soft_fragmentation: u64,
    /// Part of `gap`: free bytes cached for other streams.
    pub stream_fragmentation: u64,
    /// The largest cached free block (any stream).
    pub largest_free_block: u64,
    /// The largest cached free block of the request's stream.
    pub largest_free_block_on_stream: u64,
    /// Free blocks by size class (any stream).
    pub free_by_size: Vec<SizeClass>,
    /// Sites pinning the most free bytes, largest first (when the trace
    /// records sites).
    pub sites: Vec<SiteShare>,
    /// The cause, in plain language.
    pub summary: String,
}

/// Replays `trace` with `config` up to `event` and explains the state
/// there. For [`Moment::PeakReserved`] the event itself is replayed; for
/// [`Moment::OutOfMemory`] the allocation at `event` is attempted and
/// fails (the state is what torch leaves after releasing its cache and
/// retrying); for [`Moment::RecordedOutOfMemory`] the state before `event`
/// is explained against `request`.
pub fn explain_at(
    trace: &Trace,
    config: CachingConfig,
    moment: Moment,
    event: usize,
    request: Option<Request>,
    top_sites: usize,
) -> Explanation {
    let mut model = CachingAllocator::new(config);
    let mut ids: HashMap<usize, BlockId> = HashMap::new();
    let upto = match moment {
        Moment::PeakReserved => event.saturating_add(1),
        _ => event,
    }
    .min(trace.events().len());
    let mut request = request;
    for (at, e) in trace.events()[..upto].iter().enumerate() {
        if trace.releases_before(at) {
            model.empty_cache();
        }
        match *e {
            TraceEvent::Alloc(i) => {
                let a = &trace.allocations()[i];
                if let Ok(id) = model.malloc_on(a.size, a.stream) {
                    ids.insert(i, id);
                }
                if at == event {
                    request = Some(request_on(config.platform, a.size, a.stream));
                }
            }
            TraceEvent::Free(i) => {
                if let Some(id) = ids.remove(&i) {
                    model.free(id);
                }
            }
        }
    }
    if moment == Moment::OutOfMemory
        && let Some(TraceEvent::Alloc(i)) = trace.events().get(event)
    {
        let a = &trace.allocations()[*i];
        request = Some(request_on(config.platform, a.size, a.stream));
        if let Ok(id) = model.malloc_on(a.size, a.stream) {
            // It fits after all (a capacity other than the one that failed).
            ids.insert(*i, id);
        }
    }
    let owner: HashMap<BlockId, usize> = ids.iter().map(|(&i, &b)| (b, i)).collect();
    explain_state(&model, trace, &owner, moment, event, request, top_sites)
}

/// The request that an allocation of `requested` bytes makes under
/// torch_npu's rounding.
pub fn request_for(requested: u64, stream: u32) -> Request {
    request_on(Platform::Npu, requested, stream)
}

/// The request that an allocation of `requested` bytes makes on
/// `platform`.
pub fn request_on(platform: Platform, requested: u64, stream: u32) -> Request {
    let size = round_size_for(platform, requested);
    Request {
        requested,
        size,
        segment: allocation_size(size),
        stream,
    }
}

#[derive(Default)]
struct Parts {
    hard: u64,
    soft: u64,
    stream: u64,
}

/// Splits a segment's free bytes; returns the bytes its live blocks pin.
fn split_segment(seg: &SegmentView, stream: u32, parts: &mut Parts) -> u64 {
    let base = seg.blocks.first().map_or(0, |b| b.address);
    let live = seg.allocated_bytes() > 0;
    let mut pinned = 0;
    for b in seg.blocks.iter().filter(|b| b.state == BlockState::Free) {
        // Bytes of whole pages (expandable), or of the whole block when
        // the segment holds nothing live: returnable.
        let returnable = match seg.page {
            Some(p) => {
                let first = (b.address - base).div_ceil(p);
                let last = (b.address + b.size - base) / p;
                last.saturating_sub(first) * p
            }
            None if live => 0,
            None => b.size,
        };
        let stuck = b.size - returnable;
        pinned += stuck;
        if seg.stream != stream {
            parts.stream += b.size;
        } else {
            parts.hard += stuck;
            parts.soft += returnable;
        }
    }
    pinned
}

fn explain_state(
    model: &CachingAllocator,
    trace: &Trace,
    owner: &HashMap<BlockId, usize>,
    moment: Moment,
    event: usize,
    request: Option<Request>,
    top_sites: usize,
) -> Explanation {
    let stream = request.map_or(0, |r| r.stream);
    let stats = model.stats();
    let segments = model.segments();
    let mut parts = Parts::default();
    let mut classes = empty_classes();
    let mut largest_on_stream = 0;
    let mut by_site: HashMap<&str, SiteShare> = HashMap::new();
    for seg in &segments {
        let pinned = split_segment(seg, stream, &mut parts);
        for b in seg.blocks.iter().filter(|b| b.state == BlockState::Free) {
            let k = CLASS_ENDS.partition_point(|&end| end <= b.size);
            classes[k].blocks += 1;
            classes[k].bytes += b.size;
            if seg.stream == stream {
                largest_on_stream = largest_on_stream.max(b.size);
            }
        }
        if pinned == 0 || !trace.has_sites() {
            continue;
        }
        let holders: Vec<usize> = seg
            .blocks
            .iter()
            .filter_map(|b| match b.state {
                BlockState::Allocated(id) => owner.get(&id).copied(),
                _ => None,
            })
            .collect();
        let share = pinned / holders.len().max(1) as u64;
        let mut seen: Vec<&str> = Vec::new();
        for (k, &i) in holders.iter().enumerate() {
            let site = trace.site(i).unwrap_or("(no site recorded)");
            let extra = if k == 0 {
                pinned % holders.len().max(1) as u64
            } else {
                0
            };
            let entry = by_site.entry(site).or_insert_with(|| SiteShare {
                site: site.to_owned(),
                stranded_bytes: 0,
                blocks: 0,
                segments: 0,
            });
            entry.stranded_bytes += share + extra;
            entry.blocks += 1;
            if !seen.contains(&site) {
                entry.segments += 1;
                seen.push(site);
            }
        }
    }
    let mut sites: Vec<SiteShare> = by_site.into_values().collect();
    sites.sort_by(|a, b| {
        b.stranded_bytes
            .cmp(&a.stranded_bytes)
            .then(a.site.cmp(&b.site))
    });
    sites.truncate(top_sites);
    classes.retain(|c| c.blocks > 0);
    let reserved = stats.reserved_bytes.current;
    let allocated = stats.allocated_bytes.current;
    let mut e = Explanation {
        moment,
        event,
        request,
        capacity: model.config().capacity,
        reserved,
        allocated,
        gap: reserved.saturating_sub(allocated),
        hard_fragmentation: parts.hard,
        soft_fragmentation: parts.soft,
        stream_fragmentation: parts.stream,
        largest_free_block: model.largest_free_block(),
        largest_free_block_on_stream: largest_on_stream,
        free_by_size: classes,
        sites,
        summary: String::new(),
    };
    e.summary = summary(&e, model.config().platform);
    e
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// The plain-language paragraph.
fn summary(e: &Explanation, platform: Platform) -> String {
    let b = format_bytes;
    let mut out = String::new();
    let failed = e.moment != Moment::PeakReserved;
    match (e.moment, e.request) {
        (Moment::PeakReserved, _) => out.push_str(&format!(
            "At its peak the allocator reserved {} for {} of allocated blocks: {} ({:.0}% of the reservation) was cached but free.",
            b(e.reserved),
            b(e.allocated),
            b(e.gap),
            percent(e.gap, e.reserved)
        )),
        (_, Some(r)) => {
            out.push_str(&format!(
                "The request for {} (a {} block; with no cached block that fits, a new {} segment) failed with {} reserved and {} allocated",
                b(r.requested),
                b(r.size),
                b(r.segment),
                b(e.reserved),
                b(e.allocated)
            ));
            if let Some(c) = e.capacity {
                out.push_str(&format!(" of a {} device", b(c)));
            }
            out.push_str(&format!(
                ". The cache held {} free, and its largest free block on the request's stream was {}.",
                b(e.gap),
                b(e.largest_free_block_on_stream)
            ));
        }
        (_, None) => out.push_str("Out of memory."),
    }
    let whole = e.capacity.unwrap_or(e.reserved).max(1);
    if e.gap == 0 || percent(e.gap, whole) < 5.0 {
        out.push_str(if failed {
            " Live tensors fill the device: this is a real shortage, not fragmentation, and no allocator setting helps; the live set itself has to shrink (smaller batches, recomputation, offloading)."
        } else {
            " Almost nothing is stranded: the reservation follows the live tensors."
        });
        return out;
    }
    let parts = [
        (e.hard_fragmentation, "hard"),
        (e.soft_fragmentation, "soft"),
        (e.stream_fragmentation, "stream"),
    ];
    let Some(&(bytes, kind)) = parts.iter().max_by_key(|p| p.0) else {
        return out;
    };
    out.push_str(&format!(
        " Of the free bytes, {} is hard, {} soft and {} stream fragmentation;",
        b(e.hard_fragmentation),
        b(e.soft_fragmentation),
        b(e.stream_fragmentation)
    ));
    let share = percent(bytes, e.gap);
    out.push_str(&match kind {
        "hard" => format!(
            " the cause is hard fragmentation ({share:.0}%): free blocks interleaved with live ones inside segments that cannot be released while those live blocks exist, none large enough for the request. Tensors whose sizes change from step to step leave such holes."
        ),
        "soft" => format!(
            " the cause is soft fragmentation ({share:.0}%): whole cached segments, free but each too small for later requests, so the allocator kept adding segments (torch releases them only when a request fails, or on empty_cache())."
        ),
        _ => format!(
            " the cause is stream fragmentation ({share:.0}%): segments cached for other streams, which this stream cannot use."
        ),
    });
    if let Some(top) = e.sites.first() {
        out.push_str(&format!(
            " The site pinning the most free bytes is {} ({} across {} segment(s)).",
            top.site,
            b(top.stranded_bytes),
            top.segments
        ));
    }
    out.push_str(&format!(
        " Replay the trace with --sweep to see which {} setting (max_split_size_mb, garbage_collection_threshold, expandable_segments) needs the least memory, and what a planned arena needs.",
        platform.alloc_conf_var()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_parts_add_up_and_follow_the_definitions() {
        // Stream 0: a 20 MiB segment holding a and c with b's hole between
        // them (hard), and a whole free 2 MiB small segment (soft).
        // Stream 1: a 20 MiB segment, free (stream).
        let t = Trace::from_csv(
            "t",
            "alloc,s,1000\nfree,s\nalloc,a,6291456\nalloc,b,6291456\nalloc,c,6291456\nfree,b\nalloc,x,6291456,1\nfree,x\nalloc,d,100\n",
        )
        .unwrap();
        // After d (event 8), which reuses the small segment.
        let e = explain_at(
            &t,
            CachingConfig::default(),
            Moment::PeakReserved,
            8,
            None,
            5,
        );
        assert_eq!(e.request, Some(request_for(100, 0)));
        assert_eq!(e.reserved, 42 * MIB);
        assert_eq!(
            e.gap,
            e.hard_fragmentation + e.soft_fragmentation + e.stream_fragmentation
        );
        let b6 = 6_291_968;
        // Segment 1: b's hole and the tail; the small segment now holds d.
        assert_eq!(
            e.hard_fragmentation,
            b6 + (20 * MIB - 3 * b6) + (2 * MIB - 512)
        );
        assert_eq!(e.soft_fragmentation, 0);
        assert_eq!(e.stream_fragmentation, 20 * MIB);
        assert_eq!(e.largest_free_block, 20 * MIB);
        assert_eq!(e.largest_free_block_on_stream, b6);
        let blocks: usize = e.free_by_size.iter().map(|c| c.blocks).sum();
        assert_eq!(blocks, 4);
        // Stream 1's idle 20 MiB is the larger part.
        assert!(
            e.summary.contains("cause is stream fragmentation"),
            "{}",
            e.summary
        );
    }

    #[test]
    fn whole_free_segments_are_soft() {
        let t = Trace::from_csv("t", "alloc,a,3145728\nfree,a\nalloc,b,100\n").unwrap();
        let e = explain_at(
            &t,
            CachingConfig::default(),
            Moment::PeakReserved,
            2,
            None,
            5,
        );
        assert_eq!(e.soft_fragmentation, 20 * MIB);
        assert_eq!(e.hard_fragmentation, 2 * MIB - 512);
        assert!(e.summary.contains("soft fragmentation"), "{}", e.summary);
    }

    #[test]
    fn a_full_device_is_a_real_shortage() {
        let t = Trace::from_csv("t", "alloc,a,20971000\nalloc,b,20971000\n").unwrap();
        let config = CachingConfig {
            capacity: Some(20 * MIB),
            ..CachingConfig::default()
        };
        let e = explain_at(&t, config, Moment::OutOfMemory, 1, None, 5);
        assert_eq!(e.request.map(|r| r.segment), Some(20 * MIB));
        assert_eq!((e.reserved, e.allocated), (20 * MIB, 20 * MIB));
        assert!(e.summary.contains("real shortage"), "{}", e.summary);
    }
}
