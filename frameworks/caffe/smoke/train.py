"""Caffe smoke training: a small MLP (8 -> 16 -> 2) trained by minibatch SGD on $DATA_DIR/train.csv.

The learnerkit smoke contract: `--steps N --checkpoint-every K`, one minibatch per step (steps 1..N),
metrics through `learner.log_metrics`, a checkpoint every K steps and on halt (SIGTERM or
$JOB_STATE_DIR/halt), resume from the latest checkpoint, and at the end `model.caffemodel` and
`summary.json` in $RESULT_DIR. `SMOKE_MIN_STEP_SECONDS` stretches each step so tests can halt mid-run.
It trains in Caffe's GPU mode on GPU 0 when the CUDA runtime sees a GPU (a cuda image on a GPU host), else in
CPU mode; summary.json's `device` says which.

A checkpoint directory holds `model.caffemodel` (the weights), `solver.solverstate` (iteration and
momentum history; its `learned_net` path is cleared so the directory is self-contained) and `meta.json`.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import csv
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# glog: warnings and errors only (set before caffe loads glog).
os.environ.setdefault("GLOG_minloglevel", "2")

import numpy as np  # noqa: E402
from google.protobuf import text_format  # noqa: E402

import caffe  # noqa: E402
import learner  # noqa: E402
from caffe.proto import caffe_pb2  # noqa: E402

BATCH = 32
HIDDEN = 16
CLASSES = 2
SEED = 1234
MODEL_FILE = "model.caffemodel"
STATE_FILE = "solver.solverstate"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.checkpoint_every < 1:
        parser.error("--steps and --checkpoint-every must be >= 1")
    return args


def load_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Features x0..x(n-1) as float32 rows, and the `label` column as float32 (Caffe's label dtype)."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        if "label" not in header:
            raise SystemExit(f"{path}: no 'label' column in header {header}")
        label_col = header.index("label")
        feature_cols = [i for i, name in enumerate(header) if name != "label"]
        rows = [row for row in reader if row]
    features = np.array([[float(row[i]) for i in feature_cols] for row in rows], dtype=np.float32)
    labels = np.array([int(row[label_col]) for row in rows], dtype=np.float32)
    if len(rows) == 0 or not set(np.unique(labels)) <= {0.0, 1.0}:
        raise SystemExit(f"{path}: expected rows with a label in {{0, 1}}")
    return features, labels


def net_proto(num_features: int) -> caffe_pb2.NetParameter:
    """Input(data, label) -> InnerProduct(16) -> ReLU -> InnerProduct(2) -> SoftmaxWithLoss + Accuracy."""
    net = caffe_pb2.NetParameter(name="smoke_mlp")

    def input_layer(name: str, dims: list[int]) -> None:
        layer = net.layer.add(name=name, type="Input", top=[name])
        layer.input_param.shape.add(dim=dims)

    def inner_product(name: str, bottom: str, outputs: int) -> None:
        layer = net.layer.add(name=name, type="InnerProduct", bottom=[bottom], top=[name])
        layer.inner_product_param.num_output = outputs
        layer.inner_product_param.weight_filler.type = "xavier"
        layer.inner_product_param.bias_filler.type = "constant"

    input_layer("data", [BATCH, num_features])
    input_layer("label", [BATCH])
    inner_product("ip1", "data", HIDDEN)
    net.layer.add(name="relu1", type="ReLU", bottom=["ip1"], top=["ip1"])
    inner_product("ip2", "ip1", CLASSES)
    net.layer.add(name="loss", type="SoftmaxWithLoss", bottom=["ip2", "label"], top=["loss"])
    net.layer.add(name="accuracy", type="Accuracy", bottom=["ip2", "label"], top=["accuracy"])
    return net


def visible_gpus() -> int:
    """GPUs the CUDA runtime sees; 0 in a CPU image (no runtime), without a driver or without GPUs."""
    runtime = ctypes.util.find_library("cudart")
    if runtime is None:
        return 0
    count = ctypes.c_int()
    return count.value if ctypes.CDLL(runtime).cudaGetDeviceCount(ctypes.byref(count)) == 0 else 0


def solver_proto(net_path: Path, snapshot_prefix: Path, lr: float, gpu: bool) -> caffe_pb2.SolverParameter:
    solver = caffe_pb2.SolverParameter()
    solver.net = str(net_path)
    solver.type = "SGD"
    solver.base_lr = lr
    solver.lr_policy = "fixed"
    solver.momentum = 0.9
    solver.weight_decay = 1e-4
    solver.max_iter = 1_000_000_000  # steps are driven one by one from Python
    solver.display = 0
    solver.snapshot = 0
    solver.snapshot_after_train = False
    solver.snapshot_prefix = str(snapshot_prefix)
    solver.solver_mode = caffe_pb2.SolverParameter.GPU if gpu else caffe_pb2.SolverParameter.CPU
    solver.random_seed = SEED
    return solver


def batch_indices(step: int, count: int) -> np.ndarray:
    """The minibatch of `step`: a pure function of the step, so a resumed run sees the same batches."""
    return np.random.default_rng(SEED + step).choice(count, size=BATCH, replace=count < BATCH)


def evaluate(net: caffe.Net, features: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Loss and accuracy on the whole set (reshapes the inputs for one pass, then back to the batch size)."""
    net.blobs["data"].reshape(*features.shape)
    net.blobs["label"].reshape(len(labels))
    net.blobs["data"].data[...] = features
    net.blobs["label"].data[...] = labels
    out = net.forward()
    loss, accuracy = float(out["loss"]), float(out["accuracy"])
    net.blobs["data"].reshape(BATCH, features.shape[1])
    net.blobs["label"].reshape(BATCH)
    net.reshape()
    return loss, accuracy


def save_checkpoint(solver: caffe.SGDSolver, step: int, work: Path, loss: float, accuracy: float) -> None:
    """solver.snapshot() into the scratch prefix, then move the pair into an atomic learner checkpoint."""
    solver.snapshot()
    stem = f"{work / 'snap'}_iter_{solver.iter}"
    state = caffe_pb2.SolverState()
    with open(stem + ".solverstate", "rb") as f:
        state.ParseFromString(f.read())
    state.ClearField("learned_net")  # the weights travel next to it; restore() must not chase a /tmp path
    with learner.new_checkpoint(step) as directory:
        shutil.move(stem + ".caffemodel", Path(directory) / MODEL_FILE)
        (Path(directory) / STATE_FILE).write_bytes(state.SerializeToString())
        meta = {
            "framework": "caffe",
            "step": step,
            "iter": int(solver.iter),
            "loss": loss,
            "accuracy": accuracy,
        }
        (Path(directory) / "meta.json").write_text(json.dumps(meta) + "\n")
    os.remove(stem + ".solverstate")


def restore_checkpoint(solver: caffe.SGDSolver, checkpoint: learner.Checkpoint) -> None:
    directory = Path(checkpoint.path)
    solver.restore(str(directory / STATE_FILE))  # iteration and momentum history
    solver.net.copy_from(str(directory / MODEL_FILE))  # the weights
    if solver.iter != checkpoint.step:
        raise SystemExit(f"checkpoint {directory}: solver iteration {solver.iter} != step {checkpoint.step}")


def write_atomically(target: Path, write) -> None:
    """Write through `write(temp_path)` into a temp file beside `target`, then rename it into place."""
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    try:
        write(temp)
        os.chmod(temp, 0o664)  # mkstemp makes it 0600; the sidecar (group 0) must read the results
        os.replace(temp, target)
    finally:
        if os.path.exists(temp):  # still there only when the write or the rename failed
            os.remove(temp)


def pause_until(deadline: float) -> None:
    """Sleep until `deadline` (SMOKE_MIN_STEP_SECONDS), waking early when a halt is requested."""
    while not learner.halt_requested():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.05))


def halt(
    solver: caffe.SGDSolver, step: int, saved_step: int, work: Path, loss: float, accuracy: float
) -> int:
    """Checkpoint the current step (unless just saved, or nothing trained yet) and end cleanly."""
    if step > saved_step:
        save_checkpoint(solver, step, work, loss, accuracy)
    print(f"halted at step {step}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    min_step_seconds = float(os.environ.get("SMOKE_MIN_STEP_SECONDS") or 0)
    learner.install_halt_handler()

    features, labels = load_csv(Path(learner.data_dir()) / "train.csv")
    gpu = visible_gpus() > 0
    if gpu:
        caffe.set_mode_gpu()
        caffe.set_device(0)
    else:
        caffe.set_mode_cpu()
    device = "gpu:0" if gpu else "cpu"
    print(f"training on {device}", flush=True)
    caffe.set_random_seed(SEED)

    work = Path(tempfile.mkdtemp(prefix="caffe-smoke-"))
    try:
        net_path, solver_path = work / "net.prototxt", work / "solver.prototxt"
        net_path.write_text(text_format.MessageToString(net_proto(features.shape[1])))
        solver_path.write_text(text_format.MessageToString(solver_proto(net_path, work / "snap", args.lr, gpu)))
        solver = caffe.SGDSolver(str(solver_path))

        checkpoint = learner.latest_checkpoint()
        step = 0
        if checkpoint is not None:
            restore_checkpoint(solver, checkpoint)
            step = checkpoint.step
            print(f"resumed from step {step} ({checkpoint.path})", flush=True)
        start_step = step + 1
        saved_step = step
        net = solver.net
        loss = accuracy = float("nan")

        while step < args.steps:
            if learner.halt_requested():  # a halt that arrived before this step (e.g. during start-up)
                return halt(solver, step, saved_step, work, loss, accuracy)
            step += 1
            deadline = time.monotonic() + min_step_seconds
            batch = batch_indices(step, len(labels))
            net.blobs["data"].data[...] = features[batch]
            net.blobs["label"].data[...] = labels[batch]
            solver.step(1)
            loss, accuracy = float(net.blobs["loss"].data), float(net.blobs["accuracy"].data)
            learner.log_metrics(step, loss=loss, accuracy=accuracy)
            print(f"step {step}/{args.steps} loss={loss:.4f} accuracy={accuracy:.3f}", flush=True)
            if step % args.checkpoint_every == 0:
                save_checkpoint(solver, step, work, loss, accuracy)
                saved_step = step
            if min_step_seconds > 0:
                pause_until(deadline)
            if learner.halt_requested():
                return halt(solver, step, saved_step, work, loss, accuracy)

        if saved_step != step or learner.latest_checkpoint() is None:
            save_checkpoint(solver, step, work, loss, accuracy)
        loss, accuracy = evaluate(net, features, labels)
        results = Path(learner.result_dir())
        results.mkdir(parents=True, exist_ok=True)
        write_atomically(results / "model.caffemodel", net.save)
        summary = {
            "framework": "caffe",
            "device": device,
            "start_step": start_step,
            "final_step": step,
            "loss": loss,
            "accuracy": accuracy,
        }
        write_atomically(results / "summary.json", lambda p: Path(p).write_text(json.dumps(summary) + "\n"))
        print(
            f"finished: steps {start_step}..{step}, full-set loss={loss:.4f} accuracy={accuracy:.3f}",
            flush=True,
        )
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
