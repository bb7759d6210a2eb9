//! Matrix product on caller memory: `C = alpha * A·B + beta * C` for f32
//! ndarray views, with no allocation.
//!
//! ndarray's `general_mat_mul` goes through `matrixmultiply`, which
//! allocates a packing buffer on every call; a training step that must not
//! allocate cannot use it. This kernel keeps 4 × 16 tiles of `C` in
//! registers while streaming contiguous pieces of `B`'s rows, so the inner
//! loops vectorise; transposed operands (`.t()` views) are handled by
//! picking the loop order that keeps the innermost access contiguous.
//! Results are deterministic: every element is summed over `k` in order
//! (no FMA), whatever the CPU.

use ndarray::{ArrayView2, ArrayViewMut2, Axis};

use crate::error::{Error, Result};

/// `C` is `m × n`, the sum runs over `k`.
#[derive(Clone, Copy)]
struct Dims {
    m: usize,
    n: usize,
    k: usize,
}

/// How a 2-D operand lies in memory.
#[derive(Clone, Copy)]
enum Layout<'a> {
    /// Row `i` is `data[i * ld .. i * ld + cols]`.
    Rows(&'a [f32], usize),
    /// Column `j` is `data[j * ld .. j * ld + rows]` (a transposed view).
    Cols(&'a [f32], usize),
}

fn layout<'a>(v: &ArrayView2<'a, f32>) -> Option<Layout<'a>> {
    let (rows, cols) = v.dim();
    let (s0, s1) = (v.strides()[0], v.strides()[1]);
    if s0 < 0 || s1 < 0 {
        return None;
    }
    let data = v.to_slice_memory_order()?;
    // With one row or column the stride along it is irrelevant.
    if s1 == 1 || cols <= 1 {
        Some(Layout::Rows(
            data,
            if rows <= 1 { cols } else { s0 as usize },
        ))
    } else if s0 == 1 || rows <= 1 {
        Some(Layout::Cols(
            data,
            if cols <= 1 { rows } else { s1 as usize },
        ))
    } else {
        None
    }
}

/// `c = alpha * a · b + beta * c`.
///
/// `a` is `m × k`, `b` is `k × n`, `c` is `m × n`; any of `a`, `b` may be a
/// transposed view (`.t()`) of a row-major array. `c` must be row-major
/// (standard layout). With `beta == 0` the old contents of `c` are ignored
/// (even NaN). Allocates nothing.
///
/// ```
/// use ndarray::array;
/// use tensor_arena::ops::gemm;
/// let a = array![[1.0f32, 2.0], [3.0, 4.0]];
/// let b = array![[5.0f32, 6.0], [7.0, 8.0]];
/// let mut c = ndarray::Array2::<f32>::zeros((2, 2));
/// gemm(1.0, a.view(), b.t(), 0.0, c.view_mut())?;
/// assert_eq!(c, array![[17.0, 23.0], [39.0, 53.0]]);
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn gemm(
    alpha: f32,
    a: ArrayView2<'_, f32>,
    b: ArrayView2<'_, f32>,
    beta: f32,
    mut c: ArrayViewMut2<'_, f32>,
) -> Result<()> {
    let (m, k) = a.dim();
    let (k2, n) = b.dim();
    if k != k2 || c.dim() != (m, n) {
        return Err(Error::ShapeMismatch {
            op: "gemm",
            buffer: "a·b".to_owned(),
            shape: vec![m, k, k2, n],
            other: "c".to_owned(),
            other_shape: vec![c.dim().0, c.dim().1],
        });
    }
    scale(&mut c, beta);
    if m == 0 || n == 0 || k == 0 || alpha == 0.0 {
        return Ok(());
    }
    let dims = Dims { m, n, k };
    let c_rows = c.strides()[0] >= 0 && (c.strides()[1] == 1 || n <= 1);
    let ldc = if m <= 1 {
        n
    } else {
        c.strides()[0].unsigned_abs()
    };
    match (layout(&a), layout(&b), c_rows) {
        (Some(la), Some(Layout::Rows(bs, ldb)), true) => match c.as_slice_memory_order_mut() {
            Some(cs) => crate::ops::cpu_dispatch::dispatch(
                #[inline(always)]
                || rows_of_b(alpha, la, (bs, ldb), (cs, ldc), dims),
            ),
            None => general(alpha, &a, &b, &mut c),
        },
        (Some(Layout::Rows(as_, lda)), Some(Layout::Cols(bs, ldb)), true) => {
            match c.as_slice_memory_order_mut() {
                Some(cs) => dots(alpha, (as_, lda), (bs, ldb), (cs, ldc), dims),
                None => general(alpha, &a, &b, &mut c),
            }
        }
        _ => general(alpha, &a, &b, &mut c),
    }
    Ok(())
}

fn scale(c: &mut ArrayViewMut2<'_, f32>, beta: f32) {
    if beta == 0.0 {
        c.fill(0.0);
    } else if beta != 1.0 {
        c.map_inplace(|v| *v *= beta);
    }
}

/// Rows of `C` per register tile.
const TILE_M: usize = 4;
/// Columns of `C` per register tile (two AVX2 vectors).
const TILE_N: usize = 16;

/// `B` row-major: `C[i, j] += alpha * sum_p A[i, p] * B[p, j]`, computed in
/// `TILE_M × TILE_N` tiles whose accumulators stay in registers while `p`
/// runs, each `B` row piece contiguous. The sum over `p` runs in order for
/// every element, whatever the tile, so results do not depend on the CPU.
#[inline(always)]
fn rows_of_b(
    alpha: f32,
    a: Layout<'_>,
    (b, ldb): (&[f32], usize),
    (c, ldc): (&mut [f32], usize),
    Dims { m, n, k }: Dims,
) {
    let a_at = |i: usize, p: usize| match a {
        Layout::Rows(d, ld) => d[i * ld + p],
        Layout::Cols(d, ld) => d[p * ld + i],
    };
    let (m_full, n_full) = (m - m % TILE_M, n - n % TILE_N);
    for i0 in (0..m_full).step_by(TILE_M) {
        for j0 in (0..n_full).step_by(TILE_N) {
            let mut acc = [[0f32; TILE_N]; TILE_M];
            for p in 0..k {
                let brow: &[f32; TILE_N] = match b[p * ldb + j0..].first_chunk() {
                    Some(r) => r,
                    None => continue,
                };
                for (r, row) in acc.iter_mut().enumerate() {
                    let av = a_at(i0 + r, p);
                    for (acc, bv) in row.iter_mut().zip(brow) {
                        *acc += av * bv;
                    }
                }
            }
            for (r, row) in acc.iter().enumerate() {
                let out = &mut c[(i0 + r) * ldc + j0..][..TILE_N];
                for (o, v) in out.iter_mut().zip(row) {
                    *o += alpha * v;
                }
            }
        }
        // Columns past the last full tile.
        for r in 0..TILE_M {
            let crow = &mut c[(i0 + r) * ldc..];
            edge(&a_at, (b, ldb), crow, i0 + r, n_full..n, k, alpha);
        }
    }
    // Rows past the last full tile.
    for i in m_full..m {
        edge(&a_at, (b, ldb), &mut c[i * ldc..], i, 0..n, k, alpha);
    }
}

/// One row of `C`, columns `cols`, element by element.
#[inline(always)]
fn edge(
    a_at: &impl Fn(usize, usize) -> f32,
    (b, ldb): (&[f32], usize),
    crow: &mut [f32],
    i: usize,
    cols: std::ops::Range<usize>,
    k: usize,
    alpha: f32,
) {
    for j in cols {
        let mut sum = 0.0;
        for p in 0..k {
            sum += a_at(i, p) * b[p * ldb + j];
        }
        crow[j] += alpha * sum;
    }
}

/// Lanes of the dot-product accumulator: a fixed split of the sum, so the
/// order of additions (and the result) never depends on the CPU.
const LANES: usize = 8;

/// `A` row-major and `B` column-major (a transposed row-major array):
/// `C[i, j] += alpha * dot(A[i, :], B[:, j])`, both contiguous.
fn dots(
    alpha: f32,
    (a, lda): (&[f32], usize),
    (b, ldb): (&[f32], usize),
    (c, ldc): (&mut [f32], usize),
    Dims { m, n, k }: Dims,
) {
    for i in 0..m {
        let arow = &a[i * lda..i * lda + k];
        for j in 0..n {
            let bcol = &b[j * ldb..j * ldb + k];
            let mut acc = [0f32; LANES];
            let (ac, ar) = arow.split_at(k - k % LANES);
            let (bc, br) = bcol.split_at(k - k % LANES);
            for (x, y) in ac.chunks_exact(LANES).zip(bc.chunks_exact(LANES)) {
                for l in 0..LANES {
                    acc[l] += x[l] * y[l];
                }
            }
            for (l, (x, y)) in ar.iter().zip(br).enumerate() {
                acc[l] += x * y;
            }
            let sum =
                ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            c[i * ldc + j] += alpha * sum;
        }
    }
}

/// Any other layout (strided views): plain indexed loops.
fn general(
    alpha: f32,
    a: &ArrayView2<'_, f32>,
    b: &ArrayView2<'_, f32>,
    c: &mut ArrayViewMut2<'_, f32>,
) {
    for (i, mut crow) in c.axis_iter_mut(Axis(0)).enumerate() {
        for (p, &x) in a.row(i).iter().enumerate() {
            let x = alpha * x;
            for (cv, &bv) in crow.iter_mut().zip(b.row(p)) {
                *cv += x * bv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array2, s};

    fn reference(a: &ArrayView2<'_, f32>, b: &ArrayView2<'_, f32>) -> Array2<f64> {
        let (m, k) = a.dim();
        let n = b.dim().1;
        Array2::from_shape_fn((m, n), |(i, j)| {
            (0..k)
                .map(|p| f64::from(a[[i, p]]) * f64::from(b[[p, j]]))
                .sum()
        })
    }

    fn check(a: ArrayView2<'_, f32>, b: ArrayView2<'_, f32>) {
        let (m, n) = (a.dim().0, b.dim().1);
        let mut c = Array2::from_elem((m, n), 1.0f32);
        gemm(2.0, a, b, 0.5, c.view_mut()).unwrap();
        let r = reference(&a, &b);
        for ((i, j), &v) in c.indexed_iter() {
            let want = 2.0 * r[[i, j]] + 0.5;
            assert!(
                (f64::from(v) - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "({i},{j}) {v} vs {want}"
            );
        }
    }

    fn mat(r: usize, c: usize, seed: f32) -> Array2<f32> {
        Array2::from_shape_fn((r, c), |(i, j)| ((i * 7 + j * 3) as f32 * seed).sin())
    }

    #[test]
    fn every_layout_matches_the_reference() {
        for (m, k, n) in [(1, 1, 1), (5, 3, 7), (9, 17, 33), (4, 64, 16), (13, 1, 5)] {
            let a = mat(m, k, 0.3);
            let at = mat(k, m, 0.3);
            let b = mat(k, n, 0.7);
            let bt = mat(n, k, 0.7);
            check(a.view(), b.view());
            check(at.t(), b.view());
            check(a.view(), bt.t());
            check(at.t(), bt.t());
            // A strided view goes through the general path.
            let wide = mat(m, 2 * k, 0.3);
            check(wide.slice(s![.., ..;2]), b.view());
        }
    }

    #[test]
    fn beta_zero_ignores_nan_and_shapes_are_checked() {
        let a = mat(2, 3, 0.1);
        let b = mat(3, 2, 0.2);
        let mut c = Array2::from_elem((2, 2), f32::NAN);
        gemm(1.0, a.view(), b.view(), 0.0, c.view_mut()).unwrap();
        assert!(c.iter().all(|v| v.is_finite()));
        let mut bad = Array2::zeros((3, 2));
        assert!(matches!(
            gemm(1.0, a.view(), b.view(), 0.0, bad.view_mut()),
            Err(Error::ShapeMismatch { .. })
        ));
    }
}
