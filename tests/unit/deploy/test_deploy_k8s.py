"""The Kubernetes manifests: kustomization, schema validation, probes, selectors and the KEDA scaler."""

from __future__ import annotations

import json
import re
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils
import pytest

from duecast.shared.fanout.keys import Keys
from duecast.shared.settings import Settings
from tests.unit.deploy.deploy_support import (
    K8S,
    containers,
    docs,
    k8s,
    k8s_env,
    k8s_objects,
    settings_from,
    workloads,
)

KEDA_KINDS = {"ScaledObject", "TriggerAuthentication"}
MIN_K8S = "1.27"  # worker-pdb.yaml's unhealthyPodEvictionPolicy is on by default from 1.27


# -- Kubernetes ---------------------------------------------------------------------------------------


def test_kustomization_lists_every_manifest_and_names_the_image() -> None:
    (kz,) = docs(K8S / "kustomization.yaml")
    listed = set(kz["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    images = {i["name"] for i in kz["images"]}
    for obj in workloads():
        for container in containers(obj):
            assert container["image"] in images, f"{container['image']} is not set by kustomization images"


def schema_versions() -> list[str]:
    versions = sorted(
        {v.rsplit(".", 1)[0] for v in kubernetes_validate.utils.all_versions()},
        key=lambda v: tuple(int(x) for x in v.split(".")),
    )
    return [v for v in versions if tuple(map(int, v.split("."))) >= tuple(map(int, MIN_K8S.split(".")))]


@pytest.mark.parametrize(
    "obj", [o for o in k8s_objects() if o["kind"] not in KEDA_KINDS], ids=lambda o: o["kind"]
)
def test_k8s_objects_validate_against_the_bundled_schemas(obj: dict[str, Any]) -> None:
    versions = schema_versions()
    assert versions, "kubernetes-validate bundles no schema for the versions we support"
    for version in versions:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} on {version}: {path}: {exc.message}")


def test_the_validator_catches_a_typo() -> None:
    (dispatcher,) = k8s("Deployment", "duecast-dispatcher")
    broken = json.loads(json.dumps(dispatcher))
    broken["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, MIN_K8S, strict=True)


def test_two_dispatchers_behind_the_leader_lease_rolled_one_at_a_time() -> None:
    (dispatcher,) = k8s("Deployment", "duecast-dispatcher")
    assert dispatcher["spec"]["replicas"] == 2  # a standby leads within the lease if the leader dies
    assert dispatcher["spec"]["strategy"]["type"] == "RollingUpdate"
    (worker,) = k8s("Deployment", "duecast-worker")
    assert "replicas" not in worker["spec"], "KEDA owns the worker count: a re-apply must not reset it"


def health_port_k8s() -> int:
    (cm,) = k8s("ConfigMap", "duecast-config")
    return int(cm["data"]["DUECAST_HEALTH__PORT"])


@pytest.mark.parametrize("name", ["duecast-dispatcher", "duecast-worker"])
def test_probes_are_wired_to_healthz_and_readyz_on_the_health_port(name: str) -> None:
    (deployment,) = k8s("Deployment", name)
    port = health_port_k8s()
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    for container in containers(deployment):
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        expected = {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
        for probe, path in expected.items():
            get = container[probe]["httpGet"]
            assert get["path"] == path, f"{name} {probe}"
            target = get["port"]
            assert (ports[target] if isinstance(target, str) else target) == port, f"{name} {probe} port"


def test_selectors_match_their_pods_and_refs_resolve() -> None:
    for deployment in k8s("Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (pdb,) = k8s("PodDisruptionBudget")
    (worker,) = k8s("Deployment", "duecast-worker")
    assert (
        pdb["spec"]["selector"]["matchLabels"].items()
        <= worker["spec"]["template"]["metadata"]["labels"].items()
    )
    for obj in workloads():
        for container in containers(obj):
            for ref in container["envFrom"]:
                kind, key = (
                    ("ConfigMap", "configMapRef") if "configMapRef" in ref else ("Secret", "secretRef")
                )
                assert k8s(kind, ref[key]["name"]), f"{obj['metadata']['name']}: no {kind} {ref[key]['name']}"


# -- KEDA, structurally (its CRDs are not in the bundled schemas) -------------------------------------

SCALED_OBJECT_SPEC = {
    "scaleTargetRef",
    "pollingInterval",
    "cooldownPeriod",
    "initialCooldownPeriod",
    "idleReplicaCount",
    "minReplicaCount",
    "maxReplicaCount",
    "fallback",
    "advanced",
    "triggers",
}
TRIGGER_KEYS = {"type", "name", "metadata", "authenticationRef", "metricType", "useCachedMetrics"}


def keda_settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    (worker,) = k8s("Deployment", "duecast-worker")
    return settings_from(k8s_env(containers(worker)[0]), monkeypatch)


def test_the_scaled_object_is_well_formed_and_targets_the_workers() -> None:
    (so,) = k8s("ScaledObject")
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    spec = so["spec"]
    assert set(spec) <= SCALED_OBJECT_SPEC
    assert k8s("Deployment", spec["scaleTargetRef"]["name"]) == k8s("Deployment", "duecast-worker")
    assert 0 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    assert {t["type"] for t in spec["triggers"]} == {"redis", "mysql"}
    for trigger in spec["triggers"]:
        assert set(trigger) <= TRIGGER_KEYS
        # KEDA reads trigger metadata as map[string]string: a bare YAML number is rejected.
        bad = {k: v for k, v in trigger["metadata"].items() if not isinstance(v, str)}
        assert not bad, f"{trigger['name']}: metadata values must be strings: {bad}"
        (auth,) = k8s("TriggerAuthentication", trigger["authenticationRef"]["name"])
        for ref in auth["spec"]["secretTargetRef"]:
            (secret,) = k8s("Secret", ref["name"])
            assert ref["key"] in secret["stringData"]


def test_the_redis_trigger_watches_a_ready_list_duecast_pushes_to(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = keda_settings(monkeypatch)
    (so,) = k8s("ScaledObject")
    triggers = [t for t in so["spec"]["triggers"] if t["type"] == "redis"]
    keys = Keys(settings.redis.key_prefix)
    lists = {t["metadata"]["listName"] for t in triggers}
    assert {keys.ready("user_block_status"), keys.ready("jobs.default")} <= lists
    for trigger in triggers:
        assert trigger["metadata"]["listName"] in {keys.ready(s.name) for s in settings.all_sources()}
        assert int(trigger["metadata"]["listLength"]) > 0
        assert re.fullmatch(r"[\w.-]+:\d+", trigger["metadata"]["address"]), "address must be host:port"


def test_the_mysql_trigger_counts_due_rows_of_a_configured_source(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = keda_settings(monkeypatch)
    (so,) = k8s("ScaledObject")
    (trigger,) = [t for t in so["spec"]["triggers"] if t["type"] == "mysql"]
    query = " ".join(trigger["metadata"]["query"].split())
    matching = [
        s
        for s in settings.sources
        if f"FROM {s.table} FORCE INDEX (dc_due)" in query
        and f"{s.due_column} <= NOW(6) - INTERVAL {s.period_s:g} SECOND" in query
    ]
    assert matching, f"the query names no configured source with its due column and period: {query}"
    assert "dc_state = 0" in query
    cap = int(re.search(r"LIMIT (\d+)", query).group(1))  # type: ignore[union-attr]
    assert cap >= so["spec"]["maxReplicaCount"] * int(trigger["metadata"]["queryValue"])
