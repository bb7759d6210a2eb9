//! Operator libraries: each operator from its CANN repository's library
//! (`libopapi_nn.so`, `libopapi_math.so`) when installed, else from the
//! combined `libopapi.so`, never both phases from different libraries; a
//! missing operator names itself and every library searched.

use std::path::{Path, PathBuf};

use crate::support::sim::{self, sim};
use tensor_arena::device::ascend::{AscendConfig, AscendDevice, Op, TensorView};
use tensor_arena::{Arena, DType, Error, Planner, Result};

const NN_OPS: [&str; 4] = [
    "aclnnMm",
    "aclnnInplaceRelu",
    "aclnnSoftmax",
    "aclnnApplyAdamWV2",
];
const MATH_OPS: [&str; 6] = [
    "aclnnInplaceAdd",
    "aclnnInplaceSub",
    "aclnnInplaceMul",
    "aclnnMul",
    "aclnnGtScalar",
    "aclnnReduceSum",
];

fn file_name(p: Option<&Path>) -> Option<String> {
    p.and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
}

/// A toolkit `lib64` holding the simulated runtime and the given operator
/// libraries (links to the simulation's files), and nothing else.
fn toolkit(tag: &str, libs: &[(&str, PathBuf)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tensor-arena-libs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_default();
    let base = [
        ("libascendcl.so", sim::dir().join("libascendcl.so")),
        ("libnnopbase.so", sim::dir().join("libascendcl.so")),
        ("libtensor_arena_kernels.so", sim::kernel_lib()),
    ];
    for (name, target) in base.iter().chain(libs) {
        #[cfg(unix)]
        std::os::unix::fs::symlink(target, dir.join(name)).unwrap_or_default();
    }
    dir
}

fn relu_once(dev: &AscendDevice) -> Result<Vec<f32>> {
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[8])?;
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;
    arena.step(|s| {
        let mut l = s.lease(x)?;
        l.copy_from_host(&[-2.0, -1.0, 0.0, 1.0, 2.0, -3.0, 3.0, 0.5])?;
        s.aclnn(&Op::ReluInplace { x: l.tensor() }, None)?;
        let mut back = vec![0.0; 8];
        l.copy_to_host(&mut back)?;
        Ok(back)
    })
}

#[test]
fn operators_come_from_their_repositorys_library() -> Result<()> {
    sim().reset();
    let dev = AscendDevice::new(sim::config())?;
    let rt = dev.runtime();
    for op in NN_OPS {
        assert_eq!(
            file_name(rt.operator_library(op)).as_deref(),
            Some("libopapi_nn.so"),
            "{op}"
        );
    }
    for op in MATH_OPS {
        assert_eq!(
            file_name(rt.operator_library(op)).as_deref(),
            Some("libopapi_math.so"),
            "{op}"
        );
    }
    assert_eq!(relu_once(&dev)?, [0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 3.0, 0.5]);
    drop(dev);
    sim().assert_clean();
    Ok(())
}

#[test]
fn the_combined_library_serves_a_toolkit_without_the_split_ones() -> Result<()> {
    sim().reset();
    let dev = AscendDevice::new(sim::combined_config())?;
    let rt = dev.runtime();
    for op in NN_OPS.iter().chain(&MATH_OPS) {
        assert_eq!(
            file_name(rt.operator_library(op)).as_deref(),
            Some("libopapi.so"),
            "{op}"
        );
    }
    assert_eq!(relu_once(&dev)?, [0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 3.0, 0.5]);
    drop(dev);
    sim().assert_clean();
    Ok(())
}

#[test]
fn a_repository_library_that_is_missing_is_replaced_by_the_combined_one_for_its_operators_only()
-> Result<()> {
    sim().reset();
    let dir = toolkit(
        "mixed",
        &[
            ("libopapi_math.so", sim::dir().join("libopapi_math.so")),
            ("libopapi.so", sim::combined_dir().join("libopapi.so")),
        ],
    );
    let dev = AscendDevice::new(AscendConfig::new().search_dir(&dir).system_search(false))?;
    let rt = dev.runtime();
    for op in MATH_OPS {
        assert_eq!(
            file_name(rt.operator_library(op)).as_deref(),
            Some("libopapi_math.so"),
            "{op}: its repository's library is there"
        );
    }
    for op in NN_OPS {
        assert_eq!(
            file_name(rt.operator_library(op)).as_deref(),
            Some("libopapi.so"),
            "{op}: libopapi_nn.so is missing"
        );
    }
    assert_eq!(relu_once(&dev)?[4], 2.0);
    drop(dev);
    sim().assert_clean();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn a_missing_operator_names_itself_and_every_library_searched() -> Result<()> {
    sim().reset();
    let dir = toolkit(
        "math-only",
        &[("libopapi_math.so", sim::dir().join("libopapi_math.so"))],
    );
    let dev = AscendDevice::new(AscendConfig::new().search_dir(&dir).system_search(false))?;
    assert!(dev.runtime().operator_library("aclnnMm").is_none());
    // Math operators still work.
    assert!(dev.runtime().operator_library("aclnnInplaceAdd").is_some());
    let q = |s: &[usize]| TensorView::detached(DType::F32, s);
    let e = dev
        .workspace_size(&Op::Mm {
            a: q(&[2, 3])?,
            b: q(&[3, 4])?,
            out: q(&[2, 4])?,
        })
        .unwrap_err();
    assert!(matches!(e, Error::MissingSymbol { .. }), "{e}");
    let text = e.to_string();
    for part in [
        "aclnnMm",
        "libopapi_nn.so: not found",
        "libopapi.so: not found",
        "libopapi_math.so (ops-math operators)",
        "ops-nn operator",
        dir.to_str().unwrap_or_default(),
    ] {
        assert!(text.contains(part), "missing '{part}' in:\n{text}");
    }
    drop(dev);
    sim().assert_clean();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
