//! `TENSOR_ARENA_CHECKED=1` turns checked mode on for every arena made with
//! `Arena::new` (and for a recorder's plan), without changing code; explicit
//! options win. Its own binary: it sets a process environment variable.

use tensor_arena::{Arena, ArenaOptions, HostDevice, Planner, Recorder};

fn plan() -> tensor_arena::Result<tensor_arena::Plan> {
    let mut p = Planner::new();
    p.step::<f32>("x", &[64])?;
    p.plan()
}

#[test]
fn arena_new_honours_tensor_arena_checked() -> tensor_arena::Result<()> {
    // One test in this binary, so no other thread reads the environment.
    // SAFETY: no other thread of this process runs while it is changed.
    unsafe { std::env::remove_var("TENSOR_ARENA_CHECKED") };
    assert!(!Arena::new(HostDevice::new(), plan()?)?.options().checked);

    // SAFETY: as above.
    unsafe { std::env::set_var("TENSOR_ARENA_CHECKED", "1") };
    let arena = Arena::new(HostDevice::new(), plan()?)?;
    assert!(arena.options().checked);
    // Checked mode really is on: an ended buffer reads as poison.
    let mut arena = arena;
    let x = arena.plan().buffers()[0].name().to_owned();
    arena.step(|s| {
        s.temp::<f32>(&x, &[64])
            .map(|mut l| l.as_mut_slice().fill(1.0))
    })?;
    arena.step(|s| -> tensor_arena::Result<()> {
        let l = s.temp::<f32>(&x, &[64])?;
        assert!(l.as_slice().iter().all(|v| v.is_nan()));
        Ok(())
    })?;
    // Explicit options win over the environment.
    let plain = Arena::with_options(HostDevice::new(), plan()?, ArenaOptions::default())?;
    assert!(!plain.options().checked);
    // A recorder's plan is an `Arena::new` too.
    let mut rec = Recorder::new(HostDevice::new());
    rec.step(|s| s.temp::<f32>("y", &[8]).map(drop))?;
    rec.freeze()?;
    assert_eq!(rec.arena().map(|a| a.options().checked), Some(true));

    // SAFETY: as above.
    unsafe { std::env::set_var("TENSOR_ARENA_CHECKED", "0") };
    assert!(!Arena::new(HostDevice::new(), plan()?)?.options().checked);
    // SAFETY: as above.
    unsafe { std::env::remove_var("TENSOR_ARENA_CHECKED") };
    Ok(())
}
