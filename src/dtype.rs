//! Element types a buffer can hold.

use half::{bf16, f16};
use serde::{Deserialize, Serialize};

/// The element type of a buffer, known at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`).
    BF16,
    /// 32-bit signed integer.
    I32,
    /// 8-bit unsigned integer (masks, bytes).
    U8,
}

impl DType {
    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 => 1,
        }
    }

    /// Lower-case name, as printed in plan reports.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U8 => "u8",
        }
    }

    /// Parses a name written by [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8]
            .into_iter()
            .find(|d| d.name() == name)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that can live in a planned buffer.
///
/// Sealed: implemented for `f32`, `half::f16`, `half::bf16`, `i32` and `u8`.
/// Every element type is [`bytemuck::Pod`], so any bit pattern in the slab is
/// a valid value and buffers can be viewed as bytes.
pub trait Element: bytemuck::Pod + Send + Sync + sealed::Sealed + 'static {
    /// The run-time tag of this type.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
    )*};
}

element!(f32 => F32, f16 => F16, bf16 => BF16, i32 => I32, u8 => U8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_rust_types() {
        assert_eq!(DType::F32.size(), std::mem::size_of::<f32>());
        assert_eq!(DType::F16.size(), std::mem::size_of::<f16>());
        assert_eq!(DType::BF16.size(), std::mem::size_of::<bf16>());
        assert_eq!(DType::I32.size(), std::mem::size_of::<i32>());
        assert_eq!(DType::U8.size(), std::mem::size_of::<u8>());
    }

    #[test]
    fn names_round_trip() {
        for d in [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8] {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("f64"), None);
    }
}
