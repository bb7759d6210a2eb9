//! Elementwise kernels on f32 slices: multiply, scalar multiply, masked
//! scale (by a float, a byte or a bit mask).

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

/// `x[i] = bit i of bits ? x[i] * scale : 0`, bit `i % 8` of byte `i / 8`.
#[inline(always)]
pub(crate) fn apply_bits_f32(x: &mut [f32], bits: &[u8], scale: f32) {
    let tail_byte = bits.get(x.len() / 8).copied();
    let mut groups = x.chunks_exact_mut(8);
    for (g, &b) in (&mut groups).zip(bits) {
        // Eight lanes, one byte: the compiler turns this into one compare
        // and blend per vector.
        for (j, a) in g.iter_mut().enumerate() {
            *a = if (b >> j) & 1 != 0 { *a * scale } else { 0.0 };
        }
    }
    let rest = groups.into_remainder();
    if let Some(b) = tail_byte {
        for (j, a) in rest.iter_mut().enumerate() {
            *a = if (b >> j) & 1 != 0 { *a * scale } else { 0.0 };
        }
    }
}
