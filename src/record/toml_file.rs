//! Spec sets as TOML files that can be checked in:
//!
//! ```toml
//! version = 1
//! phases = ["forward", "backward"]
//!
//! [[buffer]]
//! name = "h"
//! dtype = "f32"
//! shape = [4096, 128]
//! lifetime = ["forward", "backward"]  # or "persistent", "step", ["forward"]
//! rounding = "inner32"                # optional; the planner's default otherwise
//! recorded_steps = 12                 # optional; absent for specs declared by hand
//! ```
//!
//! A span of phases is a list of its first and last phase names (one name
//! for a single phase), so any phase name reads back unambiguously.

use std::path::Path;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::specs::{SpecEntry, SpecLifetime, SpecSet};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Rounding;

/// The format version this build writes and reads.
pub const SPEC_FILE_VERSION: u32 = 1;

#[derive(Serialize)]
struct FileOut<'a> {
    version: u32,
    phases: &'a [String],
    buffer: Vec<EntryOut<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum LifetimeOut<'a> {
    Word(&'static str),
    Phases(Vec<&'a str>),
}

#[derive(Serialize)]
struct EntryOut<'a> {
    name: &'a str,
    dtype: DType,
    shape: &'a [usize],
    lifetime: LifetimeOut<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rounding: Option<Rounding>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recorded_steps: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileIn {
    version: Spanned<u32>,
    #[serde(default)]
    phases: Vec<Spanned<String>>,
    #[serde(default)]
    buffer: Vec<Spanned<EntryIn>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryIn {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    lifetime: Spanned<toml::Value>,
    #[serde(default)]
    rounding: Option<Rounding>,
    #[serde(default)]
    recorded_steps: Option<u64>,
}

impl SpecSet {
    /// The set as a TOML document (see the module docs for the format),
    /// headed by a comment saying what wrote it.
    ///
    /// ```
    /// use tensor_arena::record::{SpecEntry, SpecLifetime, SpecSet};
    /// use tensor_arena::DType;
    /// let set = SpecSet::new(vec!["forward".into()], vec![SpecEntry {
    ///     name: "x".into(),
    ///     dtype: DType::F32,
    ///     shape: vec![8, 3],
    ///     lifetime: SpecLifetime::Phases { first: 0, last: 0 },
    ///     rounding: None,
    ///     recorded_steps: Some(2),
    /// }])?;
    /// let text = set.to_toml()?;
    /// assert!(text.contains("lifetime = [\"forward\"]"));
    /// assert_eq!(SpecSet::from_toml(&text)?, set);
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn to_toml(&self) -> Result<String> {
        let file = FileOut {
            version: SPEC_FILE_VERSION,
            phases: &self.phases,
            buffer: self
                .buffers
                .iter()
                .map(|b| EntryOut {
                    name: &b.name,
                    dtype: b.dtype,
                    shape: &b.shape,
                    lifetime: self.lifetime_out(b.lifetime),
                    rounding: b.rounding,
                    recorded_steps: b.recorded_steps,
                })
                .collect(),
        };
        let body = toml::to_string(&file).map_err(|e| Error::InvalidSpecs {
            source_name: "SpecSet::to_toml".to_owned(),
            reason: e.to_string(),
        })?;
        let learned = self
            .buffers
            .iter()
            .filter(|b| b.recorded_steps.is_some())
            .count();
        Ok(format!(
            "# tensor-arena buffer specs: {} buffers, {learned} learned by recording.\n\
             # Load with SpecSet::load, then declare_on(planner) or Recorder::preload.\n{body}",
            self.buffers.len()
        ))
    }

    fn lifetime_out(&self, lifetime: SpecLifetime) -> LifetimeOut<'_> {
        let name = |i: usize| self.phases.get(i).map_or("?", String::as_str);
        match lifetime {
            SpecLifetime::Persistent => LifetimeOut::Word("persistent"),
            SpecLifetime::Step => LifetimeOut::Word("step"),
            SpecLifetime::Phases { first, last } if first == last => {
                LifetimeOut::Phases(vec![name(first)])
            }
            SpecLifetime::Phases { first, last } => {
                LifetimeOut::Phases(vec![name(first), name(last)])
            }
        }
    }

    /// Parses a TOML document written by [`to_toml`](SpecSet::to_toml) (or
    /// by hand). Errors name the line and what is wrong with it.
    pub fn from_toml(text: &str) -> Result<SpecSet> {
        parse(text, "<text>")
    }

    /// Reads and parses the spec file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<SpecSet> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("read", path, &e))?;
        parse(&text, &path.display().to_string())
    }

    /// Writes the set to `path` as TOML.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_toml()?).map_err(|e| Error::io("write", path, &e))
    }
}

fn parse(text: &str, source: &str) -> Result<SpecSet> {
    let invalid = |reason: String| Error::InvalidSpecs {
        source_name: source.to_owned(),
        reason,
    };
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let file: FileIn = toml::from_str(text).map_err(|e| {
        // toml's message carries a snippet over several lines; keep its
        // first line and say where.
        let what = e.message().trim().to_owned();
        match e.span() {
            Some(span) => invalid(format!("line {}: {what}", line_of(span.start))),
            None => invalid(what),
        }
    })?;
    if *file.version.get_ref() != SPEC_FILE_VERSION {
        return Err(invalid(format!(
            "line {}: version {} is not supported (this build reads version {SPEC_FILE_VERSION})",
            line_of(file.version.span().start),
            file.version.get_ref()
        )));
    }
    let phases: Vec<String> = file.phases.iter().map(|p| p.get_ref().clone()).collect();
    let mut buffers = Vec::with_capacity(file.buffer.len());
    for spanned in &file.buffer {
        let b = spanned.get_ref();
        let at = |offset: usize, what: String| {
            invalid(format!(
                "line {}: buffer '{}': {what}",
                line_of(offset),
                b.name
            ))
        };
        let lifetime = parse_lifetime(b.lifetime.get_ref(), &phases)
            .map_err(|what| at(b.lifetime.span().start, what))?;
        buffers.push(SpecEntry {
            name: b.name.clone(),
            dtype: b.dtype,
            shape: b.shape.clone(),
            lifetime,
            rounding: b.rounding,
            recorded_steps: b.recorded_steps,
        });
    }
    let set = SpecSet { phases, buffers };
    set.check().map_err(|(index, reason)| {
        let line = index
            .and_then(|i| file.buffer.get(i))
            .map(|b| line_of(b.span().start));
        invalid(match line {
            Some(line) => format!("line {line}: {reason}"),
            None => reason,
        })
    })?;
    Ok(set)
}

/// `"persistent"`, `"step"`, `["phase"]` or `["first", "last"]`.
fn parse_lifetime(
    value: &toml::Value,
    phases: &[String],
) -> std::result::Result<SpecLifetime, String> {
    const EXPECTED: &str =
        "a lifetime is \"persistent\", \"step\", or a list of one or two phase names";
    let phase = |v: &toml::Value| match v.as_str() {
        Some(name) => phases.iter().position(|p| p == name).ok_or_else(|| {
            format!("lifetime names phase '{name}', which is not one of the phases {phases:?}")
        }),
        None => Err(format!("{EXPECTED}; found {v} in the list")),
    };
    match value {
        toml::Value::String(word) if word == "persistent" => Ok(SpecLifetime::Persistent),
        toml::Value::String(word) if word == "step" => Ok(SpecLifetime::Step),
        toml::Value::Array(names) if (1..=2).contains(&names.len()) => {
            let first = phase(&names[0])?;
            let last = match names.get(1) {
                Some(v) => phase(v)?,
                None => first,
            };
            if first > last {
                return Err(format!(
                    "lifetime: phase '{}' comes after '{}'",
                    phases[first], phases[last]
                ));
            }
            Ok(SpecLifetime::Phases { first, last })
        }
        other => Err(format!("{EXPECTED}; found {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_parse_by_phase_name() {
        let phases = vec!["f".to_owned(), "b..x".to_owned(), "step".to_owned()];
        let parse = |text: &str| {
            let v: toml::Value = toml::from_str::<toml::Table>(&format!("v = {text}"))
                .unwrap()
                .remove("v")
                .unwrap();
            parse_lifetime(&v, &phases)
        };
        assert_eq!(parse("\"persistent\""), Ok(SpecLifetime::Persistent));
        assert_eq!(parse("\"step\""), Ok(SpecLifetime::Step));
        assert_eq!(
            parse("[\"step\"]"),
            Ok(SpecLifetime::Phases { first: 2, last: 2 })
        );
        assert_eq!(
            parse("[\"f\", \"b..x\"]"),
            Ok(SpecLifetime::Phases { first: 0, last: 1 })
        );
        assert!(
            parse("[\"step\", \"f\"]")
                .unwrap_err()
                .contains("comes after")
        );
        assert!(parse("[\"x\"]").unwrap_err().contains("'x'"));
        for bad in ["\"f\"", "[]", "[\"f\", \"f\", \"f\"]", "[1]", "3"] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("list of one or two phase names"), "{bad}: {e}");
        }
    }

    #[test]
    fn errors_name_the_line() {
        let text = "version = 1\nphases = [\"f\"]\n\n[[buffer]]\nname = \"x\"\ndtype = \"f64\"\nshape = [1]\nlifetime = [\"f\"]\n";
        let e = SpecSet::from_toml(text).unwrap_err().to_string();
        assert!(e.starts_with("specs from <text>: line 6:"), "{e}");
        assert!(e.contains("f64"), "{e}");
    }
}
