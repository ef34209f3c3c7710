"""The recipes in ``deploy/`` stay true: they parse, and every command, probe path and
port in them is one that lowkiq really runs and serves (started here with the same
arguments, on free ports, against the test's Redis).  No Docker engine is needed."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.parse
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.apps.runner import ROOT, WorkerProcess, eventually
from tests.health.probe import free_ports, get

DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
Start = Callable[..., WorkerProcess]


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def manifest(kind: str, name: str) -> dict[str, Any]:
    found = [
        doc
        for path in sorted(KUBERNETES.glob("*.yaml"))
        for doc in documents(path)
        if doc["kind"] == kind and doc["metadata"]["name"] == name
    ]
    assert len(found) == 1, (kind, name)
    return found[0]


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def with_option(args: list[str], name: str, value: str) -> list[str]:
    args = list(args)
    args[args.index(name) + 1] = value
    return args


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (found,) = deployment["spec"]["template"]["spec"]["containers"]
    return found


def port_number(container: dict[str, Any], port: int | str) -> int:
    """A probe's port, by number or by the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    (found,) = [p["containerPort"] for p in container["ports"] if p["name"] == port]
    return int(found)


def command(words: list[str]) -> list[str]:
    """A recipe's command, run by this Python (``lowkiq``/``gunicorn`` as modules)."""
    if words[0] in ("lowkiq", "gunicorn"):
        return [sys.executable, "-m", words[0], *words[1:]]
    return words


def run(words: list[str], redis_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url}
    return subprocess.run(
        command(words), cwd=DEPLOY, env=env, capture_output=True, text=True, timeout=120
    )


def with_port(url: str, port: int) -> str:
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=f"127.0.0.1:{port}").geturl()


@pytest.fixture
def recipe_redis(redis_client: redis.Redis, redis_url: str) -> str:
    """The test's Redis, with the query string the recipes give REDIS_URL."""
    config = manifest("ConfigMap", "lowkiq")["data"]["REDIS_URL"]
    assert compose()["x-app"]["environment"]["REDIS_URL"] == config
    return f"{redis_url}?{urllib.parse.urlsplit(config).query}"


@pytest.fixture
def deploy_workers(recipe_redis: str) -> Iterator[Start]:
    """``start(args)``: a ``lowkiq worker`` with a recipe's arguments, run in ``deploy/``."""
    started: list[WorkerProcess] = []

    def start(args: list[str]) -> WorkerProcess:
        process = WorkerProcess(*args, env={"REDIS_URL": recipe_redis}, cwd=DEPLOY)
        started.append(process)
        process.wait_started()
        return process

    yield start
    for process in started:
        process.close()


@pytest.fixture
def dashboard(recipe_redis: str) -> Iterator[int]:
    """The dashboard Deployment's command (gunicorn and its config) on a free port."""
    spec = container(manifest("Deployment", "lowkiq-dashboard"))
    port = free_ports()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "REDIS_URL": recipe_redis,
        "LOWKIQ_WEB_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "1",
    }
    process = subprocess.Popen(
        command(spec["command"]),
        cwd=DEPLOY,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        eventually(lambda: get(port, "/static/lowkiq.css")[0] == 200 or process.poll())
        assert process.poll() is None
        yield port
    finally:
        process.terminate()
        process.wait(30)


def test_the_worker_deployment_probes_are_served_and_its_prestop_quiets_the_pod(
    deploy_workers: Start, recipe_redis: str
) -> None:
    deployment = manifest("Deployment", "lowkiq-worker")
    spec = container(deployment)
    args = spec["args"]
    health = int(option(args, "--health-port"))
    port = free_ports()
    worker = deploy_workers(with_option(args, "--health-port", str(port)))
    for probe in ("livenessProbe", "readinessProbe"):
        http = spec[probe]["httpGet"]
        assert port_number(spec, http["port"]) == health
        eventually(lambda http=http: get(port, http["path"])[0] == 200)

    pre_stop = spec["lifecycle"]["preStop"]["exec"]["command"]
    assert option(pre_stop, "--pid") == "1"
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert float(option(pre_stop, "--timeout")) < grace
    assert option(pre_stop, "-r") == option(args, "-r")
    quieted = run(with_option(pre_stop, "--pid", str(worker.process.pid)), recipe_redis)
    assert quieted.returncode == 0, quieted.stderr
    assert "handed over" in quieted.stdout
    assert get(port, spec["readinessProbe"]["httpGet"]["path"])[0] == 503
    assert get(port, spec["livenessProbe"]["httpGet"]["path"])[0] == 200
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_the_compose_workers_answer_their_healthcheck(
    deploy_workers: Start, recipe_redis: str
) -> None:
    service = compose()["services"]["worker"]
    assert service["deploy"]["replicas"] == 2 and service["stop_signal"] == "SIGTERM"
    args = service["command"]
    health = int(option(args, "--health-port"))
    check = service["healthcheck"]["test"]
    assert check[0] == "CMD"
    url = option(check, "--health-url")
    assert urllib.parse.urlsplit(url).port == health
    port = free_ports()
    deploy_workers(with_option(args, "--health-port", str(port)))
    result = eventually(
        lambda: (found := run(with_option(check[1:], "--health-url", with_port(url, port)),
                              recipe_redis)).returncode == 0 and found
    )  # fmt: skip
    assert result.stdout.strip().endswith(": 200")


def test_redis_keeps_an_append_only_file_in_compose() -> None:
    redis_service = compose()["services"]["redis"]
    assert option(redis_service["command"], "--appendonly") == "yes"
    assert redis_service["volumes"] == ["redis-data:/data"]
    for name in ("worker", "dashboard"):
        depends = compose()["services"][name]["depends_on"]
        assert depends["redis"]["condition"] == "service_healthy"


def test_the_dashboard_probes_service_compose_healthcheck_and_keda_url_are_served(
    dashboard: int, recipe_redis: str
) -> None:
    deployment = manifest("Deployment", "lowkiq-dashboard")
    spec = container(deployment)
    (bind,) = [e["value"] for e in spec["env"] if e["name"] == "LOWKIQ_WEB_BIND"]
    served = int(bind.rsplit(":", 1)[1])
    for probe in ("livenessProbe", "readinessProbe"):
        http = spec[probe]["httpGet"]
        assert port_number(spec, http["port"]) == served
        assert get(dashboard, http["path"])[0] == 200, http

    service = manifest("Service", "lowkiq-dashboard")
    (service_port,) = service["spec"]["ports"]
    assert port_number(spec, service_port["targetPort"]) == served
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()

    check = compose()["services"]["dashboard"]["healthcheck"]["test"]
    url = option(check, "--health-url")
    assert compose()["services"]["dashboard"]["ports"] == [f"{served}:{served}"]
    result = run(with_option(check[1:], "--health-url", with_port(url, dashboard)), recipe_redis)
    assert result.returncode == 0, result.stderr

    keda = manifest("ScaledObject", "lowkiq-worker")
    (trigger,) = keda["spec"]["triggers"]
    target = urllib.parse.urlsplit(trigger["metadata"]["url"])
    assert target.hostname.split(".")[0] == service["metadata"]["name"]
    assert target.port == service_port["port"]
    status, body = get(dashboard, target.path)
    value: Any = json.loads(body)
    for key in trigger["metadata"]["valueLocation"].split("."):
        value = value[key]
    assert status == 200 and isinstance(value, (int, float))


def test_keda_scales_the_worker_deployment_up_to_shards_over_threads(
    redis_client: redis.Redis,
) -> None:
    spec = importlib.util.spec_from_file_location("deploy_app", DEPLOY / "app.py")
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    shards = sum(worker.shards_count for worker in app.lowkiq.settings.workers)
    threads = int(option(container(manifest("Deployment", "lowkiq-worker"))["args"], "--threads"))
    keda = manifest("ScaledObject", "lowkiq-worker")
    assert keda["spec"]["scaleTargetRef"]["name"] == "lowkiq-worker"
    assert keda["spec"]["maxReplicaCount"] == math.ceil(shards / threads)


def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, ``(NAME, arguments)``, continuations joined."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_the_dockerfile_runs_the_worker_as_a_user_and_its_files_exist(
    deploy_workers: Start,
) -> None:
    instructions = dockerfile()
    named = {name: argument for name, argument in instructions}
    assert named["FROM"].startswith("python:") and named["FROM"].endswith("-slim")
    assert named["USER"].split(":")[0] not in ("root", "0")
    assert named["STOPSIGNAL"] == "SIGTERM"
    assert json.loads(named["ENTRYPOINT"]) == ["lowkiq", "worker"]
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    kept = {line[1:] for line in ignored if line.startswith("!")}
    for name, argument in instructions:
        if name == "COPY":
            *sources, _ = argument.split()
            for source in sources:
                assert (ROOT / source).exists(), source
                assert source in kept, f"{source} is left out of the build context"
    args = json.loads(named["CMD"])
    assert named["EXPOSE"] == option(args, "--health-port")
    port = free_ports()
    deploy_workers(with_option(args, "--health-port", str(port)))
    eventually(lambda: get(port, "/ready")[0] == 200)


def test_the_systemd_worker_unit_starts_a_worker_that_serves_its_health_port(
    deploy_workers: Start,
) -> None:
    unit = (DEPLOY / "systemd" / "lowkiq-worker@.service").read_text()
    settings = dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and line[0] != "#"
    )
    assert settings["KillSignal"] == "SIGTERM" and settings["Restart"] == "on-failure"
    assert int(settings["TimeoutStopSec"]) > 0
    executable, *args = settings["ExecStart"].split()
    assert executable.endswith("/lowkiq") and args[0] == "worker"
    port = free_ports()
    deploy_workers([word.replace("%i", str(port)) for word in args[1:]])
    eventually(lambda: get(port, "/live")[0] == 200 and get(port, "/ready")[0] == 200)


def test_systemd_analyze_verifies_the_units(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed on this machine")
    # Verify checks that ExecStart's program exists: point it at this environment's.
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "lowkiq").exists() or not (bin_dir / "gunicorn").exists():
        pytest.skip(f"no lowkiq and gunicorn scripts in {bin_dir} to stand for the venv's")
    units = []
    for source, name in (
        ("lowkiq-worker@.service", "lowkiq-worker@8081.service"),
        ("lowkiq-dashboard.service", "lowkiq-dashboard.service"),
    ):
        text = (DEPLOY / "systemd" / source).read_text()
        assert "/srv/app/venv/bin/" in text
        (tmp_path / name).write_text(text.replace("/srv/app/venv/bin/", f"{bin_dir}/"))
        units.append(str(tmp_path / name))
    result = subprocess.run([analyze, "verify", *units], capture_output=True, text=True, timeout=60)
    if result.returncode != 0 and "Failed to " in result.stderr and "bus" in result.stderr:
        pytest.skip(f"systemd-analyze cannot run here: {result.stderr.strip()}")
    # verify exits 0 on unknown keys and bad values too: any message is a finding.
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stderr


def test_the_files_the_dockerfile_copies_build_lowkiq_with_the_dashboard(tmp_path: Path) -> None:
    # Stage what the image's COPY instructions put under the directory it pip-installs
    # (without __pycache__, as the ignore file says), then build it as pip would.
    instructions = dockerfile()
    (install,) = [arg for name, arg in instructions if name == "RUN" and "pip install" in arg]
    target = install.split("pip install", 1)[1].split()[0]
    staged = tmp_path / "context"
    for name, argument in instructions:
        if name != "COPY":
            continue
        *sources, destination = argument.split()
        if not destination.startswith(target):
            continue
        into = staged / destination[len(target) :].strip("/")
        for source in sources:
            path = ROOT / source
            if path.is_dir():
                ignore = shutil.ignore_patterns("__pycache__")
                shutil.copytree(path, into, ignore=ignore)
            else:
                into.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, into / path.name)
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(staged)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("lowkiq-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "lowkiq/health/http.py" in names
    assert "lowkiq_web/templates/lowkiq/base.html" in names
    assert "lowkiq_web/static/lowkiq/lowkiq.css" in names
