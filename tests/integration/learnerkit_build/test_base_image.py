"""The local Debian base: made by mmdebstrap, labelled with its recipe, slim, cached by recipe."""

from __future__ import annotations

from typing import Any

from learnerkit_build.builds.baseimage import base_reference, ensure_base, recipe_for


def test_base_is_cached_and_labelled(docker_client: Any) -> None:
    recipe = recipe_for("debian-bookworm")
    image_id, _ = ensure_base(recipe, lambda line: None)
    again, made = ensure_base(recipe, lambda line: None)
    assert (again, made) == (image_id, False)
    image = docker_client.images.get(base_reference(recipe))
    assert image.id == image_id
    labels = image.labels
    assert labels["io.learnerkit.base.suite"] == "bookworm"
    assert labels["io.learnerkit.base.mirror"] == recipe.mirror
    packages = dict(item.split("=", 1) for item in labels["io.learnerkit.base.packages"].split(","))
    assert "dpkg" in packages and "debian-archive-keyring" in packages
    assert "gcc-12" not in packages


def test_base_is_slim_and_has_no_apt_lists(docker_client: Any) -> None:
    reference = base_reference(recipe_for("debian-bookworm"))
    script = (
        'test -z "$(ls -A /var/lib/apt/lists | grep -v partial)" && test -z "$(ls -A /usr/share/man)" '
        "&& test -f /usr/share/doc/dpkg/copyright && grep -q bookworm-security /etc/apt/sources.list.d/debian.sources"
    )
    output = docker_client.containers.run(reference, ["bash", "-c", script + " && echo ok"], remove=True)
    assert output.strip() == b"ok"
