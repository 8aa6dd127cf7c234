"""The viewer in a real headless browser: Debian's Chromium, driven by Playwright, against
the app served on loopback by the same server `props serve --http` uses, on the real
database. An analyst's path: sign in, filter the runs, open a run and see an issue
highlighted at its lines with its match, open the transcript, give a verdict with one key
and find its event in the log, open the comparison. A screenshot of each page is kept in
the test's temporary directory; no script from the data ever runs."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from props.core.domain import definitions, evaluation_starts, evaluations, tokens
from props.core.log.store import EventStore
from props.projections import engine
from props.tools.http import server
from props.tools.http.app import create_app
from tests.conftest import once_per_ci
from tests.reactor_helpers import eventually, sync_samples
from tests.viewer_helpers import LONG_TEXT, real_code, viewed_run

pytestmark = [pytest.mark.browser, once_per_ci]  # (tests/conftest.py)
CHROMIUM = os.environ.get("PROPS_CHROMIUM", "/usr/bin/chromium")
# As root in a container, without a sandbox or a GPU; and nothing of Google's reached for
# (the machine's network is closed: each attempt would be refused, and slow the start).
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _browser_or_skip() -> str:
    found = shutil.which(CHROMIUM) or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if found is None:
        message = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("PROPS_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{message}; PROPS_REQUIRE_BROWSER=1 demands one")
        pytest.skip(message)
    return found


@pytest.fixture
async def served(store: EventStore) -> AsyncIterator[str]:
    """The app on a free loopback port until the test ends."""
    sock = server.bind("127.0.0.1:0", "viewer")
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve, create_app(store), sock)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
        tg.cancel_scope.cancel()


async def test_an_analyst_reads_a_run_and_gives_a_verdict(
        store: EventStore, served: str, tmp_path: Path) -> None:
    executable = _browser_or_skip()
    from playwright.async_api import async_playwright

    viewed = await viewed_run(store, model="model-a")
    other = await viewed_run(store, model="model-b")
    _, secret = await tokens.create(store, "ada", ("read", "review"))
    dialogs: list[str] = []

    async def shot(page: object, name: str) -> None:
        await page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=executable, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("dialog", lambda d: dialogs.append(d.message))  # an alert() would land here
            await page.goto(f"{served}/runs")
            assert page.url.startswith(f"{served}/login")
            await page.fill("#token", secret)
            await shot(page, "login")
            await page.click("button[type=submit]")
            await page.wait_for_url(f"{served}/runs")

            await page.fill("input[name=model]", "model-b")
            await page.click("form.filters button[type=submit]")
            await page.wait_for_url("**model=model-b**")
            rows = page.locator("table.runs tbody tr")
            assert await rows.count() == 1
            assert str(other.run_id)[:8] in await rows.first.inner_text()
            await shot(page, "runs-filtered")

            await page.goto(f"{served}/runs?model=model-a")
            await page.click(f"a[href='/runs/{viewed.run_id}']")
            await page.wait_for_url(f"{served}/runs/{viewed.run_id}")
            issue = page.locator("#issue-i1")
            marked = issue.locator(".said .line.marked")
            assert await marked.count() == 1 and await marked.get_attribute("data-line") == "10"
            background = await marked.evaluate("e => getComputedStyle(e).backgroundColor")
            unmarked = await issue.locator(".said .line:not(.marked)").first.evaluate(
                "e => getComputedStyle(e).backgroundColor")
            assert background != unmarked  # highlighted, visibly
            assert "find T1#1" in await issue.locator(".grades").inner_text()
            # A partial match (same file, partial credit) is not a find: another word, and
            # another look (the border's colour and style).
            find = issue.locator(".grade-find").first
            partial = page.locator("#issue-i3 .grade-partial").first
            assert "partial" in await partial.inner_text()
            assert "find" not in await partial.inner_text()
            look = "e => [getComputedStyle(e).borderLeftColor, getComputedStyle(e)" \
                   ".borderLeftStyle]"
            assert await find.evaluate(look) != await partial.evaluate(look)
            rationale = await issue.locator(".rationale").inner_text()
            assert "<script>alert(1)</script>" in rationale  # shown as text, never run
            tricks = await page.locator("#issue-i3 .rationale").inner_text()
            assert "{{7*7}}" in tricks and "49" not in tricks  # never evaluated
            assert "U+202E" in tricks and "U+200B" in tricks  # bidi and zero-width, visible
            assert "\u202e" not in tricks and "\u200b" not in tricks
            assert "[/x] [bold]" in await page.locator("#issue-i2 .rationale").inner_text()
            await shot(page, "run")

            await page.goto(f"{served}/runs/{str(viewed.run_id)[:8]}")  # the 8 digits shown
            assert str(viewed.run_id)[:8] in await page.locator("h1").inner_text()
            assert await page.locator("#issue-i1").count() == 1
            await page.click("nav.tabs >> text=Transcript")
            await page.wait_for_url("**/runs/*/transcript")
            assert await page.locator("article.turn").count() == viewed.turns
            assert "answer 3" in await page.locator("article.turn").last.inner_text()
            await shot(page, "transcript")

            await page.goto(f"{served}/review")
            issue_id = await page.locator("input[name=issue_id]").get_attribute("value")
            judged = await page.locator("input[name=run_id]").get_attribute("value")
            await shot(page, "review")
            await page.locator("body").press("c")  # one key: confirm
            await page.wait_for_url("**/review?**done=**")

            async def recorded() -> bool:
                return bool(await store.read_stream(f"review-{judged}"))
            await eventually(recorded, seconds=120)
            [verdict] = [r.event for r in await store.read_stream(f"review-{judged}")]
            assert verdict.reviewer == "ada"  # type: ignore[union-attr]
            assert verdict.critique_issue_id == issue_id  # type: ignore[union-attr]
            await engine.rebuild(store)

            await page.goto(f"{served}/compare?a=human%401&b=tiered%402")
            assert "human@1 against tiered@2" in await page.locator("main").inner_text()
            await page.goto(f"{served}/compare?a=tiered%401&b=tiered%402")
            assert "Agreement" in (await page.locator("main").text_content() or "")
            await shot(page, "compare")
        finally:
            await browser.close()
    assert dialogs == []
    assert {f.name for f in tmp_path.glob("*.png")} >= {
        "login.png", "runs-filtered.png", "run.png", "transcript.png", "review.png",
        "compare.png"}


PAGES = ["/runs", "/runs/{run}", "/runs/{run}/transcript", "/runs/{run}/timeline",
         "/evaluations", "/evaluations/nightly", "/scores", "/compare",
         "/compare?a=tiered%401&b=tiered%402", "/review"]


async def test_every_page_fits_a_phone_and_plots_have_axes(
        store: EventStore, served: str, tmp_path: Path) -> None:
    """At 390 px no page scrolls sideways (a wide table scrolls inside itself); each page is
    kept as a screenshot at 1280 and at 390 px; the score plots have labelled axes."""
    executable = _browser_or_skip()
    from playwright.async_api import async_playwright

    # Real code with long lines, issue texts as models write them, and a baseline's run of
    # hundreds of issues (the pages were 799, 978 and 661 px wide at 390 with these; the
    # test passed on a fixture of 30-character lines).
    viewed = await viewed_run(store, model="a-model-name-long-enough-to-need-a-break",
                              code=real_code(), text=LONG_TEXT)
    baseline = await viewed_run(store, model="baseline-ruff", code=real_code(),
                                text=LONG_TEXT, extra_issues=300)
    await sync_samples(store)  # and an evaluation, one of its cases requested
    await definitions.push(store, definitions.reference_local())
    plan = evaluations.Plan(name="nightly", examples=["csvtool/*", "logparse/*"],
                            critic=[evaluations.Critic(definition="reference", ref="local")])
    ev, _ = await evaluation_starts.start(store, plan, await evaluations.resolve(store, plan))
    await evaluations.request(store, ev, ev.cases[0], 0)
    await engine.rebuild(store)
    _, secret = await tokens.create(store, "ada", ("read", "review"))
    wide: dict[str, int] = {}
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=executable, args=FLAGS)
        try:
            for width in (1280, 390):
                page = await browser.new_page(viewport={"width": width, "height": 800})
                await page.goto(f"{served}/login")
                await page.fill("#token", secret)
                await page.click("button[type=submit]")
                await page.wait_for_url(f"{served}/runs")
                for n, path in enumerate([*PAGES, f"/runs/{baseline.run_id}"]):
                    answer = await page.goto(served + path.format(run=viewed.run_id))
                    assert answer is not None and answer.status == 200, path
                    await page.screenshot(path=str(tmp_path / f"{n:02d}-{width}.png"),
                                          full_page=True)
                    if width == 390:
                        wide[path] = await page.evaluate(
                            "document.documentElement.scrollWidth")
                if width == 390:  # negative control: the measure sees an overflow
                    assert await page.evaluate(
                        "() => { const d = document.createElement('pre'); "
                        "d.textContent = 'x'.repeat(400); document.body.append(d); "
                        "return document.documentElement.scrollWidth; }") > 390
                if width == 1280:
                    await page.goto(f"{served}/scores")
                    ticks = await page.locator("svg.interval .tick-label").all_text_contents()
                    assert {"0%", "50%", "100%"} <= set(ticks)
                    # One request date: no chart over time, a sentence saying why.
                    assert await page.locator("figure.plot").count() == 0
                    assert "two dates or more" in await page.locator("main").inner_text()
                await page.close()
        finally:
            await browser.close()
    assert {path: px for path, px in wide.items() if px > 390} == {}
    assert len(list(tmp_path.glob("*-390.png"))) == len(PAGES) + 1 == \
        len(list(tmp_path.glob("*-1280.png")))
