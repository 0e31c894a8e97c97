"""A RayCluster no other pod can drive: KubeRay's token mode (authOptions, KubeRay >= 1.5) by default, raynb reading
the token from the Secret the operator made, and a NetworkPolicy admitting only the cluster's own pods.

On the real control plane and KubeRay v1.6.1. Modelled: kwok has no pod network, so the policy is checked as the object
the API server stores (and garbage-collects with the cluster), not enforced; the refusal of a caller without the token
is checked against the real Ray head that stands behind the head pod, on the ports its service routes to."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request

from conftest import HERE_PY, VALUES

import raynb
from raynb._cluster import kube_api as kube
from raynb._cluster import kube_connect

NS = "ray-train"


def test_token_mode_by_default_and_a_caller_without_the_token_is_refused(clean, head_behind_pods) -> None:
    from kubernetes import client

    name = "tokened"
    raynb.up(values=VALUES, set={"PYTHON_VERSION": HERE_PY, "RAY_CLUSTER_NAME": name}, connect=False, timeout=60)
    target = kube_connect.connect_api()
    core, net = client.CoreV1Api(target.api), client.NetworkingV1Api(target.api)
    secret = core.read_namespaced_secret(name, NS)  # made by the operator for this cluster
    assert len(base64.b64decode(secret.data["auth_token"])) >= 32
    assert [(o.kind, o.name) for o in secret.metadata.owner_references] == [("RayCluster", name)]
    ref = kube.RayClusterRef(name, NS)
    for pod in kube.pods(target, ref):  # every Ray container authenticates with it
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token", pod["metadata"]["name"]
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": name, "key": "auth_token"}
    policy = net.read_namespaced_network_policy(f"{name}-ray", NS)
    assert policy.spec.pod_selector.match_labels == {"ray.io/cluster": name}
    assert [(o.kind, o.name) for o in policy.metadata.owner_references] == [("RayCluster", name)]

    # what any other pod of the namespace would be: a caller at the head's ports without the token
    head, _log = head_behind_pods
    body = json.dumps({"entrypoint": "id"}).encode()
    request = urllib.request.Request(f"{head.dashboard_url}/api/jobs/", data=body, method="POST")
    try:
        urllib.request.urlopen(request, timeout=10)
        status = 200
    except urllib.error.HTTPError as e:
        status = e.code
    assert status == 401, status

    assert raynb.down(name, progress=lambda _m: None) is True
    deadline = time.monotonic() + 30  # Kubernetes' garbage collector removes the cluster's dependents
    while time.monotonic() < deadline:
        left = [
            i.metadata.name for i in net.list_namespaced_network_policy(NS).items if i.metadata.name == f"{name}-ray"
        ]
        if not left and all(s.metadata.name != name for s in core.list_namespaced_secret(NS).items):
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the policy and the Secret outlived their RayCluster")
