//! The default placement on instance families built from every public
//! instance in the repository (`plan::families`): MiniMalloc's A-F
//! (tests/data/minimalloc), idealloc's G_1, S_1, Y_1 (tests/data/idealloc)
//! and the allocator suite's 18 recorded traces as instances
//! (alloc/tests/data/loops), as copies at shifts 1, 0.5, 0.25, 0.1 (2 to 40
//! copies), two interleaved, random subsets and scaled sizes. Prints every
//! instance, then the distribution of the ratio to the load bound (the most
//! bytes live at once) and of the time, and the worst instances by name.
//!
//! ```sh
//! cargo run --release --example plan_families -- --seed 1 --count 40
//! cargo run --release --example plan_families -- --table    # issue 39's table
//! cargo run --release --example plan_families -- --count 8 --max-buffers 20000
//! ```
//!
//! Flags: `--seed S` (default 1), `--count N` (default 30), `--max-buffers M`
//! (default 1,000,000), `--table` (the named instances of issue 39 instead of
//! a draw), `--filter TEXT` (only instances whose name contains it),
//! `--bound SECONDS` (for instances above 1.02x, a stronger lower bound by
//! the exact search on samples and on the busiest times, within that time,
//! and how far down from the busiest times the load bound is reachable),
//! `--base NAME --copies K --shift S` (one family member instead of a
//! draw, e.g. `--base D --copies 2 --shift 0.25`; `--copies 1` is the base
//! alone), `--time SECONDS` (the default strategy's time limit, 10 s unless
//! given: how a ratio moves with more time).

use std::io::Read;
use std::time::{Duration, Instant};

use tensor_arena::plan::families::{self, Base, Instance};
use tensor_arena::plan::minimalloc;
use tensor_arena::plan::placement::{self, Interval, Strategy};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn root() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

fn load_csv(path: &str) -> Res<Vec<Interval>> {
    Ok(minimalloc::parse(&std::fs::read_to_string(path)?)?.buffers)
}

/// Every public instance: MiniMalloc's, idealloc's, the suite's traces.
fn bases() -> Res<Vec<Base>> {
    let mut out = Vec::new();
    for name in ["A", "B", "C", "D", "E", "F"] {
        let path = format!("{}/tests/data/minimalloc/{name}.1048576.csv", root());
        out.push(Base {
            name: name.into(),
            items: load_csv(&path)?,
        });
    }
    for name in ["G_1", "S_1", "Y_1"] {
        let path = format!("{}/tests/data/idealloc/{name}.csv", root());
        out.push(Base {
            name: name.into(),
            items: load_csv(&path)?,
        });
    }
    let dir = format!("{}/alloc/tests/data/loops", root());
    let mut traces: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".csv.gz"))
        .collect();
    traces.sort();
    for path in traces {
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(std::fs::File::open(&path)?).read_to_string(&mut text)?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("trace")
            .trim_end_matches(".csv.gz")
            .to_owned();
        out.push(Base {
            name,
            items: families::from_trace(&text),
        });
    }
    Ok(out)
}

/// The instances of issue 39's table, and the Y_1 copies of issue 33.
fn table(bases: &[Base]) -> Vec<Instance> {
    let get = |n: &str| {
        bases
            .iter()
            .find(|b| b.name == n)
            .map(|b| b.items.clone())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for (base, k, shift) in [
        ("S_1", 1, 1.0),
        ("S_1", 10, 1.0),
        ("S_1", 4, 0.5),
        ("S_1", 10, 0.5),
        ("S_1", 10, 0.25),
        ("S_1", 20, 0.4),
        ("G_1", 40, 0.5),
        ("Y_1", 10, 1.0),
        ("Y_1", 10, 0.5),
    ] {
        out.push(Instance {
            name: format!("{base} x{k} shift{shift}"),
            base: base.into(),
            items: families::copies(&get(base), k, shift),
        });
    }
    out
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let seed: u64 = flag("--seed").map_or(Ok(1), |s| s.parse())?;
    let count: usize = flag("--count").map_or(Ok(30), |s| s.parse())?;
    let max_buffers: usize = flag("--max-buffers").map_or(Ok(1_000_000), |s| s.parse())?;
    let bound_s: f64 = flag("--bound").map_or(Ok(0.0), |s| s.parse())?;
    let time_s: f64 = flag("--time").map_or(Ok(10.0), |s| s.parse())?;
    let strategy = Strategy::default().with_time_limit(Duration::try_from_secs_f64(time_s)?);
    let filter = flag("--filter").unwrap_or_default();
    let bases = bases()?;
    let instances = if let Some(name) = flag("--base") {
        // One named family member: `--base D --copies 2 --shift 0.25`.
        let k: usize = flag("--copies").map_or(Ok(1), |s| s.parse())?;
        let shift: f64 = flag("--shift").map_or(Ok(1.0), |s| s.parse())?;
        let base = bases
            .iter()
            .find(|b| b.name == name)
            .ok_or_else(|| format!("no base named {name}"))?;
        vec![Instance {
            name: format!("{name} x{k} shift{shift}"),
            base: name.clone(),
            items: families::copies(&base.items, k, shift),
        }]
    } else if args.iter().any(|a| a == "--table") {
        table(&bases)
    } else {
        families::draw(&bases, seed, count, max_buffers)
    };
    let mut rows = Vec::new();
    let mut misses = 0usize;
    for inst in instances.iter().filter(|i| i.name.contains(&filter)) {
        let items = &inst.items;
        let bound = placement::lower_bound(items);
        let t = Instant::now();
        let solution = placement::solve(items, &strategy)?;
        let secs = t.elapsed().as_secs_f64();
        placement::validate(items, &solution.offsets, None)?;
        let ratio = solution.height as f64 / bound.max(1) as f64;
        let mut line = format!(
            "{:<44} {:>9} buffers  {ratio:.5}x  {secs:6.2} s",
            inst.name,
            items.len()
        );
        if solution.proven_bound > bound {
            line += &format!(
                "  (proven bound {:.5}x the load bound)",
                solution.proven_bound as f64 / bound as f64
            );
        }
        // The issue's target: at most 1.02x the load bound, or within 1%
        // of a stronger bound shown.
        let mut missed = ratio > 1.02;
        if bound_s > 0.0 && ratio > 1.02 {
            let half = Duration::from_secs_f64(bound_s / 2.0);
            let window = placement::window_bound(items, half);
            let peak = placement::peak_bound_detail(items, half);
            let stronger = window.max(peak.bound).max(bound);
            line += &format!(
                "  stronger bound {:.5}x (window {:.5}x, peak {:.5}x), ratio to it {:.5}x",
                stronger as f64 / bound as f64,
                window as f64 / bound as f64,
                peak.bound as f64 / bound as f64,
                solution.height as f64 / stronger as f64
            );
            missed = solution.height as f64 > 1.01 * stronger as f64;
            if let Some(share) = peak.at_load_down_to {
                // The busy times alone fit the load bound: the excess is
                // not forced there.
                line += &format!("; times >= {share:.2}x load placed at the load bound");
            }
        }
        println!("{line}");
        rows.push((inst.name.clone(), ratio, secs));
        misses += usize::from(missed);
    }
    let mut ratios: Vec<f64> = rows.iter().map(|r| r.1).collect();
    let mut times: Vec<f64> = rows.iter().map(|r| r.2).collect();
    ratios.sort_by(f64::total_cmp);
    times.sort_by(f64::total_cmp);
    println!(
        "\n{} instances: ratio median {:.5}x p90 {:.5}x max {:.5}x; time median {:.2} s p90 {:.2} s max {:.2} s",
        rows.len(),
        quantile(&ratios, 0.5),
        quantile(&ratios, 0.9),
        quantile(&ratios, 1.0),
        quantile(&times, 0.5),
        quantile(&times, 0.9),
        quantile(&times, 1.0),
    );
    println!(
        "above 1.02x: {}; above 10 s: {}",
        rows.iter().filter(|r| r.1 > 1.02).count(),
        rows.iter().filter(|r| r.2 > 10.0).count()
    );
    if bound_s > 0.0 {
        println!("above 1.02x and more than 1% above the stronger bound: {misses}");
    }
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("worst by ratio:");
    for (name, ratio, secs) in rows.iter().take(5) {
        println!("  {name}: {ratio:.5}x in {secs:.2} s");
    }
    Ok(())
}
