"""The ``onnxtrain`` command line (the console script, and ``python -m onnxtrain``).

``onnxtrain train`` runs the Python training loop (onnxtrain.training.train_cli), ``convert``
converts onnxruntime-training's artifacts (onnxtrain.training.convert); ``inspect`` and
``gen-artifacts`` run the C++ command-line tool shipped in the package. Global options
(``--log-level``) come before the command; ``onnxtrain COMMAND --help`` describes a command.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

# name -> one line for `onnxtrain --help`
COMMANDS = {
    "inspect": "opsets, inputs, outputs, parameters, op histogram and the ops without a kernel of a model",
    "gen-artifacts": "training artifacts of a model: training, eval and optimizer models and a checkpoint",
    "train": "train artifacts on an .npz data set, or (with no arguments) the built-in digits demo",
    "convert": "onnxruntime-training 1.19.2 artifacts and checkpoint to onnxtrain's, and checkpoints back",
}
_OPTIONS_WITH_VALUES = {"--log-level"}


def executable() -> Path:
    """Path of the compiled CLI: inside the installed package, or (a build tree, whose package
    lives in <build>/python/onnxtrain) beside the library in <build>."""
    package = Path(__file__).resolve().parent
    installed = package / "bin" / "onnxtrain"
    build_tree = package.parents[1] / "onnxtrain"
    if not installed.exists() and build_tree.is_file() and os.access(build_tree, os.X_OK):
        return build_tree
    return installed


def _parser() -> argparse.ArgumentParser:
    from onnxtrain import __version__
    from onnxtrain._logging import LEVELS

    commands = "\n".join(f"  {name:<15} {text}" for name, text in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="onnxtrain", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="onnxtrain [-h] [--version] [--log-level LEVEL] COMMAND [ARGS ...]",
        description="Train and run ONNX models.",
        epilog=f"commands:\n{commands}\n\n`onnxtrain COMMAND --help` describes a command.")
    parser.add_argument("--version", action="version", version=f"onnxtrain {__version__}")
    parser.add_argument("--log-level", type=str.upper, choices=LEVELS, metavar="LEVEL",
                        help=f"show onnxtrain's log messages of LEVEL and above ({', '.join(LEVELS)}); default: "
                             "the environment variable ONNXTRAIN_LOG_LEVEL, else warnings only")
    parser.add_argument("command", choices=list(COMMANDS), metavar="COMMAND", help=argparse.SUPPRESS)
    return parser


def _split(argv: Sequence[str]) -> int:
    """The index just past the command: global options and their values come before it."""
    index = 0
    while index < len(argv):
        arg = argv[index]
        if not arg.startswith("-"):
            return index + 1
        index += 2 if arg in _OPTIONS_WITH_VALUES else 1
    return len(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    end = _split(argv)
    parser = _parser()
    args = parser.parse_args(argv[:end])  # exits for --help, --version and mistakes
    if args.log_level:
        from onnxtrain._logging import ENVIRONMENT_VARIABLE, set_log_level

        set_log_level(args.log_level)
        os.environ[ENVIRONMENT_VARIABLE] = args.log_level  # for the C++ tool and children
    rest = argv[end:]
    if args.command == "train":
        from onnxtrain.training.train_cli import main as train

        return train(rest)
    if args.command == "convert":
        from onnxtrain.training.convert import main as convert

        return convert(rest)
    tool = executable()
    if not tool.exists():
        print(f"onnxtrain: the command-line tool is missing at {tool}; reinstall onnxtrain", file=sys.stderr)
        return 1
    sys.stdout.flush()
    os.execv(tool, [str(tool), args.command, *rest])
    return 1  # not reached: execv replaces the process


if __name__ == "__main__":
    sys.exit(main())
