//! Spec files: learned specs written as TOML and read back unchanged, and
//! malformed files rejected with the line and the reason.

use tensor_arena::record::{SpecEntry, SpecLifetime};
use tensor_arena::{DType, Error, HostDevice, Planner, Recorder, Rounding, ShapeRule, SpecSet};

type R = tensor_arena::Result<()>;

fn entry(name: &str, dtype: DType, shape: &[usize], lifetime: SpecLifetime) -> SpecEntry {
    SpecEntry {
        lifetime,
        ..SpecEntry::new(name, dtype, shape)
    }
}

/// Every element type, lifetime kind and option, and awkward names.
fn varied() -> tensor_arena::Result<SpecSet> {
    let phases = vec!["forward".to_owned(), "back ward".to_owned(), "ü".to_owned()];
    let mut rounded = entry("x \"quoted\"", DType::BF16, &[3, 5, 7], SpecLifetime::Step);
    rounded.rounding = Some(Rounding::Tile32);
    rounded.recorded_steps = Some(40);
    let mut learned = entry(
        "src/model.rs:10:5",
        DType::F16,
        &[1],
        SpecLifetime::Phases { first: 1, last: 2 },
    );
    learned.recorded_steps = Some(1);
    SpecSet::new(
        phases,
        vec![
            entry("w", DType::F32, &[64, 32], SpecLifetime::Persistent),
            rounded,
            learned,
            entry(
                "ids",
                DType::I32,
                &[9],
                SpecLifetime::Phases { first: 0, last: 0 },
            ),
            entry(
                "bytes",
                DType::U8,
                &[2, 2, 2, 2, 2, 2, 2, 2],
                SpecLifetime::Step,
            ),
        ],
    )
}

#[test]
fn spec_files_round_trip() -> R {
    let set = varied()?;
    let text = set.to_toml()?;
    assert_eq!(SpecSet::from_toml(&text)?, set);

    let path = std::env::temp_dir().join(format!("tensor-arena-specs-{}.toml", std::process::id()));
    set.save(&path)?;
    let loaded = SpecSet::load(&path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(loaded?, set);

    // Learned by a recorder, saved, loaded, declared by hand: the same plan.
    let mut rec = Recorder::new(HostDevice::new());
    let fwd = rec.phase("forward")?;
    let bwd = rec.phase("backward")?;
    rec.persistent::<f32>("w", &[10, 10])?;
    for n in [5, 9, 7] {
        rec.step(|s| -> R {
            let a = s.temp::<f32>("a", &[n, 10])?;
            s.enter(bwd)?;
            let b = s.temp::<i32>("b", &[n])?;
            drop((a, b));
            Ok(())
        })?;
    }
    let learned = SpecSet::from_toml(&rec.specs().to_toml()?)?;
    assert_eq!(learned, rec.specs());
    let mut planner = Planner::new();
    let declared = learned.declare_on(&mut planner)?;
    assert_eq!(declared.phase("backward")?.index(), 1);
    let by_hand = planner.plan()?;
    assert_eq!(by_hand.report(), rec.freeze()?.report());
    let _ = fwd;
    Ok(())
}

#[test]
fn malformed_spec_files_are_clear_errors() -> R {
    let head = "version = 1\nphases = [\"forward\", \"backward\"]\n";
    let buffer = |body: &str| format!("{head}\n[[buffer]]\n{body}");
    let ok_body = "name = \"x\"\ndtype = \"f32\"\nshape = [4, 4]\nlifetime = [\"forward\"]\n";
    SpecSet::from_toml(&buffer(ok_body))?;
    let cases: Vec<(String, &[&str])> = vec![
        ("version = 1\n[[buffer]\n".into(), &["line 2"]),
        ("phases = []\n".into(), &["missing field `version`"]),
        (
            "version = 3\n".into(),
            &["line 1", "version 3 is not supported", "versions 1 to 2"],
        ),
        ("version = \"1\"\n".into(), &["line 1", "invalid type"]),
        (
            buffer(&ok_body.replace("lifetime", "lifetim")),
            &["line 8", "unknown field `lifetim`"],
        ),
        (
            buffer("name = \"x\"\ndtype = \"f32\"\nshape = [4]\n"),
            &["line 4", "missing field `lifetime`"],
        ),
        (
            buffer(&ok_body.replace("f32", "f64")),
            &["line 6", "f64", "unknown variant"],
        ),
        (
            buffer(&format!("{ok_body}rounding = \"inner8\"\n")),
            &["line 9", "inner8"],
        ),
        (
            buffer(&ok_body.replace("\"forward\"", "\"fwd\"")),
            &[
                "line 8",
                "buffer 'x'",
                "phase 'fwd'",
                "not one of the phases",
            ],
        ),
        (
            buffer(&ok_body.replace("\"forward\"", "\"backward\", \"forward\"")),
            &["line 8", "'backward' comes after 'forward'"],
        ),
        (
            buffer(&ok_body.replace("[\"forward\"]", "\"forward\"")),
            &[
                "line 8",
                "\"persistent\", \"step\", or a list of one or two phase names",
            ],
        ),
        (
            buffer(&ok_body.replace("[4, 4]", "[4, 0]")),
            &["line 4", "buffer 'x'", "[4, 0]", "no elements"],
        ),
        (
            buffer(&ok_body.replace("[4, 4]", "[]")),
            &["line 4", "no elements"],
        ),
        (
            buffer(&ok_body.replace("[4, 4]", "[-4, 4]")),
            &["line 7", "invalid value"],
        ),
        (
            buffer(&ok_body.replace("[4, 4]", "[1, 1, 1, 1, 1, 1, 1, 1, 1]")),
            &["9 dimensions", "limit of 8"],
        ),
        (
            format!("{}\n[[buffer]]\n{ok_body}", buffer(ok_body)),
            &["line 10", "'x' is used twice"],
        ),
        (
            buffer(&ok_body.replace("\"x\"", "\"backward\"")),
            &["'backward' is used twice"],
        ),
        (buffer(&ok_body.replace("\"x\"", "\"\"")), &["empty name"]),
        (
            "version = 1\nphases = [\"a\", \"a\"]\n".into(),
            &["'a' is used twice"],
        ),
        (
            buffer(&format!("{ok_body}recorded_steps = -1\n")),
            &["line 9", "invalid value"],
        ),
    ];
    for (text, needles) in cases {
        let err = SpecSet::from_toml(&text).unwrap_err();
        assert!(
            matches!(err, Error::InvalidSpecs { .. }),
            "{err:?} for\n{text}"
        );
        let msg = err.to_string();
        assert!(msg.starts_with("specs from <text>: "), "{msg}");
        for needle in needles {
            assert!(
                msg.contains(needle),
                "'{needle}' missing in: {msg}\nfor:\n{text}"
            );
        }
    }
    Ok(())
}

#[test]
fn missing_files_name_the_path() {
    let err = SpecSet::load("/nonexistent/dir/specs.toml").unwrap_err();
    assert!(
        matches!(
            err,
            Error::Io {
                operation: "read",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("/nonexistent/dir/specs.toml"),
        "{err}"
    );
    let err = SpecSet::default()
        .save("/nonexistent/dir/specs.toml")
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Io {
                operation: "write",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn spec_files_with_modes_round_trip_and_plan_the_same() -> R {
    let mut rec = Recorder::new(HostDevice::new());
    let train = rec.mode("train")?;
    let eval = rec.mode("eval")?;
    let fwd = rec.phase_in(train, "forward")?;
    let bwd = rec.phase_in(train, "backward")?;
    rec.phase_in(eval, "forward")?;
    rec.persistent::<f32>("w", &[8, 8])?;
    rec.per_dimension::<f32>(eval, "att")?;
    rec.step_in(train, |s| -> R {
        s.enter(fwd)?;
        let x = s.temp::<f32>("x", &[16, 8])?;
        s.enter(bwd)?;
        drop((x, s.temp::<u8>("keep", &[16, 8])?));
        Ok(())
    })?;
    rec.step_in(eval, |s| -> R {
        drop(s.temp::<f32>("x", &[128, 8])?);
        drop(s.temp::<f32>("att", &[4, 9, 9])?);
        Ok(())
    })?;
    let specs = rec.specs();
    let dir = tempfile::tempdir().map_err(|e| Error::io("create", "tempdir", &e))?;
    let path = dir.path().join("specs.toml");
    specs.save(&path)?;
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io("read", &path, &e))?;
    assert!(text.starts_with("# tensor-arena buffer specs"), "{text}");
    assert!(text.contains("version = 2"), "{text}");
    assert!(text.contains("shape_rule = \"dims\""), "{text}");
    let back = SpecSet::load(&path)?;
    assert_eq!(back, specs);
    // Declared on a plain planner, the file plans what the recorder plans.
    let mut p = Planner::new();
    let declared = back.declare_on(&mut p)?;
    let att = declared.buffer_in::<f32>(Some("eval"), "att")?;
    let x_eval = declared.buffer_in::<f32>(Some("eval"), "x")?;
    let x_train = declared.buffer_in::<f32>(Some("train"), "x")?;
    assert_ne!(x_eval, x_train);
    let plan = p.plan()?;
    assert_eq!(plan.buffer(att.id())?.shape_rule(), ShapeRule::Dims);
    assert_eq!(plan.report(), rec.freeze()?.report());
    assert_eq!(declared.mode("eval")?.index(), 2);
    assert!(declared.mode("nope").is_err());
    // Rust code for the same declarations names the modes.
    let code = back.to_rust();
    for needle in [
        "let eval = planner.mode(\"eval\")?;",
        "let eval_forward = planner.phase_in(eval, \"forward\")?;",
        ".shape_rule(tensor_arena::ShapeRule::Dims)",
        "let train_x = ",
    ] {
        assert!(code.contains(needle), "{needle} missing in\n{code}");
    }
    Ok(())
}

#[test]
fn version_1_files_still_load() -> R {
    let v1 = "version = 1\nphases = [\"forward\", \"backward\"]\n\n[[buffer]]\nname = \"w\"\ndtype = \"f32\"\nshape = [64]\nlifetime = \"persistent\"\n\n[[buffer]]\nname = \"h\"\ndtype = \"f32\"\nshape = [128, 64]\nlifetime = [\"forward\", \"backward\"]\nrecorded_steps = 3\n";
    let set = SpecSet::from_toml(v1)?;
    assert!(set.modes().is_empty());
    assert!(
        set.buffers()
            .iter()
            .all(|b| b.mode.is_none() && b.shape_rule == ShapeRule::Elements)
    );
    let mut p = Planner::new();
    let h = set.declare_on(&mut p)?.buffer::<f32>("h")?;
    assert_eq!(p.plan()?.buffer(h.id())?.padded_shape().dims(), &[128, 64]);
    // Written back, it is a version 2 file that reads the same.
    assert_eq!(SpecSet::from_toml(&set.to_toml()?)?, set);
    Ok(())
}
