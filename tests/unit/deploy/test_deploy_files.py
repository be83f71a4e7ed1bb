"""Keep deploy/ honest without a container engine: every file parses, every DUECAST_* variable is a real
setting (and each container's whole environment validates), every `duecast` command line parses with
the real parsers, referenced files and modules exist, probes and ports agree, and the Kubernetes
objects validate against the schemas kubernetes-validate bundles (KEDA's, which it lacks, by hand).
The command lines are checked in test_deploy_commands.py, the Kubernetes objects in test_deploy_k8s.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from pydantic import BaseModel

from duecast.shared.settings import HealthSettings, Settings
from tests.unit.deploy.deploy_support import (
    DEPLOY,
    ROOT,
    compose,
    containers,
    docs,
    duecast_services,
    k8s_env,
    settings_from,
    workloads,
)

YAML_FILES = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])
ENV_NOT_IN_MODEL = {"DUECAST_CONFIG"}  # the TOML file's path, read by load_settings()


# -- every file parses --------------------------------------------------------------------------------


def test_there_is_something_to_check() -> None:
    names = {p.relative_to(DEPLOY).as_posix() for p in YAML_FILES}
    assert {"compose.yaml", "k8s/kustomization.yaml", "k8s/worker-keda.yaml"} <= names
    assert (DEPLOY / "Dockerfile").is_file()
    assert (DEPLOY / "README.md").is_file()


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_every_yaml_file_parses_into_mappings(path: Path) -> None:
    found = docs(path)
    assert found, f"{path} holds no document"
    assert all(isinstance(d, dict) for d in found)


# -- DUECAST_* variables are settings -----------------------------------------------------------------


def _field_path_exists(name: str) -> bool:
    """DUECAST_A__B__C names field a.b.c of Settings (pydantic-settings: prefix DUECAST_, nested `__`)."""
    model: type[BaseModel] | None = Settings
    for part in name.removeprefix("DUECAST_").lower().split("__"):
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return False
        annotation = field.annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return True


def _deploy_text_files() -> Iterator[Path]:
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file():
            yield path


def test_every_duecast_variable_named_in_deploy_is_a_setting() -> None:
    seen: dict[str, set[str]] = {}
    for path in _deploy_text_files():
        for name in re.findall(r"\bDUECAST_[A-Z0-9_]*[A-Z0-9]", path.read_text()):
            seen.setdefault(name, set()).add(path.relative_to(DEPLOY).as_posix())
    assert "DUECAST_HEALTH__PORT" in seen
    unknown = {
        n: sorted(files)
        for n, files in seen.items()
        if n not in ENV_NOT_IN_MODEL and not _field_path_exists(n)
    }
    assert not unknown, f"DUECAST_* variables that are no field of shared.settings.Settings: {unknown}"


def test_the_field_walk_rejects_what_is_not_a_setting() -> None:
    assert _field_path_exists("DUECAST_MYSQL__HOST")
    assert _field_path_exists("DUECAST_SOURCES")
    assert not _field_path_exists("DUECAST_MYSQL__HOSTNAME")
    assert not _field_path_exists("DUECAST_SOURCES__NAME")  # a list is set whole, as JSON
    assert not _field_path_exists("DUECAST_LOG_LEVEL__X")


@pytest.mark.parametrize("service", sorted(duecast_services()))
def test_each_compose_service_environment_is_valid_settings(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_from(duecast_services()[service]["environment"], monkeypatch)
    assert settings.health.port > 0
    assert [s.name for s in settings.sources] == ["user_block_status"]


def test_every_container_serving_health_listens_beyond_its_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """duecast's default health.host is 127.0.0.1 (issue 17); a kubelet probe or a published
    compose port comes from outside the container, so each file must say 0.0.0.0 itself."""
    assert HealthSettings().host == "127.0.0.1"
    envs = {f"compose:{n}": s["environment"] for n, s in duecast_services().items()}
    envs |= {f"k8s:{o['metadata']['name']}": k8s_env(c) for o in workloads() for c in containers(o)}
    served = 0
    for where, env in envs.items():
        health = settings_from(env, monkeypatch).health
        if health.port:
            served += 1
            assert health.host == "0.0.0.0", f"{where} serves /readyz on {health.host} only"  # noqa: S104
    assert served >= 4  # compose's dispatcher, worker and web, and both k8s Deployments


@pytest.mark.parametrize("obj", workloads(), ids=lambda o: o["metadata"]["name"])
def test_each_k8s_container_environment_is_valid_settings(
    obj: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for container in containers(obj):
        settings = settings_from(k8s_env(container), monkeypatch)
        assert settings.redis.url.get_secret_value().startswith("redis://")
        assert settings.sources


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_dockerfile_builds_a_non_root_duecast_image_from_files_that_exist() -> None:
    ins = dockerfile_instructions()
    froms = [rest.split()[0] for word, rest in ins if word == "FROM"]
    assert froms
    assert all(f == "python:3.11-slim" for f in froms)
    (entrypoint,) = [json.loads(rest) for word, rest in ins if word == "ENTRYPOINT"]
    assert entrypoint == ["duecast"]
    assert "duecast = " in (ROOT / "pyproject.toml").read_text()  # the console script the entrypoint runs
    user = [rest for word, rest in ins if word == "USER"][-1]
    uid = user.split(":")[0]
    assert uid.isdigit(), "USER must be numeric: runAsNonRoot cannot check a name"
    assert int(uid) != 0
    copied = [rest.split()[:-1] for word, rest in ins if word == "COPY" and not rest.startswith("--from")]
    sources = [src for srcs in copied for src in srcs]
    assert sources
    for src in sources:
        assert (ROOT / src).exists(), f"COPY {src}: no such file in the build context (the repo root)"
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    for src in sources:
        assert f"!{src.rstrip('/')}/" in ignore or f"!{src}" in ignore, f"{src} is excluded from the context"
    (expose,) = [rest for word, rest in ins if word == "EXPOSE"]
    assert int(expose) == health_port_compose()


# -- compose ------------------------------------------------------------------------------------------


def health_port_compose() -> int:
    ports = {int(s["environment"]["DUECAST_HEALTH__PORT"]) for s in duecast_services().values()}
    (port,) = ports
    return port


def test_compose_has_every_part_and_builds_from_this_repo() -> None:
    services = compose()["services"]
    assert {"mariadb", "redis", "migrate", "dispatcher", "worker"} <= set(services)
    for service in duecast_services().values():
        build = service["build"]
        context = (DEPLOY / build["context"]).resolve()
        assert context == ROOT
        assert (context / build["dockerfile"]).is_file()
    for service in services.values():
        for volume in service.get("volumes", []):
            host = volume.split(":")[0]
            if host.startswith("."):
                assert (DEPLOY / host).exists(), f"compose mounts {host}, which does not exist"


def test_compose_redis_is_disposable_and_never_evicts() -> None:
    command = compose()["services"]["redis"]["command"]
    flags = dict(zip(command[1::2], command[2::2], strict=False))
    assert flags["--maxmemory-policy"] == "noeviction"
    assert flags["--save"] == ""
    assert flags["--appendonly"] == "no"


def test_compose_up_wait_can_finish() -> None:
    """`up --wait` needs: every long-running service healthy-checkable, dependencies with conditions,
    and every one-shot adopted through service_completed_successfully (docker/compose#10596)."""
    services = compose()["services"]
    one_shot = {n for n, s in services.items() if s.get("restart", "no") == "no"}
    assert one_shot == {"migrate"}
    adopted: set[str] = set()
    for name, service in services.items():
        if name not in one_shot:
            assert "healthcheck" in service, f"{name} has no healthcheck: `up --wait` cannot tell it is up"
        for dep, how in service.get("depends_on", {}).items():
            condition = how["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], (
                    f"{name} waits for {dep} to be healthy; it has no check"
                )
            elif condition == "service_completed_successfully":
                assert dep in one_shot
                if name not in one_shot:
                    adopted.add(dep)
            else:
                pytest.fail(f"{name} -> {dep}: condition {condition} does not wait for readiness")
    assert adopted == one_shot


def test_compose_workers_scale_and_the_probes_use_the_health_port() -> None:
    services = compose()["services"]
    worker = services["worker"]
    assert "container_name" not in worker
    for mapping in worker.get("ports", []):
        parts = str(mapping).split(":")
        assert len(parts) < 3 or parts[1] == "", (
            f"worker publishes a fixed host port ({mapping}): --scale clashes"
        )
    port = health_port_compose()
    for name, service in duecast_services().items():
        if name == "migrate":
            continue
        probe = " ".join(service["healthcheck"]["test"])
        if name == "web":  # the dashboard answers /healthz on its own --port, not on health.port
            web_port = service["command"][service["command"].index("--port") + 1]
            assert f"http://127.0.0.1:{web_port}/healthz" in probe, f"web's healthcheck misses {web_port}"
            continue
        assert f"http://127.0.0.1:{port}/readyz" in probe, f"{name}'s healthcheck misses /readyz on {port}"


def test_compose_credentials_and_hosts_agree() -> None:
    services = compose()["services"]
    db = services["mariadb"]["environment"]
    for name, service in duecast_services().items():
        env = service["environment"]
        assert env["DUECAST_MYSQL__HOST"] in services, name
        assert urlsplit(env["DUECAST_REDIS__URL"]).hostname in services, name
        assert env["DUECAST_MYSQL__USER"] == db["MARIADB_USER"]
        assert env["DUECAST_MYSQL__PASSWORD"] == db["MARIADB_PASSWORD"]
        assert env["DUECAST_MYSQL__DATABASE"] == db["MARIADB_DATABASE"]
