//! The kernel calls the cost model is asked about, and its figures for one.

use tensor_arena::Element;
use tensor_arena::device::ascend::abi::{Tiling, dropout_backward_entry_point, entry_point};
use tensor_arena::ops::{Kernel, RngState};
use tensor_arena::{bf16, f16};

use crate::shim::{Cost, Shim};

/// One kernel on one element type.
pub struct Case {
    pub kernel: &'static str,
    pub dtype: &'static str,
    /// Part of the `--json` output (its `kernel` values are fixed).
    pub in_json: bool,
    /// Global-memory bytes moved per element (reads + writes).
    bytes_per_element: f64,
    launch: fn(&Shim, usize, &Tiling) -> Result<u32, String>,
}

/// The cost model's figures for one call (estimates).
pub struct Figures {
    pub elements: usize,
    pub cycles_per_element: f64,
    pub est_elements_per_s: f64,
    pub hbm_bound_elements_per_s: f64,
    /// Busy share of the slowest core's cycles, per pipe (S, V, MTE2, MTE3).
    pub busy_percent: [f64; 4],
    /// The slowest core's vector repeat cycles with UB bank conflicts over
    /// those without (1: no two sources of an instruction shared a bank
    /// group).
    pub bank_conflict_factor: f64,
    /// The slowest core's vector issue cycles (22 per vector instruction)
    /// per element it owns.
    pub issue_cycles: f64,
}

impl Figures {
    /// The busiest pipe of the slowest core.
    pub fn bound_by(&self) -> &'static str {
        let names = ["scalar", "vector", "MTE2", "MTE3"];
        let (i, _) = self
            .busy_percent
            .iter()
            .enumerate()
            .fold((0, f64::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b });
        names[i]
    }
}

const RNG: RngState = RngState {
    seed: 0x5eed,
    offset: 0,
};

impl Case {
    /// Runs the call on `elements` elements over `cores` cores and reads
    /// the model's figures for it.
    pub fn run(
        &self,
        lib: &Shim,
        elements: usize,
        clock: f64,
        cores: u32,
        hbm: f64,
    ) -> Result<Figures, String> {
        let t = Tiling::new(elements as u64, cores).map_err(|e| e.to_string())?;
        lib.reset();
        let rc = (self.launch)(lib, elements, &t)?;
        if rc != 0 || lib.violations() != 0 {
            return Err(format!("launch returned {rc}: {}", lib.report()));
        }
        let c: Cost = lib.last_cost();
        let owned = t.block_range(c.critical_block);
        let owned = (owned.end - owned.start).max(1) as f64;
        let total = c.critical_cycles.max(f64::MIN_POSITIVE);
        let mut busy_percent = [0.0; 4];
        for (p, b) in busy_percent.iter_mut().enumerate() {
            *b = 100.0 * c.critical_busy[p] / total;
        }
        Ok(Figures {
            elements,
            bank_conflict_factor: c.bank_conflict_factor(),
            issue_cycles: c.issue_cycles / owned,
            cycles_per_element: c.critical_cycles / owned,
            est_elements_per_s: elements as f64 / (c.critical_cycles / clock),
            hbm_bound_elements_per_s: hbm / self.bytes_per_element,
            busy_percent,
        })
    }
}

fn zeros<T: Element>(n: usize) -> Vec<T> {
    vec![<T as bytemuck::Zeroable>::zeroed(); n]
}

fn bernoulli<T: Element>(lib: &Shim, n: usize, t: &Tiling) -> Result<u32, String> {
    let entry = entry_point(&Kernel::Bernoulli { p: 0.5, rng: RNG }, T::DTYPE)
        .map_err(|e| e.to_string())?;
    let mut x = zeros::<T>(n);
    Ok(lib.random(entry, t.num_blocks, &mut x, 0.5, RNG, t))
}

fn dropout<T: Element>(lib: &Shim, n: usize, t: &Tiling) -> Result<u32, String> {
    let entry =
        entry_point(&Kernel::Dropout { p: 0.1, rng: RNG }, T::DTYPE).map_err(|e| e.to_string())?;
    let mut x = zeros::<T>(n);
    Ok(lib.random(entry, t.num_blocks, &mut x, 0.1, RNG, t))
}

fn dropout_backward<T: Element>(lib: &Shim, n: usize, t: &Tiling) -> Result<u32, String> {
    let entry = dropout_backward_entry_point(T::DTYPE).map_err(|e| e.to_string())?;
    let mut g = zeros::<T>(n);
    Ok(lib.random(entry, t.num_blocks, &mut g, 0.1, RNG, t))
}

fn apply_mask<T: Element>(lib: &Shim, n: usize, t: &Tiling) -> Result<u32, String> {
    let entry =
        entry_point(&Kernel::ApplyMask { scale: 2.0 }, T::DTYPE).map_err(|e| e.to_string())?;
    let (mut x, mask) = (zeros::<T>(n), zeros::<T>(n));
    Ok(lib.apply_mask(entry, t.num_blocks, &mut x, &mask, 2.0, t))
}

fn mul<T: Element>(lib: &Shim, n: usize, t: &Tiling) -> Result<u32, String> {
    let entry = entry_point(&Kernel::Mul, T::DTYPE).map_err(|e| e.to_string())?;
    let (mut x, y) = (zeros::<T>(n), zeros::<T>(n));
    Ok(lib.mul(entry, t.num_blocks, &mut x, &y, t))
}

fn mul_scalar<T: Element>(lib: &Shim, n: usize, t: &Tiling) -> Result<u32, String> {
    let entry = entry_point(&Kernel::MulScalar { s: 2.0 }, T::DTYPE).map_err(|e| e.to_string())?;
    let mut x = zeros::<T>(n);
    Ok(lib.mul_scalar(entry, t.num_blocks, &mut x, 2.0, t))
}

fn bernoulli_u8(lib: &Shim, n: usize, t: &Tiling) -> Result<u32, String> {
    let mut m = zeros::<u8>(n);
    Ok(lib.random("ta_bernoulli_u8", t.num_blocks, &mut m, 0.5, RNG, t))
}

/// `ta_<kernel>_<dtype>` for the kernels the Ascend backend does not call
/// yet.
fn unwired<T: Element>(kernel: &str) -> String {
    format!("ta_{kernel}_{}", T::DTYPE.name())
}

fn apply_mask_u8<T: Element>(lib: &Shim, n: usize, t: &Tiling) -> Result<u32, String> {
    let (mut x, mask) = (zeros::<T>(n), zeros::<u8>(n));
    let entry = unwired::<T>("apply_mask_u8");
    Ok(lib.apply_byte_mask(&entry, t.num_blocks, &mut x, &mask, 2.0, t))
}

fn dropout_bitmask<T: Element>(lib: &Shim, n: usize, t: &Tiling) -> Result<u32, String> {
    let (mut x, mut bits) = (zeros::<T>(n), zeros::<u8>(n.div_ceil(8)));
    let entry = unwired::<T>("dropout_bitmask");
    Ok(lib.random_bits(&entry, t.num_blocks, &mut x, &mut bits, 0.1, RNG, t))
}

fn apply_bitmask<T: Element>(lib: &Shim, n: usize, t: &Tiling) -> Result<u32, String> {
    let (mut g, bits) = (zeros::<T>(n), zeros::<u8>(n.div_ceil(8)));
    let entry = unwired::<T>("apply_bitmask");
    Ok(lib.apply_byte_mask(&entry, t.num_blocks, &mut g, &bits, 1.0 / 0.9, t))
}

/// Every case: the JSON's kernels on f32, f16 and bf16, then (table only)
/// the u8-mask kernels and the bit-mask dropout pair.
pub fn all() -> Vec<Case> {
    let mut out = Vec::new();
    // $operands: bytes per element in units of the element size; $extra:
    // bytes per element of a u8 or bit mask.
    macro_rules! per_dtype {
        ($kernel:literal, $f:ident, $operands:expr, $extra:expr, $json:expr) => {
            for (dtype, size, launch) in [
                (
                    "f32",
                    4.0,
                    $f::<f32> as fn(&Shim, usize, &Tiling) -> Result<u32, String>,
                ),
                ("f16", 2.0, $f::<f16>),
                ("bf16", 2.0, $f::<bf16>),
            ] {
                out.push(Case {
                    kernel: $kernel,
                    dtype,
                    in_json: $json,
                    bytes_per_element: $operands * size + $extra,
                    launch,
                });
            }
        };
    }
    // Bytes per element in units of the element size: bernoulli writes x;
    // dropout and mul_scalar read and write x; apply_mask and mul also read
    // their operand.
    per_dtype!("bernoulli", bernoulli, 1.0, 0.0, true);
    per_dtype!("dropout", dropout, 2.0, 0.0, true);
    per_dtype!("dropout_backward", dropout_backward, 2.0, 0.0, true);
    per_dtype!("apply_mask", apply_mask, 3.0, 0.0, true);
    per_dtype!("mul", mul, 3.0, 0.0, true);
    per_dtype!("mul_scalar", mul_scalar, 2.0, 0.0, true);
    out.push(Case {
        kernel: "bernoulli_u8",
        dtype: "u8",
        in_json: false,
        bytes_per_element: 1.0,
        launch: bernoulli_u8,
    });
    per_dtype!("apply_mask_u8", apply_mask_u8, 2.0, 1.0, false);
    per_dtype!("dropout_bitmask", dropout_bitmask, 2.0, 0.125, false);
    per_dtype!("apply_bitmask", apply_bitmask, 2.0, 0.125, false);
    out
}
