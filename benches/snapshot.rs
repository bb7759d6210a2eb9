//! Reading a large memory snapshot: time and memory of `Trace::read` on a
//! generated snapshot pickle of about 500 MB (set `TA_SNAPSHOT_MB` for
//! another size), with the baseline in the same run:
//!
//! - `snapshot/read_bytes`: reading the file's bytes and dropping them
//!   (what any parser pays);
//! - `snapshot/parse`: `Trace::read`, the streaming pickle reader and the
//!   trace it builds.
//!
//! The snapshot is written the way Python's pickle (protocol 4) writes
//! what torch's `_snapshot()` returns: a dict with `segments` and
//! `device_traces`; trace entries with `action`, `addr`, `size`, `stream`,
//! `time_us`, `frames`, `compile_context` and `user_metadata`; frames lists
//! shared between entries with the same stack and frame dicts shared
//! between lists, through the memo. It is written under the target
//! directory and deleted at the end. The peak resident memory of one parse
//! (`VmHWM` after resetting it) is printed beside the file size.
//!
//! ```sh
//! cargo bench --bench snapshot
//! python3 benches/medians.py snapshot
//! ```

use std::collections::HashMap;
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::Criterion;
use tensor_arena::diag::{ReadOptions, Trace};

/// A pickle writer for the few opcodes Python uses for dicts, lists,
/// strings and ints, with Python's memoization.
struct Pickler<W: Write> {
    out: W,
    memo: u32,
    strings: HashMap<String, u32>,
}

impl<W: Write> Pickler<W> {
    fn op(&mut self, bytes: &[u8]) {
        self.out.write_all(bytes).expect("write the snapshot");
    }

    fn memoize(&mut self) -> u32 {
        self.op(&[0x94]);
        self.memo += 1;
        self.memo - 1
    }

    fn get(&mut self, index: u32) {
        if index < 256 {
            self.op(&[b'h', index as u8]);
        } else {
            let mut b = vec![b'j'];
            b.extend_from_slice(&index.to_le_bytes());
            self.op(&b);
        }
    }

    fn str(&mut self, s: &str) {
        if let Some(&i) = self.strings.get(s) {
            self.get(i);
            return;
        }
        let mut b = vec![0x8c, s.len() as u8];
        b.extend_from_slice(s.as_bytes());
        self.op(&b);
        let i = self.memoize();
        self.strings.insert(s.to_owned(), i);
    }

    fn int(&mut self, v: i64) {
        if (0..256).contains(&v) {
            self.op(&[b'K', v as u8]);
        } else if (0..65536).contains(&v) {
            self.op(&[b'M', v as u8, (v >> 8) as u8]);
        } else if i32::try_from(v).is_ok() {
            let mut b = vec![b'J'];
            b.extend_from_slice(&(v as i32).to_le_bytes());
            self.op(&b);
        } else {
            let bytes = v.to_le_bytes();
            let mut n = 8;
            while n > 1 && bytes[n - 1] == 0 && bytes[n - 2] & 0x80 == 0 {
                n -= 1;
            }
            let mut b = vec![0x8a, n as u8];
            b.extend_from_slice(&bytes[..n]);
            self.op(&b);
        }
    }

    fn dict(&mut self, items: &[(&str, Value)]) {
        self.op(b"}");
        self.memoize();
        self.op(b"(");
        for (k, v) in items {
            self.str(k);
            self.value(v);
        }
        self.op(b"u");
    }

    fn value(&mut self, v: &Value) {
        match v {
            Value::Int(i) => self.int(*i),
            Value::Str(s) => self.str(s),
            Value::Memo(i) => self.get(*i),
        }
    }
}

enum Value {
    Int(i64),
    Str(String),
    Memo(u32),
}

const MIB: i64 = 1 << 20;

/// Writes a snapshot of about `target` bytes: a training loop of 30
/// allocations a step from 200 distinct stacks of 12 frames.
fn generate(path: &Path, target: u64) -> u64 {
    let file = std::fs::File::create(path).expect("create the snapshot");
    let mut p = Pickler {
        out: BufWriter::with_capacity(1 << 20, file),
        memo: 0,
        strings: HashMap::new(),
    };
    p.op(&[0x80, 4]);
    p.op(b"}");
    p.memoize();
    p.op(b"(");
    p.str("segments");
    p.op(b"]");
    p.memoize();
    p.str("device_traces");
    p.op(b"]");
    p.memoize();
    p.op(b"(");
    p.op(b"]");
    p.memoize();
    // Frames: 400 distinct frame dicts, 200 stacks of 12 of them.
    let mut frame_memo: Vec<Option<u32>> = vec![None; 400];
    let mut stack_memo: Vec<Option<u32>> = vec![None; 200];
    let base: i64 = 0x7f00_0000_0000;
    let mut written = 0u64;
    let mut entries = 0u64;
    let mut step = 0i64;
    let mut in_batch = 0;
    p.op(b"(");
    let mut entry = |p: &mut Pickler<BufWriter<std::fs::File>>,
                     action: &str,
                     addr: i64,
                     size: i64,
                     stack: usize,
                     t: i64| {
        // The frames list: written once, then referred to.
        let frames = match stack_memo[stack] {
            Some(i) => Value::Memo(i),
            None => {
                p.op(b"]");
                let list = p.memoize();
                p.op(b"(");
                for k in 0..12 {
                    let f = (stack * 7 + k * 13) % 400;
                    match frame_memo[f] {
                        Some(i) => p.get(i),
                        None => {
                            p.op(b"}");
                            frame_memo[f] = Some(p.memoize());
                            p.op(b"(");
                            p.str("filename");
                            p.str(&format!("/workspace/model/layer_{}.py", f % 50));
                            p.str("line");
                            p.int((f * 3 + 1) as i64);
                            p.str("name");
                            p.str(&format!("fn_{f}"));
                            p.op(b"u");
                        }
                    }
                }
                p.op(b"e");
                stack_memo[stack] = Some(list);
                Value::Memo(list)
            }
        };
        p.dict(&[
            ("action", Value::Str(action.to_owned())),
            ("addr", Value::Int(addr)),
            ("size", Value::Int(size)),
            ("stream", Value::Int(0)),
            ("time_us", Value::Int(1_700_000_000_000_000 + t)),
            ("frames", frames),
            ("compile_context", Value::Str("N/A".to_owned())),
            ("user_metadata", Value::Str(String::new())),
        ]);
    };
    while written < target {
        // One step: 30 allocations of step-dependent sizes, freed in reverse.
        let sizes: Vec<i64> = (0..30)
            .map(|k| ((k * 37 + step * 11) % 97 + 1) * MIB / 4)
            .collect();
        let mut addr = base;
        let mut live = Vec::new();
        for (k, &size) in sizes.iter().enumerate() {
            entry(
                &mut p,
                "alloc",
                addr,
                size,
                k * 6 % 200,
                step * 100 + k as i64,
            );
            live.push((addr, size, k));
            addr += size + 512;
        }
        for (a, size, k) in live.into_iter().rev() {
            entry(
                &mut p,
                "free_requested",
                a,
                size,
                k * 6 % 200,
                step * 100 + 50,
            );
            entry(
                &mut p,
                "free_completed",
                a,
                size,
                k * 6 % 200,
                step * 100 + 51,
            );
        }
        entries += 90;
        in_batch += 90;
        if in_batch >= 900 {
            // Python appends in batches of 1000.
            p.op(b"e(");
            in_batch = 0;
        }
        step += 1;
        if step % 64 == 0 {
            p.out.flush().expect("flush");
            written = std::fs::metadata(path).map_or(0, |m| m.len());
        }
    }
    p.op(b"e");
    p.op(b"e");
    p.op(b"u.");
    p.out.flush().expect("flush");
    eprintln!("generated {entries} trace entries");
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Peak resident memory of this process in KiB (`VmHWM`).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let mb: u64 = std::env::var("TA_SNAPSHOT_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&dir).expect("bench directory");
    let path = dir.join("generated_snapshot.pickle");
    let t0 = Instant::now();
    let bytes = generate(&path, mb << 20);
    eprintln!(
        "wrote {} ({:.1} MiB) in {:.1?}",
        path.display(),
        bytes as f64 / (1 << 20) as f64,
        t0.elapsed()
    );
    // One parse with the peak reset first (Linux: writing 5 to
    // clear_refs resets VmHWM).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = rss_kib().unwrap_or(0);
    let t0 = Instant::now();
    let trace = Trace::read(&path, ReadOptions::default()).expect("the snapshot parses");
    let took = t0.elapsed();
    let peak = peak_rss_kib().unwrap_or(0);
    eprintln!(
        "parsed {} events, {} allocations in {took:.2?}; peak RSS {:.1} MiB (from {:.1} MiB before) for a {:.1} MiB file",
        trace.events().len(),
        trace.allocations().len(),
        peak as f64 / 1024.0,
        before as f64 / 1024.0,
        bytes as f64 / (1 << 20) as f64
    );
    drop(trace);
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(20))
        .configure_from_args();
    let mut g = c.benchmark_group("snapshot");
    g.bench_function("read_bytes", |b| {
        b.iter(|| {
            let mut f = std::fs::File::open(&path).expect("open");
            std::io::copy(&mut f, &mut std::io::sink()).expect("read")
        })
    });
    g.bench_function("parse", |b| {
        b.iter(|| {
            let t = Trace::read(black_box(&path), ReadOptions::default()).expect("parse");
            t.events().len()
        })
    });
    g.finish();
    c.final_summary();
    let _ = std::fs::remove_file(&path);
}
