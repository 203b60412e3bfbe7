# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The record of what runs where: one host's ``deployment.json``. This file owns its schema.

Written only by the ``llmops.sglang.deployment_record`` module (one writer), in two ways:

* ``merge_record`` - the server role's record of the launch (roles/server/tasks/record.yml): what runs now, and what
  ran before it (``previous``), carried from the record already on the host;
* ``add_events`` - one step of a roll, written where it happens (``EVENTS`` says where), into ``roll``.

Schema (keys this file adds to the server role's record; the rest is the role's, see record.yml)::

    "previous": {"driver": "580.95.05", "model": {"revision": "main", "commit": "..."}}   # before the current one
    "roll": {"id": "20261202T045501Z", "events": [{"event": "drained", "at": "2026-12-02T04:55:10Z", ...}, ...]}

The build set's current and previous are the build_set module's (``build_set.current``/``.previous``: it owns the
pointer's history), the driver's and the model's current are the role's ``driver`` and ``model`` keys, their previous
values are carried here: a value that changed moves the old one to ``previous``; an unchanged one keeps its previous.

``roll`` holds the events of the last roll this host took part in: an event of another roll (its id comes from
playbooks/fleet_roll_plan.yml) starts the list again. Nothing secret is written: every string of a record or an event
goes through ``scrub`` (the values the caller names, and every ``api_key='...'``-like assignment or bearer token).
Pure functions, no Ansible imports (tests/unit/test_deployment_record.py).
"""

from __future__ import annotations

import datetime
import re
import time

SCHEMA = "llmops.sglang/deployment-v2"

# What runs on a host and has a previous value carried by this file: name -> the record's current value. A new fact
# (a driver another playbook moved to, a model revision) is one line in roles/server/tasks/record.yml, not here.
TRACKED = {
    "driver": lambda rec: rec.get("driver"),
    "model": lambda rec: _model(rec.get("model")),
}

# The steps of a roll: event -> (label in the report, where it is written). One writer per event.
EVENTS = {
    "drained": ("out of the router and drained", "roles/router/tasks/drain.yml"),
    "restarted": ("restarted", "roles/server/tasks/attempt.yml"),
    "ready": ("ready", "roles/server/tasks/attempt.yml"),
    "failed": ("did not come up", "roles/server/tasks/attempt.yml"),
    "rolled_back": ("rolled back", "playbooks/fleet_switch.yml"),
    "rejoined": ("back in the router", "roles/router/tasks/rejoin.yml"),
    "stopped": ("the roll stopped here", "playbooks/fleet_switch.yml"),
    "driver_upgraded": ("driver upgraded, rebooted, loaded", "playbooks/driver_upgrade.yml"),
    "held_out": ("kept out of the router, the roll stopped here", "playbooks/driver_upgrade.yml"),
}
# The detail each event may carry (anything else is dropped, so no caller can put an unvetted value in the record).
DETAIL = {
    "drained": ("left_router_at", "in_flight_left"),
    "restarted": ("attempt", "build_set", "model_revision", "mem_fraction_static"),
    "ready": ("attempt", "startup_seconds"),
    "failed": ("attempt", "outcome", "phase", "why"),
    "rolled_back": ("from_set", "to_set", "from_revision", "to_revision"),
    "rejoined": (),
    "stopped": ("why",),
    "driver_upgraded": ("from_driver", "to_driver"),
    "held_out": ("why",),
}
MAX_EVENTS = 64  # a roll of one host has a handful; a bound against a runaway caller
MAX_TEXT = 600
REDACTED = "<redacted>"

# Assignments and headers that carry a secret whatever its value: SGLang logs its ServerArgs with api_key='...' and
# admin_api_key='...' (0.5.9 sglang/srt/entrypoints/engine.py:1031 logs f"{server_args=}"), and a request may carry
# "Authorization: Bearer ...". The value is replaced, the name kept.
_SECRET_ASSIGN = re.compile(
    r"""(\b[A-Za-z_]*(?:api[_-]key|hf_token|password)['"]?\s*[=:]\s*)(['"]?)(?!None\b)([^'",\s)}]+)(\2)""",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(Bearer\s+|--(?:admin-)?api-key[ =])[A-Za-z0-9_.~+/=:-]+", re.IGNORECASE)


class RecordError(ValueError):
    """A record or an event this file refuses (one line: expected, found, what to do)."""


def _model(model):
    if not isinstance(model, dict) or not (model.get("commit") or model.get("revision")):
        return None
    return {"revision": model.get("revision"), "commit": model.get("commit")}


def scrub_text(text, secrets=()):
    """``text`` with each of ``secrets`` (values) and every secret-looking assignment or bearer token replaced."""
    out = str(text)
    for value in sorted({str(s) for s in secrets if s and len(str(s)) >= 4}, key=len, reverse=True):
        out = out.replace(value, REDACTED)
    out = _SECRET_ASSIGN.sub(lambda m: m.group(1) + m.group(2) + REDACTED + m.group(4), out)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, out)


def scrub(value, secrets=()):
    """Every string inside ``value`` (dicts, lists) through ``scrub_text``."""
    if isinstance(value, str):
        return scrub_text(value, secrets)
    if isinstance(value, dict):
        return {k: scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v, secrets) for v in value]
    return value


def utc_stamp(when=None):
    """``2026-12-02T04:55:10Z`` of a POSIX time (now when None)."""
    moment = (
        datetime.datetime.now(datetime.timezone.utc)
        if when is None
        else (datetime.datetime.fromtimestamp(float(when), datetime.timezone.utc))
    )
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(text):
    """POSIX seconds of a ``utc_stamp`` (None when it is not one)."""
    try:
        moment = datetime.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError):
        return None
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()


def merge_record(old, new, previous=None, secrets=()):
    """The record to write: ``new`` (the server role's) with ``previous`` carried from ``old`` and ``roll`` kept.

    ``previous`` ({name: value}) sets a previous value outright (a playbook that knows what it moved from); otherwise
    a TRACKED value that differs from the one in ``old`` moves the old one to ``previous``, and one that is the same
    keeps ``old``'s previous.
    """
    if not isinstance(new, dict):
        raise RecordError("expected the record as a mapping; found %s" % type(new).__name__)
    old = old if isinstance(old, dict) else {}
    before = old.get("previous") if isinstance(old.get("previous"), dict) else {}
    given = previous if isinstance(previous, dict) else {}
    carried = {}
    for name, current_of in TRACKED.items():
        now, then = current_of(new), current_of(old)
        if given.get(name) not in (None, ""):
            carried[name] = given[name]
        elif then is not None and now != then:
            carried[name] = then
        else:
            carried[name] = before.get(name)
    out = dict(new)
    out["schema"] = SCHEMA
    out["previous"] = carried
    if isinstance(old.get("roll"), dict):
        out["roll"] = old["roll"]
    return scrub(out, secrets)


def new_event(event, at=None, detail=None, now=None):
    """One roll event: {"event", "at" (UTC stamp), and the detail DETAIL allows for it}.

    ``at`` is a UTC stamp, else ``now`` (POSIX seconds; the clock when None) minus the detail's ``ago`` seconds.
    """
    if event not in EVENTS:
        raise RecordError("expected a roll event among %s; found %r. Use one of these" % (", ".join(EVENTS), event))
    if parse_stamp(at) is None:
        now = time.time() if now is None else float(now)
        try:
            ago = max(0.0, float((detail or {}).get("ago") or 0))
        except (TypeError, ValueError):
            ago = 0.0
        at = utc_stamp(now - ago)
    out = {"event": event, "at": at}
    for key in DETAIL[event]:
        value = (detail or {}).get(key)
        if value in (None, ""):
            continue
        if isinstance(value, str) and len(value) > MAX_TEXT:
            value = value[: MAX_TEXT - 1] + "…"
        out[key] = value
    return out


def add_events(old, roll, events, secrets=(), now=None):
    """The record ``old`` with ``events`` added to the roll ``roll`` (a new roll id starts the list again)."""
    if not roll or not isinstance(roll, str):
        raise RecordError("expected a roll id (playbooks/fleet_roll_plan.yml sets fleet_roll_id); found %r" % (roll,))
    out = dict(old) if isinstance(old, dict) else {}
    current = out.get("roll") if isinstance(out.get("roll"), dict) else {}
    kept = list(current.get("events") or []) if current.get("id") == roll else []
    for e in events:
        if not isinstance(e, dict):
            continue
        # a rejoin is a step of this roll only after this roll's drain (server.yml puts every replica back into the
        # router on every run, also when nothing restarted: that is no step, and a re-run must change nothing)
        if e.get("event") == "rejoined":
            names = [k.get("event") for k in kept]
            drained = max((i for i, n in enumerate(names) if n == "drained"), default=-1)
            if drained < 0 or "rejoined" in names[drained:]:
                continue
        kept.append(new_event(e.get("event"), e.get("at"), e, now))
    if not kept and current.get("id") != roll:
        return out  # nothing of this roll to record: the record stays as it is
    out["roll"] = {"id": roll, "events": scrub(kept[-MAX_EVENTS:], secrets)}
    return out


# --- reading a roll back (the report) ---------------------------------------------------------------------------


def roll_summary(record):
    """The last roll of one host's record: {"id", "events" (with label and seconds since the first), "state", "why"}.

    state: ``done`` (ready and back in the router, or ready when it was not drained: no router), ``stopped`` (the roll
    stopped at this host: it did not come up, or it was rolled back), ``in_progress`` (anything else, e.g. drained and
    not back yet), None without a roll.
    A failed attempt followed by a ready one (the capture-OOM retry) did not stop the roll.
    """
    roll = (record or {}).get("roll")
    if not isinstance(roll, dict) or not roll.get("events"):
        return None
    events = [e for e in roll["events"] if isinstance(e, dict) and e.get("event") in EVENTS]
    times = [parse_stamp(e.get("at")) for e in events]
    start = min([t for t in times if t is not None], default=None)
    shown = []
    for e, t in zip(events, times, strict=False):
        item = {k: v for k, v in e.items()}
        item["label"] = EVENTS[e["event"]][0]
        item["offset"] = (t - start) if (t is not None and start is not None) else None
        shown.append(item)
    names = [e["event"] for e in events]
    last_fail = max((i for i, n in enumerate(names) if n == "failed"), default=-1)
    last_ready = max((i for i, n in enumerate(names) if n == "ready"), default=-1)
    stops = [e for e in events if e["event"] in ("stopped", "held_out")]
    why = None
    if stops:
        state, why = "stopped", stops[-1].get("why")
    elif "rolled_back" in names or last_fail > last_ready:
        state = "stopped"
        why = events[last_fail].get("why") or events[last_fail].get("outcome") if last_fail >= 0 else None
    elif names[-1] == "rejoined" or (names[-1] == "ready" and "drained" not in names):
        state = "done"
    else:
        state = "in_progress"
    return {"id": roll.get("id"), "events": shown, "state": state, "why": why}
