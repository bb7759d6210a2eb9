//! mask-and-train: the project's main job. Trains a real model (a token MLP
//! with input masking, dropout, mean pooling and a linear head, on synthetic
//! sequences of varying length) with every tensor of a step leased from a
//! planned arena, evaluates it every few steps on larger held-out batches in
//! mode `eval` of the same arena, and measures that steady-state steps of
//! both modes allocate nothing.
//!
//! ```sh
//! cargo run --release --example mask_and_train
//! cargo run --release --example mask_and_train -- --naive   # compare with the allocating loop
//! cargo run --release --example mask_and_train -- --device ascend       # needs CANN and an NPU
//! cargo run --release --example mask_and_train -- --device ascend-sim   # the CPU simulation (a test double)
//! cargo run --release --example mask_and_train -- --help
//! ```

mod ascend;
mod backend;
mod data;
mod model;
mod naive;
mod record_train;
mod train;

use std::path::PathBuf;
use std::process::ExitCode;

use backend::Setup;
use tensor_arena::CountingAllocator;
use tensor_arena::device::ascend::AscendConfig;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const HELP: &str = "\
mask-and-train: train a token MLP in arena step scopes, with zero per-step allocation

USAGE:
    cargo run --release --example mask_and_train -- [OPTIONS]

OPTIONS:
    --steps N        training steps (default 600)
    --batch N        largest batch; the last batch of each epoch is smaller (default 64)
    --seed N         seed for data, weights and masks (default 42)
    --device NAME    host (default); ascend: the whole step on an Ascend NPU through
                     ACL (our AscendC kernels and CANN aclnn operators), failing
                     when no CANN runtime is found; ascend-sim: the same step on the
                     CPU simulation of the ACL runtime built with the crate (a test
                     double, not an NPU)
    --acl-lib PATH   ascend: the ACL runtime library to load (libascendcl.so or
                     libacl_rt.so; also TENSOR_ARENA_ACL_LIB). Default: searched in
                     $ASCEND_HOME_PATH/lib64, $ASCEND_TOOLKIT_HOME/lib64,
                     /usr/local/Ascend/cann/lib64,
                     /usr/local/Ascend/ascend-toolkit/latest/lib64, LD_LIBRARY_PATH
    --acl-dir DIR    ascend: a directory searched first for the runtime and aclnn libraries
    --kernel-lib PATH
                     ascend: the kernel library built from kernels/ascend (also
                     TENSOR_ARENA_KERNEL_LIB). Default: libtensor_arena_kernels.so next
                     to the runtime, then the loader path
    --ascend-device N
                     ascend, ascend-sim: device id (default 0; for ascend also
                     TENSOR_ARENA_ASCEND_DEVICE)
    --threads N      worker threads for the large kernels on the host (default 1;
                     results are bit-identical for any N)
    --log-every N    progress line every N steps (default 50)
    --eval-every N   held-out evaluation every N steps, in mode eval of the same arena
                     (default 100; also after the last step)
    --eval-batch N   sequences per held-out batch (default 256)
    --checked        checked mode: guard bytes after every buffer, verified after
                     every lease, and poisoning of step-scoped buffers when their
                     lifetime ends (also TENSOR_ARENA_CHECKED=1)
    --naive          also run the same training written as an allocating loop
                     (new masks and temporaries every step) and compare step rates
    --record N       host: learn the plan from the first N training steps and one
                     held-out pass (the same model on a recorder, temporaries asked
                     for by name) instead of the hand-written specs; print them
    --save-specs F   with --record: write the learned specs to the TOML file F
    --specs F        host: plan from a spec file written by --save-specs (no recording)
    -h, --help       this text
";

struct Args {
    steps: usize,
    batch: usize,
    seed: u64,
    device: String,
    acl_lib: Option<PathBuf>,
    acl_dir: Option<PathBuf>,
    kernel_lib: Option<PathBuf>,
    ascend_device: Option<i32>,
    threads: usize,
    log_every: usize,
    eval_every: usize,
    eval_batch: usize,
    naive: bool,
    checked: bool,
    record: Option<usize>,
    save_specs: Option<String>,
    specs: Option<String>,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut a = Args {
        steps: 600,
        batch: 64,
        seed: 42,
        device: "host".into(),
        acl_lib: None,
        acl_dir: None,
        kernel_lib: None,
        ascend_device: None,
        threads: 1,
        log_every: 50,
        eval_every: 100,
        eval_batch: 256,
        naive: false,
        checked: std::env::var("TENSOR_ARENA_CHECKED").is_ok_and(|v| v == "1"),
        record: None,
        save_specs: None,
        specs: None,
    };
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let number = |name: &str, v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{name}: '{v}' is not a whole number"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--steps" => a.steps = number("--steps", value("--steps")?)? as usize,
            "--batch" => a.batch = number("--batch", value("--batch")?)? as usize,
            "--seed" => a.seed = number("--seed", value("--seed")?)?,
            "--threads" => a.threads = number("--threads", value("--threads")?)? as usize,
            "--log-every" => a.log_every = number("--log-every", value("--log-every")?)? as usize,
            "--eval-every" => {
                a.eval_every = number("--eval-every", value("--eval-every")?)? as usize;
            }
            "--eval-batch" => {
                a.eval_batch = number("--eval-batch", value("--eval-batch")?)? as usize;
            }
            "--device" => a.device = value("--device")?,
            "--acl-lib" => a.acl_lib = Some(value("--acl-lib")?.into()),
            "--acl-dir" => a.acl_dir = Some(value("--acl-dir")?.into()),
            "--kernel-lib" => a.kernel_lib = Some(value("--kernel-lib")?.into()),
            "--ascend-device" => {
                let v = value("--ascend-device")?;
                a.ascend_device = Some(
                    v.parse()
                        .map_err(|_| format!("--ascend-device: '{v}' is not a device id"))?,
                );
            }
            "--naive" => a.naive = true,
            "--checked" => a.checked = true,
            "--record" => a.record = Some(number("--record", value("--record")?)? as usize),
            "--save-specs" => a.save_specs = Some(value("--save-specs")?),
            "--specs" => a.specs = Some(value("--specs")?),
            other => return Err(format!("unknown option '{other}' (see --help)")),
        }
    }
    if a.steps == 0 || a.batch == 0 || a.eval_every == 0 || a.eval_batch == 0 {
        return Err("--steps, --batch, --eval-every and --eval-batch must be at least 1".into());
    }
    if a.record == Some(0) {
        return Err("--record needs at least 1 step".into());
    }
    if a.record.is_some() && a.specs.is_some() {
        return Err(
            "--record and --specs exclude each other: learn the specs, or load them".into(),
        );
    }
    if a.save_specs.is_some() && a.record.is_none() {
        return Err("--save-specs needs --record N (the specs it saves are learned)".into());
    }
    if (a.record.is_some() || a.specs.is_some()) && a.device != "host" {
        return Err("--record and --specs run the recorder-API model on the host device".into());
    }
    Ok(Some(a))
}

/// Per-step average, printed as a whole number when it is one.
fn per_step(total: u64, steps: u64) -> String {
    if steps == 0 {
        return "n/a".into();
    }
    if total.is_multiple_of(steps) {
        (total / steps).to_string()
    } else {
        format!("{:.2}", total as f64 / steps as f64)
    }
}

/// How `--device ascend-sim` names its device in the run's first and last
/// lines.
fn sim_label(describe: &str) -> String {
    format!(
        "ascend-sim, the CPU simulation of the ACL runtime (a test double, not an NPU): {describe}"
    )
}

/// Trains on an Ascend backend (the real runtime or the simulation) and
/// finalizes the runtime explicitly, never from a destructor.
fn ascend_run(
    cfg: &train::Config,
    backend: ascend::AscendBackend,
    on: impl FnMut(train::Event<'_>),
) -> Result<train::Report, Box<dyn std::error::Error>> {
    let runtime = backend.runtime();
    let report = train::train_on(cfg, &backend, on)?;
    if let Some(n) = backend.runtime_allocations() {
        println!(
            "the simulated runtime's own device allocations over the run: {n} (one 8-byte status \
             buffer per kernel launch, allocated and freed by the launch stub as CANN's are; not \
             the crate's, so not in the counts below)"
        );
    }
    drop(backend);
    runtime.finalize()?;
    Ok(report)
}

fn banner(cfg: &train::Config, device: &str) {
    println!(
        "mask-and-train on {}: {} steps, batch <= {}, seed {}{}",
        device,
        cfg.steps,
        cfg.batch,
        cfg.seed,
        if cfg.checked { ", checked mode" } else { "" }
    );
}

fn line(p: &train::Progress) {
    println!(
        "step {:>5}  loss {:.4}  accuracy {:.3}  steps/s {:>8.1}",
        p.step, p.loss, p.accuracy, p.steps_per_sec
    );
}

fn eval_line(e: &train::EvalLine) {
    println!(
        "eval after step {:>5}  loss {:.4}  accuracy {:.3}  ({} held-out sequences, batches of {}, mode eval)",
        e.step, e.loss, e.accuracy, e.samples, e.batch
    );
}

/// The Ascend settings: the environment's, then the flags'.
fn ascend_config(args: &Args) -> Result<AscendConfig, tensor_arena::Error> {
    let mut cfg = AscendConfig::from_env()?;
    if let Some(p) = &args.acl_lib {
        cfg = cfg.runtime_lib(p);
    }
    if let Some(d) = &args.acl_dir {
        cfg = cfg.search_dir(d);
    }
    if let Some(p) = &args.kernel_lib {
        cfg = cfg.kernel_lib(p);
    }
    if let Some(id) = args.ascend_device {
        cfg = cfg.device(id);
    }
    Ok(cfg)
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut cfg = train::Config::new(args.steps, args.batch, args.seed);
    cfg.threads = args.threads;
    cfg.checked = args.checked;
    cfg.log_every = args.log_every;
    cfg.eval_every = args.eval_every;
    cfg.eval_batch = args.eval_batch;
    let on = |event: train::Event<'_>| match event {
        train::Event::Plan(plan) => println!("{plan}"),
        train::Event::Progress(p) => line(p),
        train::Event::Eval(e) => eval_line(e),
    };
    // The device the run's last line names.
    let mut device = args.device.clone();
    let report = match args.device.as_str() {
        "host" if args.record.is_some() || args.specs.is_some() => {
            banner(&cfg, &backend::HostBackend::new(cfg.threads)?.describe());
            recorded_run(&args, &cfg, on)?
        }
        "host" => {
            let backend = backend::HostBackend::new(cfg.threads)?;
            banner(&cfg, &backend.describe());
            train::train_on(&cfg, &backend, on)?
        }
        "ascend" => {
            let backend = ascend::AscendBackend::real(ascend_config(&args)?)?;
            banner(&cfg, &backend.describe());
            device = tensor_arena::Device::name(&backend.device()).to_owned();
            ascend_run(&cfg, backend, on)?
        }
        "ascend-sim" => {
            if args.acl_lib.is_some() || args.acl_dir.is_some() || args.kernel_lib.is_some() {
                return Err(
                    "--device ascend-sim uses the simulated runtime built with the crate; \
                            --acl-lib, --acl-dir and --kernel-lib are for --device ascend"
                        .into(),
                );
            }
            let backend = ascend::AscendBackend::simulation(args.ascend_device)?;
            banner(&cfg, &sim_label(&backend.describe()));
            device = format!(
                "ascend-sim (simulated {}, not an NPU)",
                tensor_arena::Device::name(&backend.device())
            );
            ascend_run(&cfg, backend, on)?
        }
        other => {
            return Err(
                format!("--device: unknown device '{other}' (host, ascend or ascend-sim)").into(),
            );
        }
    };
    println!();
    println!("{}", report.memory_summary);
    if cfg.checked {
        match report.guard_violations.first() {
            None => println!("checked mode: no guard violations"),
            Some(v) => println!("checked mode: {v}"),
        }
    }
    println!(
        "training loss {:.4} -> {:.4} (first -> last window); last held-out loss {:.4}, accuracy {:.3} (chance {:.3})",
        report.first_loss,
        report.last_loss,
        report.eval_loss,
        report.eval_accuracy,
        1.0 / cfg.sizes.classes as f64
    );
    println!(
        "arena loop: {:.1} steps/s; loss per logging window: {}; {} weights, checksum {:.6}",
        report.steps_per_sec,
        report
            .window_losses
            .iter()
            .map(|l| format!("{l:.3}"))
            .collect::<Vec<_>>()
            .join(" "),
        report.weights.len(),
        report.checksum
    );
    if args.naive {
        println!();
        println!("naive loop (new masks and temporaries every step, allocating matmuls):");
        let naive = naive::train_naive(&cfg, line)?;
        println!(
            "naive loop: {:.1} steps/s, last training loss {:.4}; steady-state allocations per step: \
             host heap {}, caching-allocator requests {} (model: {} segments, peak reserved {} B, \
             peak allocated {} B)",
            naive.steps_per_sec,
            naive.last_loss,
            per_step(naive.steady_heap_allocs, naive.steady_steps),
            per_step(naive.steady_device_requests, naive.steady_steps),
            naive.model.segment.peak,
            naive.model.reserved_bytes.peak,
            naive.model.allocated_bytes.peak,
        );
        println!(
            "step rate, arena / naive: {:.2}x",
            report.steps_per_sec / naive.steps_per_sec
        );
    }
    println!(
        "device allocation calls over the whole run: {}",
        report.device_allocs
    );
    // Counted over every steady-state step, training and evaluation.
    println!(
        "steady-state allocations per step on {}: host heap {}, device {}",
        device,
        per_step(report.steady_heap_allocs, report.steady_steps),
        per_step(report.steady_device_allocs, report.steady_steps),
    );
    Ok(())
}

/// `--record N` / `--specs F`: the recorder-API model, its plan learned
/// from N recorded steps or loaded from a spec file.
fn recorded_run(
    args: &Args,
    cfg: &train::Config,
    on: impl FnMut(train::Event<'_>),
) -> Result<train::Report, Box<dyn std::error::Error>> {
    let source = match (&args.record, &args.specs) {
        (Some(n), _) => record_train::Source::Record(*n),
        (None, Some(path)) => {
            println!("plan from the spec file {path} (no recording step)");
            record_train::Source::Preload(tensor_arena::SpecSet::load(path)?)
        }
        (None, None) => return Err("neither --record nor --specs was given".into()),
    };
    let save = args.save_specs.clone();
    let mut saved = Ok(());
    let (report, recorder) = record_train::train_recorded(cfg, source, on, |note| match note {
        record_train::Note::Specs(specs, steps) => {
            println!("specs learned over {steps} recorded steps, to be planned:");
            println!("{specs}");
            if let Some(path) = &save {
                saved = specs.save(path);
                if saved.is_ok() {
                    println!("saved the learned specs to {path}\n");
                }
            }
        }
        record_train::Note::Rerecord(e) => {
            println!("re-recording one step and re-planning: {e}");
        }
    })?;
    saved?;
    println!(
        "recorder: {} recorded steps, {} pool requests, {} pool allocations, {} plan(s)",
        recorder.recorded_steps, recorder.pool_requests, recorder.pool_allocations, recorder.plans
    );
    Ok(report)
}

fn main() -> ExitCode {
    match parse(std::env::args().skip(1)) {
        Ok(None) => {
            print!("{HELP}");
            ExitCode::SUCCESS
        }
        Ok(Some(args)) => match run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("error: {e}\n\n{HELP}");
            ExitCode::from(2)
        }
    }
}
