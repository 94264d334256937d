"""``python -m controller_sidecar``: the sidecar image's command."""

from controller_sidecar.cli import main

raise SystemExit(main())
