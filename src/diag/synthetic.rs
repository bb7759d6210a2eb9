//! Synthetic traces with the pattern that fragments a caching allocator:
//! a training loop whose batch size and sequence length change every step,
//! so every step creates temporaries of new shapes (activations, attention
//! scores, dropout masks, gradients) and frees them at the end, while a few
//! persistent weights stay.

use serde::Serialize;

use super::trace::{Trace, TraceBuilder};
use crate::error::{Error, Result};

/// Shape of the synthetic training loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SyntheticConfig {
    /// Training steps.
    pub steps: usize,
    /// Seed of the shape sequence (the same seed gives the same trace).
    pub seed: u64,
    /// Transformer layers.
    pub layers: usize,
    /// Hidden size.
    pub hidden: u64,
    /// Attention heads.
    pub heads: u64,
    /// Smallest and largest batch size (inclusive).
    pub batch: (u64, u64),
    /// Smallest and largest sequence length (inclusive).
    pub seq: (u64, u64),
    /// Prefetch the next batch: its input is allocated in the middle of a
    /// step and freed at the end of the next one, so lifetimes cross step
    /// boundaries.
    pub prefetch: bool,
    /// Buffers allocated at pseudo-random steps and never freed (optimizer
    /// state, caches), each the size of one layer's activations then.
    pub late_held: usize,
}

impl Default for SyntheticConfig {
    /// 200 steps of a 4-layer model (hidden 512, 8 heads), batch 4 to 16,
    /// sequence length 64 to 256: a trace of about 20 000 events whose
    /// steps need 30 to 500 MiB of temporaries.
    fn default() -> SyntheticConfig {
        SyntheticConfig {
            steps: 200,
            seed: 1,
            layers: 4,
            hidden: 512,
            heads: 8,
            batch: (4, 16),
            seq: (64, 256),
            prefetch: false,
            late_held: 0,
        }
    }
}

/// Generates the trace described by `config`.
///
/// Every step draws a batch size and sequence length, then runs forward
/// (per layer: input copy, attention scores `[b, heads, s, s]` f32, their
/// softmax, a dropout mask `[b, s, hidden]` u8, the MLP activation
/// `[b, s, 4 * hidden]` f32, the layer output, and a short-lived
/// workspace), then backward in reverse (gradients of the same shapes,
/// freeing each layer's saved tensors as it goes), then frees what is
/// left. Weights (f32, 12 * hidden² per layer) are allocated first and
/// never freed; their gradients are allocated in the first backward pass
/// and kept.
///
/// ```
/// use tensor_arena::diag::{synthetic, SyntheticConfig};
/// let t = synthetic(&SyntheticConfig { steps: 3, ..SyntheticConfig::default() })?;
/// assert!(t.allocations().len() > 100);
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn synthetic(config: &SyntheticConfig) -> Result<Trace> {
    check(config)?;
    let name = format!(
        "synthetic: {} steps, {} layers, hidden {}, batch {}-{}, seq {}-{}, seed {}",
        config.steps,
        config.layers,
        config.hidden,
        config.batch.0,
        config.batch.1,
        config.seq.0,
        config.seq.1,
        config.seed
    );
    let mut g = Gen {
        b: TraceBuilder::new(&name),
        next_id: 0,
    };
    let (h, heads) = (config.hidden, config.heads);
    let weights: Vec<u64> = (0..config.layers)
        .map(|_| g.alloc(12 * h * h * 4))
        .collect::<Result<_>>()?;
    let mut rng = SplitMix64(config.seed);
    let mut grads: Option<Vec<u64>> = None;
    // Steps at which a late held buffer is made.
    let mut held_at: Vec<usize> = (0..config.late_held)
        .map(|_| rng.between(0, config.steps as u64 - 1) as usize)
        .collect();
    held_at.sort_unstable();
    let mut held = Vec::new();
    let mut prefetched: Option<u64> = None;
    for step in 0..config.steps {
        let b = rng.between(config.batch.0, config.batch.1);
        let s = rng.between(config.seq.0, config.seq.1);
        let act = b * s * h * 4;
        let input = match prefetched.take() {
            Some(p) => p,
            None => g.alloc(b * s * 8)?,
        };
        while held_at.first() == Some(&step) {
            held_at.remove(0);
            held.push(g.alloc(act)?);
        }
        let mut x = g.alloc(act)?;
        let mut saved = Vec::with_capacity(config.layers);
        for _ in 0..config.layers {
            let scores = g.alloc(b * heads * s * s * 4)?;
            let probs = g.alloc(b * heads * s * s * 4)?;
            let mask = g.alloc(b * s * h)?;
            let mlp = g.alloc(b * s * 4 * h * 4)?;
            let workspace = g.alloc(b * s * 4 * h * 2)?;
            g.free(workspace)?;
            let out = g.alloc(act)?;
            saved.push([x, scores, probs, mask, mlp]);
            x = out;
        }
        if config.prefetch && step + 1 < config.steps {
            // The next batch is loaded while this one runs.
            let (nb, ns) = (
                rng.between(config.batch.0, config.batch.1),
                rng.between(config.seq.0, config.seq.1),
            );
            prefetched = Some(g.alloc(nb * ns * 8)?);
        }
        let loss = g.alloc(b * 4)?;
        let mut grad = g.alloc(act)?;
        g.free(x)?;
        let first = grads.is_none();
        let mut new_grads = Vec::new();
        for layer in saved.into_iter().rev() {
            let dmlp = g.alloc(b * s * 4 * h * 4)?;
            let dscores = g.alloc(b * heads * s * s * 4)?;
            if first {
                new_grads.push(g.alloc(12 * h * h * 4)?);
            }
            let dx = g.alloc(act)?;
            for t in [dscores, dmlp, grad] {
                g.free(t)?;
            }
            for t in layer {
                g.free(t)?;
            }
            grad = dx;
        }
        if first {
            grads = Some(new_grads);
        }
        for t in [grad, loss, input] {
            g.free(t)?;
        }
    }
    // Weights, their gradients and the late held buffers stay live to the
    // end, as in training.
    let _ = (weights, grads, held);
    Ok(g.b.finish())
}

fn check(c: &SyntheticConfig) -> Result<()> {
    let bad = |what, value: String, reason: &str| {
        Err(Error::InvalidArgument {
            what,
            value,
            reason: reason.to_owned(),
        })
    };
    if c.steps == 0 || c.steps > 1_000_000 {
        return bad("steps", c.steps.to_string(), "must be 1 to 1000000");
    }
    if c.late_held > 100_000 {
        return bad(
            "late_held",
            c.late_held.to_string(),
            "must be at most 100000",
        );
    }
    if c.layers == 0 || c.layers > 1000 {
        return bad("layers", c.layers.to_string(), "must be 1 to 1000");
    }
    for (what, (lo, hi), max) in [
        ("batch", c.batch, 1 << 16),
        ("seq", c.seq, 1 << 16),
        ("hidden", (c.hidden, c.hidden), 1 << 16),
        ("heads", (c.heads, c.heads), 1 << 10),
    ] {
        if lo == 0 || lo > hi || hi > max {
            return bad(
                what,
                format!("{lo}..={hi}"),
                &format!("needs 1 <= smallest <= largest <= {max}"),
            );
        }
    }
    Ok(())
}

struct Gen {
    b: TraceBuilder<u64>,
    next_id: u64,
}

impl Gen {
    fn alloc(&mut self, size: u64) -> Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        self.b.alloc(id, size, 0).map_err(internal)?;
        Ok(id)
    }

    fn free(&mut self, id: u64) -> Result<()> {
        self.b.free(&id).map_err(internal)
    }
}

fn internal(message: String) -> Error {
    Error::Trace {
        source_name: "synthetic".to_owned(),
        location: "generator".to_owned(),
        message,
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a few lines give a reproducible
/// shape sequence without pulling a random-number crate into the library.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (the modulo bias is irrelevant here).
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::TraceEvent;

    #[test]
    fn same_seed_same_trace_and_everything_temporary_is_freed() {
        let c = SyntheticConfig {
            steps: 5,
            ..SyntheticConfig::default()
        };
        let a = synthetic(&c).unwrap();
        assert_eq!(a, synthetic(&c).unwrap());
        let other = synthetic(&SyntheticConfig { seed: 2, ..c }).unwrap();
        assert_ne!(a.allocations(), other.allocations());
        // Only the weights and their gradients stay: 2 per layer.
        let live = a
            .allocations()
            .iter()
            .filter(|x| x.free_at.is_none())
            .count();
        assert_eq!(live, 2 * c.layers);
        let frees = a
            .events()
            .iter()
            .filter(|e| matches!(e, TraceEvent::Free(_)))
            .count();
        assert_eq!(frees + live, a.allocations().len());
    }

    #[test]
    fn refuses_empty_ranges() {
        for c in [
            SyntheticConfig {
                steps: 0,
                ..SyntheticConfig::default()
            },
            SyntheticConfig {
                batch: (8, 4),
                ..SyntheticConfig::default()
            },
            SyntheticConfig {
                heads: 0,
                ..SyntheticConfig::default()
            },
        ] {
            assert!(matches!(synthetic(&c), Err(Error::InvalidArgument { .. })));
        }
    }
}
