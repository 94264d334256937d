"""One root for the build tool's errors, under the one root of learnerkit's."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import learnerkit_build
from learnerkit.common.errors import ConfigError, LearnerkitError
from learnerkit_build.errors import BuildToolError, SpecError, TemplateError


def build_tool_errors() -> set[type[LearnerkitError]]:
    found: set[type[LearnerkitError]] = set()
    for module_info in pkgutil.walk_packages(learnerkit_build.__path__, "learnerkit_build."):
        module = importlib.import_module(module_info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, LearnerkitError) and value.__module__.startswith("learnerkit_build."):
                found.add(value)
    return found


def test_every_error_the_build_tool_defines_is_a_build_tool_error() -> None:
    errors = build_tool_errors()
    assert len(errors) > 10
    assert {error.__name__ for error in errors if not issubclass(error, BuildToolError)} == set()


def test_bad_input_stays_a_config_error() -> None:
    assert issubclass(SpecError, ConfigError)
    assert issubclass(TemplateError, ConfigError)
