"""The framework matrix as data: `frameworks/<name>/framework.yaml` parsed into typed, frozen specs.

A framework declares versions; each version declares variants (`cpu`, `cuda`, ...). One variant of one
version is one image. Unknown keys are errors, and every error names `file:line` and the field path.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from learnerkit.common.errors import ConfigError
from learnerkit.common.yamlfile import LocatedYaml, format_field_path, load_located_yaml
from learnerkit_build.errors import SpecError

NAME_PATTERN = r"^[a-z][a-z0-9-]*$"
VERSION_PATTERN = r"^[0-9][0-9a-z.]*$"
VARIANT_PATTERN = r"^[a-z][a-z0-9]*$"
LOCAL_BASE_PREFIX = "local:"

ArgValue = str | int | float | bool | list[str]
CUDA_DISTRIBUTION_PREFIXES = ("nvidia-", "cuda-")
CUDA_DISTRIBUTION_NAMES = ("triton",)
"""Distributions that exist only to bring CUDA into an environment: a `cpu` image holds none of them."""
CAPABILITY_PATTERN = r"^(sm|compute)_[0-9]+[a-z]?$"


def is_cuda_distribution(name: str) -> bool:
    """Whether a distribution (any spelling of its name) is one of the CUDA ones a `cpu` image must not hold."""
    normal = re.sub(r"[-_.]+", "-", name).lower()
    return normal.startswith(CUDA_DISTRIBUTION_PREFIXES) or normal in CUDA_DISTRIBUTION_NAMES


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def pinned_requirements(packages: list[str]) -> list[str]:
    """`packages` when each is a PEP 508 requirement pinned to one version; else a `ValueError` naming it."""
    for req in packages:
        try:
            requirement = Requirement(req)
        except InvalidRequirement as e:
            raise ValueError(f"{req!r} is not a valid requirement: {e}") from e
        specifiers = list(requirement.specifier)
        pinned = len(specifiers) == 1 and (
            specifiers[0].operator == "===" or (specifiers[0].operator == "==" and "*" not in specifiers[0].version)
        )
        if not pinned:
            raise ValueError(
                f"{req!r} is not pinned: name exactly one version with == (or === to refuse local versions "
                "such as +cpu), so that the image's content follows from this file"
            )
    return packages


class PipSpec(_Spec):
    """Python distributions installed into the learner's virtual environment."""

    packages: list[str] = Field(min_length=1)
    """PEP 508 requirements; pin them (`torch==2.13.0`) so the build-inputs hash means something."""
    index_url: str | None = None
    """Replaces the build's index for this variant (e.g. a CUDA wheel index)."""
    extra_index_urls: list[str] = []
    shared: list[str] = []
    """Requirements of `packages` installed first, in a layer of their own (`pip_install_shared`): images that
    list the same ones share that layer, built once for them (the evaluator images' torch and numpy)."""

    @field_validator("packages")
    @classmethod
    def _pinned_requirements(cls, packages: list[str]) -> list[str]:
        return pinned_requirements(packages)

    @model_validator(mode="after")
    def _shared_are_packages(self) -> PipSpec:
        stray = [req for req in self.shared if req not in self.packages]
        if stray:
            raise ValueError(f"shared requirements must be listed in packages too, exactly: {', '.join(stray)}")
        return self


class CudaSpec(_Spec):
    """What a `cuda` variant's framework was built with; `image test` checks the built image against it."""

    version: str = Field(pattern=r"^[0-9]+\.[0-9]+$")
    """The CUDA version (major.minor) the framework was compiled for, as the framework reports it."""
    cudnn: str | None = Field(pattern=r"^[0-9]+(\.[0-9]+)*$")
    """The cuDNN version it uses (a prefix: `9` or `9.20`), or null for a build without cuDNN (say why in `note`)."""
    capabilities: list[Annotated[str, Field(pattern=CAPABILITY_PATTERN)]] = Field(min_length=1)
    """What `library` carries: real architectures (`sm_80`) and PTX for the JIT (`compute_90`)."""
    library: str = Field(min_length=1)
    """The framework's CUDA library whose fatbinaries hold those, relative to the venv's site-packages or absolute."""
    note: str | None = None
    """Anything a user must know about this build (shown by `image ls`), e.g. why it has no cuDNN."""

    @model_validator(mode="after")
    def _note_explains_no_cudnn(self) -> CudaSpec:
        if self.cudnn is None and not self.note:
            raise ValueError("cudnn is null: say in `note` why the framework is built without cuDNN")
        return self


DebianName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9+.-]*$")]


class BuilderSpec(_Spec):
    """What a framework's builder stage (`builder_stages`) installs to compile it: none of it reaches the image but
    what the stage copies out. A lock holds it in its `builder` section, and a locked build installs only that."""

    apt: list[DebianName] = []
    """Debian packages of the builder stage: compilers, -dev packages."""
    sources: list[str] = []
    """Pinned requirements fetched as source distributions (the code the stage compiles), without dependencies."""
    wheels: list[str] = []
    """Pinned requirements installed as wheels, with their dependencies, into a venv of the stage (a toolkit)."""

    @field_validator("sources", "wheels")
    @classmethod
    def _pinned_requirements(cls, packages: list[str]) -> list[str]:
        return pinned_requirements(packages)


class VariantSpec(_Spec):
    """One image of a framework version: what it runs on and what goes into it."""

    accelerator: Literal["cpu", "cuda"]
    base: str = "local:debian-bookworm"
    """`local:<name>` for a base made here (`learnerkit image base`), else an image reference."""
    python: str | None = Field(default=None, pattern=r"^3\.[0-9]+$")
    """Overrides the version's Python for this variant (a CUDA base may ship another one)."""
    apt: list[DebianName] = []
    """Debian packages the framework needs at run time (build-only packages belong in `builder`)."""
    pip: PipSpec | None = None
    builder: BuilderSpec | None = None
    """What a builder stage installs to compile the framework (compilers, -dev packages, sources, a toolkit)."""
    args: dict[str, ArgValue] = {}
    """Knobs of the framework's own template (build flags)."""
    cuda: CudaSpec | None = None
    """`cuda` variants only: the CUDA build the image must hold."""

    @model_validator(mode="after")
    def _cuda_only_on_cuda(self) -> VariantSpec:
        if self.accelerator == "cuda" and self.cuda is None:
            raise ValueError("a cuda variant needs a `cuda:` section (version, cudnn, capabilities, library)")
        if self.accelerator == "cpu" and self.cuda is not None:
            raise ValueError("a cpu variant has no `cuda:` section")
        if self.accelerator == "cpu" and self.pip is not None:
            cuda = [req for req in self.pip.packages if _brings_cuda(Requirement(req))]
            if cuda:
                raise ValueError(f"a cpu variant must not install CUDA: {', '.join(cuda)}")
        return self


def _brings_cuda(requirement: Requirement) -> bool:
    extras = {extra.lower() for extra in requirement.extras}
    return is_cuda_distribution(requirement.name) or any("cuda" in extra for extra in extras)


class VersionSpec(_Spec):
    python: str = Field(pattern=r"^3\.[0-9]+$")
    variants: dict[Annotated[str, Field(pattern=VARIANT_PATTERN)], VariantSpec] = Field(min_length=1)


class SmokeSpec(_Spec):
    """The framework's tiny real training run, used by `learnerkit image test`."""

    kind: Literal["training", "evaluation", "serving"] = "training"
    """`evaluation`: an evaluator image (docs/evaluations.md), whose smoke run is one evaluation, not training;
    `serving`: the model server (docs/catalog.md), whose smoke run serves a model it signed and checks the answers."""
    command: list[str] = Field(min_length=1)
    """argv run by learner-run inside the image; `{steps}` and `{checkpoint_every}` are filled in."""
    steps: int = Field(default=60, ge=4)
    checkpoint_every: int = Field(default=10, ge=1)
    probe: list[str] | None = Field(default=None, min_length=1)
    """argv that prints, as its last line, a JSON object saying what the framework was built with: `cuda` and
    `cudnn` (versions, null for none), `gpus` (how many it sees), `detail`. Needed by `cuda` variants."""


class FrameworkSpec(_Spec):
    name: str = Field(pattern=NAME_PATTERN)
    description: str
    smoke: SmokeSpec
    versions: dict[Annotated[str, Field(pattern=VERSION_PATTERN)], VersionSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _cuda_needs_a_probe(self) -> FrameworkSpec:
        cuda = [
            f"{version}-{name}"
            for version, spec in self.versions.items()
            for name, variant in spec.variants.items()
            if variant.accelerator == "cuda"
        ]
        if cuda and self.smoke.probe is None:
            raise ValueError(
                f"cuda variants ({', '.join(cuda)}) need smoke.probe: the command that says what CUDA the "
                "framework was built with"
            )
        return self


class ImageSpec(BaseModel):
    """One cell of the matrix: framework x version x variant, resolved."""

    model_config = ConfigDict(frozen=True)

    framework: FrameworkSpec
    folder: Path
    version: str
    variant_name: str
    variant: VariantSpec
    python: str

    @property
    def name(self) -> str:
        """The short spec users type: `pytorch:2.13-cpu`."""
        return f"{self.framework.name}:{self.version}-{self.variant_name}"

    @property
    def tag(self) -> str:
        """The image tag (docs/images.md): `<version>-<variant>-py<python>`."""
        return f"{self.version}-{self.variant_name}-py{self.python}"

    def repository(self, registry: str | None = None) -> str:
        repo = f"learnerkit/{self.framework.name}"
        return f"{registry}/{repo}" if registry else repo

    @property
    def local_base(self) -> str | None:
        """Name of the locally made base image, or None when the base is an external reference."""
        base = self.variant.base
        return base[len(LOCAL_BASE_PREFIX) :] if base.startswith(LOCAL_BASE_PREFIX) else None


def load_framework(folder: Path) -> FrameworkSpec:
    """Parse and validate `folder/framework.yaml`; raise `SpecError` naming file, line and field."""
    try:
        doc = load_located_yaml(folder / "framework.yaml")
    except ConfigError as e:
        raise SpecError(str(e)) from e
    if not isinstance(doc.data, dict):
        raise SpecError(f"{doc.path}:1: expected a mapping with keys {_field_names(FrameworkSpec)}")
    try:
        spec = FrameworkSpec.model_validate(doc.data)
    except ValidationError as e:
        raise SpecError(_describe_validation_error(doc, e)) from e
    if spec.name != folder.name:
        raise SpecError(f"{doc.where(('name',))}: name {spec.name!r} must equal its folder name {folder.name!r}")
    return spec


def _describe_validation_error(doc: LocatedYaml, error: ValidationError) -> str:
    problems: list[tuple[int, str]] = []
    for item in error.errors():
        loc = tuple(part for part in item["loc"] if not _is_pydantic_tag(part))
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            parent_model = _model_at(loc[:-1])
            valid = _field_names(parent_model) if parent_model else "none"
            message = f"unknown key {loc[-1]!r}; valid keys: {valid}"
        problems.append((doc.line_of(loc) or 0, f"{doc.where(loc)}: {format_field_path(loc)}: {message}"))
    return "\n".join(text for _, text in sorted(problems))


def _is_pydantic_tag(part: Any) -> bool:
    # pydantic adds `[key]` markers and union member names to locations of dict keys and unions.
    return isinstance(part, str) and (part.startswith("[") or part in {"str", "int", "float", "bool", "list[str]"})


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """Walk the schema along a field path to the model that owns its last key (None past a leaf)."""
    model: type[BaseModel] = FrameworkSpec
    parts = list(loc)
    while parts:
        info = model.model_fields.get(str(parts.pop(0)))
        nested = _nested_model(info.annotation) if info else None
        if nested is None:
            return None
        if _is_mapping(info.annotation if info else None):
            if not parts:
                return None
            parts.pop(0)  # the version or variant name
        model = nested
    return model


def _is_mapping(annotation: Any) -> bool:
    return getattr(annotation, "__origin__", None) is dict


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    for candidate in getattr(annotation, "__args__", None) or (annotation,):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _field_names(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def iter_images(spec: FrameworkSpec, folder: Path) -> list[ImageSpec]:
    return [
        ImageSpec(
            framework=spec,
            folder=folder,
            version=version,
            variant_name=variant_name,
            variant=variant,
            python=variant.python or version_spec.python,
        )
        for version, version_spec in spec.versions.items()
        for variant_name, variant in version_spec.variants.items()
    ]


_SPEC_RE = re.compile(r"^(?P<fw>[a-z][a-z0-9-]*)(?::(?P<rest>.+))?$")


def parse_image_selector(text: str) -> tuple[str, str | None]:
    """Split `pytorch:2.13-cpu` into ("pytorch", "2.13-cpu"); the tag part is matched by `select`."""
    match = _SPEC_RE.match(text.strip())
    if not match:
        raise SpecError(f"image spec {text!r}: expected FRAMEWORK[:VERSION[-VARIANT]], e.g. pytorch:2.13-cpu")
    return match["fw"], match["rest"]
