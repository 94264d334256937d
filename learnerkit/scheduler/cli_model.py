"""`learnerkit model`: the model catalog, run where the scheduler's settings are (its registry and, for alias
moves, its signing key); every other command needs only the platform's public keys."""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from datetime import UTC, datetime
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.markup import escape

from learnerkit.common.errors import LearnerkitError
from learnerkit.common.output import console, emit, fail, output_option
from learnerkit.scheduler.catalog.errors import RefusedError
from learnerkit.scheduler.catalog.versions import Store, Version
from learnerkit.scheduler.cli_job import connected, scheduler_client, token_option
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.config.settings import DEFAULT_SIGNING_KEY, SIGNING_KEY_SETTING, BackendKind
from learnerkit.scheduler.errors import ModelMoveRefusedError, SchedulerUnreachableError
from learnerkit.scheduler.manifest.catalogfield import MODEL_NAME_HELP, model_name_ok

if TYPE_CHECKING:
    from securesystemslib.signer import Key

    from learnerkit.scheduler.serving.deployment import KubernetesModelServers

F = TypeVar("F", bound=Callable[..., Any])
REGISTRY_SETTING = "LEARNERKIT_CATALOG_REGISTRY"
ACCESS_KEY_SETTING = "AWS_ACCESS_KEY_ID"
SECRET_KEY_SETTING = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 (the variable's name)
"""The tenant's keys of its results store, as the AWS tools read them (never a command-line option: history)."""
DEFAULT_REGISTRY = "127.0.0.1:5000"


def _model_name(_context: click.Context, _parameter: click.Parameter, name: str) -> str:
    """``--name`` checked where it is read, before any scheduler or registry is contacted."""
    if not model_name_ok(name):
        raise click.BadParameter(f"{name!r}: {MODEL_NAME_HELP}")
    return name


NAME_OPTION = click.option(
    "--name", required=True, callback=_model_name, help="the model's name (lower-case letters, digits, . _ -)"
)


def catalog_command(command: F) -> F:
    """Add ``--registry``, ``--tenant``, ``--public-key``, ``--output``; hand the command a store and the keys."""
    return _catalog(command, through_scheduler=False)


def catalog_or_scheduler_command(command: F) -> F:
    """`catalog_command`'s options and ``--url``, ``--token``: the command is handed a client of the scheduler
    (the token's tenant; ``store`` None) when ``--url`` is given or no tenant is, else a store and the keys
    (``client`` None), so a user with only a token runs the same words as the operator."""
    return _catalog(command, through_scheduler=True)


def _catalog(command: F, through_scheduler: bool) -> F:
    @wraps(command)
    def wrapper(
        *args: Any,
        registry: str,
        tenant: str | None,
        public_keys: tuple[Path, ...],
        output: str,
        url: str | None = None,
        token: str | None = None,
        **kw: Any,
    ) -> Any:
        from learnerkit.common.signing import load_public_key, public_key_path

        try:
            if through_scheduler and (url is not None or tenant is None):
                try:
                    with scheduler_client(url, token) as client:
                        return command(*args, store=None, keys=[], client=client, output=output, **kw)
                except SchedulerUnreachableError as e:
                    if url is not None:
                        raise
                    raise SchedulerUnreachableError(
                        f"{e} (with no --tenant or LEARNERKIT_TENANT, the command asks the scheduler)"
                    ) from e
            assert tenant is not None  # click requires it where there is no scheduler path
            if public_keys:
                keys = [load_public_key(path, "--public-key") for path in public_keys]
            else:
                beside = f"the .pub beside {SIGNING_KEY_SETTING}"
                key = Path(os.environ.get(SIGNING_KEY_SETTING, DEFAULT_SIGNING_KEY))
                keys = [load_public_key(public_key_path(key), beside)]
            extra = {"client": None} if through_scheduler else {}
            return command(*args, store=Store(registry, tenant), keys=keys, output=output, **extra, **kw)
        except (RefusedError, ModelMoveRefusedError) as e:
            emit(output, {"refused": True, "failed": e.failed, "message": str(e)}, lambda: None)
            if output != "json":
                console.print(f"[bold red]refused:[/] {escape(str(e))}", soft_wrap=True)
            raise SystemExit(1) from e
        except LearnerkitError as e:
            fail(output, e)

    options = [
        click.option(
            "--registry",
            envvar=REGISTRY_SETTING,
            default=DEFAULT_REGISTRY,
            show_default=True,
            help=f"the catalog's OCI registry, host:port [env {REGISTRY_SETTING}]",
        ),
        click.option(
            "--tenant",
            envvar="LEARNERKIT_TENANT",
            required=not through_scheduler,
            help="the tenant, straight to the registry [env LEARNERKIT_TENANT]"
            + ("; without it, through the scheduler as the token's tenant" if through_scheduler else ""),
        ),
        click.option(
            "--public-key",
            "public_keys",
            multiple=True,
            type=click.Path(path_type=Path, dir_okay=False),
            help="a platform public key (repeat for rotated ones) [the .pub beside LEARNERKIT_SIGNING_KEY]",
        ),
        output_option,
    ]
    if through_scheduler:
        options += [
            click.option(
                "--url", default=None, help="through this scheduler [env LEARNERKIT_SCHEDULER_URL; no --tenant]"
            ),
            token_option,
        ]
    decorated: Any = wrapper
    for option in reversed(options):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


@click.group("model")
def model_group() -> None:
    """The model catalog: versions by digest, aliases moved on proof, lineage, model cards."""


def _version_row(version: Version) -> dict[str, Any]:
    return {
        "name": version.name,
        "version": version.version,
        "job": version.job,
        "attested": version.attested,
        "created": version.created,
        "files": [vars(b) for b in version.files],
        "lineage": version.lineage,
    }


@model_group.command("register")
@click.argument("job")
@NAME_OPTION
@click.option("--parent", default=None, metavar="NAME@VERSION", help="the version it was fine-tuned from")
@click.option(
    "--lend-store-keys",
    is_flag=True,
    help=f"lend the scheduler your keys of the job's results store for this read (${ACCESS_KEY_SETTING}, "
    f"${SECRET_KEY_SETTING}): needed once it has restarted since the job ended",
)
@connected
def register_command(
    job: str, name: str, parent: str | None, lend_store_keys: bool, client: SchedulerClient, output: str
) -> None:
    """Have the scheduler store the COMPLETED job JOB's model as a version of NAME, in the token's tenant: it
    reads the job's outputs from its results store and stores them only when they verify with the platform's
    keys."""
    keys = None
    if lend_store_keys:
        access, secret = os.environ.get(ACCESS_KEY_SETTING), os.environ.get(SECRET_KEY_SETTING)
        if not access or not secret:
            raise click.UsageError(f"--lend-store-keys reads ${ACCESS_KEY_SETTING} and ${SECRET_KEY_SETTING}: set both")
        keys = (access, secret)
    row = client.register_model(name, job, parent, keys)
    emit(output, row, lambda: console.print(f"registered {name}@{row['version']}", soft_wrap=True))


@model_group.command("register-folder")
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False, exists=True))
@NAME_OPTION
@click.option("--parent", default=None, metavar="NAME@VERSION", help="the version it was fine-tuned from")
@catalog_command
def register_folder_command(
    folder: Path, name: str, parent: str | None, store: Store, keys: list[Key], output: str
) -> None:
    """The operator's offline path, straight to the catalog's registry: store FOLDER (what `job download --what
    all` wrote) as a version of NAME in --tenant; it must verify with the platform's keys, or nothing is stored."""
    from learnerkit.scheduler.catalog.versions import register

    version = register(store, name, folder, keys, parent)
    emit(output, _version_row(version), lambda: console.print(f"registered {name}@{version.version}", soft_wrap=True))


@model_group.command("list")
@catalog_or_scheduler_command
def list_command(store: Store | None, keys: list[Key], client: SchedulerClient | None, output: str) -> None:
    """Every model of the tenant with its versions."""
    from learnerkit.scheduler.catalog.versions import models, version_digests

    if client is not None:
        rows = client.list_models()
    else:
        assert store is not None
        rows = [{"name": name, "versions": version_digests(store, name)} for name in models(store)]

    def show() -> None:
        # One `NAME@sha256:...` a line, never folded or cut: it is the reference the other commands take.
        for row in rows:
            for version in row["versions"]:
                console.print(f"{row['name']}@{version}", soft_wrap=True, markup=False)
        if not rows:
            whose = f"tenant {store.tenant}" if store is not None else "the token's tenant"
            console.print(f"no models for {whose}", markup=False)

    emit(output, rows, show)


@model_group.command("show")
@click.argument("reference", metavar="NAME@VERSION|NAME@ALIAS")
@catalog_command
def show_command(reference: str, store: Store, keys: list[Key], output: str) -> None:
    """A version: its files, job and lineage, and where this host's engine serves it (`served`: null where no
    Docker engine answers)."""
    from learnerkit.scheduler.catalog.service import lineage_of
    from learnerkit.scheduler.serving.deployment import served_here

    version = lineage_of(store, reference)
    here = served_here(store.tenant, version.name)
    served = None if here is None else [s.to_dict() for s in here if s.version == version.version]
    emit(output, {**_version_row(version), "served": served}, lambda: _show_version(version, served))


def _show_version(version: Version, served: list[dict[str, Any]] | None) -> None:
    console.print(f"{version.name}@{version.version}", soft_wrap=True)
    console.print(f"job {version.job}; {'attested' if version.attested else 'UNATTESTED (imported)'}")
    for blob in version.files:
        console.print(f"  {blob.path} {blob.digest} {blob.size} bytes", soft_wrap=True)
    if served is None:
        console.print("served: unknown (no Docker engine answers)")
    for row in served or []:
        console.print(f"served as {row['reference']} at {row['url']}", soft_wrap=True, markup=False)


@model_group.command("alias")
@click.argument("name")
@click.argument("alias")
@click.argument("version")
@click.option(
    "--signing-key",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar=SIGNING_KEY_SETTING,
    default=DEFAULT_SIGNING_KEY,
    help=f"the platform's key that signs the move, straight to the registry [env {SIGNING_KEY_SETTING}]",
)
@catalog_or_scheduler_command
def alias_command(
    name: str,
    alias: str,
    version: str,
    signing_key: Path,
    store: Store | None,
    keys: list[Key],
    client: SchedulerClient | None,
    output: str,
) -> None:
    """Point ALIAS at VERSION, only when its weights' signature and provenance verify, its learner image passed
    the scan gate, every evaluation passed and its card states the attested metrics; the move is signed into the
    model's alias log (through the scheduler: with its key, one move of a model at a time)."""
    if client is not None:
        move = client.move_alias(name, alias, version)
    else:
        from learnerkit.common.optionsource import given_by
        from learnerkit.common.passphrase import key_passphrase
        from learnerkit.common.signing import load_signer
        from learnerkit.scheduler.catalog.service import move_alias

        assert store is not None
        source = given_by("signing_key", "--signing-key", SIGNING_KEY_SETTING)
        signer = load_signer(signing_key, source, key_passphrase(os.environ))
        at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        move = move_alias(store, name, alias, version, keys, signer, getpass.getuser(), at)
    emit(
        output,
        move,
        lambda: console.print(f"{name}@{alias} -> {move['to']} (from {move['from'] or 'nothing'})", soft_wrap=True),
    )


@model_group.command("history")
@click.argument("name")
@catalog_command
def history_command(name: str, store: Store, keys: list[Key], output: str) -> None:
    """Every alias move of NAME, oldest first, each entry's signature and chain checked."""
    from learnerkit.scheduler.catalog.service import history

    moves, checks = history(store, name, keys)
    data = [
        {**move, "check": check.state.value, "detail": check.detail} for move, check in zip(moves, checks, strict=True)
    ]

    def show() -> None:
        for row in data:
            console.print(
                f"{row.get('sequence')} {row.get('at')} {row.get('by')} {row.get('alias')}: "
                f"{row.get('from') or '-'} -> {row.get('to')} [{row['check']}]",
                soft_wrap=True,
            )

    emit(output, data, show)
    if any(check.state.value != "ok" for check in checks):
        raise SystemExit(1)


@model_group.command("verify")
@click.argument("reference", metavar="NAME@VERSION|NAME@ALIAS")
@catalog_or_scheduler_command
def verify_command(
    reference: str, store: Store | None, keys: list[Key], client: SchedulerClient | None, output: str
) -> None:
    """Check a version again, offline: every referrer's signature, every file hashed again, the card and lineage
    rendered again; for an alias, the log's chain and that the alias is where the log last moved it (through the
    scheduler: it checks, with the platform's keys)."""
    from learnerkit.scheduler.catalog.names import Reference
    from learnerkit.scheduler.catalog.service import verify

    if client is not None:
        ref = Reference.parse(reference)
        result = client.verify_model(ref.name, ref.pinned())
    else:
        assert store is not None
        result = verify(store, reference, keys).to_dict()

    def show() -> None:
        for check in result["checks"] + [{"gate": "alias log", **c} for c in result["log"]]:
            detail = f": {escape(check['detail'])}" if check["detail"] else ""
            console.print(f"{check['state']} [{check['gate']}] {escape(check['item'])}{detail}", soft_wrap=True)
        console.print("[green]verified[/]" if result["verified"] else "[bold red]NOT verified[/]")

    emit(output, result, show)
    if not result["verified"]:
        raise SystemExit(1)


@model_group.command("lineage")
@click.argument("target", metavar="NAME@VERSION|NAME@ALIAS|DIGEST")
@catalog_command
def lineage_command(target: str, store: Store, keys: list[Key], output: str) -> None:
    """Where a version came from; or, given a SHA-256 (a data object's, an image's), which versions used it."""
    from learnerkit.scheduler.catalog.service import lineage_of, used_by

    if "@" in target:
        record = lineage_of(store, target).lineage
        emit(output, record, lambda: console.print_json(data=record))
        return
    found = used_by(store, target)

    def show() -> None:
        for row in found:
            console.print(f"{row['name']}@{row['version']}: {', '.join(row['uses'])}", soft_wrap=True)

    emit(output, found, show)


@model_group.command("pull")
@click.argument("reference", metavar="NAME@VERSION|NAME@ALIAS")
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False))
@catalog_command
def pull_command(reference: str, folder: Path, store: Store, keys: list[Key], output: str) -> None:
    """The version's files into FOLDER, as `model_signing verify key --signature FOLDER/provenance/model.sig`
    verifies them."""
    from learnerkit.scheduler.catalog.service import pull

    version = pull(store, reference, folder)
    emit(output, _version_row(version), lambda: console.print(f"{reference} -> {folder}", soft_wrap=True))


@model_group.command("export")
@click.argument("reference", metavar="NAME@VERSION|NAME@ALIAS")
@click.option(
    "--hf",
    "folder",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="the Hugging Face folder to write",
)
@catalog_command
def export_command(reference: str, folder: Path, store: Store, keys: list[Key], output: str) -> None:
    """A Hugging Face model folder: README.md (the card), the files, the signed documents."""
    from learnerkit.scheduler.catalog.service import export_hf

    version = export_hf(store, reference, folder)
    emit(output, _version_row(version), lambda: console.print(f"{reference} -> {folder}", soft_wrap=True))


@model_group.command("import")
@click.option(
    "--hf",
    "folder",
    required=True,
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="a Hugging Face model folder",
)
@NAME_OPTION
@catalog_command
def import_command(folder: Path, name: str, store: Store, keys: list[Key], output: str) -> None:
    """A Hugging Face folder stored as a version marked unattested (no alias can point at it)."""
    from learnerkit.scheduler.catalog.service import import_hf

    version = import_hf(store, name, folder)
    emit(
        output,
        _version_row(version),
        lambda: console.print(f"imported {name}@{version.version} (unattested)", soft_wrap=True),
    )


def _serving_home() -> Path:
    from learnerkit_build.state import state_home

    return state_home() / "serving"


BACKEND_OPTION = click.option(
    "--backend",
    type=click.Choice([k.value for k in BackendKind]),
    envvar="LEARNERKIT_SCHEDULER_BACKEND",
    default=BackendKind.DOCKER.value,
    show_default=True,
    is_eager=True,  # read before --port, which it rules out
    help="this host's Docker engine or the scheduler's cluster [env LEARNERKIT_SCHEDULER_BACKEND]",
)
NAMESPACE_OPTION = click.option(
    "--namespace",
    envvar="LEARNERKIT_K8S_NAMESPACE",
    default="learnerkit",
    show_default=True,
    help="the cluster's namespace (--backend kubernetes; $KUBECONFIG) [env LEARNERKIT_K8S_NAMESPACE]",
)


def _cluster_servers(backend: str, namespace: str) -> KubernetesModelServers | None:
    """The served models of the cluster $KUBECONFIG names (else the in-cluster account), or None for Docker."""
    if backend != BackendKind.KUBERNETES.value:
        return None
    from learnerkit.scheduler.serving.deployment import cluster_servers

    return cluster_servers(namespace)


def _docker_port(context: click.Context, _parameter: click.Parameter, port: int | None) -> int | None:
    """``--port`` refused on the cluster before any registry or key is read (``--backend`` is read first)."""
    if port is not None and context.params.get("backend") == BackendKind.KUBERNETES.value:
        raise click.BadParameter("--port is the Docker backend's: on Kubernetes the address is the Service's")
    return port


@model_group.command("serve")
@click.argument("reference", metavar="NAME@ALIAS|NAME@VERSION")
@click.option("--image", default=None, help="the model server image [learnerkit/modelserver:2.13-cpu-py3.11]")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    callback=_docker_port,
    help="the reference's port on 127.0.0.1, where it is not served yet [one Docker picks; kept while it is served]",
)
@BACKEND_OPTION
@NAMESPACE_OPTION
@catalog_command
def serve_command(
    reference: str,
    image: str | None,
    port: int | None,
    backend: str,
    namespace: str,
    store: Store,
    keys: list[Key],
    output: str,
) -> None:
    """Serve a version over the Open Inference Protocol v2 on the local Docker engine (or, with `--backend
    kubernetes`, the cluster); prints the reference's address, which stays while it is served. On Docker each
    NAME@ALIAS (or NAME@VERSION) has its own address, so `production` and `candidate` of one model are served side
    by side; on Kubernetes a name has one address (its Service), and serving another reference of it rolls it over.
    Serving a served reference again answers its address, rolling it over where the alias moved meanwhile (the new
    server answers ready, new requests go to it, the old one's finish, then it stops)."""
    from learnerkit.scheduler.serving.deployment import SERVER_IMAGE, serve

    key_files = _key_files()
    servers = _cluster_servers(backend, namespace)
    served = serve(store, reference, keys, key_files, _serving_home(), image or SERVER_IMAGE, port, servers)
    emit(
        output,
        served.to_dict(),
        lambda: console.print(f"{served.reference} ({served.version}) at {served.url}", soft_wrap=True, markup=False),
    )


def _key_files() -> list[Path]:
    """The public key files `--public-key` named (click's context), else the .pub beside the signing key."""
    from learnerkit.common.signing import public_key_path

    given = click.get_current_context().params.get("public_keys") or ()
    return list(given) or [public_key_path(Path(os.environ.get(SIGNING_KEY_SETTING, DEFAULT_SIGNING_KEY)))]


@model_group.command("stop")
@click.argument("reference", metavar="NAME|NAME@ALIAS|NAME@VERSION")
@click.option("--tenant", envvar="LEARNERKIT_TENANT", required=True, help="the tenant [env LEARNERKIT_TENANT]")
@BACKEND_OPTION
@NAMESPACE_OPTION
@output_option
def stop_command(reference: str, tenant: str, backend: str, namespace: str, output: str) -> None:
    """Stop serving NAME@ALIAS (or NAME@VERSION) on this host's engine, the name's other references kept; a bare
    NAME stops every reference of it. Its address goes first (the requests in flight finish), then its servers;
    no registry or key is needed. On Kubernetes (`--backend kubernetes`) a name has one address: its Service, pods
    and policy go, whichever reference is given."""
    from learnerkit.scheduler.catalog.names import Reference, check_name
    from learnerkit.scheduler.serving.deployment import stop, stop_on_cluster

    try:
        servers = _cluster_servers(backend, namespace)
        tenant = check_name(tenant, "tenant")
        if servers is not None:
            stopped = stop_on_cluster(servers, _serving_home(), tenant, reference)
        else:
            stopped = stop(_serving_home(), tenant, reference)
    except LearnerkitError as e:
        fail(output, e)
    name = Reference.parse(reference).name
    references = sorted({s.reference for s in stopped})
    emit(
        output,
        {"name": name, "stopped": [s.version for s in stopped], "references": references},
        lambda: console.print(f"stopped {', '.join(references)}", soft_wrap=True, markup=False),
    )


@model_group.command("served")
@click.argument("name", required=False)
@click.option("--tenant", envvar="LEARNERKIT_TENANT", required=True, help="the tenant [env LEARNERKIT_TENANT]")
@output_option
def served_command(name: str | None, tenant: str, output: str) -> None:
    """What this host's engine serves of the tenant's models (of NAME only, where given): each NAME@ALIAS or
    NAME@VERSION with its address and version; no registry or key is needed."""
    from learnerkit.common.engineimages import EngineError
    from learnerkit.scheduler.catalog.names import check_name
    from learnerkit.scheduler.serving.deployment import served_here

    check_name(tenant, "tenant")
    found = served_here(tenant, None if name is None else check_name(name))
    if found is None:
        fail(output, EngineError("no Docker engine answers: nothing is served on this host"))
    rows = [s.to_dict() for s in found or []]

    def show() -> None:
        # Two lines an endpoint, never cut at 80 columns: the reference and address, then the version's digest.
        for row in rows:
            console.print(f"{row['reference']} {row['url']}", soft_wrap=True, markup=False)
            console.print(f"  {row['version']}", soft_wrap=True, markup=False)
        if not rows:
            console.print(f"nothing of tenant {tenant} is served on this host", markup=False)

    emit(output, rows, show)


@model_group.command("predict")
@click.argument("reference", metavar="NAME@ALIAS|NAME@VERSION")
@click.option(
    "--input",
    "input_file",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="a v2 infer request body, or a JSON tensor (nested lists: one example or a batch)",
)
@catalog_command
def predict_command(reference: str, input_file: Path, store: Store, keys: list[Key], output: str) -> None:
    """Ask the served model (`model serve` first); prints its outputs as it computed them."""
    from learnerkit.scheduler.catalog.errors import CatalogError
    from learnerkit.scheduler.catalog.names import Reference
    from learnerkit.scheduler.catalog.versions import resolve
    from learnerkit.scheduler.serving.deployment import served
    from learnerkit.scheduler.serving.predict import predict

    ref = Reference.parse(reference)
    server = served(store.tenant, reference)
    wanted = resolve(store, ref)
    if server.version != wanted:
        raise CatalogError(f"{reference} is {wanted}, but {server.reference} serves {server.version}: serve it first")
    answer = predict(server.url, ref.name, input_file)

    def show() -> None:
        for tensor in answer.get("outputs", []):
            console.print(f"{tensor['name']} {tensor['datatype']} {tensor['shape']}", soft_wrap=True)
            console.print_json(data=tensor["data"])

    emit(output, answer, show)
