"""The web viewer over HTTP: the real app (the API's, with the viewer in it) on the real
database, through httpx. Sign-in, filters, a run's issues at their lines with every
scorer's match, its transcript, hostile text as text, and verdicts as events."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from props.core.domain import tokens
from props.core.log.store import EventStore
from props.tools.http.app import create_app
from tests.viewer_helpers import viewed_run


@asynccontextmanager
async def browser(store: EventStore, secret: str | None = None,
                  ) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app; signed in with `secret` through the login form."""
    transport = httpx.ASGITransport(app=create_app(store))
    async with httpx.AsyncClient(transport=transport, base_url="http://viewer") as client:
        if secret is not None:
            response = await sign_in(client, secret)
            assert response.status_code == 303, response.text
        yield client


def field(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found, f"no field {name}"
    return found[1]


async def sign_in(client: httpx.AsyncClient, secret: str, nonce: str | None = None,
                  next_page: str = "/runs") -> httpx.Response:
    form = await client.get("/login")
    return await client.post("/login", data={
        "token": secret, "nonce": nonce or field(form.text, "nonce"), "next": next_page})


async def test_sign_in_keeps_the_token_in_a_strict_cookie_and_revoking_ends_it(
        store: EventStore) -> None:
    await viewed_run(store)
    _, secret = await tokens.create(store, "ada", ("read",))
    async with browser(store) as client:
        assert (await client.get("/runs")).headers["location"] == "/login?next=%2Fruns"
        wrong_nonce = await sign_in(client, secret, nonce="forged")
        assert wrong_nonce.status_code == 403 and "props_session" not in client.cookies
        bad = await sign_in(client, "props_not-a-token")
        assert bad.status_code == 401 and "unknown, revoked" in bad.text
        assert "props_session" not in client.cookies
        elsewhere = await sign_in(client, secret, next_page="//evil.example/")
        assert elsewhere.status_code == 303 and elsewhere.headers["location"] == "/runs"
        cookie = elsewhere.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        page = await client.get("/runs")
        assert page.status_code == 200 and "viewer-critic" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        await tokens.revoke(store, "ada")
        assert (await client.get("/runs")).status_code == 303  # to the login form


async def test_runs_filter_and_refuse_what_they_cannot_take(store: EventStore) -> None:
    a = await viewed_run(store, model="model-a")
    b = await viewed_run(store, model="model-b")
    _, secret = await tokens.create(store, "ada", ("read",))
    async with browser(store, secret) as client:
        both = (await client.get("/runs")).text
        assert str(a.run_id)[:8] in both and str(b.run_id)[:8] in both
        only_b = (await client.get("/runs", params={"model": "model-b"})).text
        assert str(b.run_id)[:8] in only_b and str(a.run_id)[:8] not in only_b
        graded = (await client.get("/runs", params={"scorer": "tiered@2",
                                                     "sort": "cost"})).text
        assert str(a.run_id)[:8] in graded and "50.0%" in graded  # 1 of 2 defects
        for params, said in (({"since": "yesterday"}, "not a date"),
                             ({"status": "<b>"}, "status"),
                             ({"scorer": "tiered@9"}, "no scorer &#39;tiered@9&#39;"),
                             ({"page": "0"}, "page")):
            refused = await client.get("/runs", params=params)
            assert refused.status_code == 422 and said in refused.text, (params, refused.text)
            assert "<b>" not in refused.text
        missing = await client.get(f"/runs/{uuid.uuid4()}")
        assert missing.status_code == 404 and "no run" in missing.text
        assert (await client.get("/blobs/" + "0" * 64)).status_code == 404  # no such path


async def test_a_run_shows_its_issues_at_their_lines_with_each_scorers_match(
        store: EventStore) -> None:
    viewed = await viewed_run(store)
    _, secret = await tokens.create(store, "ada", ("read",))
    async with browser(store, secret) as client:
        html = (await client.get(f"/runs/{viewed.run_id}")).text
    i1 = html[html.index('id="issue-i1"'):html.index('id="issue-i3"')]
    assert '<span class="line marked" data-line="10">' in i1
    assert '<span class="line" data-line="9">' in i1  # context, not marked
    for ref in ("tiered@1", "tiered@2"):  # a find: its colour and its word
        assert f'<p class="grade grade-find"><span class="scorer">{ref}</span> <span ' \
               f'class="kind kind-find">find</span> <strong class="match">find T1#1' in i1
    assert "the total is off by one" in i1  # the TP's own rationale beside it
    i3 = html[html.index('id="issue-i3"'):html.index('id="issue-i2"')]
    assert 'class="grade grade-partial"' in i3 and ">partial</span>" in i3  # not a find
    i2 = html[html.index('id="issue-i2"'):]
    assert "decoy D1" in i2 and "looks racy" in i2 and "grade-decoy" in i2
    summary = html[html.index('class="summary"'):html.index("Not found")]
    assert "located recall <strong>50.0%</strong>" in summary and "find 1" in summary
    assert "partial 1" in summary and "decoy 1" in summary
    missed = html[html.index("Not found"):html.index("<h2>Issues")]  # near the top
    assert "T2#1" in missed and "never closed" in missed and "T1#1" not in missed
    async with browser(store, secret) as client:  # filtered by match; by its 8 digits
        finds = (await client.get(f"/runs/{str(viewed.run_id)[:8]}?match=partial")).text
        assert 'id="issue-i3"' in finds and 'id="issue-i1"' not in finds
        assert (await client.get(f"/runs/{viewed.run_id}?match=nonsense")).status_code == 422


async def test_hostile_text_is_shown_as_text_everywhere(store: EventStore) -> None:
    viewed = await viewed_run(store)
    _, secret = await tokens.create(store, "ada", ("read", "review"))
    async with browser(store, secret) as client:
        for path in ("/runs", f"/runs/{viewed.run_id}", f"/runs/{viewed.run_id}/transcript",
                     f"/runs/{viewed.run_id}/timeline", "/review"):
            html = (await client.get(path)).text
            assert "<script>alert" not in html, path
            assert "\u202e" not in html and "\u200b" not in html, path
            if path != "/runs":
                assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html or \
                    "\\u003cscript\\u003e" in html, path
        run_page = (await client.get(f"/runs/{viewed.run_id}")).text
        assert "{{7*7}}" in run_page and "[/x] [bold]not markup[/bold]" in run_page
        assert "U+202E</span>" in run_page and "U+200B</span>" in run_page
        # The negative control: the same text through a template, unescaped, would run.
        assert "<script>alert(1)</script>" in "off by one: <script>alert(1)</script>"


async def test_the_transcript_shows_each_message_once_a_page_at_a_time(
        store: EventStore) -> None:
    viewed = await viewed_run(store, turns=300)
    _, secret = await tokens.create(store, "ada", ("read",))
    async with browser(store, secret) as client:
        first = (await client.get(f"/runs/{viewed.run_id}/transcript")).text
        last = (await client.get(f"/runs/{viewed.run_id}/transcript",
                                 params={"page": 8})).text
    assert "300 model calls" in first and first.count('class="turn"') == 40
    assert first.count("You review code.") == 1  # sent with every call, shown once
    assert "question 1: " in first and "question 41: " not in first and 'rel="next"' in first
    assert last.count('class="turn"') == 20 and "answer 300" in last
    assert 'rel="next"' not in last
    assert "Review app.py." in first  # the prompt


async def test_a_run_with_2000_issues_is_paged(store: EventStore) -> None:
    viewed = await viewed_run(store, extra_issues=2000)
    _, secret = await tokens.create(store, "ada", ("read",))
    async with browser(store, secret) as client:
        html = (await client.get(f"/runs/{viewed.run_id}")).text
        last = (await client.get(f"/runs/{viewed.run_id}", params={"issues": 21})).text
    assert "(2,003)" in html and html.count('class="issue"') == 100
    assert "issues=2" in html
    assert last.count('class="issue"') == 3 and 'rel="next"' not in last


async def test_verdicts_need_the_review_scope_and_a_csrf_token(store: EventStore) -> None:
    viewed = await viewed_run(store)
    _, reader = await tokens.create(store, "reader", ("read",))
    _, reviewer = await tokens.create(store, "ada", ("read", "review"))
    async with browser(store, reader) as client:
        assert (await client.get("/review")).status_code == 403
    async with browser(store, reviewer) as client:
        page = (await client.get("/review")).text
        form = {"run_id": field(page, "run_id"), "issue_id": field(page, "issue_id"),
                "scorer": field(page, "scorer"), "verdict": "confirm", "note": ""}
        for forged in ({}, {"csrf": "0" * 64}):
            refused = await client.post("/review", data={**form, **forged})
            assert refused.status_code == 403 and "CSRF" in refused.text
        assert not await store.read_stream(f"review-{viewed.run_id}")  # nothing written
        extra = await client.post("/review", data={**form, "csrf": field(page, "csrf"),
                                                   "admin": "1"})
        assert extra.status_code == 400
        given = await client.post("/review", data={**form, "csrf": field(page, "csrf")})
        assert given.status_code == 303, given.text
        wrong = await client.post("/review", data={**form, "csrf": field(page, "csrf"),
                                                   "verdict": "tp:T9#1"})
        assert wrong.status_code == 422 and "no TP occurrence T9#1" in wrong.text
    [verdict] = [r.event for r in await store.read_stream(f"review-{viewed.run_id}")]
    assert verdict.reviewer == "ada"  # type: ignore[union-attr]
    assert verdict.critique_issue_id == form["issue_id"]  # type: ignore[union-attr]
    assert verdict.confirms is not None  # type: ignore[union-attr]


async def test_scores_and_comparisons_render(store: EventStore) -> None:
    await viewed_run(store)
    _, secret = await tokens.create(store, "ada", ("read",))
    async with browser(store, secret) as client:
        scores = (await client.get("/scores")).text
        compared = (await client.get("/compare", params={"a": "tiered@1",
                                                          "b": "tiered@2"})).text
    assert "under tiered@2" in scores and "50.0%" in scores and "<svg" in scores
    assert "tiered@1 against tiered@2" in compared and "Agreement" in compared


async def test_props_view_serves_the_viewer_with_a_token_it_revokes_at_exit(
        store: EventStore, tmp_path: Path) -> None:
    viewed = await viewed_run(store)
    log = tmp_path / "view.log"
    env = {**os.environ, "PROPS_DSN": store.dsn, "PROPS_HOME": str(tmp_path / "home")}
    with log.open("wb") as sink:
        proc = await anyio.open_process(
            [sys.executable, "-m", "props.tools.cli", "view", "--listen", "127.0.0.1:0"],
            env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        with anyio.fail_after(60):
            while not (said := re.search(r"viewer on (http://\S+/)\n.*stops\): (\S+)",
                                         log.read_text())):
                assert proc.returncode is None, log.read_text()
                await anyio.sleep(0.1)
        url, secret = said[1], said[2]
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            page = await client.get("/runs", headers={"Authorization": f"Bearer {secret}"})
        assert page.status_code == 200 and str(viewed.run_id)[:8] in page.text
    finally:
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            await proc.wait()
    assert proc.returncode == 0, log.read_text()
    assert await tokens.verify(store, secret) is None  # revoked as it stopped


@pytest.mark.parametrize("path", ["/runs", "/scores", "/compare", "/verifications", "/review"])
async def test_every_page_wants_a_session(store: EventStore, path: str) -> None:
    async with browser(store) as client:
        response = await client.get(path)
    assert response.status_code == 303 and response.headers["location"].startswith("/login")


async def test_a_range_past_the_file_is_clamped_to_it(store: EventStore) -> None:
    """An issue at lines 1..3,000,000,000 (stored before line numbers were bounded): its
    run page shows the file's 100 lines marked (before: a set of three billion lines, 25 s
    of a blocked event loop, then MemoryError)."""
    from props.core.domain import catalog
    from props.projections import engine

    viewed = await viewed_run(store)
    await store.append(f"run-{viewed.run_id}", [catalog.IssueReported.model_construct(
        run_id=viewed.run_id, issue_id="huge", rationale="everything", severity=None,
        locations=[catalog.Location.model_construct(file="app.py", ranges=[
            catalog.LineRange.model_construct(start=1, end=3_000_000_000)])])])
    await engine.rebuild(store)
    _, secret = await tokens.create(store, "ada", ("read",))
    async with browser(store, secret) as client:
        page = await client.get(f"/runs/{viewed.run_id}")
    assert page.status_code == 200, page.text[:500]
    huge = page.text[page.text.index('id="issue-huge"'):]
    assert '<span class="line marked" data-line="100">' in huge
    assert 'data-line="101"' not in huge


async def test_a_parked_event_is_shown_on_the_runs_and_on_its_run(store: EventStore) -> None:
    """A run one of whose events a projection skips says so where people look: a banner
    and a mark in the runs table, and on its page which consumer skipped what, and why."""
    from props.core.domain import catalog
    from props.projections import engine

    viewed = await viewed_run(store)
    _, secret = await tokens.create(store, "ada", ("read",))
    async with browser(store, secret) as client:
        # The control: nothing parked, nothing said.
        assert "Parked:" not in (await client.get("/runs")).text
        assert "Parked:" not in (await client.get(f"/runs/{viewed.run_id}")).text
        await store.append(f"run-{viewed.run_id}", [catalog.LlmResponded.model_construct(
            run_id=viewed.run_id, request_id=f"huge{i}", response_sha256="0" * 64,
            tokens_in=2**63 - 1, tokens_out=0, cost_usd=0.0, latency_ms=1.0)
            for i in range(2)])
        await engine.rebuild(store)
        runs = (await client.get("/runs")).text
        # (the run's own usage and each huge count overflow the sum: both are parked)
        assert "<strong>Parked:</strong> 2 event(s) of 1 run(s)" in runs
        assert 'class="parked-mark" title="2 of its events' in runs
        page = (await client.get(f"/runs/{viewed.run_id}")).text
        assert "<strong>Parked:</strong> 2 event(s) of this run" in page
        parked = page[page.index('class="parked"'):page.index('class="tabs"')]
        assert "projection.usage" in parked and "llm.responded" in parked
        assert "NumericValueOutOfRangeError" in parked


async def test_evaluations_have_pages_and_filter_runs_and_scores(store: EventStore) -> None:
    """An evaluation's page: its progress and the cases not done, and why; the runs and
    scores pages narrow to its runs; an evaluation that is not recorded is a 404 page."""
    from props.core.domain import definitions, evaluation_starts, evaluations
    from props.projections import engine
    from tests.reactor_helpers import sync_samples

    viewed = await viewed_run(store)  # a run of no evaluation's
    await sync_samples(store)
    await definitions.push(store, definitions.reference_local())
    plan = evaluations.Plan(name="nightly", examples=["csvtool/*", "logparse/*"],
                            critic=[evaluations.Critic(definition="reference", ref="local")])
    ev, _ = await evaluation_starts.start(store, plan, await evaluations.resolve(store, plan))
    asked = await evaluations.request(store, ev, ev.cases[0], 0)  # one of its two cases
    await engine.rebuild(store)
    _, secret = await tokens.create(store, "ada", ("read",))
    async with browser(store, secret) as client:
        listed = (await client.get("/evaluations")).text
        assert '<a href="/evaluations/nightly">nightly</a>' in listed
        shown = await client.get("/evaluations/nightly")
        assert shown.status_code == 200, shown.text[:300]
        assert "not complete" in shown.text and "not requested yet" in shown.text
        assert f'href="/runs/{asked}"' in shown.text and "in flight" in shown.text
        runs = (await client.get("/runs", params={"evaluation": "nightly"})).text
        assert str(asked)[:8] in runs and str(viewed.run_id)[:8] not in runs
        every = (await client.get("/runs")).text  # the control: both without the filter
        assert str(asked)[:8] in every and str(viewed.run_id)[:8] in every
        scores = await client.get("/scores", params={"evaluation": "nightly"})
        # (its one run has not finished: nothing of it is scored; every run's scores are)
        assert "has scored no run of evaluation nightly yet" in scores.text
        assert "has scored no run" not in (await client.get("/scores")).text
        gone = await client.get("/evaluations/nope")
        assert gone.status_code == 404 and "no evaluation named nope" in gone.text
        assert (await client.get("/runs", params={"evaluation": "nope"})).status_code == 404
