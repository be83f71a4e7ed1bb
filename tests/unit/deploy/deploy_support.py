"""Helpers shared by test_deploy_files.py, test_deploy_commands.py and test_deploy_k8s.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from duecast.shared.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def compose() -> dict[str, Any]:
    return docs(DEPLOY / "compose.yaml")[0]


def k8s_objects() -> list[dict[str, Any]]:
    return [d for f in sorted(K8S.glob("*.yaml")) if f.name != "kustomization.yaml" for d in docs(f)]


def k8s(kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in k8s_objects() if o["kind"] == kind and name in (None, o["metadata"]["name"])]


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj["spec"]["template"]["spec"]["containers"])


def workloads() -> list[dict[str, Any]]:
    return [o for o in k8s_objects() if o["kind"] in {"Deployment", "Job"}]


def duecast_services() -> dict[str, dict[str, Any]]:
    """Compose services that run the duecast image."""
    return {n: s for n, s in compose()["services"].items() if s.get("image") == "duecast:dev"}


def k8s_env(container: dict[str, Any]) -> dict[str, str]:
    """What a container's process sees: its ConfigMap and Secret (envFrom), then its own env."""
    env: dict[str, str] = {}
    for ref in container.get("envFrom", []):
        if "configMapRef" in ref:
            (cm,) = k8s("ConfigMap", ref["configMapRef"]["name"])
            env.update(cm["data"])
        else:
            (secret,) = k8s("Secret", ref["secretRef"]["name"])
            env.update(secret.get("stringData", {}))
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


def settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings exactly as the process builds them (the unit tier's fixture cleared DUECAST_* first)."""
    with monkeypatch.context() as m:
        for name, value in env.items():
            if value is not None:  # compose's bare `NAME:` passes the host's value through, if any
                m.setenv(name, value)
        return Settings()
