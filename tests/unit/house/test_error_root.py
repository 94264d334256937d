"""The root of learnerkit's errors lives in the sidecar, the ground both the host and the sidecar stand on."""

from __future__ import annotations

from controller_sidecar import rooterrors
from controller_sidecar.errors import SidecarConfigError, SidecarError
from learnerkit.common import errors


def test_the_host_reexports_the_sidecars_root() -> None:
    assert errors.LearnerkitError is rooterrors.LearnerkitError
    assert errors.ConfigError is rooterrors.ConfigError


def test_a_host_site_catching_learnerkit_error_catches_the_sidecars_errors() -> None:
    assert issubclass(SidecarError, errors.LearnerkitError)
    assert issubclass(SidecarConfigError, errors.ConfigError)
