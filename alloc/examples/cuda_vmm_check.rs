//! The CUDA backing's mapped ranges on a real GPU (the driver's VMM:
//! `cuMemAddressReserve`, `cuMemCreate` + `cuMemMap` + `cuMemSetAccess`,
//! `cuMemUnmap` + `cuMemRelease`, `cuMemAddressFree`): reserves a range,
//! maps and unmaps chunks, writes and reads bytes back through the
//! backing's checked-mode `fill` / `read`, checks that the backing refuses
//! an unmapped page and that the device itself refuses a copy from one,
//! and times the calls (median of repeated calls, host clock; each VMM
//! call returns after the driver has done it).
//!
//! ```sh
//! cargo build --release -p tensor-arena-alloc --example cuda_vmm_check
//! target/release/examples/cuda_vmm_check [OUT_JSON]
//! ```
//!
//! Exit status: 0 every check passed, 1 a check failed, 2 no CUDA device
//! (the runtime or the driver could not be opened). Prints one line per
//! check (`ok` / `FAIL`), then a JSON summary (also written to OUT_JSON).

use std::time::Instant;

use tensor_arena_alloc::Backing;
use tensor_arena_alloc::backing::CudaBacking;

struct Checks {
    failed: u32,
    lines: Vec<String>,
}

impl Checks {
    fn check(&mut self, name: &str, ok: bool, detail: String) {
        let line = format!("{} {name}: {detail}", if ok { "ok  " } else { "FAIL" });
        println!("{line}");
        self.lines.push(line);
        if !ok {
            self.failed += 1;
        }
    }
}

fn median_us(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn main() {
    let out_json = std::env::args().nth(1);
    let mut b = match CudaBacking::open(Some(0), None) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cuda_vmm_check: no CUDA device to check on: {e}");
            std::process::exit(2);
        }
    };
    let Some(g) = b.map_granularity() else {
        let why = b
            .reserve_address(2 << 20)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        eprintln!("cuda_vmm_check: the CUDA driver's mapped ranges are unavailable: {why}");
        std::process::exit(2);
    };
    let mut c = Checks {
        failed: 0,
        lines: Vec::new(),
    };
    println!("granularity {g} bytes on {}", b.name());
    let reserved0 = b.reserved_bytes();

    // ---- correctness ---------------------------------------------------------
    let t = Instant::now();
    let base = b.reserve_address(16 * g);
    let reserve_us = t.elapsed().as_secs_f64() * 1e6;
    let base = match base {
        Ok(a) => a,
        Err(e) => {
            c.check("reserve_address", false, e.to_string());
            std::process::exit(1);
        }
    };
    c.check(
        "reserve_address",
        base % g == 0,
        format!("{} bytes at {base:#x}", 16 * g),
    );
    let maps = [(base, g), (base + g, 2 * g), (base + 4 * g, 4 * g)];
    for (a, l) in maps {
        let r = b.map(a, l);
        c.check(
            "map",
            r.is_ok(),
            format!("{l} bytes at +{:#x}: {r:?}", a - base),
        );
    }
    c.check(
        "reserved_bytes counts mapped bytes",
        b.reserved_bytes() - reserved0 == 7 * g as u64,
        format!("{} (want {})", b.reserved_bytes() - reserved0, 7 * g),
    );
    let roundtrip =
        |b: &mut CudaBacking, addr: usize, len: usize, byte: u8| -> Result<bool, String> {
            b.fill(addr, len, byte).map_err(|e| e.to_string())?;
            let mut back = vec![0u8; len];
            b.read(addr, &mut back).map_err(|e| e.to_string())?;
            Ok(back.iter().all(|&x| x == byte))
        };
    let r = roundtrip(&mut b, base + 100, 1000, 0xAB);
    c.check(
        "fill/read in a mapped chunk",
        r == Ok(true),
        format!("{r:?}"),
    );
    let r = roundtrip(&mut b, base + g - 4096, 8192, 0x5A);
    c.check(
        "fill/read across two adjacent chunks",
        r == Ok(true),
        format!("{r:?}"),
    );
    let r = roundtrip(&mut b, base + 8 * g - 64, 64, 0x11);
    c.check(
        "fill/read at the end of the last chunk",
        r == Ok(true),
        format!("{r:?}"),
    );
    let mut buf = [0u8; 16];
    let r = b.read(base + 3 * g, &mut buf);
    c.check(
        "read of an unmapped page is refused",
        r.is_err(),
        format!("{r:?}"),
    );
    let r = b.fill(base + 3 * g - 8, 16, 1);
    c.check(
        "fill running into an unmapped page is refused",
        r.is_err(),
        format!("{r:?}"),
    );
    let r = b.map(base + 5 * g, g);
    c.check(
        "map over a mapped page is refused",
        r.is_err(),
        format!("{r:?}"),
    );
    // One physical allocation per granule (cuda_driver.rs): a granule in
    // the middle of a four-granule map goes back alone, its neighbours
    // keep their bytes, and it maps again.
    let kept = roundtrip(&mut b, base + 6 * g, 4096, 0x3C);
    let r = b.unmap(base + 5 * g, g);
    c.check(
        "unmap of one granule inside a larger map",
        r.is_ok() && kept == Ok(true),
        format!("{r:?} {kept:?}"),
    );
    let r = b.read(base + 5 * g, &mut buf);
    c.check(
        "read of the granule unmapped alone is refused",
        r.is_err(),
        format!("{r:?}"),
    );
    let mut back = [0u8; 16];
    let r = b.read(base + 6 * g, &mut back);
    c.check(
        "its neighbour keeps its bytes",
        r.is_ok() && back.iter().all(|&x| x == 0x3C),
        format!("{r:?} {back:?}"),
    );
    let r = b
        .map(base + 5 * g, g)
        .map_err(|e| e.to_string())
        .and_then(|()| roundtrip(&mut b, base + 5 * g, 4096, 0x42));
    c.check("the granule maps again", r == Ok(true), format!("{r:?}"));
    let r = b.unmap(base, 3 * g);
    c.check("unmap of two whole chunks", r.is_ok(), format!("{r:?}"));
    let r = b.read(base, &mut buf);
    c.check("read after unmap is refused", r.is_err(), format!("{r:?}"));
    let r = b
        .map(base, 3 * g)
        .map_err(|e| e.to_string())
        .and_then(|()| roundtrip(&mut b, base + 2 * g, 4096, 0x77));
    c.check("map again and fill/read", r == Ok(true), format!("{r:?}"));
    c.check(
        "reserved_bytes after unmap and map",
        b.reserved_bytes() - reserved0 == 7 * g as u64,
        format!("{}", b.reserved_bytes() - reserved0),
    );
    b.release_address(base);
    c.check(
        "release_address unmaps what is left",
        b.reserved_bytes() == reserved0,
        format!("{}", b.reserved_bytes() - reserved0),
    );
    let r = b.read(base, &mut buf);
    c.check(
        "read after release is refused",
        r.is_err(),
        format!("{r:?}"),
    );

    // ---- timings ---------------------------------------------------------------
    let reps = 50;
    let mut timings = Vec::new();
    for len in [g, 32 * g] {
        let Ok(range) = b.reserve_address(len) else {
            c.check("reserve for timing", false, format!("{len} bytes"));
            continue;
        };
        let (mut map_us, mut unmap_us) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let t = Instant::now();
            let m = b.map(range, len);
            map_us.push(t.elapsed().as_secs_f64() * 1e6);
            if m.is_err() {
                c.check("map for timing", false, format!("{m:?}"));
                break;
            }
            let t = Instant::now();
            let u = b.unmap(range, len);
            unmap_us.push(t.elapsed().as_secs_f64() * 1e6);
            if u.is_err() {
                c.check("unmap for timing", false, format!("{u:?}"));
                break;
            }
        }
        b.release_address(range);
        let (m, u) = (median_us(map_us), median_us(unmap_us));
        println!(
            "map {len} B: {m:.1} us (create+map+set_access), unmap: {u:.1} us (unmap+release), median of {reps}"
        );
        timings.push(format!(
            "{{\"bytes\":{len},\"map_us_median\":{m:.2},\"unmap_us_median\":{u:.2},\"reps\":{reps}}}"
        ));
    }
    let mut reserve_us_all = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        let r = b.reserve_address(1 << 30);
        reserve_us_all.push(t.elapsed().as_secs_f64() * 1e6);
        match r {
            Ok(a) => b.release_address(a),
            Err(e) => {
                c.check("reserve 1 GiB for timing", false, e.to_string());
                break;
            }
        }
    }
    let reserve_med = median_us(reserve_us_all);
    println!(
        "reserve_address 1 GiB: {reserve_med:.1} us median (first reserve, driver open included: {reserve_us:.1} us)"
    );

    // ---- the device refuses an unmapped page ------------------------------------
    // Last, in case the driver treats such a copy as a fault of the context.
    let device_refuses = raw_copy_from_unmapped(&mut b, g);
    c.check(
        "the device refuses a copy from an unmapped page of a reserved range",
        device_refuses.as_ref().is_ok_and(|&(code, _)| code != 0),
        format!("{device_refuses:?}"),
    );

    let json = format!(
        "{{\"granularity\":{g},\"failed\":{},\"checks\":[{}],\"timings\":[{}],\"reserve_1gib_us_median\":{reserve_med:.2},\"first_reserve_us\":{reserve_us:.2}}}",
        c.failed,
        c.lines
            .iter()
            .map(|l| format!("{l:?}"))
            .collect::<Vec<_>>()
            .join(","),
        timings.join(",")
    );
    println!("{json}");
    if let Some(p) = out_json {
        let _ = std::fs::write(p, &json);
    }
    println!("cuda_vmm_check: {} failed", c.failed);
    std::process::exit(if c.failed == 0 { 0 } else { 1 });
}

/// Maps the first unit of a fresh two-unit range and asks the runtime
/// directly (`cudaMemcpy`, device to host) for bytes of the second,
/// unmapped one: the code it answers, then `cudaDeviceSynchronize`'s
/// (whether the context survived).
fn raw_copy_from_unmapped(b: &mut CudaBacking, g: usize) -> Result<(i32, i32), String> {
    let base = b.reserve_address(2 * g).map_err(|e| e.to_string())?;
    b.map(base, g).map_err(|e| e.to_string())?;
    let names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"];
    let mut out = Err("no libcudart".to_owned());
    for n in names {
        // SAFETY: the same runtime the backing loaded (already in the
        // process); its initialisers have no preconditions.
        let Ok(lib) = (unsafe { libloading::Library::new(n) }) else {
            continue;
        };
        type Memcpy = unsafe extern "C" fn(*mut u8, *const u8, usize, i32) -> i32;
        type Sync = unsafe extern "C" fn() -> i32;
        // SAFETY: the runtime's documented signatures (cuda_runtime_api.h).
        let (memcpy, sync) = unsafe {
            (
                lib.get::<Memcpy>(b"cudaMemcpy")
                    .map_err(|e| e.to_string())?,
                lib.get::<Sync>(b"cudaDeviceSynchronize")
                    .map_err(|e| e.to_string())?,
            )
        };
        let mut host = [0u8; 64];
        // SAFETY: a 64-byte host destination; the source is a device
        // address the runtime is expected to refuse (the point of the
        // check); kind 2 = cudaMemcpyDeviceToHost.
        let code = unsafe { memcpy(host.as_mut_ptr(), (base + g) as *const u8, 64, 2) };
        // SAFETY: plain call.
        let after = unsafe { sync() };
        out = Ok((code, after));
        break;
    }
    b.release_address(base);
    out
}
