"""Every bad input of the Kubernetes path gets an error that says what, what raynb saw, and the next step — checked
against the real API server (RBAC, namespaces, discovery) where one is involved."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from conftest import HERE_PY, NAME, VALUES, apply, controlplane, head_pod_env, mount_head_account, mount_head_token

import raynb
from raynb._cluster import kube_api as kube
from raynb._cluster import kube_connect
from raynb._remote.kube_notice import NoticeRefused, PodIdentity, patch_raycluster
from raynb._shared import run_notice
from raynb.errors import ConnectError
from raynb.manifest import ManifestError


def test_unknown_instance_type_fails_before_any_api_call(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))  # would fail differently if the API were asked
    with pytest.raises(ManifestError) as e:
        raynb.up(values=VALUES, set={"GPU_NODE_TYPE": "g9.huge"}, connect=False)
    assert "Unknown GPU instance type 'g9.huge'" in e.value.what and "p5.48xlarge" in e.value.saw


def test_malformed_values_file(tmp_path) -> None:
    bad = tmp_path / "values.env"
    bad.write_text("GPU_NODE_TYPE=g6.12xlarge\nthis is not an assignment\n")
    with pytest.raises(ManifestError) as e:
        raynb.up(values=str(bad), connect=False)
    assert "Line 2" in e.value.what and "KEY=VALUE" in e.value.what


def test_no_kubeconfig(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(kube.KubeError) as e:
        raynb.up(values=VALUES, set={"PYTHON_VERSION": HERE_PY}, connect=False)
    assert e.value.what == "No Kubernetes configuration found."
    assert "aws eks update-kubeconfig" in e.value.fix and "--local" in e.value.fix


def test_unknown_context(stack) -> None:
    with pytest.raises(kube.KubeError) as e:
        raynb.up(values=VALUES, set={"PYTHON_VERSION": HERE_PY}, context="prod", connect=False)
    assert "no context 'prod'" in e.value.what and "admin@raynb-test" in e.value.saw


def test_version_mismatch_is_caught_before_anything_is_created(stack) -> None:
    """Asked for Ray Client, a kernel whose Python is not the image's is refused before anything is created (under
    auto it goes through Ray Jobs: test_jobs_on_kubernetes.py)."""
    with pytest.raises(ConnectError) as e:
        raynb.up(values=VALUES, set={"PYTHON_VERSION": "3.13" if HERE_PY != "3.13" else "3.12"}, via="client")
    assert "Python" in e.value.saw and 'pip install "ray[client,train,default]==2.58.0"' in e.value.fix
    assert kube.get_raycluster(kube_connect.connect_api(), kube.RayClusterRef(NAME, "ray-train")) is None


def test_rbac_forbidden_names_verb_and_resource(stack) -> None:
    with pytest.raises(kube.KubeError) as e:
        raynb.up(values=VALUES, set={"PYTHON_VERSION": HERE_PY}, kubeconfig=str(stack.viewer_kubeconfig), connect=False)
    assert "does not allow viewer to get rayclusters.ray.io in namespace 'ray-train'" in e.value.what
    assert "manifests/rbac.yaml" in e.value.fix


def _up_as_viewer(stack, progress) -> raynb.Cluster:
    """`up` (no connect) as the viewer, who may do what the Role the test gave it allows."""
    return raynb.up(
        values=VALUES,
        set={"PYTHON_VERSION": HERE_PY},
        kubeconfig=str(stack.viewer_kubeconfig),
        connect=False,
        timeout=60,
        progress=progress,
    )


def test_rbac_manifest_is_enough(stack, tmp_path) -> None:
    """manifests/rbac.yaml's Role, rendered for the viewer and the cluster's name, lets it run the whole lifecycle
    and read its cluster's Ray token -- and no other Secret of the namespace; and make the head pod's own account
    (head-identity.yaml), which may patch its RayCluster and no other, and goes with it."""
    from kubernetes import client

    from raynb.manifest import render_rbac

    docs = render_rbac(None, {"RAY_CLUSTER_NAME": NAME, "RBAC_SUBJECT": "User:viewer"})
    other = {"metadata": {"name": "someone-elses", "namespace": "ray-train"}, "stringData": {"key": "x"}}
    client.CoreV1Api(stack.api()).create_namespaced_secret("ray-train", other)
    for d in docs:
        apply(stack, d)
    try:
        c = _up_as_viewer(stack, lambda _m: None)
        st = c.status()
        assert len(st.kube.pods) == 3 and st.kube.nodes == []  # nodes are cluster-scoped: not for this Role
        viewer = kube_connect.connect_api(kubeconfig=str(stack.viewer_kubeconfig))
        ref = kube.RayClusterRef(NAME, "ray-train")
        deadline = time.monotonic() + 30
        while (token := kube.ray_token(viewer, ref)) is None and time.monotonic() < deadline:
            time.sleep(0.5)  # KubeRay makes the token's Secret for a token-mode cluster
        assert token, "the cluster's own Secret could not be read with the Role"
        with pytest.raises(kube.KubeError, match="does not allow viewer to get secrets"):
            kube.ray_token(viewer, kube.RayClusterRef("someone-elses", "ray-train"))
        # the Role let the viewer make the head pod's own account, which may patch this RayCluster and no other
        account = mount_head_account(stack, tmp_path)
        assert mount_head_token(stack, account) == NAME
        ident = PodIdentity.from_env(head_pod_env(stack, account))
        assert ident is not None
        patch_raycluster(ident, {"metadata": {"labels": {run_notice.LABEL: "a-run"}}})
        assert kube.get_raycluster(viewer, ref)["metadata"]["labels"][run_notice.LABEL] == "a-run"
        with pytest.raises(NoticeRefused) as refused:
            patch_raycluster(dataclasses.replace(ident, cluster="someone-elses"), {"metadata": {"labels": {"x": "y"}}})
        assert refused.value.status == 403, refused.value
        c.down(progress=lambda _m: None)
        sa = client.CoreV1Api(stack.api()).list_namespaced_service_account("ray-train").items
        deadline = time.monotonic() + 30  # the garbage collector deletes what was handed to the RayCluster
        while any(a.metadata.name == NAME for a in sa) and time.monotonic() < deadline:
            time.sleep(0.5)
            sa = client.CoreV1Api(stack.api()).list_namespaced_service_account("ray-train").items
        assert not any(a.metadata.name == NAME for a in sa), "the head's account outlived its RayCluster"
    finally:
        from conftest import delete

        delete(stack, "v1", "Secret", "someone-elses", "ray-train")
        for d in docs:
            delete(stack, d["apiVersion"], d["kind"], d["metadata"]["name"], "ray-train")


def test_a_user_who_may_not_make_the_heads_account_gets_a_cluster_without_it(stack) -> None:
    """A Role from before head-identity.yaml (rbac.yaml without its account rules): `up` says what is lost and makes
    the RayCluster anyway, its head pod on the namespace's default account."""
    from raynb.manifest import render_rbac

    role, binding = render_rbac(None, {"RAY_CLUSTER_NAME": NAME, "RBAC_SUBJECT": "User:viewer"})
    role["rules"] = [r for r in role["rules"] if not {"serviceaccounts", "roles"} & set(r["resources"])]
    for d in (role, binding):
        apply(stack, d)
    said: list[str] = []
    try:
        c = _up_as_viewer(stack, said.append)
        lost = [m for m in said if m.startswith("the head pod gets no account of its own")]
        assert lost and "does not allow viewer to" in lost[0] and "serviceaccounts" in lost[0], said
        assert "--rbac" in lost[0]
        rc = kube.get_raycluster(kube_connect.connect_api(), kube.RayClusterRef(NAME, "ray-train"))
        assert "serviceAccountName" not in rc["spec"]["headGroupSpec"]["template"]["spec"]
        c.down(progress=lambda _m: None)
    finally:
        from conftest import delete

        for d in (role, binding):
            delete(stack, d["apiVersion"], d["kind"], d["metadata"]["name"], "ray-train")


def test_missing_namespace(stack) -> None:
    with pytest.raises(kube.KubeError) as e:
        raynb.up(values=VALUES, set={"PYTHON_VERSION": HERE_PY}, namespace="nope", connect=False)
    assert e.value.what == "The namespace 'nope' does not exist."
    assert "kubectl create namespace nope" in e.value.fix


def test_kuberay_crd_missing(stack) -> None:
    """A second API server on the same etcd under its own prefix: a real cluster where KubeRay was never installed."""
    bare = controlplane.bare_apiserver(stack)
    with pytest.raises(kube.KubeError) as e:
        raynb.up(values=VALUES, set={"PYTHON_VERSION": HERE_PY}, kubeconfig=str(bare), connect=False)
    assert "KubeRay operator is not installed" in e.value.what and "helm install kuberay-operator" in e.value.fix


def test_kuberay_before_1_5_1_is_named_before_anything_is_created(stack) -> None:
    """KubeRay v1.4.0's RayCluster CRD installed in place of the operator's (v1.6.1): `up` with token auth (the
    default) is refused before anything is created -- the schema the API server publishes has no spec.authOptions --
    naming the release it needs and both ways on; a manifest that slips past (applied by hand) is refused by the
    strict apply rather than stripped of its token; with RAY_AUTH_MODE=disabled the manifest fits v1.4.0."""
    import yaml

    from raynb.manifest import check_installed, load_values, render

    api = kube_connect.connect_api()

    def published_has_auth() -> bool:
        schema = kube_connect.raycluster_schema(api)
        return schema is not None and "authOptions" in schema["properties"]["spec"]["properties"]

    def install(crd_file: Path, has_auth: bool) -> None:
        apply(stack, yaml.safe_load(crd_file.read_text()))
        deadline = time.monotonic() + 60
        while published_has_auth() != has_auth:  # the API server republishes its OpenAPI document in a moment
            assert time.monotonic() < deadline, f"the API server still publishes the old schema ({crd_file.name})"
            time.sleep(0.5)

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "crds"
    install(fixtures / "ray.io_rayclusters.v1.4.0.yaml", has_auth=False)
    try:
        with pytest.raises(ManifestError) as e:
            raynb.up(values=VALUES, set={"PYTHON_VERSION": HERE_PY}, connect=False)
        assert "does not know spec.authOptions" in e.value.what and "Nothing was created" in e.value.what
        assert "needs KubeRay 1.5.1" in (e.value.saw or "") and "RAY_AUTH_MODE=disabled" in (e.value.fix or "")
        assert kube.get_raycluster(api, kube.RayClusterRef(NAME, "ray-train")) is None
        obj = render(load_values(VALUES), {"PYTHON_VERSION": HERE_PY})
        with pytest.raises(kube.KubeError) as strict:  # applied anyway: refused, not silently stripped
            kube.apply_raycluster(api, obj)
        assert ".spec.authOptions: field not declared in schema" in (strict.value.saw or ""), strict.value
        off = render(load_values(VALUES), {"PYTHON_VERSION": HERE_PY, "RAY_AUTH_MODE": "disabled"})
        check_installed(off, kube_connect.raycluster_schema(api), "here")  # fits v1.4.0: no exception
    finally:
        install(controlplane._kuberay_crds()[0], has_auth=True)
