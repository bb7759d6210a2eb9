//! The Ascend backend (`AscendDevice`: ACL loaded at run time) against the
//! CPU simulation of the ACL runtime in `kernels/sim/`, whose kernel
//! launches run the AscendC kernels of `kernels/ascend/` compiled against
//! the CPU shim. Checks the arena on the device, kernel results against the
//! host bit for bit, one `aclrtMalloc` per arena, out-of-memory reports,
//! failed launches, aclnn operators and workspaces, the loader's errors,
//! and (by the simulation's counters) that nothing leaks.
//!
//! The behaviours of real CANN the simulation models (kernels/sim/README.md)
//! are tested in the modules under `tests/ascend_sim/`: operator library
//! resolution, executor lifetimes and reuse, memory (headroom, page
//! rounding, shared devices, memory attributes), launches (the probe,
//! unregistered kernel libraries, launch buffers) and the simulation's own
//! rules (f16/bf16 operators, the error-message stack, named codes); the
//! bit-mask dropout against the host in `tests/api/ascend_sim/bit_masks.rs`.
//!
//! Needs a C++ compiler at build time (see build.rs); nothing here has run
//! on an NPU.

mod bit_masks;
mod executors;
mod fidelity;
mod launches;
mod libraries;
mod memory;
mod vmm;

use crate::support::elem::Elem;

use crate::support::sim::{self, AICORE_EXCEPTION, devices, sim};
use half::{bf16, f16};
use tensor_arena::device::ascend::{AscendConfig, AscendDevice, Op, TensorView};
use tensor_arena::{Arena, Available, DType, Device, Error, HostDevice, Kernels, Planner, Result};

pub(crate) fn values<T: Elem>(n: usize, salt: u32) -> Vec<T> {
    (0..n)
        .map(|i| {
            let v = ((i as u32).wrapping_mul(2_654_435_761) ^ salt) % 2001;
            T::from_f32(v as f32 / 100.0 - 10.0)
        })
        .collect()
}

pub(crate) fn open(cfg: AscendConfig) -> AscendDevice {
    sim().reset();
    AscendDevice::new(cfg).unwrap_or_else(|e| panic!("the simulated runtime did not open: {e}"))
}

#[test]
fn an_arena_on_the_simulated_npu_reserves_once_and_round_trips() -> Result<()> {
    let s = sim();
    let dev = open(sim::config());
    let mut p = Planner::new();
    let w = p.persistent::<f32>("w", &[100])?;
    let x = p.step::<f32>("x", &[64, 48])?;
    let y = p.step::<i32>("y", &[10])?;
    let plan = p.plan()?;
    let needed = plan.slab_bytes() as u64;
    let mut arena = Arena::new(dev.clone(), plan)?;
    assert_eq!(s.counter("aclrtMalloc"), 1);
    assert!(s.counter("bytes_in_use") >= needed);
    let wv: Vec<f32> = (0..100).map(|i| i as f32 * 0.5).collect();
    arena.write(w, &wv)?;
    for batch in [64, 17, 64, 1] {
        arena.step(|st| {
            let mut xl = st.lease(x)?.with_shape(&[batch, 48])?;
            let data: Vec<f32> = (0..batch * 48).map(|i| i as f32 - 7.0).collect();
            xl.copy_from_host(&data)?;
            let mut back = vec![0.0; batch * 48];
            xl.copy_to_host(&mut back)?;
            assert_eq!(back, data);
            // The slab starts zeroed, as on the host.
            let yl = st.lease(y)?;
            let mut ys = vec![-1; 10];
            yl.copy_to_host(&mut ys)?;
            assert!(ys.iter().all(|&v| v == 0) || batch != 64, "{ys:?}");
            Ok::<_, Error>(())
        })?;
    }
    let mut back = vec![0.0; 100];
    arena.read(w, &mut back)?;
    assert_eq!(back, wv);
    assert_eq!(
        s.counter("aclrtMalloc"),
        1,
        "steps allocate nothing on the device"
    );
    assert_eq!(arena.stats().device.alloc_calls, 1);
    assert!(arena.memory_summary().contains("ascend:0"));
    drop(arena);
    assert_eq!(
        (s.counter("aclrtFree"), s.counter("live_allocations")),
        (1, 0)
    );
    assert_eq!(dev.counters().free_calls, 1);
    drop(dev);
    s.assert_clean();
    assert_eq!(
        s.counter("aclFinalize"),
        0,
        "a destructor never finalises ACL"
    );
    Ok(())
}

/// Runs every kernel on an arena of `dev` and returns the three buffers.
fn kernel_run<T: Elem, D: Kernels>(dev: D, n: usize) -> Result<[Vec<u32>; 3]> {
    let mut p = Planner::new();
    let x = p.step::<T>("x", &[n])?;
    let y = p.step::<T>("y", &[n])?;
    let m = p.step::<T>("m", &[n])?;
    let mut arena = Arena::new(dev, p.plan()?)?;
    arena.set_seed(0x5eed ^ n as u64);
    arena.step(|s| {
        let (mut xl, mut yl, mut ml) = (s.lease(x)?, s.lease(y)?, s.lease(m)?);
        xl.copy_from_host(&values(n, 1))?;
        yl.copy_from_host(&values(n, 2))?;
        ml.bernoulli_(0.3)?;
        xl.apply_mask_(&ml, 2.0)?;
        xl.mul_(&yl)?;
        xl.mul_scalar_(0.5)?;
        let mask = xl.dropout_(0.25)?;
        yl.dropout_backward_(&mask)?;
        yl.mul_scalar_(-3.0)?;
        let mut out = [
            vec![T::from_f32(0.0); n],
            vec![T::from_f32(0.0); n],
            vec![T::from_f32(0.0); n],
        ];
        xl.copy_to_host(&mut out[0])?;
        yl.copy_to_host(&mut out[1])?;
        ml.copy_to_host(&mut out[2])?;
        Ok(out.map(|v| v.into_iter().map(Elem::bits).collect()))
    })
}

fn kernels_match<T: Elem>() -> Result<()> {
    for (n, blocks) in [(1, 1), (31, 3), (256, 8), (4097, 8), (70_001, 5)] {
        let host = kernel_run::<T, _>(HostDevice::new(), n)?;
        let dev = open(sim::config().max_blocks(blocks));
        let npu = kernel_run::<T, _>(dev.clone(), n)?;
        for (k, (h, a)) in host.iter().zip(&npu).enumerate() {
            if let Some(i) = (0..n).find(|&i| h[i] != a[i]) {
                panic!(
                    "{} n={n} blocks={blocks} buffer {k} element {i}: host {:#x}, ascend {:#x}",
                    std::any::type_name::<T>(),
                    h[i],
                    a[i]
                );
            }
        }
        assert_eq!(
            sim().counter("kernel_launches"),
            8,
            "seven kernels, each launched once, and the device's probe"
        );
        assert_eq!(
            (
                sim().counter("launch_mallocs"),
                sim().counter("launch_frees")
            ),
            (8, 8),
            "every launch stub allocated and freed its status buffer"
        );
        drop(dev);
        sim().assert_clean();
    }
    Ok(())
}

#[test]
fn kernels_match_the_host_bit_for_bit_f32() -> Result<()> {
    kernels_match::<f32>()
}

#[test]
fn kernels_match_the_host_bit_for_bit_f16() -> Result<()> {
    kernels_match::<f16>()
}

#[test]
fn kernels_match_the_host_bit_for_bit_bf16() -> Result<()> {
    kernels_match::<bf16>()
}

pub(crate) fn plan_of(bytes: usize) -> Result<tensor_arena::Plan> {
    let mut p = Planner::new();
    p.persistent::<u8>("big", &[bytes])?;
    p.plan()
}

#[test]
fn an_oversized_plan_fails_with_needed_free_and_headroom_bytes_and_leaks_nothing() -> Result<()> {
    let s = sim();
    let id = devices::OOM;
    s.reset_device(id);
    s.set_system_reserved(id, 0);
    s.set_capacity(id, 1 << 20);
    let dev = open(sim::config().device(id).headroom(0));
    let plan = plan_of(4 << 20)?;
    let needed = tensor_arena::device::ascend::footprint(
        plan.slab_bytes(),
        tensor_arena::device::ascend::MallocPolicy::HugeFirst,
    );
    match Arena::new(dev.clone(), plan) {
        Err(Error::OutOfMemory {
            device,
            needed: n,
            available,
        }) => {
            assert_eq!(
                (device.as_str(), n, available),
                (
                    "ascend:1",
                    needed,
                    Available::FreeWithHeadroom {
                        free: 1 << 20,
                        headroom: 0
                    }
                )
            );
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    assert_eq!(
        s.counter("aclrtMalloc"),
        0,
        "checked against aclrtGetMemInfo before allocating"
    );
    // Little free memory: the "system" holds most of it.
    s.set_capacity(id, 64 << 20);
    s.set_system_reserved(id, 63 << 20);
    let e = Arena::new(dev.clone(), plan_of(2 << 20)?).unwrap_err();
    assert!(
        matches!(e, Error::OutOfMemory { available: Available::FreeWithHeadroom { free, .. }, .. } if free == 1 << 20),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("needs 4194304 bytes")
            && text.contains("free 1048576")
            && text.contains("headroom 0")
            && text.contains("ascend:1"),
        "{text}"
    );
    // What does fit still works.
    let arena = Arena::new(dev.clone(), plan_of(512 << 10)?)?;
    drop(arena);
    drop(dev);
    s.assert_clean();
    s.reset_device(id);
    Ok(())
}

#[test]
fn a_failed_launch_is_an_error_and_the_arena_stays_usable() -> Result<()> {
    let s = sim();
    let dev = open(sim::config());
    let mut p = Planner::new();
    let w = p.persistent::<f32>("w", &[256])?;
    let x = p.step::<f32>("x", &[256])?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    let wv = values::<f32>(256, 9);
    arena.write(w, &wv)?;
    arena.step(|st| {
        let mut xl = st.lease(x)?;
        xl.copy_from_host(&wv)?;
        s.fail_launch(1, AICORE_EXCEPTION);
        match xl.mul_scalar_(2.0) {
            Err(Error::Acl {
                op, code, message, ..
            }) => {
                assert_eq!(
                    (op.as_str(), code),
                    ("aclrtlaunch_ta_mul_scalar_f32", AICORE_EXCEPTION)
                );
                assert!(message.contains("injected"), "{message}");
            }
            other => panic!("expected a launch error, got {other:?}"),
        }
        // The failed launch did not run; the next one does.
        xl.mul_scalar_(2.0)?;
        let mut back = vec![0.0; 256];
        xl.copy_to_host(&mut back)?;
        assert!(back.iter().zip(&wv).all(|(b, w)| *b == 2.0 * w));
        Ok::<_, Error>(())
    })?;
    let mut back = vec![0.0; 256];
    arena.read(w, &mut back)?;
    assert_eq!(back, wv, "persistent buffers are intact");
    assert_eq!(s.counter("injected_launch_failures"), 1);
    drop(arena);
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn the_loader_pointed_at_an_empty_directory_says_cann_is_missing() {
    let empty = std::env::temp_dir().join(format!("tensor-arena-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap_or_default();
    let cfg = AscendConfig::new().search_dir(&empty).system_search(false);
    let e = AscendDevice::new(cfg).unwrap_err();
    assert!(matches!(e, Error::LibraryNotFound { .. }), "{e}");
    let text = e.to_string();
    let dir = empty.display().to_string();
    for part in [
        "libascendcl.so",
        "libacl_rt.so",
        dir.as_str(),
        "set_env.sh",
        "TENSOR_ARENA_ACL_LIB",
    ] {
        assert!(text.contains(part), "missing '{part}' in:\n{text}");
    }
    // A kernel library that is not there is named the same way.
    let e = AscendDevice::new(sim::config().kernel_lib(empty.join("libnope.so"))).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("libnope.so") && text.contains("kernels/ascend"),
        "{text}"
    );
}

#[test]
fn initialisation_may_repeat_and_finalisation_is_explicit_and_counted() -> Result<()> {
    let s = sim();
    let a = open(sim::config());
    let b = AscendDevice::new(sim::config().without_kernels())?;
    assert_eq!(
        s.counter("aclInit"),
        2,
        "the second aclInit returned REPEAT_INITIALIZE and was accepted"
    );
    // Without a kernel library, arenas work and kernels say why they cannot run.
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[64])?;
    let mut arena = Arena::new(b.clone(), p.plan()?)?;
    let e = arena.step(|st| st.lease(x)?.mul_scalar_(2.0)).unwrap_err();
    assert!(e.to_string().contains("without_kernels"), "{e}");
    drop(arena);
    let (ra, rb) = (a.runtime(), b.runtime());
    assert!(ra.has_aclnn());
    assert_eq!(ra.device_count()?, 8, "the simulated 8-NPU server");
    drop((a, b));
    assert_eq!(s.counter("aclFinalizeReference"), 0);
    assert_eq!(
        s.counter("device_refs"),
        0,
        "every aclrtSetDevice was reset"
    );
    // One finalisation per load: each takes back one aclInit, so tests
    // running beside this one keep their runtime.
    ra.finalize()?;
    rb.finalize()?;
    assert_eq!(s.counter("aclFinalizeReference"), 2);
    assert_eq!(s.counter("aclFinalize"), 0, "never the process-wide one");
    assert_eq!(s.counter("finalize_with_live_resources"), 0);
    s.assert_clean();
    Ok(())
}

#[test]
fn a_bad_device_id_is_a_typed_error() {
    let e = AscendDevice::new(sim::config().device(devices::MISSING)).unwrap_err();
    assert!(
        matches!(&e, Error::Acl { code: 107_001, op, .. } if op == "aclrtSetDevice"),
        "{e}"
    );
}

#[test]
fn aclnn_operators_run_on_leases_within_the_planned_workspace() -> Result<()> {
    let s = sim();
    let dev = open(sim::config());
    let (m, k, n) = (5, 7, 3);
    let q = |shape: &[usize]| TensorView::detached(DType::F32, shape);
    let need = dev.workspace_size(&Op::Mm {
        a: q(&[m, k])?,
        b: q(&[k, n])?,
        out: q(&[m, n])?,
    })?;
    assert!(
        need > 0,
        "the simulated aclnnMm keeps its accumulators in the workspace"
    );
    let mut p = Planner::new();
    let a = p.step::<f32>("a", &[m, k])?;
    let b = p.step::<f32>("b", &[k, n])?;
    let c = p.step::<f32>("c", &[m, n])?;
    let rows = p.step::<f32>("rows", &[n])?;
    let ws = p.persistent::<u8>("ws", &[need as usize])?;
    let small = p.persistent::<u8>("small", &[16])?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    let (av, bv) = (values::<f32>(m * k, 3), values::<f32>(k * n, 4));
    arena.step(|st| {
        let (mut al, mut bl, cl, rl) = (st.lease(a)?, st.lease(b)?, st.lease(c)?, st.lease(rows)?);
        al.copy_from_host(&av)?;
        bl.copy_from_host(&bv)?;
        let mut wl = st.lease(ws)?;
        st.aclnn(
            &Op::Mm {
                a: al.tensor(),
                b: bl.tensor(),
                out: cl.tensor(),
            },
            Some(&mut wl),
        )?;
        // c -= 1 · b[0] broadcast over rows, then column sums of c.
        let mut out = vec![0.0; m * n];
        cl.copy_to_host(&mut out)?;
        for i in 0..m {
            for j in 0..n {
                let want: f32 = (0..k).fold(0.0, |acc, p| acc + av[i * k + p] * bv[p * n + j]);
                assert_eq!(out[i * n + j].to_bits(), want.to_bits(), "({i},{j})");
            }
        }
        st.aclnn(&Op::ReluInplace { x: cl.tensor() }, Some(&mut wl))?;
        st.aclnn(
            &Op::ReduceSum {
                x: cl.tensor(),
                dims: &[0],
                keep_dims: false,
                out: rl.tensor(),
            },
            Some(&mut wl),
        )?;
        let mut sums = vec![0.0; n];
        rl.copy_to_host(&mut sums)?;
        for j in 0..n {
            let want = (0..m).fold(0.0f32, |acc, i| acc + out[i * n + j].max(0.0));
            assert_eq!(sums[j], want, "column {j}");
        }
        // Too little workspace is an error, never an allocation.
        let mut tiny = st.lease(small)?;
        let e = st
            .aclnn(
                &Op::Mm {
                    a: al.tensor(),
                    b: bl.tensor(),
                    out: cl.tensor(),
                },
                Some(&mut tiny),
            )
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::WorkspaceTooSmall {
                    op: "aclnnMm",
                    reserved: 16,
                    ..
                }
            ),
            "{e}"
        );
        // Shapes the operator refuses, and views of no memory.
        let e = st
            .aclnn(
                &Op::Mm {
                    a: bl.tensor(),
                    b: al.tensor(),
                    out: cl.tensor(),
                },
                Some(&mut wl),
            )
            .unwrap_err();
        assert!(matches!(e, Error::Acl { code: 161_002, .. }), "{e}");
        let e = st
            .aclnn(&Op::ReluInplace { x: q(&[4])? }, None)
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        Ok::<_, Error>(())
    })?;
    assert_eq!(s.counter("aclrtMalloc"), 1, "operators allocate nothing");
    assert!(s.counter("aclnn_ops") >= 3);
    drop(arena);
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn checked_mode_guards_and_poisons_device_buffers_too() -> Result<()> {
    let s = sim();
    let dev = open(sim::config());
    let mut p = Planner::new();
    let w = p.persistent::<f32>("w", &[300])?;
    let x = p.step::<f32>("x", &[300])?;
    let mut arena = Arena::with_options(
        dev.clone(),
        p.plan()?,
        tensor_arena::ArenaOptions::checked(),
    )?;
    arena.write(w, &values::<f32>(300, 5))?;
    for _ in 0..3 {
        arena.step(|st| {
            let mut xl = st.lease(x)?;
            let mut seen = vec![0.0f32; 300];
            xl.copy_to_host(&mut seen)?;
            // Step-scoped bytes come poisoned (NaN), not left over.
            assert!(seen.iter().all(|v| v.is_nan()));
            xl.copy_from_host(&values(300, 6))?;
            xl.dropout_(0.5)?;
            st.verify()
        })?;
    }
    arena.verify()?;
    assert!(arena.take_violations().is_empty());
    assert_eq!(s.counter("aclrtMalloc"), 1);
    drop(arena);
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn settings_reach_the_runtime() -> Result<()> {
    let s = sim();
    s.reset();
    let id = devices::SETTINGS;
    s.reset_device(id);
    assert_eq!(
        AscendDevice::new(sim::config())?.max_blocks(),
        48,
        "a 910B2's vector cores by default"
    );
    s.set_vector_cores(id, 3);
    let dev = AscendDevice::new(
        sim::config()
            .device(id)
            .malloc_policy(tensor_arena::device::ascend::MallocPolicy::HugeOnly),
    )?;
    assert_eq!(
        dev.max_blocks(),
        3,
        "cores per launch from aclGetDeviceCapability"
    );
    assert_eq!(
        AscendDevice::new(sim::config().device(id).max_blocks(5))?.max_blocks(),
        5
    );
    let arena = Arena::new(dev.clone(), plan_of(4096)?)?;
    assert_eq!(s.counter("malloc_policy_1"), 1, "ACL_MEM_MALLOC_HUGE_ONLY");
    assert!(s.counter("mem_info_attr_1") >= 1, "ACL_HBM_MEM");
    assert_eq!(s.counter("malloc_policy_0"), 0);
    assert_eq!(
        dev.kernel_library(),
        Some(sim::kernel_lib().as_path()),
        "the kernel library next to the runtime"
    );
    drop(arena);
    drop(dev);
    s.assert_clean();
    s.reset_device(id);
    Ok(())
}
