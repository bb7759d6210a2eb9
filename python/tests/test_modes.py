"""Modes: training and evaluation steps of different shapes in one slab."""

import pytest
import torch

import tensor_arena as ta
from tensor_arena import _native


def two_mode_planner():
    p = ta.Planner()
    w = p.persistent("w", (64,))
    train, ev = p.mode("train"), p.mode("eval")
    fwd, bwd = train.phase("forward"), train.phase("backward")
    h = train.span("h", (128, 64), torch.float32, fwd, bwd)
    g = train.span("g", (128, 64), torch.float32, bwd)
    logits = ev.step("logits", (512, 64))
    return p, dict(w=w, train=train, eval=ev, fwd=fwd, bwd=bwd, h=h, g=g, logits=logits)


def test_modes_share_the_slab_and_report_their_footprints():
    p, b = two_mode_planner()
    assert (b["train"].name, b["train"].index) == ("train", 1)
    assert p.default_mode.index == 0 and b["eval"] != b["train"]
    assert b["w"].mode is None and b["h"].mode == "train" and b["logits"].mode == "eval"
    assert b["fwd"].mode == "train" and "mode='eval'" in repr(b["logits"])
    plan = p.plan()
    modes = {m["name"]: m for m in plan.modes}
    assert list(modes) == ["default", "train", "eval"]
    assert modes["default"]["unused"] and not modes["train"]["unused"]
    assert modes["train"]["phases"] == ["forward", "backward"] and modes["train"]["buffers"] == 2
    # One slab: the persistent buffer plus the larger mode; eval's buffer
    # takes bytes train's buffers also use (they are never alive together).
    assert plan.slab_bytes == max(m["footprint"] for m in modes.values())
    assert modes["eval"]["footprint"] > modes["train"]["footprint"]
    slot = {x["name"]: (x["offset"], x["offset"] + x["size"]) for x in plan.buffers}
    assert slot["logits"][0] < slot["h"][1] and slot["h"][0] < slot["logits"][1]
    assert slot["w"][1] <= min(slot["h"][0], slot["logits"][0])
    by_name = {x["name"]: x for x in plan.buffers}
    assert by_name["w"]["mode"] is None and by_name["logits"]["mode"] == "eval"


def test_a_step_leases_only_its_modes_buffers_and_phases():
    p, b = two_mode_planner()
    arena = p.plan().reserve("cpu")
    w = arena.persistent(b["w"])
    w.fill_(2.0)
    with arena.step(b["train"]) as s:
        assert s.mode == "train"
        s.lease(b["h"], (100, 64)).fill_(1.0)
        with pytest.raises(ta.ModeError) as e:
            s.lease(b["logits"])
        assert e.value.kind == "WrongMode"
        assert (e.value.mode, e.value.step_mode) == ("eval", "train")
        assert "'logits'" in str(e.value)
        s.enter(b["bwd"])
        s.lease(b["g"])
    with arena.step("eval") as s:  # by name
        assert s.mode == "eval"
        s.lease(b["logits"], (512, 64)).zero_()
        with pytest.raises(ta.ModeError) as e:
            s.enter(b["fwd"])
        assert e.value.kind == "WrongMode" and "'forward'" in str(e.value)
        with pytest.raises(ta.ModeError):
            s.lease(b["h"])
    # Persistent buffers belong to every mode and keep their contents.
    assert torch.all(arena.persistent(b["w"]) == 2.0)
    with pytest.raises(ta.SpecError) as e:
        arena.step("generate")
    assert e.value.kind == "UnknownName" and "'generate'" in str(e.value)
    with pytest.raises(TypeError, match="Mode handle"):
        arena.step(3)
    with pytest.raises(ta.ModeError) as e:
        arena.step(ta.Planner().mode("eval"))
    assert e.value.kind == "ForeignMode"
    st = arena.stats()
    assert st["steps"] == 2 and st["live_leases"] == 0


def test_a_buffer_lives_in_the_phases_of_its_own_mode():
    p, b = two_mode_planner()
    with pytest.raises(ta.ModeError) as e:
        b["eval"].span("bad", (4,), torch.float32, b["fwd"])
    assert e.value.kind == "PhaseOfAnotherMode"
    assert "'bad'" in str(e.value) and "'eval'" in str(e.value) and "'train'" in str(e.value)
    # Without a mode handle, a span takes its phases' mode.
    x = p.span("x", (8,), torch.float32, b["fwd"], b["bwd"])
    assert x.mode == "train"


def test_the_dims_rule_refuses_a_dimension_beyond_the_declared_one():
    p = ta.Planner()
    d = p.step("d", (128, 64), shape_rule="dims")
    e = p.step("e", (128, 64))
    assert d.shape_rule == "dims" and e.shape_rule == "elements"
    arena = p.plan().reserve("cpu")
    with arena.step() as s:
        assert s.lease(e, (64, 128)).shape == (64, 128)  # same elements, other dims
        with pytest.raises(ta.CapacityError) as err:
            s.lease(d, (64, 128))
        assert err.value.kind == "ViewExceedsDims" and err.value.rule == "dims"
        assert "'d'" in str(err.value) and "[64, 128]" in str(err.value)
    with pytest.raises(ValueError, match="shape_rule 'rows'"):
        p.step("f", (4,), shape_rule="rows")


# Scripted recordings, one list of operations per step, in a mode or the default one.
TRAIN = [("temp", "h", "f32", [128, 64]), ("enter", "backward"), ("temp", "g", "f32", [128, 64])]
EVAL = [("temp", "h", "f32", [512, 64]), ("temp", "logits", "f32", [512, 10])]
STEPS = [("train", TRAIN), ("eval", EVAL), ("train", [("temp", "h", "f32", [64, 64])])]
DTYPES = {"f32": torch.float32}


def record_modes():
    rec = ta.Recorder("cpu")
    train, ev = rec.mode("train"), rec.mode("eval")
    phases = {"forward": rec.phase("forward", mode=train), "backward": rec.phase("backward", mode=train)}
    rec.persistent("w", (64,))
    for mode, ops in STEPS:
        with rec.step(mode) as s:
            assert s.mode.name == mode
            for op in ops:
                if op[0] == "temp":
                    s.temp(op[1], op[3], DTYPES[op[2]])
                else:
                    s.enter(phases[op[1]])
    return rec, train, ev


def test_the_recorder_learns_each_mode_as_the_rust_recorder_does():
    rec, train, ev = record_modes()
    rust = _native.reference_specs(
        [], [("w", "f32", [64])], STEPS, modes=[("train", ["forward", "backward"]), ("eval", [])]
    )
    assert rec.specs().to_toml() == rust
    specs = rec.specs()
    assert specs.modes == {"train": ["forward", "backward"], "eval": []}
    sites = {(x["mode"], x["name"]): x for x in specs.buffers}
    # The same name in two modes is two sites, each sized by its own steps.
    assert sites[("train", "h")]["shape"] == [128, 64]
    assert sites[("eval", "h")]["shape"] == [512, 64]
    assert sites[(None, "w")]["lifetime"] == "persistent"


def test_a_frozen_recorder_serves_each_mode_and_names_it_in_errors(tmp_path):
    rec, train, ev = record_modes()
    plan = rec.freeze()
    modes = {m["name"]: m for m in plan.modes}
    assert plan.slab_bytes == max(m["footprint"] for m in modes.values())
    with rec.step("eval") as s:
        assert not s.is_recording
        assert s.temp("h", (500, 64)).shape == (500, 64)
        with pytest.raises(ta.SpecError) as e:
            s.temp("g", (4, 64))  # only recorded in train
        assert e.value.kind == "UnrecordedSite" and e.value.mode == "eval"
    with rec.step(train) as s:
        with pytest.raises(ta.CapacityError) as e:
            s.temp("h", (500, 64))  # fits eval's h, not train's
        assert e.value.kind == "ExceedsRecorded" and e.value.mode == "train"
        assert e.value.rule == "elements" and "[128, 64]" in str(e.value)
    # The spec file keeps the modes: Rust plans it as Python does.
    path = tmp_path / "modes.toml"
    rec.save(path)
    assert ta.SpecSet.load(path) == rec.specs()
    rust_planned, rust_recorded = _native.reference_plans(str(path))
    assert rust_planned == rust_recorded == str(plan)


def test_megatron_buffers_learn_per_mode():
    buf = ta.GlobalMemoryBuffer("cpu", modes=("train", "eval"), strict=True)
    with buf.step("train"):
        buf.get_tensor((128, 64), torch.float32, "act")
    assert buf.arena is None  # eval not recorded yet
    with buf.step("eval"):
        buf.get_tensor((512, 64), torch.float32, "act")
        with pytest.raises(ta.ModeError):
            buf.get_tensor((4, 64), torch.float32, "act", arena_mode="train")
    assert buf.arena is not None
    with buf.step("eval"):
        buf.get_tensor((512, 64), torch.float32, "act")
    with buf.step("train"):
        with pytest.raises(ta.CapacityError):
            buf.get_tensor((512, 64), torch.float32, "act")
