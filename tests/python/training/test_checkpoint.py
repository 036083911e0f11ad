"""CheckpointState and its file: API.md §3's dict-like surface, the safetensors layout that
PyTorch users read, refusal of damaged files, and saves that survive a kill."""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import onnxtrain
from onnxtrain import _C
from onnxtrain.training import api
from onnxtrain.training.api import CheckpointState

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


def make_state(parameters: dict[str, np.ndarray], frozen: tuple[str, ...] = ()) -> CheckpointState:
    """A state built in memory (the training API gets its states from files or artifacts)."""
    core = _C.CheckpointState()
    for name, value in parameters.items():
        core.add_parameter(name, value, name not in frozen and value.dtype.kind == "f")
    return CheckpointState(core)


def patterned(dtype: type, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


def mlp_parameters() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "0.weight": rng.standard_normal((3, 4)).astype(np.float32),
        "0.bias": rng.standard_normal(3).astype(np.float32),
        "2.weight": rng.standard_normal((2, 3)).astype(np.float32),
        "2.bias": rng.standard_normal(2).astype(np.float32),
    }


# ---- the API surface -----------------------------------------------------------------


def test_api_exports_checkpoint_state():
    assert "CheckpointState" in api.__all__
    assert api.CheckpointState is CheckpointState


def test_round_trip_of_every_dtype(tmp_path):
    values = {f"p_{np.dtype(t).name}": patterned(t, (3, 5), i) for i, t in enumerate(DTYPES)}
    values["scalar"] = np.array(2.5, dtype=np.float32)
    values["empty"] = np.zeros((0, 3), dtype=np.float32)
    CheckpointState.save_checkpoint(make_state(values), tmp_path / "ckpt")
    back = CheckpointState.load_checkpoint(tmp_path / "ckpt")
    assert [name for name, _ in back.parameters] == list(values)
    for name, want in values.items():
        got = back.parameters[name].data
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_bfloat16_round_trips_with_the_reference_implementation(tmp_path):
    import ml_dtypes
    import safetensors.torch
    import torch

    original = torch.linspace(-3, 3, 12, dtype=torch.float32).reshape(3, 4).to(torch.bfloat16)
    safetensors.torch.save_file({"w": original, "b": torch.ones(3, dtype=torch.bfloat16)}, tmp_path / "ref")
    state = CheckpointState.load_checkpoint(tmp_path / "ref")  # written by safetensors itself
    w = state.parameters["w"]
    assert w.data.dtype == ml_dtypes.bfloat16 and w.requires_grad
    np.testing.assert_array_equal(w.data.view(np.uint16), original.view(torch.int16).numpy().view(np.uint16))
    state.parameters["b"] = np.full(3, 0.5, ml_dtypes.bfloat16)
    CheckpointState.save_checkpoint(state, tmp_path / "ckpt")
    reread = safetensors.torch.load_file(tmp_path / "ckpt")  # read by safetensors itself
    assert reread["w"].dtype == torch.bfloat16 and torch.equal(reread["w"], original)
    assert torch.equal(reread["b"], torch.full((3,), 0.5, dtype=torch.bfloat16))


def test_the_safetensors_package_reads_every_dtype(tmp_path):
    import safetensors.numpy

    values = {f"p_{np.dtype(t).name}": patterned(t, (2, 3), i) for i, t in enumerate(DTYPES)}
    CheckpointState.save_checkpoint(make_state(values), tmp_path / "ckpt")
    reread = safetensors.numpy.load_file(tmp_path / "ckpt")
    assert set(reread) == set(values)
    for name, want in values.items():
        assert reread[name].dtype == want.dtype, name
        np.testing.assert_array_equal(reread[name], want, err_msg=name)


def test_parameters_are_dict_like(tmp_path):
    values = mlp_parameters()
    state = make_state({**values, "steps": np.array([3], dtype=np.int64)})
    params = state.parameters
    assert len(params) == 5
    assert "0.weight" in params and "nope" not in params
    names = [name for name, _ in params]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias", "steps"]
    for name, p in params:
        assert isinstance(p, api.checkpoint_state.Parameter)
        assert p.name == name
    w = params["0.weight"]
    assert w.requires_grad is True and params["steps"].requires_grad is False
    assert w.grad is None
    np.testing.assert_array_equal(w.data, values["0.weight"])

    w.data[0, 0] = 1e9  # a copy: the state does not change
    assert params["0.weight"].data[0, 0] == values["0.weight"][0, 0]

    new = np.full((3, 4), 7.0, dtype=np.float32)
    params["0.weight"] = new
    np.testing.assert_array_equal(params["0.weight"].data, new)
    params["0.bias"].data = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(params["0.bias"].data, [0, 1, 2])
    params["0.weight"] = np.asfortranarray(np.ones((3, 4), dtype=np.float32))  # any layout
    assert params["0.weight"].data.sum() == 12

    with pytest.raises(ValueError, match=r"'0\.weight'.*float \[3, 4\].*\[4, 3\]"):
        params["0.weight"] = np.zeros((4, 3), dtype=np.float32)
    with pytest.raises(ValueError, match=r"'0\.weight'.*float \[3, 4\].*double"):
        params["0.weight"] = np.zeros((3, 4), dtype=np.float64)
    with pytest.raises(ValueError, match="'0.bias'"):
        params["0.bias"].data = np.array(["a", "b", "c"])
    with pytest.raises(KeyError, match="nope"):
        params["nope"]
    with pytest.raises(KeyError, match="nope"):
        params["nope"] = np.zeros(3, dtype=np.float32)

    CheckpointState.save_checkpoint(state, tmp_path / "ckpt")
    back = CheckpointState.load_checkpoint(tmp_path / "ckpt")
    assert [name for name, _ in back.parameters] == names
    assert back.parameters["steps"].requires_grad is False
    np.testing.assert_array_equal(back.parameters["0.bias"].data, [0, 1, 2])


def test_properties_of_each_type_round_trip(tmp_path):
    state = make_state(mlp_parameters())
    props = state.properties
    props["epoch"] = 3
    props["big"] = -(2**63)
    props["loss"] = 0.1
    props["nan"] = float("nan")
    props["name"] = "résumé"
    props["np_int"] = np.int32(5)
    props["np_float"] = np.float32(0.5)
    props["flag"] = True  # a bool is an int to Python, as in onnxruntime
    assert len(props) == 8 and "epoch" in props and "nope" not in props
    CheckpointState.save_checkpoint(state, tmp_path / "ckpt")

    back = CheckpointState.load_checkpoint(tmp_path / "ckpt").properties
    assert back["epoch"] == 3 and type(back["epoch"]) is int
    assert back["big"] == -(2**63)
    assert back["loss"] == 0.1 and type(back["loss"]) is float
    assert np.isnan(back["nan"])
    assert back["name"] == "résumé"
    assert back["np_int"] == 5 and type(back["np_int"]) is int
    assert back["np_float"] == 0.5 and type(back["np_float"]) is float
    assert back["flag"] == 1
    assert dict(back)["epoch"] == 3  # iteration yields (name, value)
    with pytest.raises(KeyError):
        back["nope"]
    del props["epoch"]
    assert "epoch" not in props


@pytest.mark.parametrize("value", [None, [1, 2], {"a": 1}, b"bytes", 1 + 2j, np.zeros(3), object()])
def test_other_property_types_are_type_errors(value):
    state = make_state(mlp_parameters())
    with pytest.raises(TypeError, match="int, float or str"):
        state.properties["bad"] = value
    assert "bad" not in state.properties
    with pytest.raises(TypeError):
        state.properties[3] = 1


def test_integer_property_out_of_range():
    state = make_state(mlp_parameters())
    with pytest.raises(ValueError, match="64-bit"):
        state.properties["huge"] = 2**64


def test_optimizer_state_is_saved_only_when_asked(tmp_path):
    import safetensors.numpy

    state = make_state(mlp_parameters())
    moments = {name: {"exp_avg": np.full(p.data.shape, 0.5, np.float32),
                      "exp_avg_sq": np.full(p.data.shape, 0.25, np.float32)} for name, p in state.parameters}
    state._state.set_optimizer_state(12, 1e-3, moments)

    CheckpointState.save_checkpoint(state, tmp_path / "plain")
    assert set(safetensors.numpy.load_file(tmp_path / "plain")) == set(mlp_parameters())
    assert CheckpointState.load_checkpoint(tmp_path / "plain")._state.optimizer_state() is None

    CheckpointState.save_checkpoint(state, tmp_path / "full", include_optimizer_state=True)
    tensors = safetensors.numpy.load_file(tmp_path / "full")
    assert set(tensors) == set(mlp_parameters()) | {
        f"optimizer/{p}/{m}" for p in mlp_parameters() for m in ("exp_avg", "exp_avg_sq")}
    np.testing.assert_array_equal(tensors["optimizer/0.bias/exp_avg_sq"], np.full(3, 0.25, np.float32))
    step, lr, back = CheckpointState.load_checkpoint(tmp_path / "full")._state.optimizer_state()
    assert (step, lr) == (12, 1e-3)
    np.testing.assert_array_equal(back["2.weight"]["exp_avg"], moments["2.weight"]["exp_avg"])


def test_metadata_carries_the_typed_state(tmp_path):
    from safetensors import safe_open

    state = make_state(mlp_parameters(), frozen=("2.bias",))
    state.properties["epoch"] = 1
    CheckpointState.save_checkpoint(state, tmp_path / "ckpt")
    with safe_open(tmp_path / "ckpt", framework="np") as f:
        metadata = f.metadata()
    assert metadata["format"] == "pt"
    typed = json.loads(metadata["onnxtrain"])
    assert typed["version"] == 1 and typed["nominal"] is False
    assert [p["name"] for p in typed["parameters"]] == list(mlp_parameters())
    assert {p["name"]: p["requires_grad"] for p in typed["parameters"]}["2.bias"] is False
    assert typed["properties"]["epoch"] == {"type": "int", "value": 1}


def test_nominal_checkpoint(tmp_path):
    import safetensors.numpy

    state = make_state({"w": np.ones((256, 256), np.float32), "ids": np.arange(4, dtype=np.int64)})
    state.properties["note"] = "nominal"
    _C.save_nominal_checkpoint(state._state, tmp_path / "nominal")
    assert (tmp_path / "nominal").stat().st_size < 2048
    assert safetensors.numpy.load_file(tmp_path / "nominal") == {}

    back = CheckpointState.load_checkpoint(tmp_path / "nominal")
    assert back._state.is_nominal
    w = back.parameters["w"]
    assert w.data.shape == (256, 256) and w.data.dtype == np.float32 and w.requires_grad
    assert not w.data.any()
    assert back.parameters["ids"].data.dtype == np.int64 and not back.parameters["ids"].requires_grad
    assert back.properties["note"] == "nominal"
    back.parameters["w"] = np.full((256, 256), 2.0, np.float32)  # real values arrive later
    assert back.parameters["w"].data[5, 5] == 2.0


def test_checkpoint_from_model():
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    b = numpy_helper.from_array(np.zeros(2, np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y0"]), helper.make_node("Add", ["y0", "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [w, b],
    )
    model = helper.make_model(graph).SerializeToString()
    state = CheckpointState(_C.checkpoint_from_model(model, ["w"], ["b"]))
    assert [(n, p.requires_grad) for n, p in state.parameters] == [("w", True), ("b", False)]
    with pytest.raises(ValueError, match="'nope'"):
        _C.checkpoint_from_model(model, ["nope"])


# ---- the ecosystem -------------------------------------------------------------------


def test_torch_module_loads_the_checkpoint(tmp_path):
    import safetensors.torch
    import torch

    torch_model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    state = make_state(mlp_parameters())
    state._state.set_optimizer_state(1, 0.1, {"0.weight": {"momentum": np.zeros((3, 4), np.float32)}})
    CheckpointState.save_checkpoint(state, tmp_path / "ckpt", include_optimizer_state=True)

    loaded = safetensors.torch.load_file(tmp_path / "ckpt")
    parameters = {k: v for k, v in loaded.items() if not k.startswith("optimizer/")}
    torch_model.load_state_dict(parameters)  # strict: exactly the module's parameters
    for name, value in mlp_parameters().items():
        np.testing.assert_array_equal(torch_model.state_dict()[name].numpy(), value)

    # And the other way: a module's state_dict saved by safetensors is a checkpoint.
    safetensors.torch.save_file(torch_model.state_dict(), tmp_path / "from_torch.safetensors")
    back = CheckpointState.load_checkpoint(tmp_path / "from_torch.safetensors")
    assert {name for name, _ in back.parameters} == set(mlp_parameters())
    np.testing.assert_array_equal(back.parameters["2.weight"].data, mlp_parameters()["2.weight"])
    assert back.parameters["2.weight"].requires_grad


# ---- damaged files -------------------------------------------------------------------


def saved_bytes(tmp_path: Path) -> bytes:
    state = make_state(mlp_parameters())
    state.properties["epoch"] = 1
    CheckpointState.save_checkpoint(state, tmp_path / "good")
    return (tmp_path / "good").read_bytes()


def assert_refused(path: Path, match: str = "") -> None:
    with pytest.raises(RuntimeError) as info:
        CheckpointState.load_checkpoint(path)
    assert str(path) in str(info.value)
    assert match in str(info.value), str(info.value)


def test_truncated_files_are_refused(tmp_path):
    data = saved_bytes(tmp_path)
    bad = tmp_path / "bad"
    for size in list(range(0, 16)) + list(range(16, len(data), 7)) + [len(data) - 1]:
        bad.write_bytes(data[:size])
        assert_refused(bad)


def test_corrupted_headers_are_refused(tmp_path):
    data = saved_bytes(tmp_path)
    (n,) = struct.unpack("<Q", data[:8])
    header = data[8 : 8 + n]
    bad = tmp_path / "bad"
    for position in range(0, n, 5):  # every fifth header byte, replaced by a byte JSON cannot hold there
        corrupted = header[:position] + b"\x00" + header[position + 1 :]
        bad.write_bytes(data[:8] + corrupted + data[8 + n :])
        assert_refused(bad)
    bad.write_bytes(struct.pack("<Q", n + 1000) + data[8:])
    assert_refused(bad, "truncated")


def rewrite_header(data: bytes, edit) -> bytes:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    edit(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data[8 + n :]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda h: h["0.weight"].__setitem__("data_offsets", [0, 44]), "'0.weight'"),  # longer than its shape
        (lambda h: h["0.bias"].__setitem__("data_offsets", [h["0.bias"]["data_offsets"][0] + 4,
                                                            h["0.bias"]["data_offsets"][1] + 4]), "0.bias"),
        (lambda h: h["2.bias"].__setitem__("data_offsets", [0, 8]), "overlap"),
        (lambda h: h["0.weight"].__setitem__("shape", [4, 4]), "'0.weight'"),
        (lambda h: h["0.weight"].__setitem__("dtype", "F64"), "'0.weight'"),
        (lambda h: h["0.weight"].__setitem__("dtype", "Q7"), "Q7"),
        (lambda h: h.pop("2.bias"), "hole"),
    ],
)
def test_wrong_offsets_and_shapes_are_refused(tmp_path, edit, message):
    bad = tmp_path / "bad"
    bad.write_bytes(rewrite_header(saved_bytes(tmp_path), edit))
    assert_refused(bad, message)


def test_missing_file_is_an_error_naming_it(tmp_path):
    with pytest.raises(RuntimeError, match="no-such-checkpoint"):
        CheckpointState.load_checkpoint(tmp_path / "no-such-checkpoint")


# ---- a process killed while saving ---------------------------------------------------

SAVER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from onnxtrain import _C
    from onnxtrain.training.api import CheckpointState

    path = sys.argv[1]
    core = _C.CheckpointState()
    for i in range(4):
        core.add_parameter(f"layer{i}.weight", np.zeros((1024, 2048), np.float32), True)  # 32 MB in all
    state = CheckpointState(core)
    iteration = 0
    while True:
        iteration += 1
        for name, _ in state.parameters:
            state.parameters[name] = np.full((1024, 2048), iteration, np.float32)
        state.properties["iteration"] = iteration
        CheckpointState.save_checkpoint(state, path)
        print(iteration, flush=True)
    """
)


def test_a_process_killed_while_saving_leaves_the_previous_checkpoint(tmp_path):
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    path = tmp_path / "ckpt"
    package_root = str(Path(onnxtrain.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")])}
    rng = random.Random(1234)
    deadline = time.monotonic() + 40
    kills = interrupted_saves = 0
    # At least 6 kills, and more until one lands inside a save (each does with a probability
    # of about a half: the saver alternates between filling its arrays and saving them).
    while (kills < 6 or not interrupted_saves) and time.monotonic() < deadline:
        temporaries = set(tmp_path.glob("ckpt.tmp-*"))
        process = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE, env=env, text=True)
        try:
            first = process.stdout.readline()  # one complete save in this process
            assert first.strip(), "the saver died before its first save"
            time.sleep(rng.uniform(0.0, 0.6))
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
        kills += 1
        last_reported = int(([first] + process.stdout.read().split())[-1])
        interrupted_saves += bool(set(tmp_path.glob("ckpt.tmp-*")) - temporaries)  # killed mid-write

        state = CheckpointState.load_checkpoint(path)
        iteration = state.properties["iteration"]
        assert iteration in (last_reported, last_reported + 1)  # + 1: killed between rename and print
        for name, p in state.parameters:  # one whole save, never a mix of two
            data = p.data
            assert data.shape == (1024, 2048), name
            assert (data == iteration).all(), name
    assert kills >= 3
    assert interrupted_saves >= 1, "no kill landed inside a save; the test proved nothing"
    # The next save clears what the killed writers left behind.
    CheckpointState.save_checkpoint(CheckpointState.load_checkpoint(path), path)
    assert not list(tmp_path.glob("ckpt.tmp-*"))


def test_a_flipped_bit_in_tensor_data_names_the_tensor(tmp_path):
    """Each tensor's CRC-32C is in the metadata; a flipped data bit is found on load, and
    verify=False reads the file anyway."""
    data = bytearray(saved_bytes(tmp_path))
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    checksums = json.loads(header["__metadata__"]["onnxtrain"])["checksums"]
    assert set(checksums) == {k for k in header if k != "__metadata__"}
    begin, _ = header["2.weight"]["data_offsets"]
    data[8 + n + begin + 3] ^= 0x10
    bad = tmp_path / "bad"
    bad.write_bytes(bytes(data))
    assert_refused(bad, "tensor '2.weight' is corrupt")
    state = CheckpointState.load_checkpoint(bad, verify=False)
    assert "2.weight" in state.parameters


def test_crc32c_matches_the_standard_check_value(tmp_path):
    """The checksum is CRC-32C: its check value for b"123456789" is 0xE3069283."""
    state = make_state({"w": np.frombuffer(b"123456789" + b"\0" * 3, np.float32).copy()})
    CheckpointState.save_checkpoint(state, tmp_path / "c")
    data = (tmp_path / "c").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    meta = json.loads(json.loads(data[8 : 8 + n])["__metadata__"]["onnxtrain"])
    assert crc32c_reference(b"123456789") == 0xE3069283
    assert meta["checksums"]["w"] == f"{crc32c_reference(b'123456789' + bytes(3)):08x}"


def crc32c_reference(data: bytes) -> int:
    """Bitwise CRC-32C, straight from its definition (reflected polynomial 0x82F63B78)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF
