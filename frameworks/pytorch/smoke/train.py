"""PyTorch smoke training: an 8-16-2 MLP on $DATA_DIR/train.csv, checkpointed and resumable.

It trains on the first GPU when torch sees one (a cuda image on a GPU host), else on the CPU, and says which
in summary.json's `device`.

The learner contract in miniature: halt on request (SIGTERM or control/halt) with a checkpoint,
resume from the latest checkpoint with the step counter continuing, write results atomically.
"""

import argparse
import csv
import json
import os
import time

import torch

import learner

SEED = 1234
BATCH = 32


def load_csv(path):
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    data = torch.tensor([[float(v) for v in row] for row in rows[1:]])
    return data[:, :-1], data[:, -1].long()


def batch_indices(step, n):
    """Indices of step's minibatch: a fresh seeded shuffle per epoch, so the order is a function of the step."""
    per_epoch = n // BATCH
    epoch, k = divmod(step - 1, per_epoch)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(SEED + epoch))
    return order[k * BATCH : (k + 1) * BATCH]


def save_checkpoint(step, model, opt):
    with learner.new_checkpoint(step) as tmpdir:
        torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, tmpdir / "state.pt")


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
    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # a tiny model: threads cost more than they give
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    print(f"training on {device}", flush=True)
    x, y = (tensor.to(device) for tensor in load_csv(learner.data_dir() / "train.csv"))
    model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()

    start_step = 1
    ckpt = learner.latest_checkpoint()
    if ckpt is not None:
        state = torch.load(ckpt.path / "state.pt", weights_only=True, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start_step = state["step"] + 1
        print(f"resumed from step {state['step']}", flush=True)

    step = start_step - 1
    loss = accuracy = float("nan")
    for step in range(start_step, args.steps + 1):
        began = time.monotonic()
        idx = batch_indices(step, len(x)).to(device)
        logits = model(x[idx])
        batch_loss = loss_fn(logits, y[idx])
        opt.zero_grad()
        batch_loss.backward()
        opt.step()
        loss = batch_loss.item()
        accuracy = (logits.argmax(dim=1) == y[idx]).float().mean().item()
        learner.log_metrics(step, loss=loss, accuracy=accuracy)
        time.sleep(max(0.0, min_step_seconds - (time.monotonic() - began)))
        if learner.halt_requested():
            save_checkpoint(step, model, opt)
            print(f"halted at step {step}", flush=True)
            return
        if step % args.checkpoint_every == 0:
            save_checkpoint(step, model, opt)

    if step >= start_step and step % args.checkpoint_every != 0:
        save_checkpoint(step, model, opt)
    with torch.no_grad():  # report on the whole training set, not one minibatch
        logits = model(x)
        loss = loss_fn(logits, y).item()
        accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    result_dir = learner.result_dir()
    torch.save(model.state_dict(), result_dir / "model.pt.tmp")
    (result_dir / "model.pt.tmp").replace(result_dir / "model.pt")
    write_json_atomic(
        result_dir / "summary.json",
        {
            "framework": "pytorch",
            "device": str(device),
            "start_step": start_step,
            "final_step": step,
            "loss": loss,
            "accuracy": accuracy,
        },
    )
    print(f"done: steps {start_step}..{step}, loss {loss:.4f}, accuracy {accuracy:.3f}", flush=True)


if __name__ == "__main__":
    main()
