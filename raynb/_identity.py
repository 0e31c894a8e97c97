"""In the kernel: who the notebook's user is, for naming and owning what raynb creates on a shared Kubernetes namespace.

One execution role or one pod user often serves many people (SageMaker Studio: every user's kernel runs as
``sagemaker-user`` under the domain's role; JupyterHub: every pod's login is ``jovyan``), so the person is read from
where those platforms record them before the login name.
"""

from __future__ import annotations

import getpass
import json
import os
import re
from pathlib import Path

__all__ = ["local_identity", "short_name", "default_cluster_name", "STUDIO_METADATA"]

#: SageMaker Studio writes the app's user profile here in every app container.
STUDIO_METADATA = Path("/opt/ml/metadata/resource-metadata.json")


def local_identity() -> str:
    """The SageMaker Studio user profile, else JupyterHub's user, else the login name."""
    try:
        profile = json.loads(STUDIO_METADATA.read_text()).get("UserProfileName")
        if profile:
            return f"sagemaker:{profile}"
    except (OSError, ValueError, AttributeError):
        pass
    hub = os.environ.get("JUPYTERHUB_USER")
    if hub:
        return f"jupyterhub:{hub}"
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name for this uid (some containers)
        return "user"


def short_name(identity: str) -> str:
    """A DNS-1123 name part from an identity: ``arn:aws:sts::1234:assumed-role/ML/alice`` -> ``alice``."""
    tail = re.split(r"[/:]", identity.strip())[-1]
    return re.sub(r"[^a-z0-9-]+", "-", tail.lower()).strip("-")[:30] or "user"


def default_cluster_name() -> str:
    """``ray-train-<you>``: two users of one namespace never share (or delete) a RayCluster by accident."""
    return f"ray-train-{short_name(local_identity())}"
