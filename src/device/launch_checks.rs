//! The checks every backend runs before a kernel touches the slab: the
//! kernel's parameters, the operands' presence, bounds, alignment, lengths
//! and overlap, and the element type. Shared so that a request refused on
//! the host is refused, with the same error, on every device.

use super::Region;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::Kernel;

/// Validates a launch of `kernel` on `x` (and `other`) in a slab of
/// `slab_len` bytes on device `device`; returns the second operand when the
/// kernel takes one.
pub(crate) fn check_launch(
    device: &str,
    slab_len: usize,
    kernel: &Kernel,
    dtype: DType,
    x: Region,
    other: Option<Region>,
) -> Result<Option<Region>> {
    kernel.validate()?;
    let bad = |message: String| Error::Device {
        device: device.to_owned(),
        operation: kernel.name(),
        message,
    };
    let other = if kernel.has_operand() {
        Some(other.ok_or_else(|| bad("the kernel needs a second operand".into()))?)
    } else {
        None
    };
    let check_region = |r: Region, dtype: DType| -> Result<()> {
        let inside = r
            .offset
            .checked_add(r.len)
            .is_some_and(|end| end <= slab_len);
        let aligned = r.offset.is_multiple_of(64) && r.len.is_multiple_of(dtype.size());
        if inside && aligned {
            Ok(())
        } else {
            Err(bad(format!(
                "region {}+{} is outside the {slab_len}-byte slab or not aligned for {dtype}",
                r.offset, r.len
            )))
        }
    };
    check_region(x, dtype)?;
    if let Some(o) = other {
        let odt = kernel.operand_dtype(dtype);
        check_region(o, odt)?;
        let n = x.len / dtype.size();
        let needed = kernel.operand_len(n);
        if o.len / odt.size() != needed {
            let rule = if needed == n {
                String::new()
            } else {
                format!(" (a bit mask: ceil({n} / 8) = {needed} bytes)")
            };
            return Err(bad(format!(
                "operand lengths differ: {n} elements of {dtype} need {needed} of {odt}{rule}, got {}",
                o.len / odt.size()
            )));
        }
        if x.offset < o.offset + o.len && o.offset < x.offset + x.len {
            return Err(Error::AliasedOperands {
                op: kernel.name(),
                buffer: format!("region at {}", x.offset),
                other: format!("region at {}", o.offset),
            });
        }
    }
    if kernel.supports(dtype) {
        Ok(other)
    } else {
        Err(bad(format!(
            "element type {dtype} is not supported; use f32, f16 or bf16 (or u8 for a bernoulli_ mask)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::RngState;

    const X: Region = Region {
        offset: 0,
        len: 256,
    };

    #[test]
    fn refuses_what_no_backend_may_run() {
        let mul = Kernel::Mul;
        assert!(check_launch("d", 1024, &mul, DType::F32, X, None).is_err());
        let past_end = Region {
            offset: 1024,
            len: 256,
        };
        assert!(check_launch("d", 1024, &mul, DType::F32, X, Some(past_end)).is_err());
        let shorter = Region {
            offset: 512,
            len: 128,
        };
        assert!(check_launch("d", 1024, &mul, DType::F32, X, Some(shorter)).is_err());
        let overlapping = Region {
            offset: 192,
            len: 256,
        };
        assert!(matches!(
            check_launch("d", 1024, &mul, DType::F32, X, Some(overlapping)),
            Err(Error::AliasedOperands { .. }) | Err(Error::Device { .. })
        ));
        let unaligned = Region {
            offset: 32,
            len: 256,
        };
        assert!(
            check_launch(
                "d",
                1024,
                &Kernel::MulScalar { s: 2.0 },
                DType::F32,
                unaligned,
                None
            )
            .is_err()
        );
        assert!(
            check_launch(
                "d",
                1024,
                &Kernel::MulScalar { s: 2.0 },
                DType::I32,
                X,
                None
            )
            .is_err()
        );
        let bad_p = Kernel::Bernoulli {
            p: 1.5,
            rng: RngState::new(1),
        };
        assert!(matches!(
            check_launch("d", 1024, &bad_p, DType::F32, X, None),
            Err(Error::InvalidProbability { .. })
        ));
    }

    #[test]
    fn u8_masks_are_checked_by_element_count() {
        let rng = RngState::new(1);
        let bern = Kernel::Bernoulli { p: 0.5, rng };
        let bytes = Region {
            offset: 0,
            len: 100,
        };
        assert_eq!(
            check_launch("d", 1024, &bern, DType::U8, bytes, None).unwrap(),
            None
        );
        // Only bernoulli writes u8; the others refuse it.
        assert!(
            check_launch(
                "d",
                1024,
                &Kernel::MulScalar { s: 1.0 },
                DType::U8,
                bytes,
                None
            )
            .is_err()
        );
        let k = Kernel::ApplyMaskU8 { scale: 2.0 };
        let mask = Region {
            offset: 512,
            len: 64,
        };
        // 256 bytes of f32 are 64 elements: a 64-byte mask.
        assert_eq!(
            check_launch("d", 1024, &k, DType::F32, X, Some(mask)).unwrap(),
            Some(mask)
        );
        let mask_f16 = Region {
            offset: 512,
            len: 128,
        };
        assert!(check_launch("d", 1024, &k, DType::F32, X, Some(mask_f16)).is_err());
        assert_eq!(
            check_launch("d", 1024, &k, DType::F16, X, Some(mask_f16)).unwrap(),
            Some(mask_f16)
        );
        // The values must be floats.
        assert!(check_launch("d", 1024, &k, DType::U8, X, Some(mask)).is_err());
    }

    #[test]
    fn accepts_a_well_formed_launch() {
        let y = Region {
            offset: 512,
            len: 256,
        };
        assert_eq!(
            check_launch("d", 1024, &Kernel::Mul, DType::BF16, X, Some(y)).unwrap(),
            Some(y)
        );
        assert_eq!(
            check_launch(
                "d",
                1024,
                &Kernel::MulScalar { s: 1.0 },
                DType::F16,
                X,
                Some(y)
            )
            .unwrap(),
            None
        );
    }
}
