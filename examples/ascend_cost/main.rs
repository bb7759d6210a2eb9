//! What the AscendC kernels of `kernels/ascend/` would cost on an Ascend
//! 910B2, by the CPU shim's cost model.
//!
//! **An estimate, not a measurement.** The kernels run on the CPU against
//! the shim (`kernels/shim/`), which charges every instruction the cycles
//! the AscendC documentation gives for it (more where two sources share a
//! UB bank group, by the arch-2201 rule), a per-instruction issue cost and
//! the read and write bandwidths of asc-devkit's measured A2 Add example,
//! and lets the scalar, vector, MTE2 and MTE3 pipes overlap as far as the
//! kernel's handshakes allow (model and sources:
//! `kernels/shim/ta_shim/cost.h`). Nothing here has run on an NPU.
//!
//! ```sh
//! cargo run --release --example ascend_cost            # a table
//! cargo run --release --example ascend_cost -- --json  # for tools
//! cargo run --release --example ascend_cost -- --elements 1048576
//! ```
//!
//! `--json` prints an array of objects with the keys `kernel`, `dtype`,
//! `elements`, `cycles_per_element` (per core), `est_elements_per_s` (all
//! cores), `hbm_bound_elements_per_s` (the nominal 1.6 TB/s over the bytes
//! moved per element), `bank_conflict_factor` (the slowest core's vector
//! repeat cycles with bank conflicts over those without) and
//! `issue_cycles` (its vector issue cycles per element it owns), all of
//! them estimates of the model. The table adds the u8-mask kernels, which
//! the JSON leaves out.

// The tests' loader for the shim libraries, shared rather than copied.
#[path = "../../tests/support/shim.rs"]
mod shim;

mod cases;

use std::process::ExitCode;

use cases::{Case, Figures};

/// Elements per call: 64 Mi, the size the kernel targets are set at.
const DEFAULT_ELEMENTS: usize = 64 << 20;

struct Args {
    json: bool,
    elements: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        json: false,
        elements: DEFAULT_ELEMENTS,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => args.json = true,
            "--elements" => {
                let v = it.next().ok_or("--elements needs a count")?;
                args.elements = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or(format!("--elements: '{v}' is not a positive count"))?;
            }
            "-h" | "--help" => {
                return Err("usage: ascend_cost [--json] [--elements N]".into());
            }
            other => return Err(format!("unknown argument '{other}' (try --help)")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if option_env!("TENSOR_ARENA_SHIM_KERNELS").is_none() {
        eprintln!(
            "the AscendC shim was not built (build.rs needs a C++ compiler such as g++); \
             no cost figures without it"
        );
        return ExitCode::from(2);
    }
    let lib = shim::kernels();
    let (clock, cores, hbm) = lib.cost_params();
    let mut rows = Vec::new();
    for case in cases::all() {
        if args.json && !case.in_json {
            continue;
        }
        match case.run(lib, args.elements, clock, cores, hbm) {
            Ok(f) => rows.push((case, f)),
            Err(e) => {
                eprintln!("{} {}: {e}", case.kernel, case.dtype);
                return ExitCode::FAILURE;
            }
        }
    }
    if args.json {
        print_json(&rows);
    } else {
        print_table(&rows, args.elements, clock, cores, hbm);
    }
    ExitCode::SUCCESS
}

fn print_json(rows: &[(Case, Figures)]) {
    let out: Vec<serde_json::Value> = rows
        .iter()
        .map(|(c, f)| {
            serde_json::json!({
                "kernel": c.kernel,
                "dtype": c.dtype,
                "elements": f.elements,
                "cycles_per_element": f.cycles_per_element,
                "est_elements_per_s": f.est_elements_per_s,
                "hbm_bound_elements_per_s": f.hbm_bound_elements_per_s,
                "bank_conflict_factor": f.bank_conflict_factor,
                "issue_cycles": f.issue_cycles,
            })
        })
        .collect();
    println!("{}", serde_json::Value::Array(out));
}

fn print_table(rows: &[(Case, Figures)], elements: usize, clock: f64, cores: u32, hbm: f64) {
    println!(
        "ESTIMATES by the AscendC shim's cost model (not measured; never run on an NPU): \
         {elements} elements, 910B2 model: {cores} vector cores at {:.2} GHz, HBM {:.2} TB/s",
        clock / 1e9,
        hbm / 1e12
    );
    println!(
        "{:<18} {:<5} {:>10} {:>9} {:>12} {:>12} {:>9} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7}",
        "kernel",
        "dtype",
        "cyc/elem",
        "bound",
        "est G/s",
        "HBM G/s",
        "HBM/est",
        "bank",
        "issue",
        "S %",
        "V %",
        "MTE2 %",
        "MTE3 %"
    );
    for (c, f) in rows {
        println!(
            "{:<18} {:<5} {:>10.4} {:>9} {:>12.2} {:>12.2} {:>8.2}x {:>6.3} {:>7.4} {:>7.1} {:>7.1} {:>7.1} {:>7.1}",
            c.kernel,
            c.dtype,
            f.cycles_per_element,
            f.bound_by(),
            f.est_elements_per_s / 1e9,
            f.hbm_bound_elements_per_s / 1e9,
            f.hbm_bound_elements_per_s / f.est_elements_per_s,
            f.bank_conflict_factor,
            f.issue_cycles,
            f.busy_percent[0],
            f.busy_percent[1],
            f.busy_percent[2],
            f.busy_percent[3],
        );
    }
    println!(
        "cyc/elem: cycles of the slowest core per element it owns; bound: its busiest pipe; \
         est G/s: all cores; HBM G/s: the nominal 1.6 TB/s over the bytes moved per element \
         (copies run at the measured 1.456 TB/s read and 1.105 TB/s write, each on its own \
         link, so a kernel can beat it); bank: vector repeat cycles with UB bank conflicts over \
         those without; issue: vector issue cycles per element; pipe %: busy cycles of the \
         slowest core over its total"
    );
    print_dropout_pair(rows);
}

/// Dropout forward + backward per element, by the model: the fused kernel
/// twice (the backward regenerates the stream) against the forward that
/// writes a 1-bit mask and a backward that applies it.
fn print_dropout_pair(rows: &[(Case, Figures)]) {
    let cycles = |kernel: &str, dtype: &str| {
        rows.iter()
            .find(|(c, _)| c.kernel == kernel && c.dtype == dtype)
            .map(|(_, f)| f.cycles_per_element)
    };
    for dtype in ["f32", "f16", "bf16"] {
        let fused = cycles("dropout", dtype).zip(cycles("dropout_backward", dtype));
        let split = cycles("dropout_bitmask", dtype).zip(cycles("apply_bitmask", dtype));
        if let (Some((f, b)), Some((sf, sb))) = (fused, split) {
            println!(
                "dropout {dtype} forward + backward, cycles per element per core (estimate): \
                 regenerated mask {:.3}, 1-bit mask {:.3} ({:.2}x), for n / 8 bytes of mask",
                f + b,
                sf + sb,
                (f + b) / (sf + sb)
            );
        }
    }
}
