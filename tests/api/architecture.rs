//! docs/architecture.md is checked against the source: every top-level
//! module depends only on the modules its row allows (so the layers have no
//! cycle), `error` imports nothing from the crate, and `unsafe` is allowed
//! only on the modules the page lists, each with a reason comment.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Source text without comments (doc comments included), so links in docs
/// do not count as dependencies.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `crate::name` references in `code`, `name` a module path segment.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let tail = &rest[i + "crate::".len()..];
        let name: String = tail
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
            .collect();
        // `$crate::` in macros and `tensor_arena::` are not this pattern's
        // business; a bare `crate::` before an item would be uppercase.
        let before = &rest[..i];
        if !name.is_empty() && !before.ends_with('$') {
            refs.insert(name);
        }
        rest = tail;
    }
    refs
}

/// The top-level module a file belongs to (`src/arena/lease.rs` -> arena).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "doc_tests")).then(|| name.to_owned())
}

/// Rows `| `name` | ... | deps |` of the table under `heading`.
fn table_rows(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("docs/architecture.md has no '{heading}'"));
    doc[start..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and separator
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

fn allowed_deps(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    table_rows(doc, "## Module map")
        .into_iter()
        .map(|row| {
            let name = row[0].trim_matches('`').to_owned();
            let deps = row
                .last()
                .map(|d| {
                    d.split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty() && s != "(nothing)")
                        .collect()
                })
                .unwrap_or_default();
            (name, deps)
        })
        .collect()
}

#[test]
fn modules_depend_only_on_the_layers_the_page_allows() {
    let doc = read(&root().join("docs/architecture.md"));
    let allowed = allowed_deps(&doc);
    assert!(allowed.len() >= 10, "module map not parsed: {allowed:?}");

    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut actual: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let Some(top) = top_module(&src, f) else {
            continue;
        };
        let refs = crate_refs(&code_of(&read(f)));
        let entry = actual.entry(top.clone()).or_default();
        entry.extend(refs.into_iter().filter(|r| *r != top));
    }
    for (module, deps) in &actual {
        let allow = allowed
            .get(module)
            .unwrap_or_else(|| panic!("module `{module}` is missing from the module map"));
        let extra: Vec<_> = deps.difference(allow).collect();
        assert!(
            extra.is_empty(),
            "`{module}` depends on {extra:?}, which its row in docs/architecture.md does not allow"
        );
    }
    for module in allowed.keys() {
        assert!(
            actual.contains_key(module) || src.join(format!("{module}.rs")).exists(),
            "the module map lists `{module}`, which is not in src/"
        );
    }
    // The allowed graph itself has no cycle: repeatedly remove modules
    // whose allowed dependencies are all removed.
    let mut left = allowed.clone();
    while !left.is_empty() {
        let ready: Vec<String> = left
            .iter()
            .filter(|(_, deps)| deps.iter().all(|d| !left.contains_key(d)))
            .map(|(m, _)| m.clone())
            .collect();
        assert!(
            !ready.is_empty(),
            "the module map has a cycle among {left:?}"
        );
        for m in ready {
            left.remove(&m);
        }
    }
}

#[test]
fn the_error_module_imports_nothing_from_the_crate() {
    let code = code_of(&read(&root().join("src/error.rs")));
    assert!(
        crate_refs(&code).is_empty() && !code.contains("super::"),
        "src/error.rs must not depend on other modules"
    );
}

#[test]
fn unsafe_is_allowed_only_where_the_page_says_with_a_reason() {
    let doc = read(&root().join("docs/architecture.md"));
    let listed: BTreeSet<String> = table_rows(&doc, "## The unsafe rule")
        .into_iter()
        .map(|row| row[0].trim_matches('`').to_owned())
        .collect();
    let lib = read(&root().join("src/lib.rs"));
    assert!(
        lib.contains("#![deny(unsafe_code)]"),
        "src/lib.rs must deny unsafe_code"
    );

    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = BTreeSet::new();
    for f in &files {
        let text = read(f);
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim() != "#[allow(unsafe_code)]" {
                continue;
            }
            let reason = i.checked_sub(1).map(|j| lines[j].trim());
            assert!(
                reason.is_some_and(|r| r.starts_with("//")),
                "{}:{}: #[allow(unsafe_code)] without a reason comment above it",
                f.display(),
                i + 1
            );
            let item = lines.get(i + 1).map(|l| l.trim()).unwrap_or_default();
            let Some(name) = item
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .map(|n| n.trim_end_matches(';'))
            else {
                // An item-level allowance (the `HostAccessible` declaration).
                assert!(
                    item.contains("unsafe trait"),
                    "{}:{}: #[allow(unsafe_code)] on `{item}`",
                    f.display(),
                    i + 2
                );
                continue;
            };
            let parent = f
                .strip_prefix(&src)
                .ok()
                .and_then(|rel| rel.parent())
                .map(|p| {
                    p.components()
                        .filter_map(|c| c.as_os_str().to_str())
                        .collect::<Vec<_>>()
                        .join("::")
                })
                .unwrap_or_default();
            let path = if parent.is_empty() {
                name.to_owned()
            } else {
                format!("{parent}::{name}")
            };
            assert!(
                listed.contains(&path),
                "`{path}` allows unsafe code but docs/architecture.md does not list it"
            );
            found.insert(path);
        }
    }
    let stale: Vec<_> = listed.difference(&found).collect();
    assert!(
        stale.is_empty(),
        "docs/architecture.md lists {stale:?}, which allow no unsafe code"
    );
}
