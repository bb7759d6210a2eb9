//! The arena's random-number state: a seed and an element offset into the
//! Philox stream.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Where the next random op reads the stream: `(seed, offset)`.
///
/// Each random op of `n` elements uses elements `offset..offset + n` and
/// moves `offset` on by `n` rounded up to a multiple of 4, so every op starts
/// on a fresh Philox block. Save it with the checkpoint and restore it to
/// draw the same masks after a resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct RngState {
    /// Philox key.
    pub seed: u64,
    /// Index of the next stream element.
    pub offset: u64,
}

impl RngState {
    /// The stream of `seed` from its start.
    pub fn new(seed: u64) -> RngState {
        RngState { seed, offset: 0 }
    }

    /// The state after an op of `elements` elements.
    pub fn advanced(self, elements: usize) -> Result<RngState> {
        let step = (elements as u64)
            .checked_next_multiple_of(4)
            .and_then(|s| self.offset.checked_add(s))
            .ok_or_else(|| Error::SizeOverflow {
                buffer: "<rng>".to_owned(),
                shape: vec![elements],
                what: "the random stream offset",
                limit: u64::MAX,
            })?;
        Ok(RngState {
            seed: self.seed,
            offset: step,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_move_in_whole_blocks() {
        let s = RngState::new(7);
        assert_eq!(s.advanced(0).unwrap().offset, 0);
        assert_eq!(s.advanced(1).unwrap().offset, 4);
        assert_eq!(s.advanced(8).unwrap().offset, 8);
        assert_eq!(s.advanced(9).unwrap().advanced(3).unwrap().offset, 16);
        let end = RngState {
            seed: 0,
            offset: u64::MAX - 2,
        };
        assert!(end.advanced(1).is_err());
    }
}
