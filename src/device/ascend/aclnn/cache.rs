//! The bounded cache behind executor reuse: what identifies one operator
//! call ([`OpKey`]) and a least-recently-used table of a fixed size, made
//! once when the device opens. Pure data: the executors it holds are the
//! FFI layer's (`call`).
//!
//! A key holds the operator, every operand's element type, shape, strides
//! and device address, and every scalar argument. The addresses belong in
//! it because an arena's addresses never change: a lease of a given buffer
//! is always at the same place, so one call site of a training step maps to
//! one key for each shape it sees, and an executor made repeatable for it
//! runs every step on exactly the addresses it was made with. No address
//! ever changes under a cached executor, so none of aclnn's address setters
//! (`aclSetInputTensorAddr` & co., documented for executors whose addresses
//! change) is needed.

use super::op::Op;

/// Words a key may hold: enough for five operands of eight dimensions and
/// every scalar argument.
const KEY_WORDS: usize = 112;

/// What identifies one operator call, for executor reuse.
#[derive(Clone)]
pub(crate) struct OpKey {
    hash: u64,
    len: usize,
    words: [u64; KEY_WORDS],
}

impl PartialEq for OpKey {
    fn eq(&self, other: &OpKey) -> bool {
        self.hash == other.hash && self.words[..self.len] == other.words[..other.len]
    }
}

impl OpKey {
    /// The key of `op` with operands on the slab at `base` (an address);
    /// `None` when the call does not fit a key (too many reduced
    /// dimensions), so it is never cached.
    pub(crate) fn new(op: &Op<'_>, base: usize) -> Option<OpKey> {
        let mut k = OpKey {
            hash: 0,
            len: 0,
            words: [0; KEY_WORDS],
        };
        k.push(op_tag(op))?;
        for v in op.views().into_iter().flatten() {
            let n = usize::from(v.ndim);
            k.push(u64::from(v.ndim) | (dtype_tag(v.dtype) << 8))?;
            for i in 0..n {
                k.push(v.dims[i] as u64)?;
                k.push(v.strides[i] as u64)?;
            }
            k.push(v.place.map_or(0, |p| (base + p.offset) as u64))?;
        }
        let f = |x: f32| u64::from(x.to_bits());
        match *op {
            Op::AddInplace { alpha, .. } | Op::SubInplace { alpha, .. } => k.push(f(alpha))?,
            Op::GtScalar { value, .. } => k.push(f(value))?,
            Op::ReduceSum {
                dims, keep_dims, ..
            } => {
                k.push(u64::from(keep_dims))?;
                k.push(dims.len() as u64)?;
                for &d in dims {
                    k.push(d as u64)?;
                }
            }
            Op::Softmax { dim, .. } => k.push(dim as u64)?,
            Op::AdamW {
                lr,
                beta1,
                beta2,
                weight_decay,
                eps,
                ..
            } => {
                for x in [lr, beta1, beta2, weight_decay, eps] {
                    k.push(f(x))?;
                }
            }
            Op::Mm { .. } | Op::MulInplace { .. } | Op::Mul { .. } | Op::ReluInplace { .. } => {}
        }
        k.hash = k.words[..k.len]
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &w| {
                (h ^ w).wrapping_mul(0x0000_0100_0000_01b3)
            });
        Some(k)
    }

    fn push(&mut self, w: u64) -> Option<()> {
        *self.words.get_mut(self.len)? = w;
        self.len += 1;
        Some(())
    }
}

fn op_tag(op: &Op<'_>) -> u64 {
    match op {
        Op::Mm { .. } => 1,
        Op::AddInplace { .. } => 2,
        Op::SubInplace { .. } => 3,
        Op::MulInplace { .. } => 4,
        Op::Mul { .. } => 5,
        Op::ReluInplace { .. } => 6,
        Op::GtScalar { .. } => 7,
        Op::ReduceSum { .. } => 8,
        Op::Softmax { .. } => 9,
        Op::AdamW { .. } => 10,
    }
}

fn dtype_tag(d: crate::dtype::DType) -> u64 {
    use crate::dtype::DType;
    match d {
        DType::F32 => 1,
        DType::F16 => 2,
        DType::BF16 => 3,
        DType::I32 => 4,
        DType::U8 => 5,
    }
}

/// How executor reuse went on one device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecutorStats {
    /// Entries the cache holds at most ([`AscendConfig::executor_cache`](crate::device::ascend::AscendConfig::executor_cache)).
    pub capacity: usize,
    /// Entries it holds now.
    pub cached: usize,
    /// Calls that ran a cached executor (second phase only).
    pub hits: u64,
    /// Calls that made an executor, made it repeatable and cached it.
    pub misses: u64,
    /// Cached executors destroyed to make room.
    pub evictions: u64,
    /// Calls that ran both phases once (no cache, an uncacheable call, or
    /// an executor the runtime would not make repeatable).
    pub one_shot: u64,
    /// `aclSetAclOpExecutorRepeatable` refusals.
    pub refused: u64,
    /// Executors left to the framework: made by a first phase whose second
    /// phase never ran (a workspace query or a workspace too small) and not
    /// repeatable, so not the caller's to destroy (the documented lifetime
    /// has no other release).
    pub abandoned: u64,
}

/// A least-recently-used table of at most `capacity` entries, allocated
/// in full when made: lookups and replacements allocate nothing.
pub(crate) struct Lru<T> {
    slots: Vec<(OpKey, T, u64)>,
    capacity: usize,
    tick: u64,
}

impl<T> Lru<T> {
    pub(crate) fn new(capacity: usize) -> Lru<T> {
        Lru {
            slots: Vec::with_capacity(capacity),
            capacity,
            tick: 0,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The entry for `key`, marked as just used.
    pub(crate) fn get(&mut self, key: &OpKey) -> Option<&mut T> {
        self.tick += 1;
        let tick = self.tick;
        self.slots
            .iter_mut()
            .find(|(k, _, _)| k == key)
            .map(|(_, v, t)| {
                *t = tick;
                v
            })
    }

    /// Inserts `value` for `key` (absent), returning the least recently
    /// used entry it replaced when the table was full.
    pub(crate) fn insert(&mut self, key: OpKey, value: T) -> Option<T> {
        self.tick += 1;
        if self.capacity == 0 {
            return Some(value);
        }
        if self.slots.len() < self.capacity {
            self.slots.push((key, value, self.tick));
            return None;
        }
        let oldest = self
            .slots
            .iter()
            .enumerate()
            .min_by_key(|(_, (_, _, t))| *t)
            .map(|(i, _)| i)?;
        let (_, old, _) = std::mem::replace(&mut self.slots[oldest], (key, value, self.tick));
        Some(old)
    }

    /// Takes the entry for `key` out.
    pub(crate) fn remove(&mut self, key: &OpKey) -> Option<T> {
        let i = self.slots.iter().position(|(k, _, _)| k == key)?;
        Some(self.slots.swap_remove(i).1)
    }

    /// Takes every entry out.
    pub(crate) fn clear(&mut self) -> Vec<T> {
        self.slots.drain(..).map(|(_, v, _)| v).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::ascend::TensorView;
    use crate::dtype::DType;

    fn relu(shape: &[usize]) -> Op<'static> {
        Op::ReluInplace {
            x: TensorView::detached(DType::F32, shape).unwrap(),
        }
    }

    #[test]
    fn keys_tell_shapes_types_scalars_and_places_apart() {
        let a = OpKey::new(&relu(&[4, 3]), 0).unwrap();
        assert!(a == OpKey::new(&relu(&[4, 3]), 0).unwrap());
        assert!(a != OpKey::new(&relu(&[3, 4]), 0).unwrap());
        let h = Op::ReluInplace {
            x: TensorView::detached(DType::F16, &[4, 3]).unwrap(),
        };
        assert!(a != OpKey::new(&h, 0).unwrap());
        let v = TensorView::detached(DType::F32, &[8]).unwrap();
        let add = |alpha| Op::AddInplace {
            x: v,
            other: v,
            alpha,
        };
        assert!(OpKey::new(&add(1.0), 0).unwrap() != OpKey::new(&add(2.0), 0).unwrap());
        let t = TensorView::detached(DType::F32, &[4, 3])
            .unwrap()
            .t()
            .unwrap();
        assert!(
            a != OpKey::new(&Op::ReluInplace { x: t }, 0).unwrap(),
            "strides count"
        );
        let many = [0i64; 200];
        let sum = Op::ReduceSum {
            x: v,
            dims: &many,
            keep_dims: false,
            out: v,
        };
        assert!(
            OpKey::new(&sum, 0).is_none(),
            "too long for a key: never cached"
        );
    }

    #[test]
    fn the_table_keeps_the_most_recently_used() {
        let keys: Vec<OpKey> = (1..=4)
            .map(|n| OpKey::new(&relu(&[n]), 0).unwrap())
            .collect();
        let mut lru = Lru::new(3);
        for (i, k) in keys.iter().take(3).enumerate() {
            assert!(lru.insert(k.clone(), i).is_none());
        }
        assert_eq!(lru.get(&keys[0]).copied(), Some(0));
        // keys[1] is now the least recently used.
        assert_eq!(lru.insert(keys[3].clone(), 3), Some(1));
        assert!(lru.get(&keys[1]).is_none());
        assert_eq!(lru.len(), 3);
        assert_eq!(lru.remove(&keys[0]), Some(0));
        let mut rest = lru.clear();
        rest.sort();
        assert_eq!(rest, [2, 3]);
        let mut none = Lru::new(0);
        assert_eq!(
            none.insert(keys[0].clone(), 7),
            Some(7),
            "a zero-size table keeps nothing"
        );
    }
}
