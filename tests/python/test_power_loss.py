"""scripts/power_loss_check.sh in the test command: a save over an existing checkpoint, cut at
each of its write/fsync/rename calls and just after it returned, in each mode of
tests/power_loss/lost_writes.c (kill -9; power cut dropping unsynced data and undoing an
un-fsynced rename; torn write; EIO; EIO then a power cut), leaves the old or the new checkpoint,
loadable with checksums verified -- and the new one whenever the save returned. The control
(temporary file + rename without fsync) must be caught losing checkpoints, so the check can fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import onnxtrain

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform != "linux" or shutil.which("cc") is None,
                                reason="needs Linux (LD_PRELOAD, /proc) and a C compiler")


def run_check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    package_root = str(Path(onnxtrain.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(["bash", str(ROOT / "scripts" / "power_loss_check.sh"), "--build", str(tmp_path), *args],
                          capture_output=True, text=True, env=env, timeout=600)


def test_every_cut_leaves_the_old_or_the_new_checkpoint(tmp_path):
    done = run_check(tmp_path, "--runs", "50")  # 5 modes x (9 calls + after return), each once
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "50/50 intact" in done.stdout


def test_the_check_catches_a_writer_without_fsync(tmp_path):
    done = run_check(tmp_path, "--runs", "75", "--control")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert '"save_returned": true' in done.stdout and '"found": "old"' in done.stdout  # the undone rename
    assert "No such file or directory" in done.stdout  # the rename kept, its data lost
