"""The build tool's tables at 80 columns: specs and references whole, reasons after the table, nothing cut."""

from __future__ import annotations

from rich.console import Console

from learnerkit_build.images import BuildResult
from learnerkit_build.views import build_table, image_table

ROWS = [
    {
        "spec": f"tensorflow:2.21-{variant}",
        "reference": f"learnerkit/tensorflow:2.21-{variant}-py3.12",
        "accelerator": variant,
        "python": "3.12",
        "base": f"registry.example/very/long/base-image-name:{variant}-2026.11",
        "built": variant == "cpu",
    }
    for variant in ("cpu", "cuda")
]


def at_80(renderable: object) -> str:
    console = Console(width=80, record=True, force_terminal=False)
    console.print(renderable)
    return console.export_text()


def test_image_list_keeps_specs_references_and_bases_whole_at_80_columns() -> None:
    text = at_80(image_table(ROWS))
    for row in ROWS:
        assert row["spec"] in text and row["reference"] in text and row["base"] in text
    assert "…" not in text


def test_build_results_keep_references_whole_and_say_every_reason() -> None:
    results = [
        BuildResult("tensorflow:2.21-cpu", "cached", "learnerkit/tensorflow:2.21-cpu-py3.12", seconds=0.2),
        BuildResult(
            "tensorflow:2.21-cuda",
            "skipped",
            "learnerkit/tensorflow:2.21-cuda-py3.12",
            reason="base image nvidia/cuda:12.6.3-base-ubuntu24.04 is not on this engine",
        ),
    ]
    text = at_80(build_table(results))
    assert "learnerkit/tensorflow:2.21-cuda-py3.12" in text and "skipped" in text
    assert "nvidia/cuda:12.6.3-base-ubuntu24.04" in " ".join(text.split())
    assert "…" not in text
