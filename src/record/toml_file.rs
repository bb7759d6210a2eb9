//! Spec sets as TOML files that can be checked in:
//!
//! ```toml
//! version = 2
//! phases = ["forward", "backward"]    # the default mode's phases
//!
//! [[mode]]                            # optional: declared modes
//! name = "eval"
//! phases = ["forward"]
//!
//! [[buffer]]
//! name = "h"
//! dtype = "f32"
//! shape = [4096, 128]
//! lifetime = ["forward", "backward"]  # or "persistent", "step", ["forward"]
//! mode = "eval"                       # optional; the default mode otherwise
//! shape_rule = "dims"                 # optional; "elements" otherwise
//! rounding = "inner32"                # optional; the planner's default otherwise
//! recorded_steps = 12                 # optional; absent for specs declared by hand
//! ```
//!
//! A span of phases is a list of its first and last phase names (one name
//! for a single phase) of the buffer's mode, so any phase name reads back
//! unambiguously. Version 1 files (no modes, no shape rules) still load.

use std::path::Path;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::specs::SpecMode;
use super::specs::{SpecEntry, SpecLifetime, SpecSet};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{Rounding, ShapeRule};

/// The format version this build writes. It reads this one and version 1
/// (the format before modes and shape rules).
pub const SPEC_FILE_VERSION: u32 = 2;

#[derive(Serialize)]
struct FileOut<'a> {
    version: u32,
    phases: &'a [String],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    mode: Vec<ModeOut<'a>>,
    buffer: Vec<EntryOut<'a>>,
}

#[derive(Serialize)]
struct ModeOut<'a> {
    name: &'a str,
    phases: &'a [String],
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
    mode: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shape_rule: Option<ShapeRule>,
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
    mode: Vec<Spanned<ModeIn>>,
    #[serde(default)]
    buffer: Vec<Spanned<EntryIn>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModeIn {
    name: String,
    #[serde(default)]
    phases: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryIn {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    lifetime: Spanned<toml::Value>,
    #[serde(default)]
    mode: Option<Spanned<String>>,
    #[serde(default)]
    shape_rule: Option<Spanned<ShapeRule>>,
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
    /// use tensor_arena::record::{SpecEntry, SpecLifetime, SpecMode, SpecSet};
    /// use tensor_arena::DType;
    /// let eval = SpecMode { name: "eval".into(), phases: vec!["forward".into()] };
    /// let set = SpecSet::with_modes(vec!["forward".into()], vec![eval], vec![
    ///     SpecEntry {
    ///         lifetime: SpecLifetime::Phases { first: 0, last: 0 },
    ///         recorded_steps: Some(2),
    ///         ..SpecEntry::new("x", DType::F32, &[8, 3])
    ///     },
    ///     SpecEntry {
    ///         lifetime: SpecLifetime::Phases { first: 0, last: 0 },
    ///         mode: Some("eval".into()),
    ///         ..SpecEntry::new("x", DType::F32, &[64, 3])
    ///     },
    /// ])?;
    /// let text = set.to_toml()?;
    /// assert!(text.contains("lifetime = [\"forward\"]"));
    /// assert!(text.contains("mode = \"eval\""));
    /// assert_eq!(SpecSet::from_toml(&text)?, set);
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn to_toml(&self) -> Result<String> {
        let file = FileOut {
            version: SPEC_FILE_VERSION,
            phases: &self.phases,
            mode: self
                .modes
                .iter()
                .map(|m| ModeOut {
                    name: &m.name,
                    phases: &m.phases,
                })
                .collect(),
            buffer: self
                .buffers
                .iter()
                .map(|b| EntryOut {
                    name: &b.name,
                    dtype: b.dtype,
                    shape: &b.shape,
                    lifetime: self.lifetime_out(b.mode.as_deref(), b.lifetime),
                    mode: b.mode.as_deref(),
                    shape_rule: (b.shape_rule != ShapeRule::Elements).then_some(b.shape_rule),
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

    fn lifetime_out(&self, mode: Option<&str>, lifetime: SpecLifetime) -> LifetimeOut<'_> {
        let phases = self.phases_of(mode).unwrap_or(&[]);
        let name = |i: usize| phases.get(i).map_or("?", String::as_str);
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
    let version = *file.version.get_ref();
    if !(1..=SPEC_FILE_VERSION).contains(&version) {
        return Err(invalid(format!(
            "line {}: version {version} is not supported (this build reads versions 1 to {SPEC_FILE_VERSION})",
            line_of(file.version.span().start),
        )));
    }
    if version == 1
        && let Some(m) = file.mode.first()
    {
        return Err(invalid(format!(
            "line {}: modes need version 2 (this file says version 1)",
            line_of(m.span().start)
        )));
    }
    let phases: Vec<String> = file.phases.iter().map(|p| p.get_ref().clone()).collect();
    let modes: Vec<SpecMode> = file
        .mode
        .iter()
        .map(|m| SpecMode {
            name: m.get_ref().name.clone(),
            phases: m.get_ref().phases.clone(),
        })
        .collect();
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
        let v2 = |key: &str, offset: usize| {
            if version == 1 {
                Err(at(
                    offset,
                    format!("`{key}` needs version 2 (this file says version 1)"),
                ))
            } else {
                Ok(())
            }
        };
        if let Some(m) = &b.mode {
            v2("mode", m.span().start)?;
        }
        if let Some(r) = &b.shape_rule {
            v2("shape_rule", r.span().start)?;
        }
        let mode = b.mode.as_ref().map(|m| m.get_ref().clone());
        let mode_phases = match &mode {
            None => &phases,
            Some(name) => match modes.iter().find(|m| &m.name == name) {
                Some(m) => &m.phases,
                None => {
                    let offset = b.mode.as_ref().map_or(0, |m| m.span().start);
                    return Err(at(offset, format!("mode '{name}' is not declared")));
                }
            },
        };
        let lifetime = parse_lifetime(b.lifetime.get_ref(), mode_phases)
            .map_err(|what| at(b.lifetime.span().start, what))?;
        buffers.push(SpecEntry {
            name: b.name.clone(),
            dtype: b.dtype,
            shape: b.shape.clone(),
            lifetime,
            mode,
            shape_rule: b
                .shape_rule
                .as_ref()
                .map_or(ShapeRule::Elements, |r| *r.get_ref()),
            rounding: b.rounding,
            recorded_steps: b.recorded_steps,
        });
    }
    let set = SpecSet {
        phases,
        modes,
        buffers,
    };
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
    fn version_1_files_load_and_cannot_use_modes() {
        let v1 = "version = 1\nphases = [\"f\"]\n\n[[buffer]]\nname = \"x\"\ndtype = \"f32\"\nshape = [4]\nlifetime = [\"f\"]\n";
        let set = SpecSet::from_toml(v1).unwrap();
        assert_eq!(set.buffers()[0].mode, None);
        assert!(set.to_toml().unwrap().contains("version = 2"));
        let with_mode = format!("{v1}mode = \"eval\"\n");
        let e = SpecSet::from_toml(&with_mode).unwrap_err().to_string();
        assert!(e.contains("line 9") && e.contains("needs version 2"), "{e}");
        let v3 = v1.replace("version = 1", "version = 3");
        let e = SpecSet::from_toml(&v3).unwrap_err().to_string();
        assert!(e.contains("versions 1 to 2"), "{e}");
        let undeclared = format!(
            "{}mode = \"eval\"\n",
            v1.replace("version = 1", "version = 2")
        );
        let e = SpecSet::from_toml(&undeclared).unwrap_err().to_string();
        assert!(e.contains("mode 'eval' is not declared"), "{e}");
    }

    #[test]
    fn errors_name_the_line() {
        let text = "version = 1\nphases = [\"f\"]\n\n[[buffer]]\nname = \"x\"\ndtype = \"f64\"\nshape = [1]\nlifetime = [\"f\"]\n";
        let e = SpecSet::from_toml(text).unwrap_err().to_string();
        assert!(e.starts_with("specs from <text>: line 6:"), "{e}");
        assert!(e.contains("f64"), "{e}");
    }
}
