"""The `onnxtrain` console script: `onnxtrain train` runs the Python training loop
(onnxtrain.training.train_cli), `onnxtrain convert` converts onnxruntime-training's artifacts
(onnxtrain.training.convert); every other command runs the C++ command-line tool shipped
in the package (inspect, gen-artifacts)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def executable() -> Path:
    """Path of the compiled CLI inside the installed package."""
    return Path(__file__).resolve().parent / "bin" / "onnxtrain"


def main() -> None:
    if sys.argv[1:2] == ["train"]:
        from onnxtrain.training.train_cli import main as train

        sys.exit(train(sys.argv[2:]))
    if sys.argv[1:2] == ["convert"]:
        from onnxtrain.training.convert import main as convert

        sys.exit(convert(sys.argv[2:]))
    tool = executable()
    if not tool.exists():
        sys.exit(f"onnxtrain: the command-line tool is missing at {tool}; reinstall onnxtrain")
    os.execv(tool, [str(tool), *sys.argv[1:]])


if __name__ == "__main__":
    main()
