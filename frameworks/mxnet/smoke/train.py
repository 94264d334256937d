"""MXNet smoke training: an 8-16-2 Gluon MLP on $DATA_DIR/train.csv, trained with autograd + gluon.Trainer.

It trains on the first GPU when MXNet counts one (a cuda image on a GPU host), else on the CPU, and says
which in summary.json's `device`.

The learner contract in miniature: halt on request (SIGTERM or control/halt) with a checkpoint,
resume from the latest checkpoint with the step counter continuing, write results atomically.
"""

import argparse
import json
import os
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import learner

SEED = 1234
BATCH = 32


def load_csv(path):
    data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32, ndmin=2)
    return data[:, :-1], data[:, -1]


def batch_indices(step, n):
    """Indices of step's minibatch: a fresh seeded shuffle per epoch, so the order is a function of the step."""
    epoch, k = divmod(step - 1, n // BATCH)
    order = np.random.default_rng(SEED + epoch).permutation(n)
    return order[k * BATCH : (k + 1) * BATCH]


def write_json_atomic(path, doc):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2))
    tmp.replace(path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    args = parser.parse_args()
    min_step_seconds = float(os.environ.get("SMOKE_MIN_STEP_SECONDS", "0"))

    learner.install_halt_handler()
    mx.random.seed(SEED)
    np.random.seed(SEED)
    ctx = mx.gpu(0) if mx.context.num_gpus() > 0 else mx.cpu()
    device = "gpu:0" if ctx.device_type == "gpu" else "cpu"
    print(f"training on {device}", flush=True)
    x, y = load_csv(learner.data_dir() / "train.csv")
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu", in_units=x.shape[1]), gluon.nn.Dense(2, in_units=16))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def save_checkpoint(step):
        with learner.new_checkpoint(step) as tmpdir:
            net.save_parameters(str(tmpdir / "model.params"))
            trainer.save_states(str(tmpdir / "trainer.states"))
            (tmpdir / "step.json").write_text(json.dumps({"step": step}))

    start_step = 1
    ckpt = learner.latest_checkpoint()
    if ckpt is not None:
        net.load_parameters(str(ckpt.path / "model.params"), ctx=ctx)
        trainer.load_states(str(ckpt.path / "trainer.states"))
        start_step = json.loads((ckpt.path / "step.json").read_text())["step"] + 1
        print(f"resumed from step {start_step - 1}", flush=True)

    step = start_step - 1
    for step in range(start_step, args.steps + 1):
        began = time.monotonic()
        idx = batch_indices(step, len(x))
        xb, yb = mx.nd.array(x[idx], ctx=ctx), mx.nd.array(y[idx], ctx=ctx)
        with autograd.record():
            logits = net(xb)
            batch_loss = loss_fn(logits, yb)
        batch_loss.backward()
        trainer.step(len(idx))  # the gradient is summed over the batch: normalize by its size
        loss = float(batch_loss.mean().asscalar())
        accuracy = float((logits.argmax(axis=1) == yb).mean().asscalar())
        learner.log_metrics(step, loss=loss, accuracy=accuracy)
        time.sleep(max(0.0, min_step_seconds - (time.monotonic() - began)))
        if learner.halt_requested():
            save_checkpoint(step)
            print(f"halted at step {step}", flush=True)
            return
        if step % args.checkpoint_every == 0:
            save_checkpoint(step)

    if step >= start_step and step % args.checkpoint_every != 0:
        save_checkpoint(step)
    logits = net(mx.nd.array(x, ctx=ctx))  # report on the whole training set, not one minibatch
    loss = float(loss_fn(logits, mx.nd.array(y, ctx=ctx)).mean().asscalar())
    accuracy = float(np.mean(logits.asnumpy().argmax(axis=1) == y))
    result_dir = learner.result_dir()
    net.save_parameters(str(result_dir / "model.params.tmp"))
    (result_dir / "model.params.tmp").replace(result_dir / "model.params")
    write_json_atomic(
        result_dir / "summary.json",
        {
            "framework": "mxnet",
            "device": device,
            "start_step": start_step,
            "final_step": step,
            "loss": loss,
            "accuracy": accuracy,
        },
    )
    print(f"done: steps {start_step}..{step}, loss {loss:.4f}, accuracy {accuracy:.3f}", flush=True)


if __name__ == "__main__":
    main()
