"""The Python surface follows conventions: unknown SessionOptions attributes and keyword
arguments are errors, the `onnxtrain` logger logs what a user wants to see, every public
object has a docstring, and the package ships type information."""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
from pathlib import Path

import numpy as np
import pytest

import onnxtrain
from onnxtrain.training.train_cli import digits_cnn


def test_session_options_reject_unknown_attributes() -> None:
    options = onnxtrain.SessionOptions()
    assert options.intra_op_num_threads == 0
    options.intra_op_num_threads = 2
    assert repr(options).startswith("SessionOptions(intra_op_num_threads=2, graph_optimization_level=")
    with pytest.raises(AttributeError, match="onnxruntime option that onnxtrain does not implement"):
        options.enable_mem_pattern = False
    with pytest.raises(AttributeError, match="has no option 'intra_op_threads'; its options: enable_profiling"):
        options.intra_op_threads = 2
    with pytest.raises(TypeError, match="must be an int"):
        options.intra_op_num_threads = "2"
    with pytest.raises(ValueError, match=">= 0"):
        options.intra_op_num_threads = -1
    with pytest.raises(TypeError, match="must be a GraphOptimizationLevel .*ORT_DISABLE_ALL.*got 3"):
        options.graph_optimization_level = 3
    with pytest.raises(TypeError, match="enable_profiling must be a bool"):
        options.enable_profiling = 1
    options.graph_optimization_level = 1  # onnxruntime's integer values are accepted too
    assert options.graph_optimization_level == onnxtrain.GraphOptimizationLevel.ORT_ENABLE_BASIC


def test_inference_session_rejects_unknown_keywords(tmp_path) -> None:
    import onnx

    onnx.save(digits_cnn(seed=0), tmp_path / "model.onnx")
    with pytest.raises(TypeError, match="unexpected keyword argument 'sess_option'"):
        onnxtrain.InferenceSession(tmp_path / "model.onnx", sess_option=onnxtrain.SessionOptions())
    with pytest.raises(ValueError, match="CPU only"):
        onnxtrain.InferenceSession(tmp_path / "model.onnx", providers=[("CUDAExecutionProvider", {})])
    with pytest.raises(ValueError, match="takes no options"):
        onnxtrain.InferenceSession(tmp_path / "model.onnx", provider_options=[{"arena": "1"}])
    session = onnxtrain.InferenceSession(tmp_path / "model.onnx", providers=[("CPUExecutionProvider", {})])
    with pytest.raises(ValueError, match="no RunOptions"):
        session.run(None, {"image": np.zeros((1, 1, 8, 8), np.float32)}, run_options=object())


def test_logger_reports_what_happens(tmp_path, caplog) -> None:
    import onnx

    from onnxtrain.training import artifacts
    from onnxtrain.training.api import CheckpointState, Module, Optimizer

    onnx.save(digits_cnn(seed=0), tmp_path / "model.onnx")
    logger = logging.getLogger("onnxtrain")
    propagate = logger.propagate
    logger.propagate = True  # caplog listens on the root logger
    try:
        with caplog.at_level(logging.INFO, logger="onnxtrain"):
            artifacts.generate_artifacts(tmp_path / "model.onnx", loss=artifacts.LossType.CrossEntropyLoss,
                                         optimizer=artifacts.OptimType.SGD, artifact_directory=tmp_path)
            state = CheckpointState.load_checkpoint(tmp_path / "checkpoint")
            module = Module(tmp_path / "training_model.onnx", state)
            Optimizer(tmp_path / "optimizer_model.onnx", module)
            CheckpointState.save_checkpoint(state, tmp_path / "saved")
            onnxtrain.InferenceSession(tmp_path / "model.onnx")
    finally:
        logger.propagate = propagate
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "onnxtrain")
    for expected in ("generated artifacts in", "training_model.onnx, eval_model.onnx, optimizer_model.onnx, checkpoint",
                     "loaded checkpoint", "loaded training model", "loaded optimizer model",
                     f"saved checkpoint {tmp_path / 'saved'}", "loaded " + str(tmp_path / "model.onnx")):
        assert expected in text, text


def test_set_log_level() -> None:
    level = onnxtrain.get_log_level()
    try:
        onnxtrain.set_log_level("debug")
        assert onnxtrain.get_log_level() == logging.DEBUG
        onnxtrain.set_log_level(logging.ERROR)
        assert onnxtrain.get_log_level() == logging.ERROR
        with pytest.raises(ValueError, match="unknown log level 'loud'"):
            onnxtrain.set_log_level("loud")
    finally:
        logging.getLogger("onnxtrain").setLevel(level)


def _public_objects():
    """Every public module, class, function and method of the package (ortmodule excepted:
    it is written elsewhere)."""
    seen = set()
    for info in pkgutil.walk_packages(onnxtrain.__path__, "onnxtrain."):
        name = info.name
        parts = name.split(".")[1:]
        # Private modules, the C++ library (libonnxtrain.so sits in the package) and ortmodule.
        if any(part.startswith(("_", "lib")) for part in parts) or "ortmodule" in name:
            continue
        module = importlib.import_module(name)
        yield name, module
        for attribute in getattr(module, "__all__", []):
            obj = getattr(module, attribute)
            if inspect.ismodule(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            yield f"{name}.{attribute}", obj
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                for method_name, method in vars(obj).items():
                    if method_name.startswith("_") or not (inspect.isfunction(method) or isinstance(
                            method, (property, classmethod, staticmethod))):
                        continue
                    yield f"{name}.{attribute}.{method_name}", method


def test_every_public_object_has_a_docstring() -> None:
    missing = []
    for name, obj in _public_objects():
        target = obj.__func__ if isinstance(obj, (classmethod, staticmethod)) else obj
        doc = target.fget.__doc__ if isinstance(target, property) else inspect.getdoc(target)
        if isinstance(target, type) and target.__doc__ is None:
            doc = None
        if not doc or not doc.strip():
            missing.append(name)
    assert not missing, "no docstring: " + ", ".join(missing)


def test_the_package_ships_type_information() -> None:
    package = Path(onnxtrain.__file__).resolve().parent
    assert (package / "py.typed").exists()
    stub = package / "_C.pyi"
    assert stub.exists()
    text = stub.read_text()
    for name in ("class InferenceSession", "class Module", "class Optimizer", "class CheckpointState",
                 "def generate_artifacts", "def build_optimizer_model"):
        assert name in text, name


def test_the_stub_is_what_stubgen_writes_for_this_build() -> None:
    pytest.importorskip("nanobind.stubgen")
    import importlib.util

    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("generate_stubs", root / "tools/generate_stubs.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    checked_in = (root / "python/onnxtrain/_C.pyi").read_text()
    assert tool.generate() == checked_in, "python/onnxtrain/_C.pyi is stale: run tools/generate_stubs.py"
