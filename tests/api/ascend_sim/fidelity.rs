//! The simulation's own rules, where real CANN is stricter or looser than a
//! naive double would be: null objects destroy, empty copies succeed first,
//! an unknown malloc policy falls back, error messages stack newest first,
//! executors outside their lifetime are caught, operators compute float16
//! and bfloat16, and installation codes are named with their fix.

use std::ffi::{CStr, c_char, c_int, c_void};

use half::{bf16, f16};

use super::values;
use crate::support::elem::Elem;
use crate::support::sim::{self, sim};
use tensor_arena::device::ascend::{Op, TensorView};
use tensor_arena::{Arena, Error, Planner, Result};

type DestroyFn = unsafe extern "C" fn(*const c_void) -> i32;

#[test]
fn destroying_null_objects_succeeds() {
    let s = sim();
    for name in ["aclDestroyTensor", "aclDestroyScalar", "aclDestroyIntArray"] {
        // SAFETY: `aclnnStatus aclDestroy*(const T *)`; null is allowed.
        let status = unsafe { s.function::<DestroyFn>(name)(std::ptr::null()) };
        assert_eq!(status, 0, "{name}(nullptr)");
    }
}

#[test]
fn empty_copies_succeed_before_any_check() {
    let s = sim();
    s.reset();
    type Memcpy = unsafe extern "C" fn(*mut c_void, usize, *const c_void, usize, c_int) -> i32;
    type Memset = unsafe extern "C" fn(*mut c_void, usize, i32, usize) -> i32;
    // SAFETY: the header signatures; a zero count touches no memory.
    unsafe {
        let memcpy: Memcpy = s.function("aclrtMemcpy");
        let memset: Memset = s.function("aclrtMemset");
        assert_eq!(memcpy(std::ptr::null_mut(), 0, std::ptr::null(), 0, 1), 0);
        assert_eq!(memset(std::ptr::null_mut(), 0, 0, 0), 0);
    }
    assert_eq!(s.counter("empty_copies"), 2);
}

type Malloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_int) -> i32;
type Free = unsafe extern "C" fn(*mut c_void) -> i32;
type RecentErr = unsafe extern "C" fn() -> *const c_char;

#[test]
fn an_unknown_malloc_policy_falls_back_to_the_default() -> Result<()> {
    let s = sim();
    let dev = super::open(sim::config());
    // SAFETY: header signatures; `p` is a valid out pointer, freed below.
    unsafe {
        let malloc: Malloc = s.function("aclrtMalloc");
        let free: Free = s.function("aclrtFree");
        let mut p = std::ptr::null_mut();
        // HUGE_ONLY | HIGH_BAND_WIDTH, as CANN's launch stubs ask.
        assert_eq!(malloc(&mut p, 100, 1 | 0x1000), 0);
        assert_eq!(s.counter("malloc_policy_fallbacks"), 1);
        assert_eq!(
            s.counter("malloc_bytes"),
            160,
            "normal pages: 100 -> 128 + 32"
        );
        assert_eq!(free(p), 0);
    }
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn recent_error_messages_stack_newest_first_until_read() -> Result<()> {
    let s = sim();
    let dev = super::open(sim::config());
    type Memset = unsafe extern "C" fn(*mut c_void, usize, i32, usize) -> i32;
    // SAFETY: header signatures; the bogus pointers are only looked up,
    // never touched (the runtime refuses them); the message pointer is
    // read before the next call.
    let text = unsafe {
        let free: Free = s.function("aclrtFree");
        let memset: Memset = s.function("aclrtMemset");
        let recent: RecentErr = s.function("aclGetRecentErrMsg");
        let bogus = 0x40usize as *mut c_void;
        assert_ne!(free(bogus), 0);
        assert_ne!(memset(bogus, 8, 0, 8), 0);
        let p = recent();
        assert!(!p.is_null());
        let text = CStr::from_ptr(p).to_string_lossy().into_owned();
        assert!(recent().is_null(), "read once, then cleared");
        text
    };
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].contains("aclrtMemset") && lines[1].contains("aclrtFree"),
        "{text}"
    );
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn executors_outside_their_lifetime_are_caught() -> Result<()> {
    type CreateTensor = unsafe extern "C" fn(
        *const i64,
        u64,
        c_int,
        *const i64,
        i64,
        c_int,
        *const i64,
        u64,
        *mut c_void,
    ) -> *mut c_void;
    type ReluWs = unsafe extern "C" fn(*mut c_void, *mut u64, *mut *mut c_void) -> i32;
    type Run = unsafe extern "C" fn(*mut c_void, u64, *mut c_void, *mut c_void) -> i32;
    type Destroy = unsafe extern "C" fn(*mut c_void) -> i32;
    let s = sim();
    let dev = super::open(sim::config());
    // The operator library of the per-repository layout, the instance the
    // backend loaded.
    // SAFETY: the simulation's ops-nn library, whose initialisers only set
    // up C++ runtime state.
    let nn = unsafe { libloading::Library::new(sim::dir().join("libopapi_nn.so")) }
        .unwrap_or_else(|e| panic!("{e}"));
    // SAFETY: header signatures of acl_meta.h and aclnn_relu.h; the tensor
    // describes 16 f32 of a live device allocation; every object is
    // destroyed below.
    unsafe {
        let malloc: Malloc = s.function("aclrtMalloc");
        let free: Free = s.function("aclrtFree");
        let create: CreateTensor = s.function("aclCreateTensor");
        let destroy_tensor: DestroyFn = s.function("aclDestroyTensor");
        let destroy_exec: Destroy = s.function("aclDestroyAclOpExecutor");
        let ws_fn = *nn
            .get::<ReluWs>(b"aclnnInplaceReluGetWorkspaceSize")
            .unwrap_or_else(|e| panic!("{e}"));
        let run = *nn
            .get::<Run>(b"aclnnInplaceRelu")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut mem = std::ptr::null_mut();
        assert_eq!(malloc(&mut mem, 64, 0), 0);
        let dims = [16i64];
        let t = create(
            dims.as_ptr(),
            1,
            0,
            std::ptr::null(),
            0,
            2,
            dims.as_ptr(),
            1,
            mem,
        );
        assert!(!t.is_null());
        let (mut ws, mut exec) = (0u64, std::ptr::null_mut());
        assert_eq!(ws_fn(t, &mut ws, &mut exec), 0);
        assert_eq!(run(std::ptr::null_mut(), 0, exec, std::ptr::null_mut()), 0);
        // The second phase freed the non-repeatable executor: a second run
        // is a use after free on a device.
        assert_eq!(
            run(std::ptr::null_mut(), 0, exec, std::ptr::null_mut()),
            561_103
        );
        assert_eq!(s.counter("bad_executors"), 1);
        // Destroying a non-repeatable executor is outside the documentation.
        assert_eq!(ws_fn(t, &mut ws, &mut exec), 0);
        assert_eq!(destroy_exec(exec), 0);
        assert_eq!(s.counter("destroyed_non_repeatable"), 1);
        assert_eq!(destroy_tensor(t), 0);
        assert_eq!(free(mem), 0);
        let recent: RecentErr = s.function("aclGetRecentErrMsg");
        let _ = recent();
    }
    // Those were this test's deliberate misuses.
    s.reset();
    drop(dev);
    s.assert_clean();
    Ok(())
}

/// Element types the operators compute in besides f32, widened to f32.
trait Half: Elem + Copy {
    fn wide(self) -> f32;
}

impl Half for f16 {
    fn wide(self) -> f32 {
        self.to_f32()
    }
}

impl Half for bf16 {
    fn wide(self) -> f32 {
        self.to_f32()
    }
}

fn ulps<T: Half>(a: T, b: T) -> u32 {
    a.bits().abs_diff(b.bits())
}

fn read<T: Half>(
    l: &tensor_arena::Lease<'_, T, tensor_arena::device::ascend::AscendDevice>,
) -> Result<Vec<T>> {
    let mut v = vec![T::from_f32(0.0); l.len()];
    l.copy_to_host(&mut v)?;
    Ok(v)
}

fn half_operators<T: Half>() -> Result<()> {
    let s = sim();
    let dev = super::open(sim::config());
    let (m, k, n) = (4usize, 6usize, 3usize);
    let mut p = Planner::new();
    let a = p.step::<T>("a", &[m, k])?;
    let b = p.step::<T>("b", &[k, n])?;
    let c = p.step::<T>("c", &[m, n])?;
    let row = p.step::<T>("row", &[k])?;
    let out = p.step::<T>("out", &[m, k])?;
    let m1 = p.step::<T>("m", &[m, k])?;
    let v2 = p.step::<T>("v", &[m, k])?;
    let step = p.step::<f32>("t", &[1])?;
    let ws = p.persistent::<u8>("ws", &[16 << 20])?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    let (av, bv, rv) = (
        values::<T>(m * k, 1),
        values::<T>(k * n, 2),
        values::<T>(k, 3),
    );
    let wide = |v: &[T]| v.iter().map(|x| x.wide()).collect::<Vec<f32>>();
    let (af, bf, rf) = (wide(&av), wide(&bv), wide(&rv));
    arena.step(|st| {
        let (mut al, mut bl, cl, mut rl, ol) = (
            st.lease(a)?,
            st.lease(b)?,
            st.lease(c)?,
            st.lease(row)?,
            st.lease(out)?,
        );
        let mut wl = st.lease(ws)?;
        al.copy_from_host(&av)?;
        bl.copy_from_host(&bv)?;
        rl.copy_from_host(&rv)?;
        // Matrix product: sums in index order, rounded once.
        st.aclnn(
            &Op::Mm {
                a: al.tensor(),
                b: bl.tensor(),
                out: cl.tensor(),
            },
            Some(&mut wl),
        )?;
        let got = read(&cl)?;
        for i in 0..m {
            for j in 0..n {
                let sum = (0..k).fold(0.0f32, |acc, q| acc + af[i * k + q] * bf[q * n + j]);
                assert_eq!(
                    got[i * n + j].bits(),
                    T::from_f32(sum).bits(),
                    "Mm ({i},{j})"
                );
            }
        }
        // out = a · row (broadcast), then relu, then a > 0 into out.
        st.aclnn(
            &Op::Mul {
                a: al.tensor(),
                b: rl.tensor(),
                out: ol.tensor(),
            },
            None,
        )?;
        let got = read(&ol)?;
        for (i, g) in got.iter().enumerate() {
            assert_eq!(g.bits(), T::from_f32(af[i] * rf[i % k]).bits(), "Mul {i}");
        }
        let product = got;
        st.aclnn(&Op::ReluInplace { x: ol.tensor() }, None)?;
        let relu = read(&ol)?;
        for (i, g) in relu.iter().enumerate() {
            let w = product[i].wide();
            let want = T::from_f32(if w > 0.0 { w } else { 0.0 });
            assert_eq!(g.bits(), want.bits(), "Relu {i}");
        }
        st.aclnn(
            &Op::AddInplace {
                x: al.tensor(),
                other: rl.tensor(),
                alpha: 0.5,
            },
            None,
        )?;
        let added = read(&al)?;
        for (i, g) in added.iter().enumerate() {
            assert_eq!(
                g.bits(),
                T::from_f32(af[i] + 0.5 * rf[i % k]).bits(),
                "Add {i}"
            );
        }
        st.aclnn(
            &Op::GtScalar {
                x: al.tensor(),
                value: 0.0,
                out: ol.tensor(),
            },
            None,
        )?;
        let gt = read(&ol)?;
        for (i, g) in gt.iter().enumerate() {
            let want = if added[i].wide() > 0.0 { 1.0 } else { 0.0 };
            assert_eq!(g.wide(), want, "GtScalar {i}");
        }
        st.aclnn(
            &Op::ReduceSum {
                x: al.tensor(),
                dims: &[0],
                keep_dims: false,
                out: rl.tensor(),
            },
            Some(&mut wl),
        )?;
        let sums = read(&rl)?;
        for j in 0..k {
            let want = (0..m).fold(0.0f32, |acc, i| acc + added[i * k + j].wide());
            assert_eq!(sums[j].bits(), T::from_f32(want).bits(), "ReduceSum {j}");
        }
        st.aclnn(
            &Op::Softmax {
                x: al.tensor(),
                dim: 1,
                out: ol.tensor(),
            },
            Some(&mut wl),
        )?;
        let soft = read(&ol)?;
        for i in 0..m {
            let r: Vec<f32> = (0..k).map(|j| added[i * k + j].wide()).collect();
            let max = r.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let sum = r.iter().fold(0.0f32, |a, &x| a + (x - max).exp());
            for j in 0..k {
                let want = T::from_f32((r[j] - max).exp() / sum);
                assert!(ulps(soft[i * k + j], want) <= 1, "Softmax ({i},{j})");
            }
        }
        // One AdamW step: var = a, grad = the probabilities, m = v = 0.
        let (mut ml, mut vl, mut tl) = (st.lease(m1)?, st.lease(v2)?, st.lease(step)?);
        tl.copy_from_host(&[1.0])?;
        let zeros = vec![T::from_f32(0.0); m * k];
        ml.copy_from_host(&zeros)?;
        vl.copy_from_host(&zeros)?;
        let (lr, b1, b2, eps) = (0.01f32, 0.9f32, 0.999f32, 1e-8f32);
        st.aclnn(
            &Op::AdamW {
                var: al.tensor(),
                m: ml.tensor(),
                v: vl.tensor(),
                grad: ol.tensor(),
                step: tl.tensor(),
                lr,
                beta1: b1,
                beta2: b2,
                weight_decay: 0.0,
                eps,
            },
            Some(&mut wl),
        )?;
        let (var, mom, vel) = (read(&al)?, read(&ml)?, read(&vl)?);
        let (bc1, bc2) = (1.0 - b1.powf(1.0), 1.0 - b2.powf(1.0));
        for i in 0..m * k {
            let g = soft[i].wide();
            let mv = (1.0 - b1) * g;
            let vv = (1.0 - b2) * g * g;
            let w = added[i].wide() - lr * (mv / bc1) / ((vv / bc2).sqrt() + eps);
            assert!(ulps(mom[i], T::from_f32(mv)) <= 1, "AdamW m {i}");
            assert!(ulps(vel[i], T::from_f32(vv)) <= 1, "AdamW v {i}");
            assert!(ulps(var[i], T::from_f32(w)) <= 1, "AdamW var {i}");
        }
        Ok::<_, Error>(())
    })?;
    assert!(s.counter("aclnn_ops") >= 7);
    drop(arena);
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn operators_compute_float16() -> Result<()> {
    half_operators::<f16>()
}

#[test]
fn operators_compute_bfloat16() -> Result<()> {
    half_operators::<bf16>()
}

#[test]
fn operators_refuse_mixed_element_types() -> Result<()> {
    let s = sim();
    let dev = super::open(sim::config());
    let q = |t, sh: &[usize]| TensorView::detached(t, sh);
    let e = dev
        .workspace_size(&Op::AddInplace {
            x: q(tensor_arena::DType::F16, &[4])?,
            other: q(tensor_arena::DType::F32, &[4])?,
            alpha: 1.0,
        })
        .unwrap_err();
    assert!(matches!(e, Error::Acl { code: 161_002, .. }), "{e}");
    assert!(e.to_string().contains("does not promote"), "{e}");
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn installation_codes_are_named_with_their_fix() -> Result<()> {
    let s = sim();
    let dev = super::open(sim::config());
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[8])?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    for (code, name, fix) in [
        (
            561_107,
            "ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND",
            "ASCEND_OPP_PATH",
        ),
        (
            561_112,
            "ACLNN_ERR_INNER_OPP_KERNEL_PKG_NOT_FOUND",
            "kernel package",
        ),
    ] {
        s.fail_op(1, code);
        let e = arena
            .step(|st| {
                st.aclnn(
                    &Op::ReluInplace {
                        x: st.lease(x)?.tensor(),
                    },
                    None,
                )
            })
            .unwrap_err();
        assert!(
            matches!(&e, Error::Acl { code: c, name: n, .. } if *c == code && *n == name),
            "{e}"
        );
        assert!(e.to_string().contains(fix), "{e}");
    }
    drop(arena);
    drop(dev);
    s.assert_clean();
    Ok(())
}
