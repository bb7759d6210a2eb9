//! The synthetic dataset and its loader.
//!
//! Each sample is a sequence of `len` tokens (8 to `max_len`), each token a
//! noisy copy of one of two prototypes of the sample's class. A single token
//! says little (the noise is larger than the prototypes); the average of a
//! sequence says a lot, so a model that pools over the sequence can learn it
//! and longer sequences are easier. Everything comes from one Philox stream,
//! so a seed fixes the data.

use tensor_arena::ops::philox::stream_word;

/// Spread of the class prototypes.
const PROTOTYPE_SCALE: f32 = 0.5;
/// Per-token noise: several times the prototype spread, so single tokens
/// are ambiguous and only the sequence average separates the classes.
const NOISE: f32 = 3.0;

/// The whole dataset, in host memory, made once at startup.
pub struct Dataset {
    pub features: usize,
    pub max_len: usize,
    /// `samples × max_len × features`; tokens past a sample's length are 0.
    pub tokens: Vec<f32>,
    pub lengths: Vec<usize>,
    pub labels: Vec<usize>,
}

/// Uniform draws in (0, 1] from the Philox stream of `seed`.
struct Draws {
    seed: u64,
    next: u64,
}

impl Draws {
    fn uniform(&mut self) -> f32 {
        let w = stream_word(self.seed, self.next);
        self.next += 1;
        ((w >> 8) as f32 + 1.0) * (1.0 / 16_777_216.0)
    }

    fn below(&mut self, n: usize) -> usize {
        ((self.uniform() * n as f32) as usize).min(n - 1)
    }

    fn normal(&mut self) -> f32 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
    }
}

impl Dataset {
    /// `samples` sequences of the task fixed by `task_seed` (its class
    /// prototypes), drawn with `sample_seed`: a training and a held-out set
    /// share the task and differ in samples.
    pub fn generate(
        samples: usize,
        features: usize,
        classes: usize,
        max_len: usize,
        task_seed: u64,
        sample_seed: u64,
    ) -> Dataset {
        let mut task = Draws {
            seed: task_seed ^ 0x7a5c,
            next: 0,
        };
        let prototypes: Vec<f32> = (0..classes * 2 * features)
            .map(|_| PROTOTYPE_SCALE * task.normal())
            .collect();
        let mut d = Draws {
            seed: sample_seed ^ 0x0da7_a5e7,
            next: 0,
        };
        let mut tokens = vec![0.0; samples * max_len * features];
        let mut lengths = Vec::with_capacity(samples);
        let mut labels = Vec::with_capacity(samples);
        for s in 0..samples {
            let label = d.below(classes);
            let len = 8 + d.below(max_len - 7);
            for t in 0..len {
                let proto = &prototypes[(label * 2 + d.below(2)) * features..][..features];
                let token = &mut tokens[(s * max_len + t) * features..][..features];
                for (x, p) in token.iter_mut().zip(proto) {
                    *x = p + NOISE * d.normal();
                }
            }
            lengths.push(len);
            labels.push(label);
        }
        Dataset {
            features,
            max_len,
            tokens,
            lengths,
            labels,
        }
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }
}

/// Hands out batches of sample indices in a shuffled order, epoch after
/// epoch; the last batch of an epoch is smaller when the batch size does not
/// divide the dataset, as real loaders do. Allocates only when made.
pub struct Loader {
    order: Vec<usize>,
    pos: usize,
    batch: usize,
    draws: Draws,
}

/// One batch: which samples, and the sequence length they are padded to
/// (the longest in the batch, bucketed up to a multiple of 16).
pub struct Batch<'a> {
    pub samples: &'a [usize],
    pub len: usize,
}

impl Loader {
    pub fn new(samples: usize, batch: usize, seed: u64) -> Loader {
        let mut l = Loader {
            order: (0..samples).collect(),
            pos: samples,
            batch,
            draws: Draws {
                seed: seed ^ 0x10ade5,
                next: 0,
            },
        };
        l.shuffle();
        l.pos = 0;
        l
    }

    fn shuffle(&mut self) {
        for i in (1..self.order.len()).rev() {
            let j = self.draws.below(i + 1);
            self.order.swap(i, j);
        }
    }

    pub fn next<'a>(&'a mut self, data: &Dataset) -> Batch<'a> {
        if self.pos >= self.order.len() {
            self.shuffle();
            self.pos = 0;
        }
        let end = (self.pos + self.batch).min(self.order.len());
        let samples = &self.order[self.pos..end];
        self.pos = end;
        let longest = samples.iter().map(|&s| data.lengths[s]).max().unwrap_or(1);
        Batch {
            samples,
            len: longest
                .next_multiple_of(16)
                .min(data.max_len.next_multiple_of(16)),
        }
    }
}
