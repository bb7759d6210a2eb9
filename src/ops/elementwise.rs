//! Elementwise kernels on f32 slices: multiply, scalar multiply, masked
//! scale (by a float or a byte mask).

/// `x[i] *= y[i]`.
#[inline(always)]
pub(crate) fn mul_f32(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a *= *b;
    }
}

/// `x[i] *= s`.
#[inline(always)]
pub(crate) fn mul_scalar_f32(x: &mut [f32], s: f32) {
    for a in x.iter_mut() {
        *a *= s;
    }
}

/// `x[i] = mask[i] != 0 ? x[i] * scale : 0`.
#[inline(always)]
pub(crate) fn apply_mask_f32(x: &mut [f32], mask: &[f32], scale: f32) {
    for (a, &m) in x.iter_mut().zip(mask) {
        *a = if m != 0.0 { *a * scale } else { 0.0 };
    }
}

/// `x[i] = mask[i] != 0 ? x[i] * scale : 0` with a byte mask.
#[inline(always)]
pub(crate) fn apply_mask_u8_f32(x: &mut [f32], mask: &[u8], scale: f32) {
    for (a, &m) in x.iter_mut().zip(mask) {
        *a = if m != 0 { *a * scale } else { 0.0 };
    }
}
