//! Executors: the documented lifetime (a non-repeatable executor runs once;
//! one that will not run is made repeatable and destroyed) and reuse of
//! repeatable executors across steps, bounded by the cache size.

use super::values;
use crate::support::sim::{self, sim};
use tensor_arena::device::ascend::{AscendConfig, ExecutorStats, Op, TensorView};
use tensor_arena::{Arena, DType, Error, Planner, Result};

/// `c = a · b` for `steps` steps with new `a` each step; checks every
/// result against the host.
fn matmul_steps(cfg: AscendConfig, steps: usize) -> Result<ExecutorStats> {
    let dev = super::open(cfg);
    let (m, k, n) = (4, 6, 3);
    let q = |s: &[usize]| TensorView::detached(DType::F32, s);
    let need = dev.workspace_size(&Op::Mm {
        a: q(&[m, k])?,
        b: q(&[k, n])?,
        out: q(&[m, n])?,
    })?;
    let mut p = Planner::new();
    let a = p.step::<f32>("a", &[m, k])?;
    let b = p.persistent::<f32>("b", &[k, n])?;
    let c = p.step::<f32>("c", &[m, n])?;
    let ws = p.persistent::<u8>("ws", &[need as usize])?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    let bv = values::<f32>(k * n, 11);
    arena.write(b, &bv)?;
    for step in 0..steps {
        let av = values::<f32>(m * k, step as u32);
        arena.step(|s| {
            let (mut al, bl, cl, mut wl) = (s.lease(a)?, s.lease(b)?, s.lease(c)?, s.lease(ws)?);
            al.copy_from_host(&av)?;
            let op = Op::Mm {
                a: al.tensor(),
                b: bl.tensor(),
                out: cl.tensor(),
            };
            s.aclnn(&op, Some(&mut wl))?;
            let mut out = vec![0.0f32; m * n];
            cl.copy_to_host(&mut out)?;
            for i in 0..m {
                for j in 0..n {
                    let want = (0..k).fold(0.0f32, |acc, p| acc + av[i * k + p] * bv[p * n + j]);
                    assert_eq!(
                        out[i * n + j].to_bits(),
                        want.to_bits(),
                        "step {step} ({i},{j})"
                    );
                }
            }
            Ok::<_, Error>(())
        })?;
    }
    let stats = dev.executor_stats();
    drop(arena);
    drop(dev);
    Ok(stats)
}

#[test]
fn a_workspace_query_makes_its_executor_repeatable_and_destroys_it() -> Result<()> {
    let s = sim();
    let dev = super::open(sim::config());
    let q = |sh: &[usize]| TensorView::detached(DType::F32, sh);
    let op = Op::Softmax {
        x: q(&[5, 7])?,
        dim: 1,
        out: q(&[5, 7])?,
    };
    assert_eq!(dev.workspace_size(&op)?, 5 * 8);
    assert_eq!(s.counter("repeatable_executors"), 1);
    assert_eq!(s.counter("aclDestroyAclOpExecutor"), 1);
    assert_eq!(
        s.counter("live_executors"),
        0,
        "released the documented way, not left behind"
    );
    assert_eq!(dev.executor_stats().abandoned, 0);
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn a_repeated_call_runs_its_cached_executor_on_new_data() -> Result<()> {
    let s = sim();
    sim().reset();
    let stats = matmul_steps(sim::config(), 6)?;
    assert_eq!(
        (stats.misses, stats.hits, stats.one_shot, stats.cached),
        (1, 5, 0, 1),
        "{stats:?}"
    );
    // The query's first phase and the first step's; later steps run the
    // second phase only.
    assert_eq!(s.counter("aclnn_first_phase"), 2);
    assert_eq!(s.counter("aclnn_ops"), 6);
    assert_eq!(s.counter("aclnn_repeated_runs"), 5);
    s.assert_clean();
    Ok(())
}

#[test]
fn without_a_cache_every_call_runs_both_phases_once() -> Result<()> {
    let s = sim();
    sim().reset();
    let stats = matmul_steps(sim::config().executor_cache(0), 4)?;
    assert_eq!(
        (stats.hits, stats.misses, stats.one_shot),
        (0, 0, 4),
        "{stats:?}"
    );
    assert_eq!(s.counter("aclnn_first_phase"), 5);
    assert_eq!(s.counter("aclnn_repeated_runs"), 0);
    assert_eq!(
        s.counter("repeatable_executors"),
        1,
        "only the query's, to destroy it"
    );
    s.assert_clean();
    Ok(())
}

#[test]
fn an_executor_the_runtime_will_not_make_repeatable_runs_once_and_is_not_kept() -> Result<()> {
    let s = sim();
    sim().reset();
    let dev = super::open(sim::config());
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[16])?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    for round in 0..3 {
        if round == 0 {
            s.refuse_repeatable(1);
        }
        arena.step(|st| {
            let mut l = st.lease(x)?;
            l.copy_from_host(&values::<f32>(16, round))?;
            st.aclnn(&Op::ReluInplace { x: l.tensor() }, None)?;
            let mut back = vec![0.0f32; 16];
            l.copy_to_host(&mut back)?;
            let want: Vec<f32> = values::<f32>(16, round)
                .iter()
                .map(|v| v.max(0.0))
                .collect();
            assert_eq!(back, want);
            Ok::<_, Error>(())
        })?;
    }
    let stats = dev.executor_stats();
    assert_eq!(
        (stats.refused, stats.one_shot, stats.misses, stats.hits),
        (1, 1, 1, 1),
        "{stats:?}"
    );
    drop(arena);
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn a_full_cache_evicts_the_least_recently_used_and_stays_correct() -> Result<()> {
    let s = sim();
    sim().reset();
    let dev = super::open(sim::config().executor_cache(2));
    let mut p = Planner::new();
    let bufs: Vec<_> = (0..3)
        .map(|i| p.step::<f32>(&format!("x{i}"), &[8 * (i + 1)]))
        .collect::<Result<_>>()?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    for round in 0..4u32 {
        arena.step(|st| {
            for (i, &b) in bufs.iter().enumerate() {
                let mut l = st.lease(b)?;
                let v = values::<f32>(8 * (i + 1), round * 7 + i as u32);
                l.copy_from_host(&v)?;
                st.aclnn(&Op::ReluInplace { x: l.tensor() }, None)?;
                let mut back = vec![0.0f32; v.len()];
                l.copy_to_host(&mut back)?;
                assert!(back.iter().zip(&v).all(|(b, v)| *b == v.max(0.0)));
            }
            Ok::<_, Error>(())
        })?;
    }
    let stats = dev.executor_stats();
    // Three calls round-robin through two entries: every call misses.
    assert_eq!(
        (
            stats.capacity,
            stats.cached,
            stats.misses,
            stats.evictions,
            stats.hits
        ),
        (2, 2, 12, 10, 0),
        "{stats:?}"
    );
    drop(arena);
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn the_same_shape_on_other_buffers_is_another_executor() -> Result<()> {
    let s = sim();
    sim().reset();
    let dev = super::open(sim::config());
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[32])?;
    let y = p.step::<f32>("y", &[32])?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    for _ in 0..3 {
        arena.step(|st| {
            let (mut xl, yl) = (st.lease(x)?, st.lease(y)?);
            xl.copy_from_host(&values::<f32>(32, 1))?;
            let mut yl = yl;
            yl.copy_from_host(&values::<f32>(32, 2))?;
            st.aclnn(&Op::ReluInplace { x: xl.tensor() }, None)?;
            st.aclnn(&Op::ReluInplace { x: yl.tensor() }, None)?;
            let mut back = vec![0.0f32; 32];
            yl.copy_to_host(&mut back)?;
            let want: Vec<f32> = values::<f32>(32, 2).iter().map(|v| v.max(0.0)).collect();
            assert_eq!(back, want, "y's executor runs on y");
            Ok::<_, Error>(())
        })?;
    }
    let stats = dev.executor_stats();
    assert_eq!(
        (stats.misses, stats.hits, stats.cached),
        (2, 4, 2),
        "{stats:?}"
    );
    drop(arena);
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn too_little_workspace_releases_the_executor_the_documented_way() -> Result<()> {
    let s = sim();
    sim().reset();
    let dev = super::open(sim::config());
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[4, 4])?;
    let y = p.step::<f32>("y", &[4, 4])?;
    let small = p.persistent::<u8>("small", &[8])?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    arena.step(|st| {
        let (xl, yl, mut wl) = (st.lease(x)?, st.lease(y)?, st.lease(small)?);
        let op = Op::Softmax {
            x: xl.tensor(),
            dim: 1,
            out: yl.tensor(),
        };
        for _ in 0..2 {
            let e = st.aclnn(&op, Some(&mut wl)).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::WorkspaceTooSmall {
                        needed: 32,
                        reserved: 16,
                        ..
                    }
                ),
                "{e}"
            );
        }
        Ok::<_, Error>(())
    })?;
    assert_eq!(s.counter("aclDestroyAclOpExecutor"), 2);
    assert_eq!(s.counter("live_executors"), 0);
    drop(arena);
    drop(dev);
    s.assert_clean();
    Ok(())
}
