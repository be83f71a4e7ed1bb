"""Keep deploy/ honest without a container engine: every file parses, every DUECAST_* variable is a real
setting (and each container's whole environment validates), every `duecast` command line parses with
the real parsers, referenced files and modules exist, probes and ports agree, and the Kubernetes
objects validate against the schemas kubernetes-validate bundles (KEDA's, which it lacks, by hand).
"""

from __future__ import annotations

import importlib.util
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml
from pydantic import BaseModel

from duecast.cli import commands as cli
from duecast.shared.fanout.keys import Keys
from duecast.shared.settings import HealthSettings, Settings

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
YAML_FILES = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])
KEDA_KINDS = {"ScaledObject", "TriggerAuthentication"}
MIN_K8S = "1.27"  # worker-pdb.yaml's unhealthyPodEvictionPolicy is on by default from 1.27
ENV_NOT_IN_MODEL = {"DUECAST_CONFIG"}  # the TOML file's path, read by load_settings()


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


# -- commands, files and modules exist ----------------------------------------------------------------


class Parsed(BaseException):
    """Raised where a command would start working: its arguments parsed. A BaseException, so it
    passes through the commands' failure handling (shared/process/failures.py), as Ctrl-C would."""


def _stop_after_parsing(*_args: Any, **_kwargs: Any) -> Any:
    raise Parsed


def assert_command_parses(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, *, app_exists: bool = True
) -> None:
    """Run argv through duecast.cli.commands and the role's own argparse parser, stopping before any I/O;
    with `app_exists`, an --app module must be importable too."""
    assert argv[0] in cli.COMMANDS, f"`duecast {argv[0]}` is not a subcommand ({', '.join(cli.COMMANDS)})"
    monkeypatch.setattr("duecast.dispatcher.main.start_process", _stop_after_parsing)
    monkeypatch.setattr("duecast.worker.main.start_process", _stop_after_parsing)
    monkeypatch.setattr("duecast.cli.commands.load_settings", _stop_after_parsing)
    monkeypatch.setattr("duecast.web.serve.load_settings", _stop_after_parsing)
    try:
        cli.main(argv)
    except Parsed:
        pass
    except SystemExit as exc:
        pytest.fail(f"`duecast {' '.join(argv)}` does not parse (exit {exc.code})")
    else:
        pytest.fail(f"`duecast {' '.join(argv)}` returned before parsing its arguments")
    for i, arg in enumerate(argv[:-1]):
        if arg == "--app" and app_exists:
            module = argv[i + 1].partition(":")[0]
            assert importlib.util.find_spec(module) is not None, f"--app {module}: no such module"


def command_lines() -> list[tuple[str, list[str]]]:
    """Every `duecast` argv in deploy/: compose commands, k8s container args (the image's entrypoint is
    duecast), and the `duecast ...` lines of the README's code blocks."""
    lines = [(f"compose:{n}", list(s["command"])) for n, s in duecast_services().items()]
    lines += [(f"k8s:{o['metadata']['name']}", list(c["args"])) for o in workloads() for c in containers(o)]
    readme = (DEPLOY / "README.md").read_text()
    for block in re.findall(r"```(?:sh|console|bash)?\n(.*?)```", readme, flags=re.S):
        for line in block.splitlines():
            m = re.match(r"\s*(?:\$\s*)?duecast\s+(.*?)\s*(?:#.*)?$", line)
            if m:
                lines.append(("README", m.group(1).split()))
    return lines


def test_the_readme_shows_commands() -> None:
    assert any(where == "README" for where, _ in command_lines())


@pytest.mark.parametrize(
    ("where", "argv"), command_lines(), ids=lambda v: v if isinstance(v, str) else " ".join(v)
)
def test_every_duecast_command_line_parses(
    where: str, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The README's examples name the reader's own app (myapp.handlers); the files run the demo's.
    assert_command_parses(argv, monkeypatch, app_exists=where != "README")


def test_the_parse_check_catches_a_bad_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(pytest.fail.Exception, match="does not parse"):
        assert_command_parses(
            ["worker", "--app", "duecast.examples.block_check", "--no-such-flag"], monkeypatch
        )
    with pytest.raises(AssertionError, match="not a subcommand"):
        assert_command_parses(["dispatch"], monkeypatch)


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


def test_parsing_runs_no_role(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parse check must stop before any role starts (no thread, no connection)."""
    before = threading.active_count()
    assert_command_parses(["dispatcher"], monkeypatch)
    assert threading.active_count() == before
