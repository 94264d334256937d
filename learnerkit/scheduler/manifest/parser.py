"""Read FfDL's `manifest.yml` (accepted unchanged) and learnerkit's `learnerkit:` section into a `JobManifest`.

The parser is pure: it reads text, never the build tool or the network. The frameworks a job may name
come in as a `FrameworkCatalog` (the CLI builds it from `frameworks/*/framework.yaml`). Every problem
becomes a `Problem` naming `file:line: field.path`, and all of them are raised together as one
`ManifestError`. Where FfDL fell back silently (memory it could not read became 512 MB), this is an error;
where it filled in a default (no `cpus` or `memory`), so does this parser, and the manifest says which.
The data stores must be able to serve the job (`storecheck`): the same check the scheduler makes at submit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from learnerkit.common.errors import ConfigError
from learnerkit.common.yamlfile import (
    FieldPath,
    LocatedYaml,
    Problem,
    YamlBudget,
    YamlError,
    load_located_yaml,
    parse_located_yaml,
)
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest.catalogfield import parse_catalog
from learnerkit.scheduler.manifest.defaultresults import with_default_results
from learnerkit.scheduler.manifest.evaluations import parse_evaluations
from learnerkit.scheduler.manifest.ffdlnames import CHOSEN, DISTRIBUTED_NAMES, known_names, means_newest, runs_as
from learnerkit.scheduler.manifest.fields import FieldReader, describe
from learnerkit.scheduler.manifest.imageref import reference_problem
from learnerkit.scheduler.manifest.kinds import EvaluatorKinds
from learnerkit.scheduler.manifest.model import (
    CONNECTION_KEYS,
    CREDENTIAL_KEYS,
    CUSTOM_FRAMEWORK,
    DATA_STORE_TYPES,
    DISTRIBUTED_FRAMEWORK,
    FFDL_DEFAULTS,
    HOST_MOUNT,
    REQUIRED_CONNECTION_KEYS,
    DataStore,
    DistributedMode,
    Extensions,
    Framework,
    FrameworkCatalog,
    JobManifest,
    ResourceDefaults,
    Resources,
)
from learnerkit.scheduler.manifest.storecheck import store_problems
from learnerkit.scheduler.manifest.units import parse_size

TOP_KEYS = (
    "name",
    "description",
    "version",
    "cpus",
    "gpus",
    "gpu_type",
    "learners",
    "memory",
    "storage",
    "data_stores",
    "framework",
    "evaluation_metrics",
    "evaluations",
    "catalog",
    "learnerkit",
)
DATA_STORE_KEYS = ("id", "type", "training_data", "training_results", "connection")
FRAMEWORK_KEYS = ("name", "version", "image_tag", "command")
EXTENSION_KEYS = (
    "image",
    "priority",
    "tenant",
    "queue",
    "checkpoint_interval",
    "max_restarts",
    "auto_resume",
    "preemptible",
    "distributed",
    "halt_grace",
    "training_data",
    "training_results",
)

_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_LABEL_HELP = "lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit"
_GPU_TYPE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_GPU_TYPE_HELP = "a Kubernetes label value such as nvidia-tesla-v100 (letters, digits, '-', '_', '.')"
_IMAGE = re.compile(r"[^\s]+")
MIN_CPUS = 0.01
"""The least CPU share a learner may ask for: the engine's smallest limit (a smaller one rounds to no limit)."""
MAX_NODES = 10_000
"""Values in one manifest: a real one has a few dozen; the cap bounds the time a hostile one costs."""
_IMAGE_HELP = "an image reference without spaces, e.g. registry.local/learnerkit/pytorch:2.13-cpu-py3.11"
_LINE_BREAK = re.compile(r"\r?\n")
"""FfDL's trainer replaced each of these in `command` with a space (`createJobConfig`): a folded `>` block whose
continuation lines are more indented keeps its line breaks in YAML, and still ran as one command."""
_IMAGE_WAY_OUT = "or pass --image REF, or set learnerkit.image"


def load_manifest(
    path: Path,
    catalog: FrameworkCatalog | None = None,
    *,
    defaults: ResourceDefaults = FFDL_DEFAULTS,
    image: str | None = None,
    tenant: str | None = None,
    kinds: EvaluatorKinds | None = None,
) -> JobManifest:
    """Read and validate a manifest file; raises `ManifestError` listing every problem. ``image``: the
    submission's ``--image``, which replaces the framework's image (and ``learnerkit.image``); ``tenant``: whose
    folder the default results store is (None: the manifest's ``learnerkit.tenant``); ``kinds``: the evaluator
    kinds of the project the catalog comes from (None: ``installed_kinds()``)."""
    try:
        doc = load_located_yaml(path, YamlBudget(max_nodes=MAX_NODES))
    except YamlError as e:
        raise ManifestError(list(e.problems)) from e
    except ConfigError as e:
        raise ManifestError([Problem(path=path, line=None, loc=(), message=str(e))]) from e
    return _parse(doc, catalog, defaults, image, tenant, kinds)


def parse_manifest(
    text: str,
    source: str = "manifest.yml",
    catalog: FrameworkCatalog | None = None,
    *,
    seconds: float | None = None,
    defaults: ResourceDefaults = FFDL_DEFAULTS,
    image: str | None = None,
    tenant: str | None = None,
    kinds: EvaluatorKinds | None = None,
) -> JobManifest:
    """Validate manifest text; `source` names it in messages. `catalog` None skips the framework check; the
    other arguments as `load_manifest`'s.

    Reading the YAML stops with a problem after `MAX_NODES` values or, with ``seconds``, after that long.
    """
    try:
        doc = parse_located_yaml(text, Path(source), YamlBudget(max_nodes=MAX_NODES, seconds=seconds))
    except YamlError as e:
        raise ManifestError(list(e.problems)) from e
    return _parse(doc, catalog, defaults, image, tenant, kinds)


def _parse(
    doc: LocatedYaml,
    catalog: FrameworkCatalog | None,
    defaults: ResourceDefaults,
    image: str | None = None,
    tenant: str | None = None,
    kinds: EvaluatorKinds | None = None,
) -> JobManifest:
    reader = FieldReader(doc)
    if doc.data is None:
        reader.fail((), "the manifest is empty: expected a mapping with keys name, framework, data_stores, ...")
        raise ManifestError(reader.problems)
    top = reader.mapping(doc.data, (), TOP_KEYS)
    if top is None:
        raise ManifestError(reader.problems)
    name = reader.string(top, (), "name", required=True)
    description = reader.string(top, (), "description")
    version = reader.string(top, (), "version")
    resources = _resources(reader, top, defaults)
    stores = _data_stores(reader, top.get("data_stores"))
    extensions = _extensions(reader, top.get("learnerkit"))
    if image is not None:
        why = reference_problem(image)
        if why is not None:
            reader.problems.append(Problem(Path("command line"), None, ("--image",), why))
        elif extensions is not None:
            extensions = replace(extensions, image=image)
    framework = _framework(reader, top.get("framework"), catalog, extensions)
    metrics = _evaluation_metrics(reader, top.get("evaluation_metrics"))
    store_ids = None if stores is None else {store.id for store in stores}
    evaluations = parse_evaluations(reader, top.get("evaluations"), store_ids, kinds=kinds)
    catalog_spec = parse_catalog(reader, top.get("catalog"), bool(top.get("evaluations")))
    if stores is not None and extensions is not None:
        _check_store_references(reader, stores, extensions)
    if framework is not None and extensions is not None:
        extensions = _ffdl_distributed(framework, extensions, top.get("learnerkit"))
        _check_distributed(reader, framework, extensions)
    # Each part is None only where a problem was recorded.
    if reader.problems or name is None or resources is None or stores is None or framework is None:
        raise ManifestError(reader.problems)
    if extensions is None or evaluations is None:
        raise ManifestError(reader.problems)
    manifest = JobManifest(
        name=name,
        description=description or "",
        version=version,
        resources=resources,
        data_stores=stores,
        framework=framework,
        evaluation_metrics=metrics,
        extensions=extensions,
        evaluations=evaluations,
        catalog=catalog_spec,
    )
    manifest = with_default_results(manifest, defaults.results_bucket, tenant or extensions.tenant)
    for loc, message in store_problems(manifest):
        reader.fail(loc, message)
    if reader.problems:
        raise ManifestError(reader.problems)
    return manifest


def _resources(reader: FieldReader, top: Mapping[str, Any], defaults: ResourceDefaults) -> Resources | None:
    defaulted = tuple(key for key in ("cpus", "memory") if key not in top)
    cpus = defaults.cpus if "cpus" in defaulted else reader.positive_number(top, (), "cpus", required=True)
    if cpus is not None and cpus < MIN_CPUS:
        reader.fail(("cpus",), f"must be at least {MIN_CPUS} (a hundredth of a CPU); got {cpus:g}")
        cpus = None
    gpus = reader.integer(top, (), "gpus", minimum=0, whole_floats=True)
    learners = reader.integer(top, (), "learners", minimum=1)
    gpu_type = reader.string(top, (), "gpu_type", pattern=_GPU_TYPE, pattern_help=_GPU_TYPE_HELP)
    gpus_unreadable = top.get("gpus") is not None and gpus is None  # already reported
    if gpu_type is not None and not gpus and not gpus_unreadable:
        reader.fail(("gpu_type",), f"gpu_type {gpu_type!r} needs gpus of 1 or more; gpus is {gpus or 0}")
    memory = defaults.memory_bytes if "memory" in defaulted else _size(reader, top, "memory", required=True)
    storage = _size(reader, top, "storage", required=False)
    if "storage" not in top and defaults.storage_bytes is not None:
        storage, defaulted = defaults.storage_bytes, (*defaulted, "storage")
    if cpus is None or memory is None:
        return None
    return Resources(
        cpus=cpus,
        memory_bytes=memory,
        gpus=gpus or 0,
        learners=learners or 1,
        gpu_type=gpu_type,
        storage_bytes=storage,
        defaulted=defaulted,
    )


def _size(reader: FieldReader, top: Mapping[str, Any], key: str, *, required: bool) -> int | None:
    value = top.get(key)
    if value is None:
        if required:
            reader.fail((key,), "required: a size such as 1Gb or 512MiB")
        return None
    if not isinstance(value, str):
        reader.fail((key,), f"expected a size with a unit such as 1Gb or 512MiB; got {describe(value)}")
        return None
    try:
        return parse_size(value)
    except ValueError as e:
        reader.fail((key,), str(e))
        return None


def _data_stores(reader: FieldReader, value: Any) -> tuple[DataStore, ...] | None:
    loc: FieldPath = ("data_stores",)
    if value is None:
        reader.fail(loc, "required: a list of data stores (id, type, training_data, training_results, connection)")
        return None
    if not isinstance(value, list) or not value:
        reader.fail(loc, f"expected a list of at least one data store; got {describe(value)}")
        return None
    stores = [_data_store(reader, item, (*loc, i)) for i, item in enumerate(value)]
    seen: dict[str, int] = {}
    for i, store in enumerate(stores):
        if store is None:
            continue
        if store.id in seen:
            reader.fail(
                (*loc, i, "id"), f"duplicate data store id {store.id!r} (first at data_stores[{seen[store.id]}])"
            )
        seen.setdefault(store.id, i)
    if all(store is not None for store in stores) and not any(s.training_data for s in stores if s):
        reader.fail(loc, "no data store has training_data: name the container the training data is in")
    if any(store is None for store in stores):
        return None
    return tuple(store for store in stores if store is not None)


def _data_store(reader: FieldReader, value: Any, loc: FieldPath) -> DataStore | None:
    item = reader.mapping(value, loc, DATA_STORE_KEYS)
    if item is None:
        return None
    store_id = reader.string(item, loc, "id", required=True)
    store_type = reader.choice(item, loc, "type", DATA_STORE_TYPES)
    if store_type is None and item.get("type") is None:
        reader.fail((*loc, "type"), f"required: one of {', '.join(DATA_STORE_TYPES)}")
    training_data = _container(reader, item, loc, "training_data")
    training_results = _container(reader, item, loc, "training_results")
    connection = _connection(reader, item, loc, store_type)
    if store_id is None or store_type is None or connection is None:
        return None
    public, secret = connection
    return DataStore(
        id=store_id,
        type=store_type,
        training_data=training_data,
        training_results=training_results,
        connection=MappingProxyType(public),
        credentials=MappingProxyType(secret),
    )


def _container(reader: FieldReader, item: Mapping[str, Any], loc: FieldPath, key: str) -> str | None:
    value = item.get(key)
    if value is None:
        return None
    section = reader.mapping(value, (*loc, key), ("container",))
    if section is None:
        return None
    container = reader.string(section, (*loc, key), "container", required=True)
    if container is not None and any(part in (".", "..") for part in container.split("/")):
        reader.fail((*loc, key, "container"), f"{container!r}: '.' and '..' are not allowed in a bucket path")
    return container


def _connection(
    reader: FieldReader, item: Mapping[str, Any], loc: FieldPath, store_type: str | None
) -> tuple[dict[str, str], dict[str, str]] | None:
    loc = (*loc, "connection")
    if item.get("connection") is None:
        reader.fail(loc, "required: how to reach the data store (auth_url, user_name, password)")
        return None
    if store_type is None:
        return None
    connection = reader.mapping(item["connection"], loc, CONNECTION_KEYS[store_type])
    if connection is None:
        return None
    for key in REQUIRED_CONNECTION_KEYS[store_type]:
        if connection.get(key) is None:
            reader.fail((*loc, key), f"required for a {store_type} data store")
    values = {
        key: text
        for key in CONNECTION_KEYS[store_type]
        if key in connection
        and (text := reader.string(connection, loc, key, secret=key in CREDENTIAL_KEYS)) is not None
    }
    _check_connection(reader, loc, store_type, values)
    public = {key: text for key, text in values.items() if key not in CREDENTIAL_KEYS}
    secret = {key: text for key, text in values.items() if key in CREDENTIAL_KEYS}
    return public, secret


def _check_connection(reader: FieldReader, loc: FieldPath, store_type: str, values: Mapping[str, str]) -> None:
    kind = values.get("type")
    if store_type == "mount_volume":
        if kind is not None and kind != HOST_MOUNT:
            reader.fail((*loc, "type"), f"a mount_volume data store connects by {HOST_MOUNT!r}; got {kind!r}")
        path = values.get("path")
        if path is not None and not path.startswith("/"):
            reader.fail((*loc, "path"), f"{path!r} must be an absolute host path")
        return
    if kind is not None and kind != store_type:
        reader.fail((*loc, "type"), f"{kind!r} contradicts the data store's type {store_type!r}")
    url = values.get("auth_url")
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            reader.fail((*loc, "auth_url"), f"{url!r} is not an http(s) URL of the object store endpoint")


def _framework(
    reader: FieldReader, value: Any, catalog: FrameworkCatalog | None, extensions: Extensions | None
) -> Framework | None:
    loc: FieldPath = ("framework",)
    if value is None:
        reader.fail(loc, "required: name, version and command of the framework")
        return None
    section = reader.mapping(value, loc, FRAMEWORK_KEYS)
    if section is None:
        return None
    name = reader.string(section, loc, "name", required=True)
    version = reader.string(section, loc, "version", required=True)
    command = reader.string(section, loc, "command", required=True)
    image_tag = reader.string(section, loc, "image_tag")
    if command is not None:
        command = _LINE_BREAK.sub(" ", command).strip()
    has_image = extensions is not None and extensions.image is not None
    target = runs_as(name, version, command or "") if name is not None and version is not None else None
    if name == CHOSEN and version is not None and target is None and not has_image:
        reader.fail(
            ("framework", "name"),
            "horovod runs PyTorch or TensorFlow here, and neither the command nor the version says which:"
            " name the framework pytorch or tensorflow",
        )
    if name is not None and version is not None and target is not None and catalog is not None:
        _check_catalog(reader, name, target, version, catalog, has_image)
    if name is None or version is None or command is None:
        return None
    return Framework(
        name=name, version=version, command=command, image_tag=image_tag, runs_as="" if target == name else target or ""
    )


def _check_catalog(
    reader: FieldReader, name: str, target: str, version: str, catalog: FrameworkCatalog, has_image: bool
) -> None:
    if name == CUSTOM_FRAMEWORK:
        if not _IMAGE.fullmatch(version):
            reader.fail(("framework", "version"), f"framework custom takes an image here; {_IMAGE_HELP}")
        return
    if has_image:
        return
    if target not in catalog:
        valid = ", ".join(known_names(catalog))
        reader.fail(
            ("framework", "name"),
            f"no learnerkit image runs framework {name!r}; frameworks here: {valid}, or {CUSTOM_FRAMEWORK}"
            f" (framework.version names the image); {_IMAGE_WAY_OUT}",
        )
        return
    if version not in catalog[target] and not means_newest(name, version):
        valid = ", ".join([*sorted(catalog[target]), "latest"])
        reader.fail(
            ("framework", "version"),
            f"no {target} image {version!r} is built here; versions: {valid} ({_IMAGE_WAY_OUT})",
        )


def _evaluation_metrics(reader: FieldReader, value: Any) -> Mapping[str, Any] | None:
    loc: FieldPath = ("evaluation_metrics",)
    if value is None:
        return None
    if not isinstance(value, dict):
        reader.fail(loc, f"expected a mapping (type, in, groups, ...); got {describe(value)}")
        return None
    if not reader.json_value(value, loc):
        return None
    before = len(reader.problems)
    kind = _check_evaluation_metrics(reader, value)
    if len(reader.problems) != before or kind is None:
        return None
    return MappingProxyType({**value, "type": kind})


def _check_evaluation_metrics(reader: FieldReader, value: Mapping[str, Any]) -> str | None:
    """The sidecar's own checks of the section (regex rules, the TensorBoard folder ``in``), so a job the
    sidecar would refuse is refused here, by field; the collector's own name for the section's ``type`` (FfDL's
    aliases mapped, so any sidecar reads it). Imported only for manifests that have the section."""
    from controller_sidecar.errors import SidecarConfigError
    from controller_sidecar.evalmetrics import parse_evaluation_metrics
    from controller_sidecar.jobdirs import JobDirs

    try:
        rules = parse_evaluation_metrics(dict(value))
        if rules is not None and rules.type == "tensorboard":
            from controller_sidecar.tensorboard import event_folder

            event_folder(rules.location, JobDirs())
    except SidecarConfigError as error:
        field, _, message = str(error).partition(": ")
        reader.fail(tuple(field.split(".")), message)
        return None
    return rules.type if rules is not None else None


def _extensions(reader: FieldReader, value: Any) -> Extensions | None:
    loc: FieldPath = ("learnerkit",)
    if value is None:
        return Extensions()
    section = reader.mapping(value, loc, EXTENSION_KEYS)
    if section is None:
        return None
    before = len(reader.problems)
    defaults = Extensions()
    image = reader.string(section, loc, "image", pattern=_IMAGE, pattern_help=_IMAGE_HELP)
    priority = reader.integer(section, loc, "priority", minimum=-1000, maximum=1000)
    tenant = reader.string(section, loc, "tenant", pattern=_LABEL, pattern_help=_LABEL_HELP)
    queue = reader.string(section, loc, "queue", pattern=_LABEL, pattern_help=_LABEL_HELP)
    checkpoint_interval = reader.integer(section, loc, "checkpoint_interval", minimum=1)
    max_restarts = reader.integer(section, loc, "max_restarts", minimum=0, maximum=100)
    auto_resume = reader.boolean(section, loc, "auto_resume")
    preemptible = reader.boolean(section, loc, "preemptible")
    distributed = reader.choice(section, loc, "distributed", [mode.value for mode in DistributedMode])
    halt_grace = reader.integer(section, loc, "halt_grace", minimum=1, maximum=3600)
    training_data = reader.string(section, loc, "training_data")
    training_results = reader.string(section, loc, "training_results")
    if len(reader.problems) > before:
        return None
    return Extensions(
        image=image,
        priority=defaults.priority if priority is None else priority,
        tenant=tenant or defaults.tenant,
        queue=queue or defaults.queue,
        checkpoint_interval=checkpoint_interval,
        max_restarts=defaults.max_restarts if max_restarts is None else max_restarts,
        auto_resume=defaults.auto_resume if auto_resume is None else auto_resume,
        preemptible=defaults.preemptible if preemptible is None else preemptible,
        distributed=DistributedMode(distributed) if distributed else defaults.distributed,
        halt_grace=halt_grace or defaults.halt_grace,
        training_data=training_data,
        training_results=training_results,
    )


def _check_store_references(reader: FieldReader, stores: tuple[DataStore, ...], extensions: Extensions) -> None:
    by_id = {store.id: store for store in stores}
    for key in ("training_data", "training_results"):
        wanted = getattr(extensions, key)
        if wanted is None:
            continue
        loc: FieldPath = ("learnerkit", key)
        store = by_id.get(wanted)
        if store is None:
            reader.fail(loc, f"no data store has id {wanted!r}; ids: {', '.join(by_id)}")
        elif getattr(store, key) is None:
            reader.fail(loc, f"data store {wanted!r} has no {key} container")


def _ffdl_distributed(framework: Framework, extensions: Extensions, section: Any) -> Extensions:
    """FfDL's horovod and pytorchmpi jobs run as distributed jobs of their framework unless the manifest says."""
    chosen = isinstance(section, dict) and "distributed" in section
    modes = {"pytorch": DistributedMode.DDP, "tensorflow": DistributedMode.TF}
    if framework.name not in DISTRIBUTED_NAMES or chosen or framework.target not in modes:
        return extensions
    return replace(extensions, distributed=modes[framework.target])


def _check_distributed(reader: FieldReader, framework: Framework, extensions: Extensions) -> None:
    needed = DISTRIBUTED_FRAMEWORK.get(extensions.distributed)
    if needed is None or framework.target in (needed, CUSTOM_FRAMEWORK) or extensions.image:
        return
    reader.fail(
        ("learnerkit", "distributed"),
        f"{extensions.distributed.value} runs {needed} learners; framework.name is {framework.name!r}",
    )
