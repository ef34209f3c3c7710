"""The built wheel ships templates and static files: installed into a fresh virtualenv,
``create_app()`` serves a page, the vendored htmx and uPlot from the installed package,
and the ``lowkiq`` command runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile

from web_support import REPO

CHECK = textwrap.dedent(
    """
    import sys
    import redis
    import lowkiq
    import lowkiq_web.blueprint as blueprint
    from lowkiq_web import create_app

    class OrderWorker(lowkiq.Worker):
        pass

    lowkiq.settings.redis = lambda: redis.Redis.from_url(sys.argv[1])
    lowkiq.settings.workers = [OrderWorker]
    templates = blueprint.asset_dir("templates")
    assert "site-packages" in str(templates), templates
    client = create_app().test_client()
    page = client.get("/OrderWorker/enqueued")
    assert page.status_code == 200 and b"OrderWorker" in page.data, page.status_code
    htmx = client.get("/static/" + "htmx-" + blueprint.HTMX_VERSION + ".min.js")
    assert htmx.status_code == 200 and b"htmx" in htmx.data[:200]
    uplot = client.get("/static/" + "uPlot-" + blueprint.UPLOT_VERSION + ".min.js")
    assert uplot.status_code == 200 and b"uPlot" in uplot.data[:200]
    print("wheel ok")
    """
)


def test_wheel_serves_the_dashboard(tmp_path, redis_url):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO)],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("lowkiq-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "lowkiq_web/templates/lowkiq/base.html" in names
    assert any(n.startswith("lowkiq_web/static/lowkiq/htmx-") for n in names)
    # Type checkers read the packages' hints (PEP 561) and the licence ships.
    assert {"lowkiq/py.typed", "lowkiq_web/py.typed"} <= set(names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        check=True,
        capture_output=True,
    )
    result = subprocess.run(
        [str(python), "-c", CHECK, redis_url],
        cwd=tmp_path,  # away from the checkout, so the installed package is imported
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "wheel ok" in result.stdout
    # The README's commands come with it: the installed `lowkiq` script runs.
    command = subprocess.run(
        [str(venv / "bin" / "lowkiq"), "--help"], cwd=tmp_path, capture_output=True, text=True
    )
    assert command.returncode == 0, command.stderr
    assert "worker" in command.stdout and "info" in command.stdout
