"""The operator dashboard (``chronos/admin/dashboard.html``) in headless Chromium against a real
node: its charts must draw what the node holds and delivers, not merely load.

Why a browser and not an HTML parse: the page is JavaScript that polls the admin API and draws
SVG; only running it shows a renamed JSON field, a drawing bug or a console error. Chromium comes
from the system (Debian's ``chromium``), driven by Playwright without its own browser download.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from chronos.metrics import BOUNDS_MS
from chronos.web.tokens import hash_token, new_token
from proxy.client import DelayClient, DelayRequest
from tests.broker import is_tansu
from tests.integration.harness import Inbox, make_settings, running_node, wait_until

try:
    from playwright.sync_api import Page, sync_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    if os.environ.get("CI"):  # .ci/run installs it: a skip there would hide a broken setup
        raise
    pytest.skip("playwright is not installed (pip install playwright)", allow_module_level=True)

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Minutes from now -> messages due then: distinct counts, so each bar is told from the others.
LATER = {5: 3, 17: 7, 33: 12, 52: 5}
SOON = 40
CHARTS = ("due-chart", "rate-chart", "lateness-chart")
#: JavaScript: the sum of the due chart's bars.
DUE_TOTAL = (
    "[...document.querySelectorAll('#due-chart rect')].reduce((n, r) => n + +r.dataset.count, 0)"
)
#: JavaScript: every chart's data attributes.
CHART_DATA = "ids => Object.fromEntries(ids.map(i => [i, document.getElementById(i)?.dataset]))"


def _chromium() -> str:
    """The system's Chromium (``CHRONOS_TEST_CHROMIUM`` overrides); Playwright's own browser
    download needs the internet, which CI does not have."""
    names = ("chromium", "chromium-browser", "google-chrome")
    found = os.environ.get("CHRONOS_TEST_CHROMIUM") or next(
        filter(None, map(shutil.which, names)), None
    )
    if found is None:
        if os.environ.get("CI"):  # .ci/run installs it
            pytest.fail("no Chromium on PATH in CI: .ci/run should have installed it")
        pytest.skip("no Chromium on PATH (apt-get install chromium, or set CHRONOS_TEST_CHROMIUM)")
    return found


def _bars(page: Page, chart: str) -> list[dict[str, float]]:
    """Each drawn bar of ``chart``: its count, minute and drawn height."""
    return cast(
        "list[dict[str, float]]",
        page.eval_on_selector_all(
            f"#{chart} rect[data-count]",
            """rects => rects.map(r => ({count: +r.dataset.count, minute: +r.dataset.minute,
                                         height: +r.getAttribute('height')}))""",
        ),
    )


def _charts(page: Page) -> dict[str, dict[str, Any]]:
    """Every chart's data attributes, for a failure message that says what the page showed."""
    return cast("dict[str, dict[str, Any]]", page.evaluate(CHART_DATA, list(CHARTS)))


def _wait(page: Page, condition: str, what: str, timeout_s: float = 30) -> None:
    """Polls ``condition`` with ``page.evaluate`` (Chrome's own evaluation): Playwright's
    ``wait_for_function`` evaluates its predicate with the page's ``eval``, which the
    dashboard's Content-Security-Policy forbids, as it should."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(f"() => Boolean({condition})"):
        if time.monotonic() > deadline:
            raise AssertionError(f"the page never showed {what}; charts: {_charts(page)}")
        page.wait_for_timeout(200)


def test_dashboard_draws_the_schedule_deliveries_and_replicas(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    """Mutants caught: a chart drawing from a field the API does not send (or a renamed one);
    due bars misplaced or scaled out of proportion; a rate that ignores deliveries; a replicas
    table without the node; any JavaScript or resource error in the console; a page that
    does not send the token its address gives (the node requires one here)."""
    if is_tansu():
        pytest.skip("runs once per suite, in the Apache Kafka pass: the page reads the admin API")
    executable = _chromium()
    token = new_token()
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        f'[[tokens]]\nname = "ops"\nsha256 = "{hash_token(token)}"\noperations = ["admin"]\n'
    )
    settings = make_settings(
        kafka_bootstrap, namespace, tmp_path / "store", security={"tokens_file": tokens}
    )
    topic = f"{namespace}-target"
    errors: list[str] = []
    with running_node(settings) as node, Inbox(settings, [topic]) as inbox:
        port = node.admin_port
        assert port is not None
        base = f"http://127.0.0.1:{port}"
        auth = {"authorization": f"Bearer {token}"}
        with (
            httpx.Client(base_url=base, timeout=5, headers=auth) as http,
            DelayClient(settings) as client,
        ):
            wait_until(lambda: http.get("/readyz").status_code == 200, 60, "the node is ready")
            # While due counts are built /v1/forecast answers 503, which Chromium logs as an
            # error: wait it out so a console error means a fault of the page.
            wait_until(lambda: http.get("/v1/forecast").status_code == 200, 60, "forecast ready")
            now_ms = int(time.time() * 1000)
            client.send_batch(
                [
                    DelayRequest(topic, "later", deliver_at=now_ms + minute * 60_000)
                    for minute, count in LATER.items()
                    for _ in range(count)
                ]
            )
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=executable, args=["--no-sandbox"]
                )
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
                page.goto(f"{base}/dashboard#token={token}")
                # Kept for the tab, out of the address bar (and of screenshots, history).
                assert page.url == f"{base}/dashboard"
                every_chart = " && ".join(
                    f"document.getElementById('{c}')?.dataset.rendered === 'true'" for c in CHARTS
                )
                # The rate chart draws once two samples exist; deliveries after that must show.
                _wait(page, every_chart, "all three charts rendered")
                ids = {
                    r.id
                    for r in client.send_batch(
                        [DelayRequest(topic, f"soon{i}", delay=1.0 + i / SOON) for i in range(SOON)]
                    )
                }
                assert inbox.wait_for(ids, 60)
                _wait(
                    page,
                    f"""(() => {{
                        const rate = document.getElementById('rate-chart').dataset;
                        return +rate.bars >= 2 && +rate.peak > 0 &&
                            {DUE_TOTAL} === {sum(LATER.values())};
                    }})()""",
                    "the delivered messages in the rate and only the later ones as due",
                )
                _wait(
                    page,
                    f"document.querySelector('#totals dd').textContent === '{SOON}'",
                    f"delivered = {SOON} among the counters",
                )

                bars = sorted(_bars(page, "due-chart"), key=lambda b: b["minute"])
                assert page.get_attribute("#due-chart", "data-bars") == str(len(LATER))
                assert [b["count"] for b in bars] == list(LATER.values())
                for bar, minute in zip(bars, LATER, strict=True):
                    # from_ms is the minute the node's clock is in when the page asked: the
                    # same one as when the test scheduled, or the next one.
                    assert bar["minute"] in (minute - 1, minute), bars
                per_message = bars[0]["height"] / bars[0]["count"]
                assert all(abs(b["height"] - b["count"] * per_message) < 1 for b in bars), bars

                lateness = _bars(page, "lateness-chart")
                assert len(lateness) == len(BOUNDS_MS) + 1
                assert sum(b["count"] for b in lateness) >= 1  # one per acknowledged batch

                row = page.locator("#replicas tbody tr[data-node='n1']")
                assert row.get_attribute("data-role") == "alone"
                assert "alone" in page.inner_text("#role")
                assert page.inner_text("#ready") == "ready"

                shot = os.environ.get("CHRONOS_TEST_SCREENSHOT")
                path = REPO_ROOT / "docs" / "dashboard.png" if shot else tmp_path / "dashboard.png"
                page.screenshot(path=str(path), full_page=True)
                browser.close()
    assert not errors, f"console errors: {errors}"
