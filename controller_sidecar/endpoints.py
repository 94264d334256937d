"""Where the sidecar reaches etcd and the object store, and with which credentials.

The sidecar reads these variables (:func:`controller_sidecar.settings.load_settings`); every producer of a
sidecar (``learnerkit sidecar run-local``, the scheduler's Docker and Kubernetes backends) fills them from one
:class:`Endpoints`, so the names live here alone. Secrets travel only in the environment, never in the config
document.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ETCD_ENDPOINTS = "ETCD_ENDPOINTS"
ETCD_USERNAME = "ETCD_USERNAME"
ETCD_PASSWORD = "ETCD_PASSWORD"  # noqa: S105 - the variable's name, not a password
S3_ENDPOINT_URL = "S3_ENDPOINT_URL"
S3_ACCESS_KEY = "AWS_ACCESS_KEY_ID"
S3_SECRET_KEY = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 - the variable's name, not a secret


@dataclass(frozen=True)
class Endpoints:
    etcd_endpoints: str
    """Comma-separated ``host:port`` of the etcd members."""
    etcd_username: str | None = None
    etcd_password: str | None = field(default=None, repr=False)
    s3_endpoint_url: str | None = None
    """None means AWS."""
    s3_access_key: str | None = field(default=None, repr=False)
    s3_secret_key: str | None = field(default=None, repr=False)

    def env(self) -> dict[str, str]:
        """The sidecar's variables, unset values left out."""
        values = {
            ETCD_ENDPOINTS: self.etcd_endpoints,
            ETCD_USERNAME: self.etcd_username,
            ETCD_PASSWORD: self.etcd_password,
            S3_ENDPOINT_URL: self.s3_endpoint_url,
            S3_ACCESS_KEY: self.s3_access_key,
            S3_SECRET_KEY: self.s3_secret_key,
        }
        return {name: value for name, value in values.items() if value}
