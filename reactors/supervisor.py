"""The grader supervisor: grader containers (re)started when graders or runs change.

Grader definitions are images (`props definitions push --type grader`); each digest is a
scorer version of its own (see `grader_runs`). The supervisor handles:
- `definition.pushed` of a grader (or its `definition.granted`, when its push asked for what
  only a grant gives: a grader is started only once granted): registers its scorer, asks the
  grader runs of older digests of the same name that have not finished to stop, and
  requests a grader run of the new digest for every active (synced, not retired) snapshot:
  the new grader grades all history;
- `run.finished` of a critic run: requests a grader run of the latest digest of every grader
  name for that run's snapshot, so new issues get graded.
Run ids derive from (digest, snapshot, cause): handling an event twice requests nothing twice.
The launcher carries grader runs out like critic runs. The in-process grader reactor
(deterministic scorers) runs beside it; which scorer is active is the analysts' choice.
"""

from __future__ import annotations

import logging
import uuid

import anyio.abc

from props.core.domain import catalog, definitions, endpoints, streams
from props.core.domain.specimens import specimen_sync
from props.core.log import errors
from props.core.log.checkpoints import START
from props.core.log.events import NewEvent, RecordedEvent
from props.core.log.store import EventStore
from props.reactors.launcher import grader_runs

log = logging.getLogger(__name__)

_NAMESPACE = uuid.UUID("7b1e4c2d-9f3a-4e6b-8d5c-2a1f0e9b8c7d")
GRADER_TIMEOUT = 1800.0


def grader_run_id(digest: str, slug: str, cause: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"{digest}:{slug}:{cause}")


class Supervisor:
    name = "supervisor"
    types: tuple[str, ...] = ("definition.pushed", "definition.granted", "run.finished")

    def __init__(self, store: EventStore) -> None:
        self.store = store

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        pass

    async def handle(self, rec: RecordedEvent) -> None:
        e = rec.event
        if rec.imported:
            return  # another database's pushes and runs: its graders never run here
        if isinstance(e, catalog.DefinitionPushed) and e.agent_type == "grader":
            await self._pushed(e)
        elif isinstance(e, catalog.DefinitionGranted) and e.agent_type == "grader":
            for pushed in await definitions.all_pushed(self.store, "grader", own=True):
                if pushed.digest == e.digest:  # granted now what its push could not
                    await self._pushed(pushed)
        elif isinstance(e, catalog.RunFinished):
            run = await self.store.read_stream(streams.run(e.run_id), limit=1)
            first = run[0].event if run else None
            if isinstance(first, catalog.RunRequested) and first.agent_type == "critic":
                for grader in await self._latest_graders():
                    await self._request(grader, first.example.snapshot, f"run:{e.run_id}")

    async def _latest_graders(self) -> list[catalog.DefinitionPushed]:
        latest: dict[str, catalog.DefinitionPushed] = {}
        for d in await definitions.all_pushed(self.store, "grader", own=True):
            latest[d.name] = d  # (an imported grader never runs here)
        return list(latest.values())

    async def _pushed(self, grader: catalog.DefinitionPushed) -> None:
        granted = await endpoints.grant_of(self.store, "grader", grader.digest)
        if missing := endpoints.ungranted(grader, granted):
            log.warning("grader %s %s asks for %s, not granted: it grades nothing until an "
                        "operator runs props definitions grant", grader.name,
                        grader.digest[:19], ", ".join(missing))
            return
        await grader_runs.scorer_for(self.store, grader)
        await self._stop_older(grader)
        snapshots = await specimen_sync.history(self.store)
        for slug, history in sorted(snapshots.items()):
            if not history.retired:
                await self._request(grader, slug, "push")

    async def _stop_older(self, grader: catalog.DefinitionPushed) -> None:
        """Ask unfinished grader runs of other digests of this grader to stop."""
        async for batch in self.store.iter_all(START, types=["run.requested"]):
            for rec in batch:
                e = rec.event
                if not (isinstance(e, catalog.RunRequested) and e.agent_type == "grader"
                        and e.definition == grader.name and e.definition_ref != grader.digest):
                    continue
                types = [r.type_name for r in await self.store.read_stream(rec.stream_id)]
                if "run.finished" in types or "run.cancel_requested" in types:
                    continue
                cancel = catalog.RunCancelRequested(run_id=e.run_id,
                                                    requested_by="grader supervisor")
                await self.store.append(rec.stream_id, [NewEvent(
                    cancel, uuid.uuid5(_NAMESPACE, f"cancel:{e.run_id}"))])

    async def _request(self, grader: catalog.DefinitionPushed, slug: str, cause: str) -> None:
        run_id = grader_run_id(grader.digest, slug, cause)
        try:
            await self.store.append(streams.run(run_id), [catalog.RunRequested(
                run_id=run_id, agent_type="grader", definition=grader.name,
                definition_ref=grader.digest, example=catalog.Example(snapshot=slug),
                model=grader.name, timeout_seconds=GRADER_TIMEOUT, budget_usd=0.0,
                requested_by="grader supervisor")], expected_version=0)
        except errors.ConcurrencyConflict:
            pass  # requested before (this event handled again): nothing to do
