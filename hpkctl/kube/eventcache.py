"""client-go's event correlation (``tools/record/events_cache.go``), so a pod stuck in a loop cannot
flood the API server with Events.

Three steps per event, in client-go's order (``EventCorrelator.EventCorrelate``):

1. **Aggregation** (``EventAggregator``): events about one object with the same source, type and
   reason but different messages are "similar". Once :data:`AGGREGATE_MAX_EVENTS` (10) distinct
   messages were seen within :data:`AGGREGATE_INTERVAL` (600 s) of each other, the event becomes one
   aggregated event, "(combined from similar events): <message>", counted under the group's key.
2. **Deduplication** (``eventLogger``): the same event again (same key) bumps ``count`` of the one
   posted before instead of adding another.
3. **Spam filter** (``EventSourceObjectSpamFilter``): per source and object, a token bucket of
   :data:`SPAM_BURST` (25) refilled at :data:`SPAM_QPS` (1 per 300 s). An event without a token is
   dropped, count bumps included.

Pure and clocked by a parameter, so the tests step time instead of waiting it out.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

#: client-go's maxLruCacheEntries: each cache remembers this many keys, the least recently used go first
LRU_ENTRIES = 4096
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = 600.0
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
COMBINED = "(combined from similar events): "

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    """k8s.io/utils/lru: a bounded map; :meth:`get` and :meth:`put` make a key the most recent.
    ``index``: what :meth:`drop` finds keys by (an event key's object uid), kept as a map so that
    dropping one object's keys looks at those keys only, not at the whole cache (a burst of deleted
    pods scanned 4,096 keys per pod: ~9 % of the kubelet's CPU)."""

    def __init__(self, size: int = LRU_ENTRIES, *, index: Callable[[K], str] | None = None) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._index = index
        self._by: dict[str, set[K]] = {}

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        if self._index is not None and key not in self._items:
            self._by.setdefault(self._index(key), set()).add(key)
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            old, _ = self._items.popitem(last=False)
            if self._index is not None:
                keys = self._by.get(ix := self._index(old))
                if keys is not None:
                    keys.discard(old)
                    if not keys:
                        del self._by[ix]

    def drop(self, index: str) -> None:
        """Forget every key whose ``index`` is ``index``."""
        for key in self._by.pop(index, ()):
            self._items.pop(key, None)


@dataclass(frozen=True)
class EventKey:
    """What client-go's ``getEventKey`` joins: the source, the object, the type, reason and message."""

    component: str
    host: str
    kind: str
    namespace: str
    name: str
    uid: str
    api_version: str
    type: str
    reason: str
    message: str

    @property
    def spam(self) -> tuple[str, ...]:
        """``getSpamKey``: the source and the object."""
        return (self.component, self.host, self.kind, self.namespace, self.name, self.uid, self.api_version)

    @property
    def group(self) -> tuple[str, ...]:
        """``EventAggregatorByReasonFunc``'s aggregate key: all but the message."""
        return (*self.spam, self.type, self.reason)


def key_uid(key: EventKey | tuple[str, ...]) -> str:
    """The uid of the object an event key (or a group or spam key) is about."""
    return key.uid if isinstance(key, EventKey) else key[5]


@dataclass
class TokenBucket:
    """flowcontrol's passive token bucket: starts full, refills ``qps`` tokens a second up to ``burst``."""

    burst: int
    qps: float
    tokens: float
    at: float

    def try_accept(self, now: float) -> bool:
        self.tokens = min(float(self.burst), self.tokens + max(0.0, now - self.at) * self.qps)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass
class _Group:
    messages: set[str] = field(default_factory=set)
    last: float = float("-inf")


@dataclass(frozen=True)
class Correlated:
    """What to do with one event: post ``message`` as a new event (``count`` 1), or bump ``count`` of
    the one remembered under ``key`` (``count`` > 1); ``skip`` when the spam filter dropped it."""

    key: EventKey | tuple[str, ...]
    message: str
    count: int
    skip: bool = False


class EventCorrelator:
    """Aggregation, deduplication and the spam filter, as client-go's ``NewEventCorrelator`` sets
    them up. Not thread-safe: the caller holds its own lock."""

    def __init__(self, *, burst: int = SPAM_BURST, qps: float = SPAM_QPS, max_events: int = AGGREGATE_MAX_EVENTS,
                 interval: float = AGGREGATE_INTERVAL, size: int = LRU_ENTRIES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self.qps, self.max_events, self.interval = burst, qps, max_events, interval
        self.clock = clock
        self._groups: Lru[tuple[str, ...], _Group] = Lru(size)
        self._counts: Lru[EventKey | tuple[str, ...], int] = Lru(size, index=key_uid)
        self._buckets: Lru[tuple[str, ...], TokenBucket] = Lru(size)

    def correlate(self, key: EventKey) -> Correlated:
        now = self.clock()
        # 1. aggregation: the 10th distinct message of a group within the interval and later ones
        group = self._groups.get(key.group)
        if group is None or now - group.last > self.interval:
            group = _Group()
        group.messages.add(key.message)
        group.last = now
        self._groups.put(key.group, group)
        ckey: EventKey | tuple[str, ...] = key
        message = key.message
        if len(group.messages) >= self.max_events:
            group.messages.pop()  # client-go's PopAny: the set never grows past the maximum
            ckey, message = key.group, COMBINED + key.message
        # 2. deduplication: the count this occurrence makes
        count = (self._counts.get(ckey) or 0) + 1
        self._counts.put(ckey, count)
        # 3. the spam filter, per source and object
        bucket = self._buckets.get(key.spam)
        if bucket is None:
            bucket = TokenBucket(self.burst, self.qps, float(self.burst), now)
        accepted = bucket.try_accept(now)
        self._buckets.put(key.spam, bucket)
        return Correlated(ckey, message, count, skip=not accepted)

    def posted(self, key: EventKey | tuple[str, ...]) -> None:
        """A new event was posted under ``key`` (the first, or one after the old expired): count 1."""
        self._counts.put(key, 1)

    def forget(self, uid: str) -> None:
        """Drop the counts of a deleted object (its events are not bumped again)."""
        self._counts.drop(uid)
