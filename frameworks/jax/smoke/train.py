"""JAX smoke training: an 8-16-2 MLP on $DATA_DIR/train.csv, trained with jax.grad and a small Adam.

It trains on JAX's default device: the first GPU when the CUDA plug-in finds one (a cuda image on a GPU
host), else the CPU; summary.json's `device` says which.

The learner contract in miniature: halt on request (SIGTERM or control/halt) with a checkpoint,
resume from the latest checkpoint with the step counter continuing, write results atomically.
"""

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import learner

SEED = 1234
BATCH = 32
LEARNING_RATE, BETA1, BETA2, EPS = 0.01, 0.9, 0.999, 1e-8


def load_csv(path):
    data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32, ndmin=2)
    return data[:, :-1], data[:, -1].astype(np.int32)


def batch_indices(step, n):
    """Indices of step's minibatch: a fresh seeded shuffle per epoch, so the order is a function of the step."""
    epoch, k = divmod(step - 1, n // BATCH)
    order = np.random.default_rng(SEED + epoch).permutation(n)
    return order[k * BATCH : (k + 1) * BATCH]


def init_params(n_in, n_hidden=16, n_out=2):
    """He-initialized weights, drawn with numpy: eager jax.random ops would each compile on first use."""
    rng = np.random.default_rng(SEED)
    params = {
        "w1": rng.normal(0, np.sqrt(2.0 / n_in), (n_in, n_hidden)),
        "b1": np.zeros(n_hidden),
        "w2": rng.normal(0, np.sqrt(1.0 / n_hidden), (n_hidden, n_out)),
        "b2": np.zeros(n_out),
    }
    return {name: jnp.asarray(value, dtype=jnp.float32) for name, value in params.items()}


def forward(params, x):
    return jax.nn.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


@jax.jit
def loss_and_accuracy(params, x, y):
    logits = forward(params, x)
    loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))
    return loss, jnp.mean(jnp.argmax(logits, axis=1) == y)


@jax.jit
def train_step(params, m, v, t, x, y):
    """One Adam step; t is the number of updates done before this one."""
    (loss, accuracy), grads = jax.value_and_grad(loss_and_accuracy, has_aux=True)(params, x, y)
    t = t + 1
    m = jax.tree_util.tree_map(lambda a, g: BETA1 * a + (1 - BETA1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda a, g: BETA2 * a + (1 - BETA2) * g * g, v, grads)
    scale = LEARNING_RATE * jnp.sqrt(1 - BETA2**t) / (1 - BETA1**t)
    params = jax.tree_util.tree_map(lambda p, a, b: p - scale * a / (jnp.sqrt(b) + EPS), params, m, v)
    return params, m, v, t, loss, accuracy


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
    first = jax.devices()[0]
    device = f"{first.platform}:{first.id}"
    print(f"training on {device}", flush=True)
    x, y = load_csv(learner.data_dir() / "train.csv")
    params = init_params(x.shape[1])
    m = {name: np.zeros(value.shape, np.float32) for name, value in params.items()}
    v = dict(m)
    t = np.int32(0)

    def save_checkpoint(step):
        arrays = {
            f"{group}/{name}": np.asarray(value)
            for group, tree in (("params", params), ("m", m), ("v", v))
            for name, value in tree.items()
        }
        with learner.new_checkpoint(step) as tmpdir:
            np.savez(tmpdir / "state.npz", step=step, t=np.asarray(t), **arrays)

    start_step = 1
    ckpt = learner.latest_checkpoint()
    if ckpt is not None:
        with np.load(ckpt.path / "state.npz") as saved:
            params, m, v = (
                {name: jnp.asarray(saved[f"{group}/{name}"]) for name in params} for group in ("params", "m", "v")
            )
            t = jnp.asarray(saved["t"])
            start_step = int(saved["step"]) + 1
        print(f"resumed from step {start_step - 1}", flush=True)

    step = start_step - 1
    for step in range(start_step, args.steps + 1):
        began = time.monotonic()
        idx = batch_indices(step, len(x))
        params, m, v, t, loss, accuracy = train_step(params, m, v, t, x[idx], y[idx])
        learner.log_metrics(step, loss=float(loss), accuracy=float(accuracy))
        time.sleep(max(0.0, min_step_seconds - (time.monotonic() - began)))
        if learner.halt_requested():
            save_checkpoint(step)
            print(f"halted at step {step}", flush=True)
            return
        if step % args.checkpoint_every == 0:
            save_checkpoint(step)

    if step >= start_step and step % args.checkpoint_every != 0:
        save_checkpoint(step)
    loss, accuracy = (float(value) for value in loss_and_accuracy(params, x, y))  # the whole training set
    result_dir = learner.result_dir()
    tmp = result_dir / "model.tmp.npz"
    np.savez(tmp, **{name: np.asarray(value) for name, value in params.items()})
    tmp.replace(result_dir / "model.npz")
    write_json_atomic(
        result_dir / "summary.json",
        {
            "framework": "jax",
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
