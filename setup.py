"""Which packages the wheel ships, found rather than listed: every folder with an ``__init__.py`` under the four
package roots, so that a sub-package added later ships without a change here (``pyproject.toml`` holds the rest).

A ``setup.py`` because ``build/`` is imported as ``learnerkit_build``: ``[tool.setuptools.packages.find]`` names a
package after its folder and cannot rename ``build.lock`` to ``learnerkit_build.lock``.
"""

from setuptools import find_packages, setup

ROOTS = {
    "learnerkit": "learnerkit",
    "learnerkit_build": "build",
    "learner": "learner_base/learner",
    "controller_sidecar": "controller_sidecar",
}


def packages() -> list[str]:
    """Each root and every package below it, under its import name."""
    found = []
    for name, folder in ROOTS.items():
        found += [name, *(f"{name}.{sub}" for sub in find_packages(folder))]
    return found


setup(packages=packages(), package_dir=ROOTS)
