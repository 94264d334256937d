"""TensorFlow smoke training: an 8-16-2 Keras MLP on $DATA_DIR/train.csv, trained with tf.GradientTape.

It trains on the first GPU when TensorFlow sees one (a cuda image on a GPU host), else on the CPU, and says
which in summary.json's `device`.

The learner contract in miniature: halt on request (SIGTERM or control/halt) with a checkpoint,
resume from the latest checkpoint with the step counter continuing, write results atomically.
"""

import argparse
import json
import os
import shutil
import time

import numpy as np
import tensorflow as tf

import learner

SEED = 1234
BATCH = 32


def load_csv(path):
    data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32, ndmin=2)
    return data[:, :-1], data[:, -1].astype(np.int64)


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
    tf.keras.utils.set_random_seed(SEED)
    device = "gpu:0" if tf.config.list_physical_devices("GPU") else "cpu"
    print(f"training on {device}", flush=True)
    with tf.device("/GPU:0" if device == "gpu:0" else "/CPU:0"):
        train(args, min_step_seconds, device)


def train(args, min_step_seconds, device):
    x, y = load_csv(learner.data_dir() / "train.csv")
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(x.shape[1],)),
            tf.keras.layers.Dense(16, activation="relu"),
            tf.keras.layers.Dense(2),
        ]
    )
    opt = tf.keras.optimizers.Adam(learning_rate=0.01)
    opt.build(model.trainable_variables)  # create the slots now, so a restore fills them at once
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    step_var = tf.Variable(0, dtype=tf.int64)
    state = tf.train.Checkpoint(model=model, optimizer=opt, step=step_var)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            loss = loss_fn(yb, logits)
        opt.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, axis=1), yb), tf.float32))
        return loss, accuracy

    def save_checkpoint(step):
        step_var.assign(step)
        with learner.new_checkpoint(step) as tmpdir:
            state.write(str(tmpdir / "state"))

    start_step = 1
    ckpt = learner.latest_checkpoint()
    if ckpt is not None:
        state.read(str(ckpt.path / "state")).assert_consumed()
        start_step = int(step_var.numpy()) + 1
        print(f"resumed from step {start_step - 1}", flush=True)

    step = start_step - 1
    for step in range(start_step, args.steps + 1):
        began = time.monotonic()
        idx = batch_indices(step, len(x))
        loss, accuracy = train_step(tf.constant(x[idx]), tf.constant(y[idx]))
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
    logits = model(x, training=False)  # report on the whole training set, not one minibatch
    loss = float(loss_fn(y, logits))
    accuracy = float(np.mean(np.argmax(logits.numpy(), axis=1) == y))
    result_dir = learner.result_dir()
    tmp, final = result_dir / "saved_model.tmp", result_dir / "saved_model"
    shutil.rmtree(tmp, ignore_errors=True)
    tf.saved_model.save(model, str(tmp))
    shutil.rmtree(final, ignore_errors=True)
    tmp.replace(final)
    write_json_atomic(
        result_dir / "summary.json",
        {
            "framework": "tensorflow",
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
