//! MiniMalloc's CSV format, so that the planner's placers can be run on
//! MiniMalloc's public benchmarks and their results compared.
//!
//! One header line, then one buffer per line: `id,lower,upper,size` and
//! optionally `offset`, where the buffer lives during `[lower, upper)`.
//! Columns may come in any order; MiniMalloc's older names are accepted
//! too (`buffer`/`buffer_id` for `id`, `start`/`begin` for `lower`, and
//! `end`, an inclusive end, for `upper`). Blank lines are skipped.
//!
//! ```
//! use tensor_arena::plan::minimalloc;
//! use tensor_arena::plan::placement::{self, Strategy};
//!
//! let problem = minimalloc::parse("id,lower,upper,size\na,0,2,8\nb,1,3,8\nc,2,4,8\n")?;
//! let solution = placement::solve(&problem.buffers, &Strategy::best())?;
//! let csv = problem.to_csv(Some(&solution.offsets));
//! let back = minimalloc::parse(&csv)?;
//! assert_eq!(back.buffers, problem.buffers);
//! assert_eq!(back.offsets.as_deref(), Some(&solution.offsets[..]));
//! back.validate(16)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt::Write as _;

use super::placement::{Interval, Violation, validate};
use crate::error::{Error, Result};

/// A parsed MiniMalloc problem, with a solution if the file had offsets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Problem {
    /// Buffer ids, as written.
    pub ids: Vec<String>,
    /// Lifetimes and sizes, in file order.
    pub buffers: Vec<Interval>,
    /// The `offset` column, if present.
    pub offsets: Option<Vec<usize>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    Id,
    Lower,
    Upper,
    /// An inclusive end (MiniMalloc's old `end` column): upper = end + 1.
    End,
    Size,
    Offset,
}

impl Column {
    fn parse(name: &str) -> Option<Column> {
        Some(match name {
            "id" | "buffer" | "buffer_id" => Column::Id,
            "lower" | "start" | "begin" => Column::Lower,
            "upper" => Column::Upper,
            "end" => Column::End,
            "size" => Column::Size,
            "offset" => Column::Offset,
            _ => return None,
        })
    }

    /// Columns that mean the same thing share a slot.
    fn slot(self) -> usize {
        match self {
            Column::Id => 0,
            Column::Lower => 1,
            Column::Upper | Column::End => 2,
            Column::Size => 3,
            Column::Offset => 4,
        }
    }
}

const SLOT_NAMES: [&str; 5] = ["id", "lower", "upper", "size", "offset"];

fn invalid(line: usize, field: &str, reason: String) -> Error {
    Error::InvalidCsv {
        line,
        field: field.to_owned(),
        reason,
    }
}

/// Parses a MiniMalloc CSV text. Errors name the line, the column and the
/// offending value: a missing, unknown or repeated column; a row with the
/// wrong number of fields; a value that is not a non-negative integer; an
/// empty lifetime (`upper <= lower`); sizes that add up beyond `usize`.
///
/// ```
/// use tensor_arena::plan::minimalloc;
/// let err = minimalloc::parse("id,lower,upper,size\na,0,2,8\nb,3,3,8\n").unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "CSV line 3, field 'upper': upper 3 must be greater than lower 3 (lifetimes are [lower, upper))"
/// );
/// ```
pub fn parse(text: &str) -> Result<Problem> {
    let mut lines = text
        .split('\n')
        .enumerate()
        .map(|(k, l)| (k + 1, l.strip_suffix('\r').unwrap_or(l)))
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((header_line, header)) = lines.next() else {
        return Err(invalid(1, "header", "the file is empty".to_owned()));
    };
    // Column position of each slot, and how the upper slot is written.
    let mut position: [Option<usize>; 5] = [None; 5];
    let mut inclusive_end = false;
    let columns: Vec<&str> = header.split(',').map(str::trim).collect();
    for (k, name) in columns.iter().enumerate() {
        let column = Column::parse(name).ok_or_else(|| {
            invalid(
                header_line,
                name,
                format!("unknown column '{name}' (expected id, lower, upper, size and optionally offset)"),
            )
        })?;
        let slot = &mut position[column.slot()];
        if slot.is_some() {
            return Err(invalid(
                header_line,
                name,
                "the column appears twice".to_owned(),
            ));
        }
        *slot = Some(k);
        inclusive_end |= column == Column::End;
    }
    let mut required = [0usize; 4];
    for (slot, name) in SLOT_NAMES[..4].iter().enumerate() {
        required[slot] = position[slot].ok_or_else(|| {
            invalid(
                header_line,
                name,
                "required column is missing (the header needs id, lower, upper and size)"
                    .to_owned(),
            )
        })?;
    }
    let [id_at, lower_at, upper_at, size_at] = required;
    let mut problem = Problem {
        offsets: position[4].map(|_| Vec::new()),
        ..Problem::default()
    };
    let mut total = 0usize;
    for (line, row) in lines {
        let fields: Vec<&str> = row.split(',').map(str::trim).collect();
        if fields.len() != columns.len() {
            return Err(invalid(
                line,
                "row",
                format!(
                    "{} fields, but the header has {} columns",
                    fields.len(),
                    columns.len()
                ),
            ));
        }
        let number = |at: usize| -> Result<usize> {
            fields[at].parse::<usize>().map_err(|_| {
                invalid(
                    line,
                    columns[at],
                    format!("'{}' is not a non-negative integer", fields[at]),
                )
            })
        };
        let lower = number(lower_at)?;
        let mut upper = number(upper_at)?;
        if inclusive_end {
            upper = upper.checked_add(1).ok_or_else(|| {
                invalid(
                    line,
                    columns[upper_at],
                    format!("'{}' is too large", fields[upper_at]),
                )
            })?;
        }
        if upper <= lower {
            return Err(invalid(
                line,
                columns[upper_at],
                format!(
                    "upper {upper} must be greater than lower {lower} (lifetimes are [lower, upper))"
                ),
            ));
        }
        let size = number(size_at)?;
        total = total.checked_add(size).ok_or_else(|| {
            invalid(
                line,
                columns[size_at],
                format!("sizes add up beyond {} bytes", usize::MAX),
            )
        })?;
        if let (Some(offsets), Some(at)) = (problem.offsets.as_mut(), position[4]) {
            offsets.push(number(at)?);
        }
        problem.ids.push(fields[id_at].to_owned());
        problem.buffers.push(Interval { lower, upper, size });
    }
    Ok(problem)
}

impl Problem {
    /// Number of buffers.
    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    /// Whether there are no buffers.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// The CSV text (`id,lower,upper,size`, plus `offset` when `offsets` is
    /// given), one buffer per line in this problem's order.
    pub fn to_csv(&self, offsets: Option<&[usize]>) -> String {
        let mut out = String::with_capacity(32 * (self.buffers.len() + 1));
        out.push_str("id,lower,upper,size");
        if offsets.is_some() {
            out.push_str(",offset");
        }
        out.push('\n');
        for (k, b) in self.buffers.iter().enumerate() {
            let id = self.ids.get(k).map_or("", String::as_str);
            // Writing to a String cannot fail.
            let _ = write!(out, "{id},{},{},{}", b.lower, b.upper, b.size);
            if let Some(offsets) = offsets {
                let _ = write!(out, ",{}", offsets.get(k).copied().unwrap_or(0));
            }
            out.push('\n');
        }
        out
    }

    /// Validates the file's own offsets against `capacity`: no two buffers
    /// alive together share a byte, all end within the capacity. A file
    /// without an `offset` column has nothing to validate and is an error.
    pub fn validate(&self, capacity: usize) -> std::result::Result<(), Violation> {
        let offsets = self.offsets.as_deref().unwrap_or(&[]);
        validate(&self.buffers, offsets, Some(capacity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> (usize, String, String) {
        match parse(text) {
            Err(Error::InvalidCsv {
                line,
                field,
                reason,
            }) => (line, field, reason),
            other => panic!("expected a CSV error, got {other:?}"),
        }
    }

    #[test]
    fn reads_the_benchmark_format() {
        let p = parse("id,lower,upper,size\n0,995328,1000448,656384\r\n1,0,5,7\n\n").unwrap();
        assert_eq!(p.ids, vec!["0", "1"]);
        assert_eq!(
            p.buffers,
            vec![
                Interval {
                    lower: 995328,
                    upper: 1000448,
                    size: 656384
                },
                Interval {
                    lower: 0,
                    upper: 5,
                    size: 7
                }
            ]
        );
        assert_eq!(p.offsets, None);
    }

    #[test]
    fn old_column_names_and_inclusive_end() {
        let p = parse("buffer,start,end,size,offset\nx,3,4,10,20\n").unwrap();
        assert_eq!(
            p.buffers[0],
            Interval {
                lower: 3,
                upper: 5,
                size: 10
            }
        );
        assert_eq!(p.offsets, Some(vec![20]));
    }

    #[test]
    fn round_trip_with_offsets() {
        let p = parse("size,id,upper,lower\n5,a,2,0\n6,b,3,1\n").unwrap();
        let csv = p.to_csv(Some(&[0, 5]));
        assert_eq!(csv, "id,lower,upper,size,offset\na,0,2,5,0\nb,1,3,6,5\n");
        let q = parse(&csv).unwrap();
        assert_eq!(q.buffers, p.buffers);
        assert_eq!(q.ids, p.ids);
        q.validate(11).unwrap();
        assert!(matches!(
            q.validate(10),
            Err(Violation::OverCapacity { .. })
        ));
        assert!(matches!(p.validate(100), Err(Violation::Count { .. })));
    }

    #[test]
    fn malformed_input_names_line_and_field() {
        assert_eq!(err("").0, 1);
        let (line, field, reason) = err("id,lower,upper\n0,1,2\n");
        assert_eq!((line, field.as_str()), (1, "size"));
        assert!(reason.contains("missing"), "{reason}");
        let (_, field, reason) = err("id,lower,upper,size,colour\n");
        assert_eq!(field, "colour");
        assert!(reason.contains("unknown column"), "{reason}");
        let (_, field, _) = err("id,lower,upper,size,start\n");
        assert_eq!(field, "start");
        let (line, field, reason) = err("id,lower,upper,size\n0,0,1,4\n\n1,0,x,4\n");
        assert_eq!((line, field.as_str()), (4, "upper"));
        assert!(reason.contains("'x'"), "{reason}");
        let (line, field, reason) = err("id,lower,upper,size\n0,0,1\n");
        assert_eq!((line, field.as_str()), (2, "row"));
        assert!(reason.contains("3 fields"), "{reason}");
        let (_, field, reason) = err("id,lower,upper,size\n0,5,5,4\n");
        assert_eq!(field, "upper");
        assert!(reason.contains("greater than lower 5"), "{reason}");
        let (_, field, _) = err("id,lower,upper,size\n0,0,1,-4\n");
        assert_eq!(field, "size");
        let big = format!("id,lower,upper,size\n0,0,1,{}\n1,0,1,1\n", usize::MAX);
        let (line, field, reason) = err(&big);
        assert_eq!((line, field.as_str()), (3, "size"));
        assert!(reason.contains("add up"), "{reason}");
        let end_max = format!("id,lower,end,size\n0,0,{},1\n", usize::MAX);
        assert_eq!(err(&end_max).1, "end");
        let e = parse("id,lower,upper,size\n0,0,x,1\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "CSV line 2, field 'upper': 'x' is not a non-negative integer"
        );
    }
}
