"""Write the example's data: scikit-learn's handwritten digits as digits-train.csv (1,300 rows) and
digits-eval.csv (497 rows) in /job/data, 64 pixel columns scaled to [0, 1] and `label`, shuffled with a fixed seed.
Runs where scikit-learn is installed: the robustness evaluator image has it (docs/evaluations.md)."""

import numpy as np
from sklearn.datasets import load_digits

digits = load_digits()
order = np.random.default_rng(0).permutation(len(digits.target))
x, y = digits.data[order] / 16.0, digits.target[order]
head = ",".join([f"p{i}" for i in range(64)] + ["label"])
for name, part in (("digits-train.csv", slice(0, 1300)), ("digits-eval.csv", slice(1300, None))):
    np.savetxt(
        f"/job/data/{name}",
        np.column_stack([x[part], y[part]]),
        delimiter=",",
        header=head,
        comments="",
        fmt=["%.4f"] * 64 + ["%d"],
    )
