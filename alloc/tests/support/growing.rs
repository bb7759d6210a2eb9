//! A synthetic loop whose activations grow every step (a curriculum, a
//! growing sequence length): the case of issue 38's "a step that outgrows
//! the plan", every step a new largest live peak. 12 activations (of 1, 2
//! and 3 times the step's size) with a temporary each, then the backward:
//! gradients of fixed sizes carried into the next step and freed at its
//! start (`zero_grad(set_to_none=True)`).

use tensor_arena_alloc::trace::{self, TraceEvent};

/// The events of `steps` steps whose activation size starts at 64 KiB and
/// is multiplied by `growth` after every step.
pub fn growing_loop(steps: usize, growth: f64) -> Vec<TraceEvent> {
    let mut text = String::from("event,addr,size,stream\n");
    let mut next = 4096usize;
    let mut fresh = || {
        next += 1 << 24;
        next
    };
    let mut act = 64.0 * 1024.0;
    let mut grads: Vec<(usize, usize)> = Vec::new();
    for _ in 0..steps {
        text += "step_begin,0,0,0\n";
        for (a, s) in grads.drain(..) {
            text += &format!("free,{a},{s},0\n");
        }
        let mut acts = Vec::new();
        for i in 0..12 {
            let s = (act as usize) * (i % 3 + 1);
            let a = fresh();
            text += &format!("alloc,{a},{s},0\n");
            acts.push((a, s));
            let (t, ts) = (fresh(), s / 2 + 100);
            text += &format!("alloc,{t},{ts},0\nfree,{t},{ts},0\n");
        }
        for (i, (a, s)) in acts.into_iter().enumerate().rev() {
            let (g, gs) = (fresh(), 4096 * (i + 1));
            text += &format!("alloc,{g},{gs},0\n");
            grads.push((g, gs));
            text += &format!("free,{a},{s},0\n");
        }
        text += "step_end,0,0,0\n";
        act *= growth;
    }
    trace::parse(&text).unwrap_or_default()
}
