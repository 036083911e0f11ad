"""The model the blocks build on: ``base(model)`` and ``empty_base()``, as in
``onnxruntime.training.onnxblock``.

Inside ``with base(model) as accessor:`` every block called works on ``accessor.model``, a
copy of ``model``. A model with external data (over 2 GB, or saved that way) is given by
its path, ``base(model, model_path)`` or ``base(path)``: its tensors then stay on disk, and
checking, shape inference and artifact generation read them from beside that path.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Optional, Union

import onnx
import onnx.external_data_helper

_PROTOBUF_LIMIT = 2**31 - 1


def _external_locations(model: onnx.ModelProto) -> set[str]:
    """The files (relative to the model's folder) that hold ``model``'s external data."""
    locations: set[str] = set()

    def visit(tensors) -> None:
        for tensor in tensors:
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                continue
            for entry in tensor.external_data:
                if entry.key == "location":
                    locations.add(entry.value)

    visit(model.graph.initializer)
    for node in model.graph.node:
        visit(a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR)
    return locations


@contextlib.contextmanager
def saved_with_external_data(model: onnx.ModelProto) -> Iterator[str]:
    """A temporary file of ``model`` (over 2 GB, so with external data). onnx.save_model
    moves the tensors of the proto itself out to the data file; they are read back before
    the file goes, so that ``model`` is left as it was."""
    with tempfile.TemporaryDirectory(prefix="onnxblock-") as folder:
        path = os.path.join(folder, "model.onnx")
        try:
            onnx.save_model(model, path, save_as_external_data=True, location="model.onnx.data")
            yield path
        finally:
            onnx.external_data_helper.load_external_data_for_model(model, folder)


class ModelAccessor:
    """Holds the model under construction (``model``) and where its external data lives."""

    def __init__(self, model: onnx.ModelProto, model_path: Optional[str] = None) -> None:
        self._model = model
        self._model_dir = os.path.dirname(os.path.abspath(model_path)) if model_path else None
        self.depth = 0  # how many block calls are running (the outermost one checks the model)
        self.targets: dict[str, onnx.ValueInfoProto] = {}  # graph inputs the loss blocks added

    @property
    def model(self) -> onnx.ModelProto:
        """The model the blocks build on (edited in place)."""
        return self._model

    @property
    def has_path(self) -> bool:
        """Whether the model's tensors stay on disk (external data read from its folder)."""
        return self._model_dir is not None

    @property
    def model_dir(self) -> Optional[str]:
        """The folder of the model's file (where its external data lives), or None."""
        return self._model_dir

    @contextlib.contextmanager
    def saved(self, model: Optional[onnx.ModelProto] = None) -> Iterator[str]:
        """A file of ``model`` (default: the model under construction) that sees its external
        data: saved in a temporary folder where the data files are links to the originals."""
        model = self._model if model is None else model
        if self._model_dir is None and model.ByteSize() > _PROTOBUF_LIMIT:
            with saved_with_external_data(model) as path:
                yield path
            return
        with tempfile.TemporaryDirectory(prefix="onnxblock-") as folder:
            path = os.path.join(folder, "model.onnx")
            if self._model_dir is not None:
                for location in _external_locations(model):
                    top = location.replace("\\", "/").split("/")[0]
                    link = os.path.join(folder, top)
                    if not os.path.lexists(link):
                        os.symlink(os.path.join(self._model_dir, top), link)
            onnx.save_model(model, path)
            yield path

    def check(self) -> None:
        """``onnx.checker`` on the model (by path when its data is on disk or too large)."""
        if self._model_dir is None and self._model.ByteSize() <= _PROTOBUF_LIMIT:
            onnx.checker.check_model(self._model)
            return
        with self.saved() as path:
            onnx.checker.check_model(path)

    def infer_shapes(self) -> onnx.ModelProto:
        """The model with the types and shapes ONNX shape inference finds."""
        if self._model_dir is None and self._model.ByteSize() <= _PROTOBUF_LIMIT:
            return onnx.shape_inference.infer_shapes(self._model)
        with self.saved() as path:
            inferred = os.path.join(os.path.dirname(path), "inferred.onnx")
            onnx.shape_inference.infer_shapes_path(path, inferred)
            return onnx.load_model(inferred, load_external_data=False)


_GLOBAL_ACCESSOR: Optional[ModelAccessor] = None


def current() -> ModelAccessor:
    """The accessor of the enclosing ``base()`` / ``empty_base()`` context."""
    if _GLOBAL_ACCESSOR is None:
        raise RuntimeError(
            "no base model: call blocks inside `with onnxblock.base(model):` or `with onnxblock.empty_base():`")
    return _GLOBAL_ACCESSOR


@contextlib.contextmanager
def _register(accessor: ModelAccessor) -> Iterator[ModelAccessor]:
    global _GLOBAL_ACCESSOR
    if _GLOBAL_ACCESSOR is not None:
        raise RuntimeError("a base model is set already: onnxblock.base() / empty_base() contexts do not nest")
    _GLOBAL_ACCESSOR = accessor
    try:
        yield accessor
    finally:
        _GLOBAL_ACCESSOR = None


@contextlib.contextmanager
def base(model: Union[onnx.ModelProto, str, "os.PathLike[str]"],
         model_path: Optional[Union[str, "os.PathLike[str]"]] = None) -> Iterator[ModelAccessor]:
    """Makes (a copy of) ``model`` the base that blocks called inside the context build on.

    Args:
        model: an ``onnx.ModelProto`` or the path of a model file. A path is loaded without
            its external data, which is then read from beside the file when needed.
        model_path: for a ``ModelProto`` loaded with ``load_external_data=False``: the path it
            was loaded from, so that its external data can be found.

    Yields:
        The ``ModelAccessor``; ``accessor.model`` is the model as the blocks leave it.

    Raises:
        RuntimeError: a base is set already (contexts do not nest).
    """
    if isinstance(model, (str, os.PathLike)):
        model_path = os.fspath(model)
        model = onnx.load_model(model_path, load_external_data=False)
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"base(model): expected an onnx.ModelProto or a path, got {type(model).__name__}")
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    has_external = bool(_external_locations(copy))
    path = os.fspath(model_path) if model_path is not None and has_external else None
    with _register(ModelAccessor(copy, path)) as accessor:
        yield accessor


@contextlib.contextmanager
def empty_base(opset_version: Optional[int] = None) -> Iterator[ModelAccessor]:
    """Starts the blocks from an empty model (no inputs, nodes or outputs), e.g. to build an
    optimizer model. ``opset_version``: of the default ONNX domain (default: 17)."""
    opset = 17 if opset_version is None else int(opset_version)
    opsets = [onnx.helper.make_opsetid("", opset)]
    model = onnx.helper.make_model(onnx.helper.make_graph([], "onnxblock", [], []), opset_imports=opsets,
                                   producer_name="onnxtrain.onnxblock")
    model.ir_version = onnx.helper.find_min_ir_version_for(opsets)
    with _register(ModelAccessor(model)) as accessor:
        yield accessor


__all__ = ["ModelAccessor", "base", "empty_base"]
