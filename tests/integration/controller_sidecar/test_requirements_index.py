"""Run-time requirements through a real HTTPS index with its own CA: the case of a TLS-intercepting proxy.

A CA and a server certificate for 127.0.0.1 are made here (``cryptography``), and a PEP 503 index of a wheel built
here is served over TLS; real pip installs from it. With the platform's CA bundle it installs; without, it fails
with one line naming the requirement and the certificate.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import ipaddress
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from controller_sidecar.provenancerecord import InstalledPackage
from controller_sidecar.requirements import PackageIndex, RequirementError, install_requirements
from tests.pyindex import build_wheel, serve_index, write_index


@dataclass(frozen=True)
class TlsIndex:
    url: str
    ca_bundle: Path
    wheel: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) as PEM files: a CA of its own and a certificate it
    issued for 127.0.0.1."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("learnerkit test proxy CA"))
        .issuer_name(_name("learnerkit test proxy CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@pytest.fixture
def tls_index(tmp_path: Path) -> Iterator[TlsIndex]:
    ca, cert, key = _certificates(tmp_path)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = build_wheel(wheels, "lkgreet", "1.0", {"lkgreet.py": "def hello():\n    return 'hello over TLS'\n"})
    write_index(tmp_path / "index", [wheel])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with serve_index(tmp_path / "index", tls=context) as url:
        yield TlsIndex(url, ca, wheel)


def _model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "requirements.txt").write_text("lkgreet==1.0\n")
    return model


def test_the_platforms_ca_bundle_lets_pip_reach_an_index_behind_its_own_ca(tmp_path: Path, tls_index: TlsIndex) -> None:
    packages = tmp_path / "job" / "packages"
    index = PackageIndex(tls_index.url, ca_bundle=str(tls_index.ca_bundle))
    installed = asyncio.run(install_requirements(_model(tmp_path), packages, index))
    digest = hashlib.sha256(tls_index.wheel.read_bytes()).hexdigest()
    assert installed.packages == (InstalledPackage("lkgreet", "1.0", digest),)
    check = [sys.executable, "-c", "import lkgreet; print(lkgreet.hello())"]
    done = subprocess.run(check, env={"PYTHONPATH": str(packages)}, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "hello over TLS"


def test_without_the_ca_bundle_the_reason_is_one_line_naming_the_requirement_and_the_certificate(
    tmp_path: Path, tls_index: TlsIndex, caplog: pytest.LogCaptureFixture
) -> None:
    packages = tmp_path / "job" / "packages"
    with pytest.raises(RequirementError) as failed:
        asyncio.run(install_requirements(_model(tmp_path), packages, PackageIndex(tls_index.url)))
    reason = str(failed.value)
    assert "\n" not in reason
    assert reason.startswith(f"requirements.txt: lkgreet==1.0: cannot reach {tls_index.url}/lkgreet/ (")
    assert "certificate verify failed" in reason
    assert "set the platform's CA bundle (LEARNERKIT_PIP_CA_BUNDLE)" in reason
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text, "pip's whole output goes to the sidecar's log"
    assert not packages.exists()
