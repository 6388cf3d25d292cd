"""A shard job's link to the store: lanes hand in finished records and take claims, and one round trip at a time
carries every record ready and asks for the claims the lanes will need.

Read-ahead: while a batch's calls are fast (under _FAST_CALL on average, where a round trip to Redis is a large part of
an item), the feeder keeps claims in hand, up to seventeen per lane, so a lane that finishes starts its next call at
once, and records are written eight lanes' worth at a time while calls run, each waiting at most _LINGER for the
others (an eighth of the round trips of a lane's worth: each round trip's fixed cost, in Redis and in the worker, is
shared by eight times the items, and a record is stored within tens of milliseconds). Only for a read-only batch
that does not stop on error (`reads_ahead`). A claim in hand is held in Redis against the job like a call in flight (if
the worker dies, a replacement gets it); one that will not run here is given back. Slow calls gain nothing from it and
would leave other shards idle at the end while this one holds claims, so then a lane asks for its next claim when it
needs it, as does every lane of other batches. Either way a record counts as finished only once the script has stored
it, and once the cursor has reached the end (the batch's last items, all of a small batch) a record goes at once.

Each round trip tells the store how many of the job's lanes have a call (readers count those `running`) and which
claims in hand the job keeps unsent until the next round trip is answered (readers count them `pending`; a take-over
after a crash sends them on as never dispatched, so only calls that may have reached a backend come back
`recovered`). A lane may take a claim so declared only once a later round trip has taken the declaration back.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence

from mcp_batch.models import Mode, OnError
from mcp_batch.records import ItemRecord
from mcp_batch.store.batch_row import BatchMeta
from mcp_batch.store.claims import Claim, Claims

_LINGER = 0.03  # seconds a finished record may wait for others to share its round trip (read-ahead only)
_FAST_CALL = 0.05  # seconds: calls faster than this on average are read ahead
_PACE = 0.2  # weight of the latest call in the running average of call times
_AHEAD = 17  # claims in hand per lane while reading ahead, of which lanes may take sixteen (see Feeder._keep)
_SHARE = 8  # while reading ahead, a round trip carries about this many lanes' worth of records and claims


def reads_ahead(meta: BatchMeta) -> bool:
    """Whether claims may be taken before a lane needs them: not when a claim held unrun could change what runs
    (a stop on error, serial order) or run twice (a tool that may change something, recovered after a crash)."""
    return meta.read_only and meta.mode is Mode.concurrent and meta.on_error is OnError.continue_


class Feeder:
    """Records in, claims out, for one shard job."""

    def __init__(
        self,
        claims: Claims,
        batch_id: str,
        job: str,
        lanes: int,
        read_ahead: bool,
        stored: Callable[[Sequence[int]], None] | None = None,
    ) -> None:
        self._claims, self._batch_id, self._job = claims, batch_id, job
        self._lanes, self._read_ahead = lanes, read_ahead
        self._stored = stored  # told which items are in Redis now
        self._pace: float | None = None  # running average of call seconds; None until the lanes' first calls end
        self._ended = 0
        self._ready: deque[Claim] = deque()  # claims a lane may take now
        self._locked: list[Claim] = []  # claims in hand that the store was told are held unsent: not to be taken
        self._unlocking: list[Claim] = []  # of those, the ones the round trip in flight frees
        self._busy = 0  # lanes with a claim: its call running, at the gate or being checked
        self._marked = False  # the store holds a non-zero busy count or held claims of this job
        self._records: list[tuple[Claim, ItemRecord]] = []
        self._give_back: list[Claim] = []
        self._waiters: deque[asyncio.Future[Claim | None]] = deque()  # lanes waiting for a claim, first come first
        self._more = True  # the store may still have claims for this job
        self._seq: int | None = None  # the seq the batch's next record takes, as of the last round trip
        self._alone = True  # no other job has recorded items between this job's round trips (so far)
        self._failure: BaseException | None = None
        self._pump: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.lost = False  # the job's lease was taken over
        self.ended = False  # one of its round trips ended the batch

    def finish(self, claim: Claim, record: ItemRecord) -> None:
        """Hand in a finished item; it is stored with the next round trip (this returns at once)."""
        self._records.append((claim, record))
        self._busy -= 1
        elapsed = record.get("elapsed_seconds")
        if elapsed is not None:
            self._ended += 1
            self._pace = elapsed if self._pace is None else self._pace + _PACE * (elapsed - self._pace)
        self._kick()

    async def next(self, stopping: bool = False) -> Claim | None:
        """The next claim for a lane; None when there is none to take (`stopping`: the lane takes no more). A lane
        that waits is handed its claim by the round trip that brings it: only the lanes served wake."""
        if self._failure is not None:
            raise self._failure
        if stopping or self.lost:
            return None
        if self._ready:
            claim = self._ready.popleft()
            self._busy += 1
            self._kick()  # top the claims in hand up while this one runs
            return claim
        if not self._more and not self._locked:
            return None
        waiter: asyncio.Future[Claim | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._kick()
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                handed = waiter.result()  # handed over as the lane was cancelled: in hand again
                if handed is not None:
                    self._ready.appendleft(handed)
                    self._busy -= 1
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    async def close(self) -> None:
        """Store what is left and give back the claims not run here (once every lane has stopped)."""
        self._more = False
        while self._pump is not None:
            await asyncio.shield(self._pump)
        if self._failure is not None:
            raise self._failure
        self._give_back += [*self._ready, *self._locked]
        self._ready.clear()
        self._locked = []
        self._busy = 0  # a lane whose call was handed back stops without finishing it
        # The job's marks (busy, held) need no round trip of their own once its batch has ended: the release that
        # follows drops them.
        if self._records or self._give_back or (self._marked and not self.ended):
            await self._round(0)

    @property
    def _spare(self) -> int:
        """Claims to keep in hand beyond the lanes waiting."""
        fast = self._ended >= self._lanes and self._pace is not None and self._pace < _FAST_CALL
        return _AHEAD * self._lanes if self._read_ahead and fast else 0

    @property
    def _keep(self) -> int:
        """Claims in hand that lanes may take without another round trip (the rest are declared held unsent):
        sixteen per lane while reading ahead, as many as lanes finish while a round trip tops them up."""
        return (_AHEAD - 1) * self._lanes if self._spare else self._lanes

    def _want(self) -> int:
        if not self._more or self.lost:
            return 0
        return max(0, self._waiting + self._spare - len(self._ready) - len(self._locked))

    def _due(self) -> bool:
        """Whether a round trip should go now: more lanes wait than there are claims they may take, those claims run
        low, or enough records are ready to share one (a record alone waits at most _LINGER for others, and not at
        all once the cursor is at the end)."""
        share = _SHARE * self._lanes if self._spare else 1
        if self._waiting > len(self._ready) or self._give_back or len(self._records) >= (share if self._more else 1):
            return True
        return self._want() > 0 and len(self._ready) < share

    def _kick(self) -> None:
        if self._pump is not None or self._failure is not None:
            return
        if self._due():
            self._pump = asyncio.create_task(self._run())
        elif self._records and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(_LINGER, self._linger)

    def _linger(self) -> None:
        self._timer = None
        if self._pump is None and self._failure is None and self._records:
            self._pump = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            await asyncio.sleep(0)  # one loop turn: lanes finishing together share the round trip
            await self._round(self._want())
            while self._due():
                await self._round(self._want())
        except BaseException as exc:  # the lanes raise it (Redis gone for longer than the outage wait)
            self._failure = exc
        finally:
            self._pump = None
            self._wake()
        if self._records:
            self._kick()  # records handed in during the last round trip, not yet due

    async def _round(self, want: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        records, self._records = self._records, []
        give_back, self._give_back = self._give_back, []
        held = self._declare()
        free = max(0, self._keep - len(self._ready) - len(self._unlocking))
        served = min(self._waiting, len(self._ready) + len(self._unlocking))  # lanes woken to a claim in hand
        lanes = (self._busy + served, self._waiting - served, free)
        # The records go with their seqs while this job looks like the batch's only writer: right, they are stored
        # as sent; wrong, the store makes each anew, which costs it more than making them in the first place.
        seq = self._seq if self._alone and records else None
        step = await self._claims.step(self._batch_id, self._job, records, want, give_back, lanes, held, seq)
        if seq is not None and step.next_seq is not None and step.next_seq != seq + len(records):
            self._alone = False
        self._seq = step.next_seq
        self.ended = self.ended or step.ended
        self._marked = bool(held) or len(step.claims) > free or self._busy + self._waiting > 0
        if self._stored is not None and records:
            self._stored([claim.index for claim, _ in records])
        self._ready.extend(self._unlocking)
        self._ready.extend(step.claims[:free])
        self._locked, self._unlocking = [*held, *step.claims[free:]], []
        if step.lost:
            self.lost, self._more = True, False
            self._ready.clear()  # the take-over moved them to the orphans already
            self._locked = []
        elif not step.more:  # halted or ended: claims in hand are not run
            self._more = False
            self._give_back += [*self._ready, *self._locked]
            self._ready.clear()
            self._locked = []
        elif len(step.claims) < want:  # the cursor is at the end: nothing more for now
            self._more = False
        self._wake()

    def _declare(self) -> list[Claim]:
        """The claims in hand this round trip declares held unsent: all but `_keep`, which lanes that finish
        meanwhile take (the new claims it brings fill that up first, and the rest are held too). They are locked
        at once; those declared last time and not now are freed by the answer."""
        if not self._locked and len(self._ready) <= self._keep:
            return []
        in_hand, free = [*self._ready, *self._locked], len(self._ready)
        keep = self._keep
        self._ready = deque(in_hand[: min(keep, free)])
        self._unlocking = in_hand[free:keep]
        self._locked = in_hand[min(keep, free) :]
        return in_hand[keep:]

    @property
    def _waiting(self) -> int:
        return len(self._waiters)

    def _wake(self) -> None:
        """Hand claims in hand to the lanes waiting, in turn; the rest learn there is nothing to take, or the
        failure, once that is so."""
        if self._failure is None:
            while self._waiters and self._ready:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    self._busy += 1
                    waiter.set_result(self._ready.popleft())
            if not self._waiters or (not self.lost and (self._more or self._locked)):
                return
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            if waiter.done():
                continue
            if self._failure is not None:
                waiter.set_exception(self._failure)
            else:
                waiter.set_result(None)
