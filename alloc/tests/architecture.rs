//! docs/architecture.md's section on this crate is checked against the
//! source: `unsafe` only in the modules its table lists, each with a reason
//! comment above the allowance; the policy modules hold none.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The modules the page's "Unsafe in tensor-arena-alloc" table lists.
fn listed() -> BTreeSet<String> {
    let doc = read(&crate_dir().join("../docs/architecture.md"));
    let start = doc
        .find("### Unsafe in tensor-arena-alloc")
        .expect("docs/architecture.md has the allocator crate's unsafe table");
    doc[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .next()
                .unwrap_or("")
                .trim()
                .trim_matches('`')
                .to_owned()
        })
        .collect()
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn unsafe_lives_only_in_the_listed_modules() {
    let src = crate_dir().join("src");
    assert!(read(&src.join("lib.rs")).contains("#![deny(unsafe_code)]"));
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut found = BTreeSet::new();
    for f in &all {
        let text = read(f);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            !text.contains("#![allow(unsafe_code)]"),
            "{}: allowances go on the module declaration",
            f.display()
        );
        for (i, line) in lines.iter().enumerate() {
            if line.trim() != "#[allow(unsafe_code)]" {
                continue;
            }
            assert!(
                i > 0 && lines[i - 1].trim().starts_with("//"),
                "{}:{}: #[allow(unsafe_code)] without a reason comment",
                f.display(),
                i + 1
            );
            let item = lines.get(i + 1).map(|l| l.trim()).unwrap_or_default();
            let name = item
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .map(|n| n.trim_end_matches(';'))
                .unwrap_or_else(|| {
                    panic!(
                        "{}:{}: allowance on `{item}`, not a module",
                        f.display(),
                        i + 2
                    )
                });
            let parent = f.strip_prefix(&src).unwrap().parent().unwrap();
            let path = if parent.as_os_str().is_empty() {
                name.to_owned()
            } else {
                format!("{}::{name}", parent.display())
            };
            found.insert(path);
        }
    }
    assert_eq!(
        found,
        listed(),
        "the modules that allow unsafe code vs docs/architecture.md"
    );
}
