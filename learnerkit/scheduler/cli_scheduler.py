"""`learnerkit scheduler serve`, `nodes`, `drain|undrain NODE`, `token add|revoke|list`, `key create|rotate`
and `cert create`.

Options override the environment (`SchedulerSettings.from_env`); secrets (etcd password, S3 keys) are read from
the environment only, so they never show in a process list.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import click
from rich import box
from rich.markup import escape
from rich.table import Table

from controller_sidecar.errors import TransientError
from controller_sidecar.settings import EtcdSettings as SidecarEtcdSettings
from learnerkit.common.errors import ConfigError, LearnerkitError
from learnerkit.common.output import OutputFormat, console, emit, err_console, fail, keep_whole, output_option
from learnerkit.scheduler.api.auth import ROLES, TENANT_ROLE, add_token, read_tokens, revoke
from learnerkit.scheduler.config.settings import (
    DEFAULT_SIGNING_KEY,
    DEFAULT_TOKENS,
    SIGNING_KEY_SETTING,
    BackendKind,
    SchedulerSettings,
    parse_endpoints,
    resource_defaults,
)
from learnerkit.scheduler.errors import TokensFileError
from learnerkit.scheduler.manifest.defaultresults import tenant_results
from learnerkit.scheduler.manifest.units import format_size
from learnerkit.scheduler.nodes.listing import NodeRow, list_nodes
from learnerkit.scheduler.nodes.marks import mark_node

tokens_option = click.option(
    "--tokens",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="LEARNERKIT_SCHEDULER_TOKENS",
    default=DEFAULT_TOKENS,
    show_default=True,
    help="the tokens file [env LEARNERKIT_SCHEDULER_TOKENS]",
)


@click.group("scheduler")
def scheduler_group() -> None:
    """Run the scheduler and manage its tenants' tokens and its signing key."""


@scheduler_group.command("serve")
@click.option("--host", default=None, help="address to listen on [env LEARNERKIT_SCHEDULER_HOST; 127.0.0.1]")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="[env LEARNERKIT_SCHEDULER_PORT; 8080]")
@click.option("--tokens", type=click.Path(path_type=Path, dir_okay=False), default=None, help="the tokens file")
@click.option(
    "--signing-key",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help=f"the platform's signing key (`scheduler key create`) [env {SIGNING_KEY_SETTING}; {DEFAULT_SIGNING_KEY}]",
)
@click.option(
    "--tls-cert",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="serve HTTPS with this certificate (PEM) [env LEARNERKIT_SCHEDULER_TLS_CERT; plain HTTP]",
)
@click.option(
    "--tls-key",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="the certificate's private key (PEM) [env LEARNERKIT_SCHEDULER_TLS_KEY]",
)
@click.option("--etcd-endpoints", default=None, help="comma-separated host:port [env ETCD_ENDPOINTS]")
@click.option("--s3-endpoint", default=None, help="S3 endpoint URL [env S3_ENDPOINT_URL; AWS]")
@click.option("--s3-bucket", default=None, help="bucket for logs, checkpoints, results [env LEARNERKIT_S3_BUCKET]")
@click.option("--backend", type=click.Choice([k.value for k in BackendKind]), default=None, help="where learners run")
@click.option(
    "--tenants",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="per-tenant quotas and priority ranges (docs/security.md) [env LEARNERKIT_TENANTS]",
)
@click.option(
    "--default-cpus", default=None, help="CPUs of a learner whose manifest has no cpus [env LEARNERKIT_DEFAULT_CPUS; 5]"
)
@click.option(
    "--default-memory",
    default=None,
    help="memory of a learner whose manifest has none [env LEARNERKIT_DEFAULT_MEMORY; 12GiB]",
)
@click.option(
    "--default-storage",
    default=None,
    help="the most a learner's /job may hold when its manifest has no storage [env LEARNERKIT_DEFAULT_STORAGE; none]",
)
@click.option(
    "--results-bucket",
    default=None,
    help="the default results store's bucket, for manifests without training_results [env LEARNERKIT_RESULTS_BUCKET]",
)
@click.option(
    "--trust-project-images",
    is_flag=True,
    default=None,
    help="run this project's images without the scan gate (development) [env LEARNERKIT_TRUST_PROJECT_IMAGES=1]",
)
def serve_command(
    host: str | None,
    port: int | None,
    tokens: Path | None,
    signing_key: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    etcd_endpoints: str | None,
    s3_endpoint: str | None,
    s3_bucket: str | None,
    backend: str | None,
    tenants: Path | None,
    default_cpus: str | None,
    default_memory: str | None,
    default_storage: str | None,
    results_bucket: str | None,
    trust_project_images: bool | None,
) -> None:
    """Serve the REST API (docs/api.md) in front of the job store, monitor and backend."""
    try:
        given = {
            "LEARNERKIT_DEFAULT_CPUS": default_cpus,
            "LEARNERKIT_DEFAULT_MEMORY": default_memory,
            "LEARNERKIT_DEFAULT_STORAGE": default_storage,
            "LEARNERKIT_RESULTS_BUCKET": results_bucket,
        }
        defaults = resource_defaults({**os.environ, **{k: v for k, v in given.items() if v is not None}})
        settings = SchedulerSettings.from_env(os.environ).with_overrides(
            api={"host": host, "port": port, "tokens": tokens, "tls_cert": tls_cert, "tls_key": tls_key},
            etcd={"endpoints": parse_endpoints(etcd_endpoints) if etcd_endpoints is not None else None},
            s3={"endpoint_url": s3_endpoint, "bucket": s3_bucket},
            backend={"kind": BackendKind(backend) if backend else None},
            limits={"tenants": tenants, "defaults": defaults},
            trust={"project_images": trust_project_images},
            signing={"key": signing_key, "source": "--signing-key" if signing_key is not None else None},
        )
        results = tenant_results(defaults.results_bucket, "<tenant>") if defaults.results_bucket else "none (required)"
        storage = format_size(defaults.storage_bytes) if defaults.storage_bytes else "an unbounded /job"
        err_console.print(
            f"manifests without cpus get {defaults.cpus:g}, without memory {format_size(defaults.memory_bytes)},"
            f" without storage {storage}, without training_results: {results}",
            markup=False,
            highlight=False,
        )
        # Imported here: only `serve` pays for the scheduler, its backends and uvicorn, not `token ...`.
        from learnerkit.scheduler.api.server import serve
        from learnerkit.scheduler.factory import create_scheduler

        serve(settings, create_scheduler)
    except LearnerkitError as e:
        fail(OutputFormat.TABLE.value, e)


@scheduler_group.group("key")
def key_group() -> None:
    """The platform's signing key: it signs every job's provenance (docs/provenance.md)."""


key_path_option = click.option(
    "--key",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar=SIGNING_KEY_SETTING,
    default=DEFAULT_SIGNING_KEY,
    show_default=True,
    help=f"the private key (its .pub beside it) [env {SIGNING_KEY_SETTING}]",
)
ENCRYPTION_NOTE = (
    "The key is encrypted with the passphrase in LEARNERKIT_SIGNING_KEY_PASSPHRASE or in the file "
    "LEARNERKIT_SIGNING_KEY_PASSPHRASE_FILE names, where one is set (serve reads it from there too)."
)


@key_group.command("create", epilog=ENCRYPTION_NOTE)
@key_path_option
@output_option
def key_create(key: Path, output: str) -> None:
    """Create an ECDSA P-256 key for `serve` and print its public key; an existing key is kept, never replaced."""
    # Imported here: only this command pays for the cryptography stack.
    from learnerkit.common.passphrase import key_passphrase
    from learnerkit.common.signing import create_signer, public_key_path, public_pem

    try:
        if key.exists():
            raise ConfigError(f"{key}: a key is there already; it is kept (`scheduler key rotate` replaces it)")
        passphrase = key_passphrase(os.environ)
        signer = create_signer(key, passphrase)
    except (LearnerkitError, OSError) as e:
        fail(output, e if isinstance(e, LearnerkitError) else ConfigError(f"{key}: cannot write the key: {e}"))
        return
    pem = public_pem(signer)
    emit(
        output,
        {
            "key": str(key),
            "public_key": str(public_key_path(key)),
            "keyid": signer.public_key.keyid,
            "encrypted": passphrase is not None,
            "pem": pem,
        },
        lambda: click.echo(pem, nl=False),
    )


@key_group.command("rotate", epilog=ENCRYPTION_NOTE)
@key_path_option
@output_option
def key_rotate(key: Path, output: str) -> None:
    """Replace the signing key with a new one, keeping the old public key (in KEY's folder, `<name>.retired/<key
    id>.pub`) so the scheduler keeps publishing it (GET /v1/keys) and jobs it signed still verify. Restart `serve`
    to sign with the new key."""
    from learnerkit.common.keyring import retired_folder, rotate
    from learnerkit.common.optionsource import given_by
    from learnerkit.common.passphrase import key_passphrase
    from learnerkit.common.signing import public_pem

    try:
        rotation = rotate(key, key_passphrase(os.environ), given_by("key", "--key", SIGNING_KEY_SETTING))
    except (LearnerkitError, OSError) as e:
        fail(output, e if isinstance(e, LearnerkitError) else ConfigError(f"{key}: cannot write the keys: {e}"))
        return
    new = rotation.current.public_key.keyid
    done = {"key": str(key), "keyid": new, "retired": rotation.retired, "retired_folder": str(retired_folder(key))}

    def show() -> None:
        click.echo(f"signing key {key} is now {new}; {rotation.retired} kept in {retired_folder(key)}")
        click.echo("restart `learnerkit scheduler serve` to sign with it")

    emit(output, done | {"pem": public_pem(rotation.current)}, show)


@scheduler_group.group("cert")
def cert_group() -> None:
    """The API's TLS certificate, from a local CA made here (docs/security.md)."""


@cert_group.command("create")
@click.option(
    "--dir",
    "folder",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="where ca.pem, ca-key.pem, server.pem and server-key.pem go (none may be there)",
)
@click.option(
    "--host",
    "hosts",
    multiple=True,
    help="a name or IP address the scheduler is reached at, repeatable [localhost and 127.0.0.1]",
)
@output_option
def cert_create(folder: Path, hosts: tuple[str, ...], output: str) -> None:
    """Make a local CA and a server certificate signed by it: `serve --tls-cert server.pem --tls-key server-key.pem`,
    and the CLI trusts the CA with LEARNERKIT_SCHEDULER_CA=ca.pem."""
    # Imported here: only this command pays for the cryptography stack.
    from learnerkit.scheduler.api.certificates import DEFAULT_HOSTS, create_certificates

    try:
        files = create_certificates(folder, hosts or DEFAULT_HOSTS)
    except (LearnerkitError, OSError) as e:
        fail(output, e if isinstance(e, LearnerkitError) else ConfigError(f"{folder}: cannot write there: {e}"))
        return
    made = {"ca": str(files.ca), "ca_key": str(files.ca_key), "cert": str(files.cert), "key": str(files.key)}

    def show() -> None:
        click.echo(f"serve with:  --tls-cert {files.cert} --tls-key {files.key}")
        click.echo(f"the CLI:     export LEARNERKIT_SCHEDULER_CA={files.ca}")
        click.echo(f"keep {files.ca_key} private (it can sign certificates the CLI trusts); it serves nothing")

    emit(output, made | {"hosts": list(hosts or DEFAULT_HOSTS)}, show)


@scheduler_group.command("public-key")
@click.option("--url", default=None, help="the scheduler [env LEARNERKIT_SCHEDULER_URL; http://127.0.0.1:8080]")
@output_option
def public_key(url: str | None, output: str) -> None:
    """Print the platform's public signing key (PEM) as the scheduler's API serves it."""
    from learnerkit.scheduler.client.http import SchedulerClient

    client = SchedulerClient.from_env(url, None)
    if (warning := client.plain_http_warning()) is not None:
        err_console.print(warning, markup=False, highlight=False)
    try:
        pem = client.public_key()
    except LearnerkitError as e:
        fail(output, e)
        return
    finally:
        client.close()
    emit(output, {"url": client.base_url, "pem": pem}, lambda: click.echo(pem, nl=False))


etcd_option = click.option(
    "--etcd-endpoints", default=None, help="the scheduler's etcd, comma-separated host:port [env ETCD_ENDPOINTS]"
)


@scheduler_group.command("drain")
@click.argument("node")
@etcd_option
@output_option
def drain_command(node: str, etcd_endpoints: str | None, output: str) -> None:
    """Take no new learners on NODE and move its jobs elsewhere: each halts onto a checkpoint and resumes by
    itself on another node (docs/scheduler.md, Drained nodes). Kept in etcd until `undrain`."""
    _mark(node, etcd_endpoints, output, drained=True)


@scheduler_group.command("undrain")
@click.argument("node")
@etcd_option
@output_option
def undrain_command(node: str, etcd_endpoints: str | None, output: str) -> None:
    """Give a drained NODE back: it takes learners again at the scheduler's next read of the nodes."""
    _mark(node, etcd_endpoints, output, drained=False)


def nodes_table(rows: list[NodeRow]) -> Table:
    """A row per job holding room on a node; no rules, so a node's name (Kubernetes': 30 characters and more) and
    a job id leave the state and the status their words at 80 columns."""
    table = Table("NODE", "STATE", "JOB", "TENANT", "STATUS", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for row in rows:
        for job in row.jobs or (None,):
            cells = (job.job_id, job.tenant, job.status) if job is not None else ("-", "", "")
            table.add_row(escape(row.node), row.state.value, *(escape(cell) for cell in cells))
    return keep_whole(table, "NODE", "JOB")


@scheduler_group.command("nodes")
@etcd_option
@output_option
def nodes_command(etcd_endpoints: str | None, output: str) -> None:
    """List the nodes with their state (ready, cordoned, not-ready, lost, drained) and the jobs holding room
    there, as the scheduler serving the etcd root last read them; on Docker the one node `local`."""
    try:
        rows = asyncio.run(list_nodes(_etcd_settings(etcd_endpoints)))
    except TransientError as e:
        fail(output, TransientError(f"{e}. {_ETCD_HINT}"))
        return
    except LearnerkitError as e:
        fail(output, e)
        return

    def show() -> None:
        console.print(nodes_table(rows))

    emit(output, [row.to_dict() for row in rows], show)


def _etcd_settings(etcd_endpoints: str | None) -> SidecarEtcdSettings:
    settings = SchedulerSettings.from_env(os.environ).with_overrides(
        etcd={"endpoints": parse_endpoints(etcd_endpoints) if etcd_endpoints is not None else None}
    )
    etcd = settings.etcd
    return SidecarEtcdSettings(endpoints=etcd.endpoints, username=etcd.username, password=etcd.password, root=etcd.root)


_ETCD_HINT = (
    "The nodes' marks and states live in the scheduler's etcd: give it with --etcd-endpoints or ETCD_ENDPOINTS "
    "(`learnerkit dev env` prints the local environment's)"
)


def _mark(node: str, etcd_endpoints: str | None, output: str, *, drained: bool) -> None:
    try:
        change = asyncio.run(mark_node(_etcd_settings(etcd_endpoints), node, drained=drained))
    except TransientError as e:
        fail(output, TransientError(f"{e}. {_ETCD_HINT}"))
        return
    except LearnerkitError as e:
        fail(output, e)
        return
    verb = "drained" if drained else "undrained"
    said = f"node {node} {verb}" if change.changed else f"node {node} was {verb} already"
    emit(output, {"node": node, "drained": change.drained, "changed": change.changed}, lambda: console.print(said))


@scheduler_group.group("token")
def token_group() -> None:
    """Bearer tokens per tenant, stored hashed in the tokens file."""


@token_group.command("add")
@click.argument("tenant")
@click.option(
    "--role",
    type=click.Choice(ROLES),
    default=TENANT_ROLE,
    show_default=True,
    help="operator: the console's Cluster view opens to it too (the nodes, every tenant's quota and use)",
)
@tokens_option
@output_option
def token_add(tenant: str, role: str, tokens: Path, output: str) -> None:
    """Create a token for TENANT and print it: it is shown this once, the file keeps only its hash."""
    try:
        token = add_token(tokens, tenant, role)
    except LearnerkitError as e:
        fail(output, e)
        return
    if output == OutputFormat.TABLE.value:
        err_console.print(f"token for tenant {escape(tenant)} (shown once; {escape(str(tokens))} keeps its hash):")
    emit(output, {"tenant": tenant, "role": role, "token": token}, lambda: click.echo(token))


@token_group.command("revoke")
@click.argument("tenant", required=False)
@click.option("--id", "token_id", default=None, help="revoke only this token (see `token list`)")
@tokens_option
@output_option
def token_revoke(tenant: str | None, token_id: str | None, tokens: Path, output: str) -> None:
    """Revoke every token of TENANT, or the one given by --id; a running server notices at once."""
    try:
        gone = revoke(tokens, tenant=tenant, token_id=token_id)
        if not gone:
            raise TokensFileError(f"{tokens}: no token of {f'tenant {tenant!r}' if tenant else f'id {token_id!r}'}")
    except LearnerkitError as e:
        fail(output, e)
        return
    emit(output, {"revoked": gone}, lambda: console.print(f"revoked {len(gone)} token(s): {', '.join(gone)}"))


@token_group.command("list")
@tokens_option
@output_option
def token_list(tokens: Path, output: str) -> None:
    """Each token's id, tenant, role and creation time (never the token)."""
    try:
        entries = sorted(read_tokens(tokens).values(), key=lambda e: (e.tenant, e.created_at))
    except LearnerkitError as e:
        fail(output, e)
        return
    rows = [{"id": e.token_id, "tenant": e.tenant, "role": e.role, "created_at": e.created_at} for e in entries]

    def show() -> None:
        table = Table(title=str(tokens), title_justify="left")
        columns = ("id", "tenant", "role", "created_at")
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*(escape(row[c]) for c in columns))
        console.print(keep_whole(table, "id", "tenant"))

    emit(output, rows, show)
