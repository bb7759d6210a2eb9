//! The SVG timeline of a diagnosis: allocated and reserved memory of the
//! caching-allocator model against the arena's constant slab, and the
//! model's segment count below. Drawn with plotters' SVG backend only:
//! text is written as SVG `<text>`, so no font files are read.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::Diagnosis;
use crate::error::{Error, Result};

const RESERVED: RGBColor = RGBColor(214, 39, 40);
const ALLOCATED: RGBColor = RGBColor(31, 119, 180);
const ARENA: RGBColor = RGBColor(44, 160, 44);
const RECORDED: RGBColor = RGBColor(255, 127, 14);
const CAPACITY: RGBColor = RGBColor(90, 90, 90);

/// Draws the timeline of `d` as an SVG document of `width` x `height`
/// pixels.
///
/// ```
/// use tensor_arena::diag::{diagnose, timeline_svg, DiagnoseOptions, Trace};
/// let t = Trace::from_csv("t", "alloc,a,6291456\nalloc,b,6291456\nfree,a\nalloc,c,7340032\n")?;
/// let svg = timeline_svg(&diagnose(&t, &DiagnoseOptions::default())?, 800, 500)?;
/// assert!(svg.starts_with("<svg") && svg.contains("reserved"));
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn timeline_svg(d: &Diagnosis, width: u32, height: u32) -> Result<String> {
    if !(200..=20_000).contains(&width) || !(150..=20_000).contains(&height) {
        return Err(Error::InvalidArgument {
            what: "SVG size",
            value: format!("{width}x{height}"),
            reason: "width must be 200 to 20000 pixels, height 150 to 20000".to_owned(),
        });
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        draw(d, &root, height).map_err(|e| Error::Plot {
            message: e.to_string(),
        })?;
        root.present().map_err(|e| Error::Plot {
            message: e.to_string(),
        })?;
    }
    Ok(svg)
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

fn draw(d: &Diagnosis, root: &DrawingArea<SVGBackend<'_>, Shift>, height: u32) -> DrawResult {
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(height * 7 / 10);
    let events = d.trace.events.max(1) as f64;
    let cap = d.model.config.capacity.unwrap_or(0);
    let recorded_max = d
        .recorded_reserved
        .iter()
        .flatten()
        .map(|&(_, v)| v)
        .max()
        .unwrap_or(0);
    let max = [
        d.model.stats.reserved_bytes.peak,
        d.arena.slab_bytes,
        cap,
        recorded_max,
    ]
    .into_iter()
    .max()
    .unwrap_or(0)
    .max(1);
    let (unit, unit_name) = if max >= 2 << 30 {
        ((1u64 << 30) as f64, "GiB")
    } else {
        ((1u64 << 20) as f64, "MiB")
    };
    let y = |v: u64| v as f64 / unit;
    let y_max = y(max) * 1.08;
    let title = format!(
        "{}: caching allocator vs planned arena",
        short(&d.trace.name)
    );
    let mut chart = ChartBuilder::on(&top)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(28)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..events, 0f64..y_max)?;
    chart
        .configure_mesh()
        .y_desc(unit_name)
        .x_labels(8)
        .y_labels(8)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|v| {
            if unit_name == "GiB" {
                format!("{v:.1}")
            } else {
                format!("{v:.0}")
            }
        })
        .draw()?;
    let series =
        |f: fn(&super::Sample) -> u64| steps(d.timeline.iter().map(|s| (s.event, y(f(s)))), events);
    chart
        .draw_series(LineSeries::new(
            series(|s| s.reserved),
            RESERVED.stroke_width(2),
        ))?
        .label("reserved (caching allocator)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RESERVED.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(
            series(|s| s.allocated),
            ALLOCATED.stroke_width(2),
        ))?
        .label("allocated (caching allocator)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], ALLOCATED.stroke_width(2)));
    let slab = y(d.arena.slab_bytes);
    chart
        .draw_series(LineSeries::new(
            [(0.0, slab), (events, slab)],
            ARENA.stroke_width(2),
        ))?
        .label("planned arena (one slab)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], ARENA.stroke_width(2)));
    if let Some(recorded) = &d.recorded_reserved {
        let line = steps(recorded.iter().map(|&(at, v)| (at, y(v))), events);
        chart
            .draw_series(LineSeries::new(line, RECORDED.stroke_width(1)))?
            .label("reserved (recorded)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RECORDED));
    }
    if cap > 0 {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, y(cap)), (events, y(cap))],
                6,
                4,
                CAPACITY.stroke_width(1),
            ))?
            .label("device capacity")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], CAPACITY));
    }
    if let Some(oom) = &d.model.oom {
        let x = oom.event as f64;
        chart.draw_series(LineSeries::new(
            [(x, 0.0), (x, y_max)],
            BLACK.stroke_width(1),
        ))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("OOM at event {}", oom.event),
            (x, y_max * 0.96),
            ("sans-serif", 13),
        )))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;

    let seg_max = d.model.peak_segments.max(1) as f64 * 1.15;
    let mut seg = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(28)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..events, 0f64..seg_max)?;
    seg.configure_mesh()
        .y_desc("segments")
        .x_desc("event")
        .x_labels(8)
        .y_labels(4)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    seg.draw_series(LineSeries::new(
        steps(
            d.timeline.iter().map(|s| (s.event, s.segments as f64)),
            events,
        ),
        RESERVED.stroke_width(1),
    ))?
    .label("segments (caching allocator)")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RESERVED));
    seg.draw_series(LineSeries::new(
        [(0.0, 1.0), (events, 1.0)],
        ARENA.stroke_width(1),
    ))?
    .label("arena")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], ARENA));
    seg.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// A step line through `(event, value)` points: each value holds until
/// the next event, the last one until `end`.
fn steps(points: impl Iterator<Item = (usize, f64)>, end: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (at, v) in points {
        if let Some(&(_, prev)) = out.last() {
            out.push((at as f64, prev));
        }
        out.push((at as f64, v));
    }
    if let Some(&(_, last)) = out.last() {
        out.push((end, last));
    }
    out
}

/// A trace name short enough for a title.
fn short(name: &str) -> String {
    const MAX: usize = 100;
    if name.chars().count() <= MAX {
        name.to_owned()
    } else {
        let cut: String = name.chars().take(MAX - 3).collect();
        format!("{cut}...")
    }
}
