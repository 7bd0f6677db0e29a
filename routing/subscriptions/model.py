"""The plain-Python model of the subscription table: the oracle for the Spark MERGE.

Deliberately written without anything from :mod:`routing.subscriptions.table`:
sequential dictionary updates instead of windows, joins and a MERGE. Only the
per-event rules (:func:`~routing.subscriptions.events.judge`) are shared; they
are pinned by their own unit tests.

Semantics of one batch (the unit the refresh job commits atomically):

1. Invalid events are rejected with their reason code.
2. Per (subscriber, pattern) only the valid event with the greatest
   ``(ts, change_id)`` counts; the others are *superseded*.
3. That event applies only if its ``(ts, change_id)`` is greater than the row's
   (last writer wins) and its change id is not the row's; otherwise it is
   *stale* (so re-applying a change, a retried copy of a keyed change with a
   later ``ts``, or an old subscribe arriving after an unsubscribe, is a no-op).
4. Unsubscribes apply first (soft delete: the row stays, inactive). Then the
   subscribes that would activate a row are taken in ``(ts, change_id)`` order.
   Each is rejected with ``subscription_table_full`` when the table already
   holds ``max_subscriptions_per_table`` active rows (checked first), else with
   ``too_many_subscriptions`` when its subscriber already holds
   ``max_subscriptions_per_subscriber`` active patterns, else with
   ``match_cost_exceeded`` when its pattern's match cost would take the
   subscriber's active patterns past ``max_match_cost_per_subscriber``, else
   accepted. A rejected subscribe holds nothing, so a later, cheaper one of the
   same subscriber may still fit (batching never changes the outcome).
   Subscribes to rows already active only refresh ``ts``/``change_id`` and
   never count against either limit; a table already over its limit (the
   limit was lowered) keeps its rows but accepts no new ones.

A subscribe the validator's ``[acl]`` rules forbid is rejected in step 1
(``forbidden_pattern``). Rules tightened later are applied to the rows already
held by :meth:`SubscriptionModel.deactivate_forbidden`, which the refresh job
runs before each run's first batch (:mod:`routing.subscriptions.acl_sweep`).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable

from routing.errors import MatchCostError, TooManySubscriptionsError
from routing.subscriptions.acl_sweep import FORBIDDEN_PATTERN, deactivation_change_id, forbidden_rows
from routing.subscriptions.events import (
    REFRESHED,
    STALE,
    SUBSCRIBED,
    SUBSCRIPTION_TABLE_FULL,
    SUPERSEDED,
    TOMBSTONED,
    UNSUBSCRIBED,
    ChangeEvent,
    Op,
    Outcome,
    Received,
    judge,
)
from routing.validation import Validator


@dataclasses.dataclass(frozen=True)
class ModelRow:
    active: bool
    ts_millis: int
    change_id: str


@dataclasses.dataclass
class SubscriptionModel:
    """Rows keyed by (subscriber, pattern), plus every rejected change id and its reason."""

    validator: Validator
    max_event_bytes: int
    rows: dict[tuple[str, str], ModelRow] = dataclasses.field(default_factory=dict)
    rejects: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Change id a deactivation gave its row -> its detail (the rejects table's ``forbidden_pattern`` rows).
    deactivations: dict[str, str] = dataclasses.field(default_factory=dict)

    def deactivate_forbidden(self) -> list[tuple[str, str]]:
        """Deactivate every active row the validator's ``[acl]`` rules forbid; returns their (subscriber, pattern).

        A row keeps its ``ts`` and gets its change id plus the sweep's suffix
        (see :mod:`~routing.subscriptions.acl_sweep`).
        """
        held = sorted(key for key, row in self.rows.items() if row.active)
        done = []
        for subscriber, pattern, detail in forbidden_rows(held, self.validator.acl):
            row = self.rows[(subscriber, pattern)]
            change_id = deactivation_change_id(row.change_id)
            self.rows[(subscriber, pattern)] = ModelRow(False, row.ts_millis, change_id)
            self.rejects[change_id] = FORBIDDEN_PATTERN
            self.deactivations[change_id] = detail
            done.append((subscriber, pattern))
        return done

    def apply_batch(self, batch: Iterable[Received | Outcome]) -> collections.Counter[str]:
        """Apply one batch; returns how many events had each outcome (kinds and reject reasons).

        A :class:`Received` is judged here as a JSON event (the Kafka path); an :class:`Outcome`
        arrives judged already (import files, whose CSV records are not JSON).
        """
        counts: collections.Counter[str] = collections.Counter()
        latest: dict[tuple[str, str], ChangeEvent] = {}
        validator = self.validator.for_batch()  # one ACL budget per batch, like each task of the job
        for item in batch:
            if isinstance(item, Outcome):
                outcome = item
            else:
                outcome = judge(item, validator, max_event_bytes=self.max_event_bytes)
            if outcome.rejection is not None:
                self.rejects[outcome.received.change_id] = outcome.rejection.reason
                counts[outcome.rejection.reason] += 1
                continue
            event = outcome.event
            assert event is not None
            key = (event.subscriber, event.pattern)
            held = latest.get(key)
            if held is None or event.order > held.order:
                latest[key] = event
            if held is not None:
                counts[SUPERSEDED] += 1

        activations: list[ChangeEvent] = []
        for key, event in latest.items():
            row = self.rows.get(key)
            if row is not None and (event.order <= (row.ts_millis, row.change_id) or event.change_id == row.change_id):
                counts[STALE] += 1
            elif event.op is Op.UNSUBSCRIBE:
                counts[UNSUBSCRIBED if row is not None and row.active else TOMBSTONED] += 1
                self.rows[key] = ModelRow(False, event.ts_millis, event.change_id)
            elif row is not None and row.active:
                counts[REFRESHED] += 1
                self.rows[key] = ModelRow(True, event.ts_millis, event.change_id)
            else:
                activations.append(event)

        held_now = collections.Counter(subscriber for (subscriber, _), row in self.rows.items() if row.active)
        cost_now: collections.Counter[str] = collections.Counter()
        for (subscriber, pattern), row in self.rows.items():
            if row.active:
                cost_now[subscriber] += self.validator.match_cost(pattern)
        table_now = sum(held_now.values())
        for event in sorted(activations, key=lambda candidate: candidate.order):
            if table_now >= self.validator.limits.max_subscriptions_per_table:
                self.rejects[event.change_id] = SUBSCRIPTION_TABLE_FULL
                counts[SUBSCRIPTION_TABLE_FULL] += 1
                continue
            cost = self.validator.match_cost(event.pattern)
            try:
                self.validator.check_subscription_count(event.subscriber, held_now[event.subscriber] + 1)
                self.validator.check_match_cost(event.subscriber, cost_now[event.subscriber] + cost)
            except (TooManySubscriptionsError, MatchCostError) as error:
                self.rejects[event.change_id] = error.reason
                counts[error.reason] += 1
                continue
            held_now[event.subscriber] += 1
            cost_now[event.subscriber] += cost
            table_now += 1
            counts[SUBSCRIBED] += 1
            self.rows[(event.subscriber, event.pattern)] = ModelRow(True, event.ts_millis, event.change_id)
        return counts

    def active_pairs(self) -> frozenset[tuple[str, str]]:
        """(pattern, subscriber) of every active row: what the router would match against."""
        return frozenset((pattern, subscriber) for (subscriber, pattern), row in self.rows.items() if row.active)


def apply_events_model(
    batches: Iterable[Iterable[Received | Outcome]], validator: Validator, *, max_event_bytes: int
) -> SubscriptionModel:
    """The table (and rejects) after applying ``batches`` in order to an empty table."""
    model = SubscriptionModel(validator, max_event_bytes)
    for batch in batches:
        model.apply_batch(batch)
    return model
