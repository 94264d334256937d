"""A local certificate authority and the API's server certificate (`learnerkit scheduler cert create`).

For a scheduler without a certificate from an organisation's CA: a CA made here signs the server's certificate,
and the CLI trusts that CA alone (``$LEARNERKIT_SCHEDULER_CA``). Keys are ECDSA P-256 (as the platform's signing
key), written 0600; the CA's key signs nothing else and may be moved offline once the server's certificate is made.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from controller_sidecar.atomicfile import write_atomic
from learnerkit.common.errors import ConfigError

DEFAULT_HOSTS = ("localhost", "127.0.0.1")
CA_DAYS = 3650
SERVER_DAYS = 397
"""What browsers accept for a server certificate; `cert create` again (in a new folder) before it ends."""


@dataclass(frozen=True)
class CertificateFiles:
    ca: Path
    ca_key: Path
    cert: Path
    key: Path

    @classmethod
    def in_folder(cls, folder: Path) -> CertificateFiles:
        return cls(folder / "ca.pem", folder / "ca-key.pem", folder / "server.pem", folder / "server-key.pem")


def create_certificates(folder: Path, hosts: Sequence[str] = DEFAULT_HOSTS) -> CertificateFiles:
    """Make a CA and a server certificate for ``hosts`` (names or IP addresses) in ``folder``; refuses to replace
    any of the four files."""
    files = CertificateFiles.in_folder(folder)
    present = [str(path) for path in (files.ca, files.ca_key, files.cert, files.key) if path.exists()]
    if present:
        raise ConfigError(f"{', '.join(present)}: already there and kept; remove them, or use another --dir")
    if not hosts:
        raise ConfigError("--host: name at least one host name or IP address the scheduler is reached at")
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "learnerkit scheduler local CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=SERVER_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([_general_name(host) for host in hosts]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(files.ca_key, _private_pem(ca_key), mode=0o600)
    write_atomic(files.key, _private_pem(key), mode=0o600)
    write_atomic(files.cert, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)
    write_atomic(files.ca, ca.public_bytes(serialization.Encoding.PEM), mode=0o644)
    return files


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
