"""The doctor from Python returns the command's --json figures."""

import json
import pickle
import subprocess
import sys

import pytest

import tensor_arena as ta

CSV = "op,id,size\nalloc,a,6291456\nalloc,b,6291456\nalloc,c,6291456\nfree,b\nalloc,d,7340032\nfree,a\nfree,c\nfree,d\n"


def command_json(binary, *args):
    out = subprocess.run([binary, "replay", *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


@pytest.fixture
def csv_trace(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text(CSV)
    return path


def test_replay_equals_the_command(binary, csv_trace):
    ours = ta.replay(csv_trace)
    assert ours == command_json(binary, str(csv_trace))
    assert set(ours) >= {"trace", "model", "arena", "model_min_capacity", "arena_min_capacity",
                         "capacity_scan", "explain", "timeline", "recorded_reserved"}
    assert ours["model"]["stats"]["reserved_bytes"]["peak"] == 40 << 20
    assert ours["arena_min_capacity"] == 2 * 6291968 + 7340544


def test_options_become_the_same_flags(binary, csv_trace):
    ours = ta.replay(csv_trace, capacity="44MiB", expandable_segments=True, top=2, window=8 << 20)
    assert ours == command_json(binary, str(csv_trace), "--capacity", "44MiB", "--expandable-segments",
                                "--top", "2", "--window", "8388608")
    assert ours["model"]["config"]["expandable_segments"] is True


def test_sweep_equals_the_command(binary, csv_trace):
    ours = ta.sweep(csv_trace, max_split_mb=[32, 128], gc=[0.8])
    theirs = command_json(binary, str(csv_trace), "--sweep", "--sweep-max-split-mb", "32,128", "--sweep-gc", "0.8")
    assert ours == theirs
    assert {"conf", "peak_reserved", "min_capacity", "safe_capacity"} <= set(ours["sweep"][0])
    assert "PYTORCH_NPU_ALLOC_CONF" in ours["recommendation"]["export"]


def test_a_live_snapshot_dict_equals_its_pickle(binary, data, tmp_path):
    path = data / "snapshot_small.pickle"
    with open(path, "rb") as f:
        snapshot = pickle.load(f)  # the dict torch.cuda.memory._snapshot() returns
    assert isinstance(snapshot, dict) and "device_traces" in snapshot
    ours = ta.replay(snapshot, name="snapshot_small.pickle")
    assert ours == command_json(binary, str(path))
    assert ours["trace"]["name"] == "snapshot_small.pickle"
    assert ta.replay(path.read_bytes(), name="snapshot_small.pickle") == ours


def test_gzip_snapshots_with_sites(binary, data):
    path = data / "oom_snapshot_sites.pickle.gz"
    assert ta.replay(path, capacity="64MiB") == command_json(binary, str(path), "--capacity", "64MiB")


def test_report_text_and_synthetic():
    text = ta.report(synthetic=10, seed=3, search=False)
    assert "arena" in text
    d = ta.replay(synthetic=10, seed=3, search=False)
    assert d["capacity_scan"] is None and d["trace"]["name"].startswith("synthetic")


def test_the_doctor_needs_no_torch():
    code = "import sys, tensor_arena as ta; ta.replay(synthetic=5, search=False); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "False"


def test_bad_inputs_raise(tmp_path, data):
    bad = tmp_path / "t.csv"
    bad.write_text("alloc,0,4096\nfree,0,100\n")
    with pytest.raises(ta.TraceError, match="line 2: free of id 0 gives size 100"):
        ta.replay(bad)
    with pytest.raises(ta.TraceError):
        ta.replay(data / "not_a_snapshot.pickle")
    with pytest.raises(ValueError, match="unexpected argument|invalid value|error"):
        ta.replay(bad, format="parquet")
    with pytest.raises(ta.TraceError):
        ta.replay(bad, alloc_conf="roundup_power2_divisions:4")
    with pytest.raises(TypeError):
        ta.replay(42)


def test_the_console_script_is_the_command(console_script, binary, csv_trace):
    ours = subprocess.run([console_script, "replay", str(csv_trace), "--json"], capture_output=True, text=True)
    theirs = subprocess.run([binary, "replay", str(csv_trace), "--json"], capture_output=True, text=True)
    assert ours.returncode == theirs.returncode == 0
    assert ours.stdout == theirs.stdout
    for args in (["--version"], ["--help"], ["replay"], ["plan", "--csv", "/no/such.csv"]):
        ours = subprocess.run([console_script, *args], capture_output=True, text=True)
        theirs = subprocess.run([binary, *args], capture_output=True, text=True)
        assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout), args


def _independent(path):
    """The state and the recorded reserved peak of a snapshot, read with Python's pickle."""
    import gzip

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        snapshot = pickle.load(f)
    return snapshot


def _state(snapshot, device):
    segments = [s for s in snapshot.get("segments", []) if s["device"] == device]
    blocks = [b for s in segments for b in s["blocks"]]
    live = [b for b in blocks if b["state"].startswith("active")]
    free = [b["size"] for b in blocks if not b["state"].startswith("active")]
    return {
        "segments": len(segments),
        "reserved": sum(s["total_size"] for s in segments),
        "allocated": sum(b["size"] for b in live),
        "allocated_blocks": len(live),
        "free": sum(free),
        "largest_free_block": max(free, default=0),
    }


def _recorded_peak(snapshot, device):
    traces = snapshot.get("device_traces", [])
    trace = traces[device] if device < len(traces) else []
    entries = [e for e in trace if e["action"].startswith("segment_")]
    if not entries:
        return None
    running = peak = 0
    for e in entries:
        running += e["size"] if e["action"] in ("segment_alloc", "segment_map") else -e["size"]
        peak = max(peak, running)
    end = sum(s["total_size"] for s in snapshot["segments"] if s["device"] == device)
    return end - running + peak


def test_public_snapshots_match_pythons_own_reading(data):
    paths = sorted((data / "snapshots").glob("*.pickle.gz"))
    assert len(paths) >= 3
    for path in paths:
        snapshot = _independent(path)
        ours = ta.replay(path, search=False)
        snap = ours["snapshot"]
        state = _state(snapshot, snap["device"])
        assert {k: snap["state"][k] for k in state} == state, path.name
        peak = _recorded_peak(snapshot, snap["device"])
        if peak is None:
            assert ours["recorded_vs_model"] is None
        else:
            r = ours["recorded_vs_model"]
            assert r["recorded_peak_reserved"] == peak
            assert abs(ours["model"]["stats"]["reserved_bytes"]["peak"] / peak - 1) <= 0.01, path.name
        if "allocator_settings" in snapshot:
            assert ours["configuration"]["platform"]["value"] == "cuda"
            assert ours["model"]["config"]["platform"] == "cuda"


def test_a_live_cuda_snapshot_dict_configures_the_model(data):
    snapshot = _independent(data / "snapshots" / "cs336_silmont2000_mem_snapshot.pickle.gz")
    ours = ta.replay(snapshot, name="mem_snapshot.pickle", search=False)
    assert ours["configuration"]["alloc_conf"]["source"].startswith("snapshot: allocator_settings")
    npu = ta.replay(snapshot, name="mem_snapshot.pickle", search=False, platform="npu")
    assert npu["model"]["config"]["platform"] == "npu"
    assert npu["configuration"]["platform"]["source"] == "flag --platform"
    # torch_npu's 32-byte pad needs bigger segments than the CUDA run recorded.
    assert npu["model"]["stats"]["reserved_bytes"]["peak"] > ours["model"]["stats"]["reserved_bytes"]["peak"]
    rec = ta.sweep(snapshot, name="mem_snapshot.pickle", max_split_mb=[128], gc=[0.8])["recommendation"]
    assert rec["variable"] == "PYTORCH_CUDA_ALLOC_CONF"
    assert "PYTORCH_CUDA_ALLOC_CONF" in rec["export"]
    assert rec["below_floor"] == (rec["headroom_bytes"] < rec["headroom_floor"])


def test_the_oom_device_is_read_by_default(data):
    ours = ta.replay(data / "snapshot_three_devices_oom.pickle", search=False)
    assert ours["snapshot"]["device"] == 1
    assert any(e["moment"] == "recorded_out_of_memory" for e in ours["explain"])
    assert ours["configuration"]["capacity"]["value"] == 22 << 20


def test_a_torch_npu_snapshot_dict_configures_the_npu_model(data):
    with open(data / "snapshot_small.pickle", "rb") as f:
        snapshot = pickle.load(f)
    # torch_npu's _snapshot() has the same shape; its settings name its variable.
    snapshot["allocator_settings"] = {"PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:128"}
    ours = ta.replay(snapshot, search=False)
    assert ours["model"]["config"]["platform"] == "npu"
    assert ours["configuration"]["platform"]["source"] == "snapshot: allocator_settings has PYTORCH_NPU_ALLOC_CONF"
    assert ours["model"]["config"]["max_split_size"] == 128 << 20
    flags = ta.replay(snapshot, search=False, max_split_size_mb=256)
    assert flags["model"]["config"]["max_split_size"] == 256 << 20
    assert flags["configuration"]["alloc_conf"]["source"] == "flags"
