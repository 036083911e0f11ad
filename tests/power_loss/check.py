"""Power loss during CheckpointState.save_checkpoint (driven by scripts/power_loss_check.sh).

Run with tests/power_loss/lost_writes.c preloaded. Saves checkpoint A, then, for each trial,
forks a child that arms the shim at one of the file-system calls a save makes and saves
checkpoint B over A; the shim kills the child there (dropping what no fsync made durable, in
the `power` and `torn` modes) or fails that call with EIO. The parent then checks that the path
holds A or B, loadable with its checksums verified (load_checkpoint(path, verify=True)).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from pathlib import Path

import numpy as np

from onnxtrain.training.api import CheckpointState

MODES = {"kill": 0, "power": 1, "torn": 2, "eio": 3, "eio_cut": 4}


def make_state(path: Path, seed: int) -> dict[str, np.ndarray]:
    """A checkpoint of a few tensors (one large enough to take several writes) saved at `path`."""
    rng = np.random.default_rng(seed)
    tensors = {"w1": rng.standard_normal((256, 512)).astype(np.float32),  # 512 KiB
               "b1": rng.standard_normal(512).astype(np.float32),
               "w2": rng.standard_normal((512, 64)).astype(np.float64),
               "steps": np.array([seed], np.int64)}
    header = {}
    offset = 0
    for name, array in tensors.items():
        code = {np.float32: "F32", np.float64: "F64", np.int64: "I64"}[array.dtype.type]
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    source = path.with_suffix(".source")
    source.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(a.tobytes() for a in tensors.values()))
    state = CheckpointState.load_checkpoint(source)  # a safetensors file from elsewhere
    CheckpointState.save_checkpoint(state, path)  # now onnxtrain's format, with checksums
    source.unlink()
    return tensors


def holds(path: Path, tensors: dict[str, np.ndarray]) -> bool:
    state = CheckpointState.load_checkpoint(path, verify=True)
    return all(np.array_equal(state.parameters[name].data, value) for name, value in tensors.items())


def verdict(path: Path, old: dict, new: dict) -> str:
    try:
        if holds(path, old):
            return "old"
        if holds(path, new):
            return "new"
        return "neither"
    except Exception as e:  # noqa: BLE001 - a checkpoint that does not load is the finding
        return f"broken: {type(e).__name__}: {str(e)[:200]}"


def naive_save(data: bytes, path: Path) -> None:
    """The control: what an atomic save is without its fsyncs (temporary file, rename)."""
    temporary = path.with_name(path.name + ".naive")
    with open(temporary, "wb", buffering=0) as f:
        for start in range(0, len(data), 65536):
            f.write(data[start:start + 65536])
    os.rename(temporary, path)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--control", action="store_true",
                        help="save with a naive writer (temporary file + rename, no fsync) instead: "
                             "the check must find it losing checkpoints")
    args = parser.parse_args()
    save = CheckpointState.save_checkpoint
    shim = ctypes.CDLL(None)  # the preloaded shim's functions are in the global namespace
    shim.powerloss_arm.argtypes = [ctypes.c_longlong, ctypes.c_int]
    shim.powerloss_calls.restype = ctypes.c_longlong
    args.folder.mkdir(parents=True, exist_ok=True)
    path = args.folder / "checkpoint"
    old = make_state(path, 1)
    new_state = CheckpointState.load_checkpoint(path)
    new = {name: (value + 1 if value.dtype != np.int64 else value + 1) for name, value in old.items()}
    for name, value in new.items():
        new_state.parameters[name] = value
    if args.control:
        CheckpointState.save_checkpoint(new_state, args.folder / "naive-source")
        data = (args.folder / "naive-source").read_bytes()
        save = lambda state, target: naive_save(data, target)  # noqa: E731

    # How many calls a whole save makes: arm far away and count.
    shim.powerloss_arm(1 << 60, MODES["kill"])
    save(new_state, args.folder / "probe")
    calls = shim.powerloss_calls()
    shim.powerloss_arm(0, 0)
    print(f"one save makes {calls} write/fsync/rename calls")

    results: dict[str, int] = {}
    failures = []
    modes = list(MODES)
    for run in range(args.runs):
        mode = modes[run % len(modes)]
        # Every call of the save in turn, in every mode; calls + 1: the power goes right after
        # the save returned.
        n = 1 + (run // len(modes)) % (calls + 1)
        returned_r, returned_w = os.pipe()  # the child says "the save returned" through it
        pid = os.fork()
        if pid == 0:
            os.close(returned_r)
            shim.powerloss_arm(n, MODES[mode])
            try:
                save(new_state, path)
                os.write(returned_w, b"r")
                if (n > calls and mode != "eio") or mode == "eio_cut":
                    shim.powerloss_cut()
                os._exit(0)
            except Exception:  # noqa: BLE001 - the eio mode: the save must raise, not half-write
                os._exit(3)
        os.close(returned_w)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        returned = os.read(returned_r, 1) == b"r"
        os.close(returned_r)
        seen = verdict(path, old, new)
        key = f"{mode}:{seen}" + (":save returned" if returned else "")
        results[key] = results.get(key, 0) + 1
        intact = seen in ("old", "new")
        if returned and seen != "new":
            intact = False  # a save that returned must have made B durable
        if not intact:
            failures.append({"run": run, "mode": mode, "call": n, "exit": code, "save_returned": returned,
                             "found": seen})
        # Back to A for the next trial (written without the shim armed).
        if seen != "old":
            make_state(path, 1)
        for leftover in args.folder.glob("checkpoint.*"):
            leftover.unlink()
    intact = args.runs - len(failures)
    print(json.dumps({"runs": args.runs, "intact": intact, "calls_per_save": calls, "by_mode": results,
                      "failures": failures}, indent=1))
    print(f"{intact}/{args.runs} intact")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
