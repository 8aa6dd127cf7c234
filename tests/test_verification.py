"""A scorer grades the headline only after a verification of its exact bytes (issue 53).

The judge is an LLM judge on a loopback OpenAI-compatible server (tests/fake_openai.py) that
judges by overlapping lines; the cohort is an evaluation of the reference critic on the three
sample snapshots the demo reviews. Verified -> activation passes; one byte of the prompt
changed -> refused, writing nothing; verified again -> passes; a new evaluation -> gated;
--force -> recorded. The buckets add up to the cohort's reported issues; a judge that times
out lands in "diverged: judge unreachable"; a verification killed in the middle resumes
without asking the model again about what it answered."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from props.core.domain import catalog, definitions, evaluation_starts, evaluations
from props.core.log.store import EventStore
from props.core.scoring import cohorts, gate, identity, llm_judge, registration, scorers
from props.core.scoring import verification as v
from props.projections import figures
from props.projections import status as projection_status
from props.tools.bundled import samples
from props.tools.command_line import figure_tables
from tests.fake_openai import Reply, chat_server
from tests.reactor_helpers import eventually, finished
from tests.test_llm_judge import _answer

LENIENT = gate.Policy(min_label_accuracy=0.5)  # the fake judge's accuracy is its own
EXAMPLES = ["csvtool/*", "logparse/*", "notes-api/*"]


@pytest.fixture
def model() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with chat_server(_answer) as served:
        yield served


def _scorers_file(path: Path, url: str, *, timeout: float = 30) -> None:
    path.write_text(f'["judge@1"]\nkind = "llm-judge"\nbase_url = "{url}"\nmodel = "judge-m"\n'
                    f"price_in_per_mtok = 1.0\nprice_out_per_mtok = 4.0\n"
                    f"request_timeout = {timeout}\n")


@pytest.fixture
def judge_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               model: tuple[str, list[dict[str, Any]]]) -> Path:
    path = tmp_path / "scorers.toml"
    _scorers_file(path, model[0])
    monkeypatch.setenv("PROPS_SCORERS_FILE", str(path))
    return path


async def _evaluation(store: EventStore, name: str, examples: list[str] = EXAMPLES
                      ) -> list[uuid.UUID]:
    """The reference critic on `examples`, once each, finished and graded by the default
    scorer, with the projections showing its issues."""
    await definitions.push(store, definitions.reference_local())
    plan = evaluations.Plan(name=name, examples=examples, epochs=1,
                            critic=[evaluations.Critic(definition="reference", ref="local")])
    ev, _ = await evaluation_starts.start(store, plan, await evaluations.resolve(store, plan))
    runs = [await evaluations.request(store, ev, case, 0) for case in ev.cases]
    await finished(store, runs)

    async def projected() -> bool:
        if await store.pool.fetchval("SELECT to_regclass('projections.grading_edges')") is None:
            return False
        graded = await store.pool.fetchval(
            "SELECT count(DISTINCT critique_run_id) FROM projections.grading_edges "
            "WHERE critique_run_id = ANY ($1)", runs)
        return bool(graded == len(runs))

    await eventually(projected, 120)
    return runs


async def _issues(store: EventStore, runs: list[uuid.UUID]) -> int:
    """The cohort's reported issues, counted from the log (not from the verification)."""
    return int(await store.pool.fetchval(
        "SELECT count(*) FROM props.events WHERE type = 'issue.reported' "
        "AND stream_id = ANY ($1)", [f"run-{r}" for r in runs]))


async def _events(store: EventStore) -> int:
    return int(await store.pool.fetchval("SELECT count(*) FROM props.events"))


def _buckets(e: catalog.ScorerVerified) -> int:
    return e.unchanged + e.newly_credited + e.newly_uncredited + e.credited_elsewhere + sum(
        d.issues for d in e.diverged)


async def test_verify_gates_activation_on_the_exact_bytes_and_the_cohort(
        served: EventStore, judge_file: Path, model: tuple[str, list[dict[str, Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = served
    runs = await _evaluation(store, "demo")
    judge = scorers.scorer("judge@1")
    default = scorers.scorer(scorers.DEFAULT_SCORER)
    cohort = await cohorts.of_evaluation(store, "demo")
    labels = v.Labels.load(samples.cases_dir())
    calls = len(model[1])

    # Never verified: refused, saying what to run, and nothing written.
    before = await _events(store)
    with pytest.raises(gate.ActivationRefused, match=r"never verified.*props scorers verify "
                       r"judge@1 --cohort demo"):
        await gate.activate(store, judge, rules=LENIENT)
    assert await _events(store) == before

    done = await v.verify(store, judge, default, cohort, labels)
    e = done.event
    assert e.status == "completed" and e.cohort.runs == len(runs) == 3
    assert _buckets(e) == e.candidates == await _issues(store, runs) > 0
    assert len(done.issues) == e.candidates and not e.diverged
    assert e.labels is not None and e.labels.issues > 0 and e.labels.low is not None
    asked = len(model[1]) - calls
    # The judge asks one question per candidate (issue 59): the runs' questions are the
    # answers recorded in the verification's stream, the cases' their candidates; none twice.
    assert done.asked > 0
    assert asked == await _answers_recorded(store) + _questions(labels)
    assert e.cost_usd > 0 and e.tokens_in > 0
    assert await registration.active_scorer(store) == scorers.DEFAULT_SCORER  # unchanged
    changed, standing = await gate.activate(store, judge, rules=LENIENT)
    assert changed and standing.verified is not None and standing.refusal is None
    assert await registration.active_scorer(store) == "judge@1"

    # Again, nothing is asked: every answer is recorded.
    calls = len(model[1])
    again = await v.verify(store, judge, default, cohort, labels)
    assert again.event == e and len(model[1]) == calls and again.asked == 0

    # One byte of its prompt changed: another identity, refused as not what was verified.
    await registration.activate(store, "tiered", 2)
    monkeypatch.setattr(llm_judge, "SYSTEM", llm_judge.SYSTEM.replace("grade", "grado", 1))
    assert identity.identity(judge) != e.identity_hash
    before = await _events(store)
    with pytest.raises(gate.ActivationRefused, match="bytes changed"):
        await gate.activate(store, judge, rules=LENIENT)
    assert await _events(store) == before
    edited = await v.verify(store, judge, default, cohort, labels)
    assert edited.event.status == "completed" and edited.asked == done.asked  # asked anew
    assert edited.event.identity_hash == identity.identity(judge)
    assert (await gate.activate(store, judge, rules=LENIENT))[0]

    # A new evaluation is a new cohort: gated until verified on it.
    await registration.activate(store, "tiered", 2)
    await _evaluation(store, "demo-2", EXAMPLES[:1])
    with pytest.raises(gate.ActivationRefused, match=r"evaluation demo-2 started after it.*"
                       r"props scorers verify judge@1 --cohort demo-2"):
        await gate.activate(store, judge, rules=LENIENT)
    # The policy is the operator's: the same verification, a stricter policy, refused.
    await v.verify(store, judge, default, await cohorts.of_evaluation(store, "demo-2"), labels)
    assert (await gate.standing(store, judge, gate.Policy(min_label_accuracy=1.0))).refusal
    assert (await gate.standing(store, judge, LENIENT)).refusal is None

    # --force: activated anyway, with who and why recorded in the same write.
    monkeypatch.setattr(llm_judge, "SYSTEM", llm_judge.SYSTEM + " ")
    changed, standing = await gate.activate(store, judge, force_reason="a trial, by hand",
                                            rules=LENIENT)
    assert changed and standing.refusal is not None
    [forced] = [r.event for r in await store.read_stream("scorer-judge")
                if isinstance(r.event, catalog.ScorerForced)]
    assert forced.reason == "a trial, by hand" and forced.actor
    assert forced.identity_hash == identity.identity(judge)
    assert "bytes changed" in forced.refused
    # The figures it grades say so; the default scorer, never verified here, says that.
    await eventually(lambda: _folded(store), 60)
    _, notes = await figures.load(store, "judge", 1)
    assert notes["scorer_standing"]["judge@1"]["standing"] == "forced"
    assert "a trial, by hand" in notes["scorer_standing"]["judge@1"]["detail"]
    assert "under judge@1 (forced)" in figure_tables.evidence_line(notes)
    _, notes = await figures.load(store, "tiered", 2)
    assert notes["scorer_standing"]["tiered@2"]["standing"] == "unverified"
    assert "scorers: tiered@2 (identity " in (figure_tables.scorers_line(notes) or "")


async def _folded(store: EventStore) -> bool:
    return not await projection_status.folded(store)


def test_bucket_of_each_pair_of_words() -> None:
    """Every pair of verdicts has one bucket; a partial grade is no credit."""
    tp = scorers.Match("t1", 1, None, 1.0)
    assert v.bucket(scorers.Match(), scorers.Match(fp_id="d1")) == "unchanged"
    assert v.bucket(scorers.Match(), tp) == "newly credited"
    assert v.bucket(tp, scorers.Match()) == "newly uncredited"
    assert v.bucket(tp, scorers.Match("t1", 2, None, 1.0)) == "credited elsewhere"
    assert v.bucket(scorers.Match("t1", 1, None, 0.6), tp) == "newly credited"


def test_hostile_arguments_are_refused_at_the_boundary(dsn: str, tmp_path: Path) -> None:
    """One line, a documented exit code, nothing written."""
    from tests.test_cli import props

    def count() -> str:
        return props("events", "tail", "--from", "start", "--no-follow", "--json",
                     dsn=dsn).stdout

    before = count()
    cases = [
        (("scorers", "activate", "overlap@2", "--force"), 65, "--force and --reason"),
        (("scorers", "activate", "overlap@2", "--reason", "why"), 65, "--force and --reason"),
        (("scorers", "activate", "overlap@2", "--force", "--reason", "a\x1bb"), 2,
         "printable"),
        (("scorers", "activate", "overlap@2"), 77, "props scorers verify overlap@2"),
        (("scorers", "activate", "nope@1"), 66, "unknown scorer"),
        (("scorers", "verify", "overlap@2", "--cohort", "nope"), 66, "no evaluation"),
        (("scorers", "verify", "overlap@2", "--as-of", "-5"), 2, "not from 0"),
        (("scorers", "verify", "overlap@2", "--labels", str(tmp_path)), 65, "no [[case]]"),
        (("scorers", "verify", "nope@1"), 66, "unknown scorer"),
    ]
    for args, code, says in cases:
        out = props(*args, dsn=dsn, env={"PROPS_HOME": str(tmp_path)})
        assert (out.returncode, says in out.stderr) == (code, True), (args, out.stderr)
        assert out.stderr.strip().count("\n") == 0 or code == 2, out.stderr
    assert count() == before


async def test_a_judge_that_times_out_is_diverged_unreachable_never_dropped(
        served: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model answers after the judge's request timeout: every issue of the cohort is
    in "diverged: judge unreachable", the verification is not completed, the gate refuses.
    (Negative control of the resume test's count: a model that does not answer is asked
    again on the next run.)"""
    store = served
    runs = await _evaluation(store, "slow", EXAMPLES[:1])
    slow = json.dumps({"choices": [{"message": {"role": "assistant", "content": "{}"}}]})
    with chat_server(lambda _: Reply(body=slow.encode(), delay=1.0)) as (url, seen):
        path = tmp_path / "scorers.toml"
        _scorers_file(path, url, timeout=0.2)
        monkeypatch.setenv("PROPS_SCORERS_FILE", str(path))
        judge = scorers.scorer("judge@1")
        cohort = await cohorts.of_evaluation(store, "slow")
        done = await v.verify(store, judge, scorers.scorer("tiered@2"), cohort, None)
        first = len(seen)
        assert first > 0
        again = await v.verify(store, judge, scorers.scorer("tiered@2"), cohort, None)
        assert len(seen) == 2 * first  # nothing recorded, so asked again
    e = done.event
    assert e.status == "failed" and again.event.status == "failed"
    assert [(d.reason, d.issues) for d in e.diverged] == [
        ("judge unreachable", await _issues(store, runs))]
    assert _buckets(e) == e.candidates > 0
    with pytest.raises(gate.ActivationRefused, match="failed"):
        await gate.activate(store, judge, rules=LENIENT)


def _default_sigint() -> None:
    """In the child: Ctrl-C as a terminal gives it, whatever this process inherited (a
    process started with SIGINT ignored keeps it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _props(*args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "props.tools.cli", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **env}, start_new_session=True,
                            preexec_fn=_default_sigint)


async def test_verify_resumes_after_kill_9_without_asking_again(
        served: EventStore, dsn: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`props scorers verify` killed (SIGKILL) once a run's answer is recorded: run again,
    it asks the model only about the runs it has no answer for, and exits 0 when complete
    (3 while it is not); `props scorers activate` then passes the policy file's gate."""
    store = served
    runs = await _evaluation(store, "demo")
    answers = 0

    def slowly(body: dict[str, Any]) -> dict[str, Any] | Reply:
        nonlocal answers
        answers += 1
        return Reply(body=json.dumps(_answer(body)).encode(), delay=0.0 if answers == 1
                     else 1.5)

    labels = tmp_path / "labels"
    labels.mkdir()
    shutil.copy(samples.cases_dir() / "overlap.toml", labels)
    policy = tmp_path / "policy.toml"
    policy.write_text("[verification]\nmin_label_accuracy = 0.5\n")
    with chat_server(slowly) as (url, seen):
        path = tmp_path / "scorers.toml"
        _scorers_file(path, url)
        env = {"PROPS_DSN": dsn, "PROPS_SCORERS_FILE": str(path),
               "PROPS_HOME": str(tmp_path / "home"), "PROPS_POLICY_FILE": str(policy)}
        monkeypatch.setenv("PROPS_SCORERS_FILE", str(path))
        args = ("scorers", "verify", "judge@1", "--cohort", "demo", "--labels", str(labels))

        async def replayed() -> int:
            return int(await store.pool.fetchval(
                "SELECT count(*) FROM props.events WHERE type = 'verification.replayed'"))

        proc = _props(*args, env=env)
        try:
            await eventually(lambda: _one(replayed), 120)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        kept = await replayed()
        assert 1 <= kept < len(runs)
        asked_before, answered_before = len(seen), await _answers_recorded(store)
        refused = await _cli("scorers", "activate", "judge@1", env=env)
        assert refused.returncode == 77 and b"props scorers verify judge@1" in refused.stderr
        done = await _cli(*args, "--json", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        out = json.loads(done.stdout)
        # The second process asked about the runs it had no answer for (their questions
        # recorded since), and the cases; the runs answered before were not asked again.
        assert len(seen) - asked_before == await _answers_recorded(store) - answered_before \
            + _questions(v.Labels.load(labels))
        assert out["status"] == "completed" and len(out["issues"]) == out["candidates"]
    activated = await _cli("scorers", "activate", "judge@1", env=env)
    assert activated.returncode == 0 and b"verified on evaluation demo" in activated.stdout


async def _answers_recorded(store: EventStore) -> int:
    """The model's answers every verification recorded (one a question)."""
    rows = await store.pool.fetch(
        "SELECT jsonb_array_length(data->'answers') FROM props.events "
        "WHERE type = 'verification.replayed'")
    return sum(int(r[0]) for r in rows)


def _questions(labels: v.Labels) -> int:
    """The questions the judge asks of labelled cases: one a candidate."""
    return sum(len(found) for case in labels.cases
               for found in llm_judge.candidates(case.issues, case.ground_truth).values())


async def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return await anyio.run_process([sys.executable, "-m", "props.tools.cli", *args],
                                   check=False, env={**os.environ, **env})


async def _one(count: Any) -> bool:
    return bool(await count() >= 1)


def test_buckets_that_do_not_add_up_are_refused() -> None:
    """The negative control of "none dropped": the event itself refuses a verification
    whose buckets hold fewer issues than the cohort reported."""
    import pydantic

    spec = catalog.Cohort(kind="as-of", name="7", cohort_id="0" * 16, runs=1)
    fields: dict[str, Any] = {
        "verification_id": uuid.uuid4(), "name": "judge", "version": 1,
        "identity_hash": "a" * 64, "code_hash": "b" * 64, "cohort": spec,
        "status": "completed", "candidates": 5, "unchanged": 3,
        "diverged": [catalog.Diverged(reason="judge unreachable", issues=2)]}
    assert catalog.ScorerVerified(**fields).candidates == 5
    with pytest.raises(pydantic.ValidationError, match="the buckets hold 4 issues"):
        catalog.ScorerVerified(**{**fields, "unchanged": 2})


async def test_a_verification_an_import_brought_does_not_open_the_gate(
        store: EventStore) -> None:
    """What arrives from outside adds; it never decides for this database: a passing
    verification of the same bytes, recorded with an import's origin, is not counted."""
    from tests.verification_helpers import record_verification

    s = scorers.scorer("overlap@2")
    await record_verification(store, s, metadata={"origin": {"signer": "them"}})
    where = await gate.standing(store, s, gate.Policy())
    assert where.refusal is not None and "never verified" in where.refusal
    await record_verification(store, s)  # the same, of this database's own: it passes
    assert (await gate.standing(store, s, gate.Policy())).refusal is None


async def test_an_interrupted_verification_says_cancelled(
        served: EventStore, dsn: str, tmp_path: Path) -> None:
    """Ctrl-C in the middle: `scorer.verified` with status `cancelled`, covering the runs it
    reached (their buckets add up), and an exit that is not 0."""
    store = served
    await _evaluation(store, "stopped", EXAMPLES[:2])
    answers = 0

    def slowly(body: dict[str, Any]) -> Reply:
        nonlocal answers
        answers += 1
        return Reply(body=json.dumps(_answer(body)).encode(), delay=0.0 if answers == 1
                     else 5.0)

    with chat_server(slowly) as (url, _):
        path = tmp_path / "scorers.toml"
        _scorers_file(path, url)
        env = {"PROPS_DSN": dsn, "PROPS_SCORERS_FILE": str(path),
               "PROPS_HOME": str(tmp_path / "home")}

        async def replayed() -> int:
            return int(await store.pool.fetchval(
                "SELECT count(*) FROM props.events WHERE type = 'verification.replayed'"))

        proc = _props("scorers", "verify", "judge@1", "--cohort", "stopped", env=env)
        try:
            await eventually(lambda: _one(replayed), 120)
            proc.send_signal(signal.SIGINT)
            with anyio.fail_after(60):
                while proc.poll() is None:  # noqa: ASYNC110 (a process, not a task)
                    await anyio.sleep(0.1)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode != 0
    [said] = [orjson_loads(r) for r in await store.pool.fetch(
        "SELECT data::text FROM props.events WHERE type = 'scorer.verified'")]
    assert said["status"] == "cancelled" and said["replayed_runs"] == 1


def orjson_loads(row: Any) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(row[0])
    return loaded


async def test_the_divergence_report_is_read_from_the_log_on_its_page(
        served: EventStore, judge_file: Path, model: tuple[str, list[dict[str, Any]]]) -> None:
    """The viewer's page of a verification (issue 53, item 5): its buckets, adding up to the
    cohort's issues, the runs behind each, and the judge's recorded answers, read from what
    the verification recorded (`verification.bucketed`), with no model asked. Negative
    control: the list names no verification before one is recorded; an unknown id is a 404
    page."""
    from props.core.domain import tokens
    from props.core.scoring import divergence
    from tests.test_viewer import browser

    store = served
    _, secret = await tokens.create(store, "verification-reader", ("read",))
    async with browser(store, secret) as client:
        assert "No verification yet" in (await client.get("/verifications")).text
        await _evaluation(store, "demo", EXAMPLES[:2])
        done = await v.verify(store, scorers.scorer("judge@1"), scorers.scorer("tiered@2"),
                              await cohorts.of_evaluation(store, "demo"), None)
        asked = len(model[1])
        listed = await client.get("/verifications")
        assert listed.status_code == 200 and f"/verifications/{done.event.verification_id}" \
            in listed.text and "judge@1" in listed.text
        page = await client.get(f"/verifications/{done.event.verification_id}")
        assert page.status_code == 200, page.text
        report = await divergence.report(store, done.event.verification_id)
        shown = {name: len(rows) for name, rows in report.buckets().items()}
        assert sum(shown.values()) == done.event.candidates == len(done.issues) > 0
        assert shown["unchanged"] == done.event.unchanged
        assert shown["newly credited"] == done.event.newly_credited
        assert {(o.run_id, o.issue_id, o.bucket) for o in done.issues} == {
            (run, i.issue_id, i.bucket) for name, rows in report.buckets().items()
            for run, i in rows}
        answers = [a for r in report.runs for a in r.answers]
        assert answers and "the judge's recorded answer" in page.text
        assert "&#34;role&#34;:&#34;assistant&#34;" in page.text  # the answer as text
        assert len(model[1]) == asked  # read from the log: no model asked
        missing = await client.get(f"/verifications/{uuid.uuid4()}")
        assert missing.status_code == 404 and "no verification" in missing.text
        assert (await client.get("/verifications/not-a-uuid")).status_code == 404
