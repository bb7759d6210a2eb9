//! One run of the default placement on generated large instances: copies of
//! idealloc's public instances at several time shifts and random interval
//! graphs, with the first placement (the sweep) beside it. The criterion
//! bench (`cargo bench --bench planner -- scale`) measures the same
//! instances; this prints one run of each in seconds.
//!
//! ```sh
//! cargo run --release --example plan_scale            # every instance
//! cargo run --release --example plan_scale -- Y_1x10  # those whose name contains it
//! ```

use std::time::Instant;

use tensor_arena::plan::placement::{self, GreedyOrder, Interval, Strategy};
use tensor_arena::plan::{families, minimalloc};

fn load_idealloc(name: &str) -> Result<Vec<Interval>, Box<dyn std::error::Error>> {
    let path = format!(
        "{}/tests/data/idealloc/{name}.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    Ok(minimalloc::parse(&std::fs::read_to_string(path)?)?.buffers)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let y_1 = load_idealloc("Y_1")?;
    let s_1 = load_idealloc("S_1")?;
    let mut cases: Vec<(String, Vec<Interval>)> = vec![
        ("S_1".into(), s_1),
        ("Y_1".into(), y_1.clone()),
        ("Y_1x10/shift1".into(), families::copies(&y_1, 10, 1.0)),
    ];
    for shift in [0.5, 0.25, 0.1] {
        cases.push((
            format!("Y_1x10/shift{shift}"),
            families::copies(&y_1, 10, shift),
        ));
    }
    cases.push((
        "Y_1x16/shift0.5 (1.0M)".into(),
        families::copies(&y_1, 16, 0.5),
    ));
    cases.push(("random/1M".into(), families::random_run(1_000_000, 7)));
    // A name given exactly runs that instance alone; otherwise every
    // instance whose name contains the argument.
    let exact = cases.iter().any(|(n, _)| *n == filter);
    let chosen = cases.iter().filter(|(n, _)| {
        if exact {
            *n == filter
        } else {
            n.contains(&filter)
        }
    });
    for (name, items) in chosen {
        let bound = placement::lower_bound(items);
        let t = Instant::now();
        let sweep = placement::greedy(items, GreedyOrder::Start);
        let sweep_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let solution = placement::solve(items, &Strategy::default())?;
        let auto_s = t.elapsed().as_secs_f64();
        placement::validate(items, &solution.offsets, None)?;
        println!(
            "{name}: {} buffers, sweep {:.5}x in {sweep_s:.2} s, default {:.5}x in {auto_s:.2} s ({} rounds)",
            items.len(),
            placement::height(items, &sweep) as f64 / bound as f64,
            solution.height as f64 / bound as f64,
            solution.rounds,
        );
    }
    Ok(())
}
