"""Train a small network on the digits CSV ($DATA_DIR/digits-train.csv: 64 pixel columns in [0, 1], then label)
and save it with learner.save_model for the evaluations. ``--adversarial``: train on FGSM examples too.
``--onnx``: save it as ONNX too, the file `learnerkit model serve` runs by onnxruntime (docs/catalog.md, "ONNX";
torch's exporter needs the `onnx` package: add ``onnx==1.23.2`` to a requirements.txt beside this file)."""

import argparse
import csv
import io
import json
import time

import torch

import learner


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--adversarial", action="store_true")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--epsilon", type=float, default=0.2)
    parser.add_argument("--onnx", action="store_true")
    args = parser.parse_args()
    started = time.monotonic()
    with (learner.data_dir() / "digits-train.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))[1:]
    x = torch.tensor([[float(v) for v in row[:-1]] for row in rows])
    y = torch.tensor([int(row[-1]) for row in rows])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        order = torch.randperm(len(x))
        for start in range(0, len(x), 64):
            xb, yb = x[order[start : start + 64]], y[order[start : start + 64]]
            if args.adversarial:
                xb = xb.clone().requires_grad_(True)
                torch.nn.functional.cross_entropy(net(xb), yb).backward()
                eps = args.epsilon * torch.rand(len(xb), 1)
                attacked = (xb + eps * xb.grad.sign()).clamp(0, 1).detach()
                xb = torch.cat([xb.detach(), attacked])
                yb = torch.cat([yb, yb])
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(xb), yb)
            loss.backward()
            optimizer.step()
        learner.log_metrics(epoch, loss=loss.item())
    learner.save_model(net, [64], 10)
    if args.onnx:
        save_onnx(net)
    summary = {"seconds": time.monotonic() - started, "adversarial": args.adversarial}
    (learner.result_dir() / "training.json").write_text(json.dumps(summary))


def save_onnx(net: torch.nn.Module) -> None:
    """``$RESULT_DIR/model/model.onnx`` beside learner.save_model's files, written atomically: the same tensor names
    (``input``, ``logits``) and a batch of any size."""
    graph = io.BytesIO()
    torch.onnx.export(
        net.eval(),
        (torch.zeros(1, 64),),
        graph,
        input_names=["input"],
        output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        dynamo=False,  # the TorchScript-based exporter: it needs `onnx` only, the default one onnxscript too
    )
    target = learner.result_dir() / "model" / "model.onnx"
    partial = target.with_name(".model.onnx.partial")
    partial.write_bytes(graph.getvalue())
    partial.chmod(0o644)
    partial.replace(target)


if __name__ == "__main__":
    main()
