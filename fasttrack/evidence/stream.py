"""The bench passes' result stream: how a timing worker hands each sample to the collector as it is measured.

A bench worker hosts contribution code (the contribution pass imports its candidates entry), so anything it
writes to disk, and anything it still holds in memory, is in that code's hands until the process is gone:
an exit hook can rewrite its own result file, a gc walk can rewrite its records before they are written.
The collector therefore builds the bench part only from what it received over this stream during the pass;
the files the worker writes stay in the work dir as a record and are never read back.

The channel: before each pass the collector listens on a Unix socket of its own (Linux: an abstract address,
no file anywhere; elsewhere a socket in a fresh 0700 directory) and generates a per-run nonce; the worker
finds both in ``FASTTRACK_STREAM`` (removed from its environment at once) and connects, once per rank,
before any contribution module is imported. Every frame is one JSON line (`Frame`): schema version `v`,
the nonce, the rank the connection said hello as, a sequence number that counts up from 0 per connection,
and a kind:

* ``hello`` (seq 0): rank, world size, pass ("engine" / "contribution");
* ``point``: a point id the collector assigned (in the spec) starts;
* ``declare``: the point's variant names; the collector answers one line ``{"ids": {name: id}}`` of ids it
  generated, which every later frame of the point must use;
* ``sample``: one timed replay of one variant (device and wall time, us), sent right after the timed call
  returned, before any other contribution code runs;
* ``check``: the accuracy outcome of that replay;
* ``result``: the point's record (`Measurement`), after the point ends;
* ``end``: the worker finished.

The collector (`StreamServer`) refuses a connection whose hello carries another nonce, an unknown rank, or a
rank already connected (the genuine ranks connect before contribution code exists; a forger that read the
nonce and came first gets the genuine hello refused), one past the ranks and `MAX_EXTRA_CONNECTIONS` more
(closed unread), and one whose frames its reader cannot handle; any refused connection rejects every point
of the pass. A frame out of sequence, for an unassigned point or variant id, a second result for a point,
or a frame after ``end`` breaks the connection: none of that rank's data is used. When the worker has
exited, every genuine connection reaches end of file; one still open (a process the worker started holds
the socket) is broken too. A point's record is taken with the streamed samples, checks and oracle checks in
place of the ones it carries: a record whose samples, oracle checks or errors differ from what was streamed
as it was measured (rewritten in memory) is rejected, as is one that calls a variant accurate after a
streamed check failed, and one that names another point (or rank) than the collector assigned the id to.

What this does not stop: code in the worker's own process (the candidates) can write frames itself (it holds
the socket and the nonce) or patch the timer before a sample is taken; the saved timer references and the
timer guard (which watches this module's functions and the client's socket too) are the defence there, and
the engine pass (no contribution code) is the yardstick for stock. Contribution code that rewrites the guard
as well is not caught: a check in the process that hosts it. A process of the same user can read the nonce
from the worker's /proc environ; connecting first only gets the worker refused (the pass rejected). Root on
the machine can do anything.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import math
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fasttrack.evidence.measurement import Measurement

ENV = "FASTTRACK_STREAM"
VERSION = 1
MAX_LINE = 64 << 20  # one frame; a point's record with 100,000 samples per variant is a few MB
EOF_WAIT_S = 5.0  # after the worker exited, how long its connections may take to reach end of file
PassKind = Literal["engine", "contribution"]
Kind = Literal["hello", "point", "declare", "sample", "check", "oracle", "result", "end"]
MAX_EXTRA_CONNECTIONS = 8  # beyond the ranks: a forger's (each refused); more are closed unread


class Frame(BaseModel):
    """One line of the stream. Fields a kind does not use stay None."""

    model_config = ConfigDict(extra="forbid")

    v: Literal[1]
    kind: Kind
    nonce: str = Field(min_length=16, max_length=128)
    seq: int = Field(ge=0)
    rank: int = Field(ge=0, le=4095)
    world: int | None = Field(default=None, ge=1, le=4096)
    pass_kind: PassKind | None = None
    point_id: str | None = Field(default=None, max_length=64)
    variant_id: str | None = Field(default=None, max_length=64)
    names: list[str] | None = Field(default=None, max_length=256)
    device_us: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    wall_us: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    ok: bool | None = None
    reason: str | None = Field(default=None, max_length=4096)
    error: float | None = Field(default=None, ge=0, allow_inf_nan=False)  # a check's max abs error so far
    atol: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    rtol: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    result: Measurement | None = None


# -------------------------------------------------------------------------------------------- worker side
class StreamClient:
    """The worker's end: one connection, frames numbered from 0."""

    def __init__(self, sock: socket.socket, nonce: str, rank: int) -> None:
        self._sock = sock
        self._reader = sock.makefile("rb")
        self._nonce = nonce
        self._rank = rank
        self._seq = 0
        self._ids: dict[str, dict[str, str]] = {}

    @classmethod
    def from_env(cls, rank: int, world: int, pass_kind: PassKind) -> StreamClient | None:
        """Connect to the collector named in ``FASTTRACK_STREAM`` (and remove it from the environment, so
        no process this one starts inherits it). None when the variable is not set (a worker run by hand
        writes its files only)."""
        raw = os.environ.pop(ENV, None)
        if raw is None:
            return None
        cfg = json.loads(raw)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(_sockaddr(str(cfg["address"])))
        client = cls(sock, str(cfg["nonce"]), rank)
        client._send("hello", world=world, pass_kind=pass_kind)
        return client

    def _send(self, kind: Kind, **fields: Any) -> None:
        frame = {"v": VERSION, "kind": kind, "nonce": self._nonce, "seq": self._seq, "rank": self._rank,
                 **fields}
        self._seq += 1
        self._sock.sendall((json.dumps(frame, allow_nan=False, sort_keys=True) + "\n").encode())

    def point(self, point_id: str) -> None:
        self._send("point", point_id=point_id)

    def declare(self, point_id: str, names: list[str]) -> None:
        self._send("declare", point_id=point_id, names=names)
        reply = json.loads(self._reader.readline(MAX_LINE) or b"{}")
        ids = reply.get("ids") if isinstance(reply, dict) else None
        if not isinstance(ids, dict) or set(ids) != set(names):
            raise RuntimeError("the collector did not assign ids to the declared variants")
        self._ids[point_id] = {str(k): str(v) for k, v in ids.items()}

    def sample(self, point_id: str, name: str, device_us: float, wall_us: float | None) -> None:
        self._send("sample", point_id=point_id, variant_id=self._ids[point_id][name], device_us=device_us,
                   wall_us=wall_us)

    def check(self, point_id: str, name: str, ok: bool, reason: str | None,
              error: float | None = None) -> None:
        self._send("check", point_id=point_id, variant_id=self._ids[point_id][name], ok=ok,
                   reason=None if reason is None else reason[:4000], error=_finite(error))

    def oracle(self, point_id: str, name: str, ok: bool, error: float | None, atol: float, rtol: float,
               reason: str | None) -> None:
        self._send("oracle", point_id=point_id, variant_id=self._ids[point_id][name], ok=ok,
                   error=_finite(error), atol=atol, rtol=rtol,
                   reason=None if reason is None else reason[:4000])

    def result(self, point_id: str, record: dict[str, Any]) -> None:
        self._send("result", point_id=point_id, result=record)

    def end(self) -> None:
        self._send("end")
        self._reader.close()  # the makefile holds the socket open until it is closed too
        self._sock.close()

    def recorder(self, point_id: str) -> PointRecorder:
        return PointRecorder(self, point_id)


@dataclass
class PointRecorder:
    """What the timing protocol calls while it measures one point (`timing.run_case(recorder=...)`)."""

    client: StreamClient
    point_id: str

    def declare(self, names: list[str]) -> None:
        self.client.declare(self.point_id, names)

    def sample(self, name: str, device_us: float, wall_us: float | None) -> None:
        self.client.sample(self.point_id, name, device_us, wall_us)

    def check(self, name: str, ok: bool, reason: str | None, error: float | None = None) -> None:
        self.client.check(self.point_id, name, ok, reason, error)

    def oracle(self, name: str, ok: bool, error: float | None, atol: float, rtol: float,
               reason: str | None) -> None:
        self.client.oracle(self.point_id, name, ok, error, atol, rtol, reason)


# ------------------------------------------------------------------------------------------ collector side
def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) or x < 0 else float(x)


@dataclass
class _Point:
    names: dict[str, str] = field(default_factory=dict)  # variant id -> name
    samples: dict[str, list[tuple[float, float | None]]] = field(default_factory=dict)  # name -> samples
    checks: dict[str, list[tuple[bool, str | None, float | None]]] = field(default_factory=dict)
    oracle: dict[str, tuple[bool, float | None, float, float, str | None]] = field(default_factory=dict)
    result: Measurement | None = None


@dataclass
class _Conn:
    rank: int
    points: dict[str, _Point] = field(default_factory=dict)
    current: str | None = None
    ended: bool = False
    broken: str | None = None


def _sockaddr(address: str) -> str | bytes:
    return b"\0" + address[1:].encode() if address.startswith("@") else address


class StreamServer:
    """The collector's end for one bench pass of `world` ranks over the points `point_ids` names."""

    def __init__(self, world: int, pass_kind: PassKind, jobs: Iterable[str],
                 points: dict[str, dict[str, Any]] | None = None) -> None:
        self.world = world
        self.pass_kind = pass_kind
        self.nonce = secrets.token_hex(24)
        self.point_ids = {job: secrets.token_hex(8) for job in jobs}  # job (result file) -> point id
        # job -> the point the collector asked for there: a record naming another point is not taken for it
        self.points = dict(points or {})
        self._by_id = {v: k for k, v in self.point_ids.items()}
        self.problems: list[str] = []
        self.refused: list[str] = []
        self._conns: dict[int, _Conn] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self._closing = False
        self._stop_accepting = False
        self._dir: str | None = None
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if sys.platform.startswith("linux"):
            self.address = f"@fasttrack-stream-{secrets.token_hex(12)}"
        else:
            self._dir = tempfile.mkdtemp(prefix="ftstream-")
            self.address = os.path.join(self._dir, "s")
        self._listener.bind(_sockaddr(self.address))
        self._listener.listen(world + 8)
        self._listener.settimeout(0.2)
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def env(self) -> dict[str, str]:
        return {ENV: json.dumps({"address": self.address, "nonce": self.nonce})}

    # ------------------------------------------------------------------ receiving
    def _accept(self) -> None:
        while not self._stop_accepting:
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._start(conn)

    def _start(self, conn: socket.socket) -> None:
        conn.settimeout(None)
        with self._lock:
            if len(self._socks) >= self.world + MAX_EXTRA_CONNECTIONS:
                # every reader is a thread and a line buffer of up to MAX_LINE: a flood is not read at all
                self.refused.append("a connection was refused: more connections than the pass has ranks "
                                    f"(+{MAX_EXTRA_CONNECTIONS})")
                with contextlib.suppress(OSError):
                    conn.close()
                return
            self._socks.append(conn)
        t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
        self._threads.append(t)
        t.start()

    def _serve(self, sock: socket.socket) -> None:
        reader = sock.makefile("rb")
        state: _Conn | None = None
        seq = 0
        try:
            while True:
                line = reader.readline(MAX_LINE + 1)
                if not line:
                    return
                if self._closing:
                    raise _Broken("a frame arrived after the worker had exited")
                if len(line) > MAX_LINE:
                    raise _Broken("a frame longer than the limit")
                if not line.endswith(b"\n"):
                    return  # a frame cut short by the worker's end (an interrupted pass): it adds nothing
                try:
                    frame = Frame.model_validate_json(line)
                except ValidationError as exc:
                    raise _Broken(f"a frame that does not fit the schema: {exc.errors()[0].get('msg')}"
                                  ) from None
                if not hmac.compare_digest(frame.nonce.encode(), self.nonce.encode()):
                    raise _Refused("a frame without this run's nonce")
                if frame.seq != seq:
                    raise _Broken(f"frame {seq} expected, got {frame.seq}")
                seq += 1
                if state is None:
                    state = self._hello(frame)
                    continue
                if frame.rank != state.rank:
                    raise _Broken(f"a frame for rank {frame.rank} on rank {state.rank}'s connection")
                self._frame(state, frame, sock)
        except _Refused as exc:
            with self._lock:
                self.refused.append(f"a connection was refused: {exc}")
            if state is not None:
                state.broken = state.broken or str(exc)
        except _Broken as exc:
            if state is None:
                with self._lock:
                    self.refused.append(f"a connection was refused: {exc}")
            else:
                state.broken = state.broken or str(exc)
        except OSError as exc:
            if state is not None and not self._closing:
                state.broken = state.broken or f"the connection failed: {exc}"
        except Exception as exc:  # nothing a peer sends may end a reader unnoticed
            why = f"the collector could not read a frame ({type(exc).__name__}: {str(exc)[:200]})"
            with self._lock:
                if state is None:
                    self.refused.append(f"a connection was refused: {why}")
                else:
                    state.broken = state.broken or why
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def _hello(self, frame: Frame) -> _Conn:
        if frame.kind != "hello":
            raise _Refused("the first frame is not a hello")
        if frame.world != self.world or frame.pass_kind != self.pass_kind:
            raise _Refused(f"a hello for a {frame.pass_kind} pass of {frame.world} rank(s); this is a "
                           f"{self.pass_kind} pass of {self.world}")
        if frame.rank >= self.world:
            raise _Refused(f"rank {frame.rank} of a {self.world}-rank pass")
        with self._lock:
            if frame.rank in self._conns:
                raise _Refused(f"rank {frame.rank} is already connected (a second stream for it)")
            state = _Conn(rank=frame.rank)
            self._conns[frame.rank] = state
        return state

    def _frame(self, state: _Conn, frame: Frame, sock: socket.socket) -> None:
        if state.ended:
            raise _Broken("a frame after the end of the stream")
        if frame.kind == "hello":
            raise _Broken("a second hello")
        if frame.kind == "end":
            state.ended = True
            return
        pid = frame.point_id
        if pid is None or pid not in self._by_id:
            raise _Broken(f"a {frame.kind} frame for a point id the collector did not assign")
        if frame.kind == "point":
            if pid in state.points:
                raise _Broken("a point started twice")
            state.points[pid] = _Point()
            state.current = pid
            return
        if pid != state.current:
            raise _Broken(f"a {frame.kind} frame for a point that is not the one running")
        pt = state.points[pid]
        if pt.result is not None:
            raise _Broken(f"a {frame.kind} frame after the point's result")
        if frame.kind == "declare":
            names = frame.names or []
            if pt.names or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
                raise _Broken("variants declared twice, or twice the same name")
            ids = {n: secrets.token_hex(6) for n in names}
            pt.names = {v: k for k, v in ids.items()}
            pt.samples = {n: [] for n in names}
            pt.checks = {n: [] for n in names}
            sock.sendall((json.dumps({"ids": ids}) + "\n").encode())
            return
        if frame.kind == "result":
            if frame.result is None:
                raise _Broken("a result frame without a record")
            pt.result = frame.result
            return
        name = pt.names.get(frame.variant_id or "")
        if name is None:
            raise _Broken(f"a {frame.kind} frame for a variant id the collector did not assign")
        if frame.kind == "sample":
            if frame.device_us is None:
                raise _Broken("a sample without a time")
            pt.samples[name].append((frame.device_us, frame.wall_us))
        elif frame.kind == "oracle":
            if frame.ok is None or frame.atol is None or frame.rtol is None or name in pt.oracle:
                raise _Broken("an oracle check without an outcome or tolerance, or a second one for a "
                              "variant")
            pt.oracle[name] = (frame.ok, frame.error, frame.atol, frame.rtol, frame.reason)
        else:
            if frame.ok is None:
                raise _Broken("a check without an outcome")
            pt.checks[name].append((frame.ok, frame.reason, frame.error))

    # ------------------------------------------------------------------ after the pass
    def finish(self, wait_s: float = EOF_WAIT_S) -> None:
        """Called once the worker has exited: stop accepting; every genuine connection is at end of file
        (the worker closed it by exiting); one still open after `wait_s` is held by another process and
        is broken (its data is not used)."""
        self._closing_accept()
        deadline = time.monotonic() + wait_s
        for t in list(self._threads):
            t.join(max(0.0, deadline - time.monotonic()))
        late = [t for t in self._threads if t.is_alive()]
        self._closing = True
        if late:
            with self._lock:
                for state in self._conns.values():
                    state.broken = state.broken or ("the stream was still open after the worker exited (a "
                                                    "process it started holds it)")
                socks = list(self._socks)
            for s in socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            for t in late:
                t.join(1.0)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def _closing_accept(self) -> None:
        """Stop the acceptor, then serve every connection still waiting in the backlog (a forger's too: its
        hello is judged like any other) and close the listener."""
        self._stop_accepting = True
        self._acceptor.join(2.0)
        self._listener.setblocking(False)
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                break
            self._start(conn)
        with contextlib.suppress(OSError):
            self._listener.close()

    def records(self, job: str) -> list[dict[str, Any] | None]:
        """Each rank's record of the point `job` as JSON (None: that rank streamed no usable record), with
        the streamed samples in place of the record's own and the rejections the stream found."""
        pid = self.point_ids[job]
        out: list[dict[str, Any] | None] = []
        for rank in range(self.world):
            state = self._conns.get(rank)
            pt = None if state is None or state.broken else state.points.get(pid)
            if pt is None or pt.result is None:
                out.append(None)
                continue
            out.append(_reconcile(pt, self.refused, self.points.get(job), rank, self.world))
        return out

    def notes(self) -> list[str]:
        """What the collector says about the stream in bench.log (refusals and broken connections)."""
        lines = list(self.refused)
        for rank in range(self.world):
            state = self._conns.get(rank)
            if state is None:
                lines.append(f"rank {rank} never connected its result stream")
            elif state.broken:
                lines.append(f"rank {rank}'s result stream was broken ({state.broken}): none of its data "
                             "is used")
        return lines


class _Refused(Exception):
    pass


class _Broken(Exception):
    pass


def _reconcile(pt: _Point, refused: list[str], point: dict[str, Any] | None = None, rank: int = 0,
               world: int = 1) -> dict[str, Any]:
    rec = pt.result
    assert rec is not None
    data = rec.model_dump(mode="json")
    reasons: list[str] = list(data.get("reasons") or [])
    if point is not None and data.get("point") != point:
        reasons.append(f"the worker's record names another point ({data.get('point')}) than the one the "
                       f"collector assigned this point id to ({point}): it is taken for neither")
        data["point"] = dict(point)
    if int(data.get("world_size") or 1) != world or data.get("rank") != (rank if world > 1 else None):
        reasons.append(f"the worker's record names another rank or world size (rank {data.get('rank')} of "
                       f"{data.get('world_size')}) than its stream's (rank {rank} of {world})")
        data["world_size"], data["rank"] = world, (rank if world > 1 else None)
    _reconcile_oracle(pt, data, reasons)
    variants: dict[str, Any] = data.get("variants") or {}
    declared = set(pt.samples)
    for name in sorted(set(variants) - declared):
        if variants[name].get("samples_us"):
            reasons.append(f"variant {name!r}: samples in the worker's record that were never streamed")
        variants[name]["samples_us"] = []
        variants[name].pop("samples_wall_us", None)
    for name in sorted(declared):
        streamed = pt.samples[name]
        v = variants.setdefault(name, {})
        device = [d for d, _w in streamed]
        walls = [w for _d, w in streamed]
        if list(v.get("samples_us") or []) != device:
            reasons.append(f"variant {name!r}: the worker's record differs from the samples streamed as they "
                           "were measured (rewritten in the worker's memory after the timed replays)")
        v["samples_us"] = device
        v.pop("samples_wall_us", None)
        if walls and all(w is not None for w in walls):
            v["samples_wall_us"] = [float(w) for w in walls if w is not None]
        failed = [r for ok, r, _e in pt.checks[name] if not ok]
        errors = [e for _ok, _r, e in pt.checks[name] if e is not None]
        acc = (data.get("accuracy") or {}).get(name)
        if isinstance(acc, dict):
            acc["checked"] = max(int(acc.get("checked") or 0), len(device))
            if errors and float(acc.get("max_abs_error") or 0.0) < max(errors):
                reasons.append(f"variant {name!r}: the worker's record states a smaller error than the "
                               f"checks streamed ({acc.get('max_abs_error')} < {max(errors)})")
                acc["max_abs_error"] = max(errors)
            if failed:
                if acc.get("ok"):
                    reasons.append(f"variant {name!r}: the worker's record calls it accurate after a "
                                   f"streamed check failed ({failed[0] or 'no reason given'})")
                acc["ok"] = False
                acc["failures"] = max(int(acc.get("failures") or 0), len(failed))
                acc["reason"] = acc.get("reason") or failed[0]
    if refused:
        reasons.append("the collector refused a forged result stream during this pass: "
                       + "; ".join(refused[:3]))
    data["reasons"] = list(dict.fromkeys(reasons))
    if data["reasons"] and data.get("status") == "ok":
        data["status"] = "rejected"
    return data


def _reconcile_oracle(pt: _Point, data: dict[str, Any], reasons: list[str]) -> None:
    """The record's oracle checks are the streamed ones (each sent as it was computed, before the next
    variant ran): a record entry that differs, or has no streamed check, is a record rewritten in memory."""
    oracle: dict[str, Any] = data.get("oracle") or {}
    for name in sorted(set(oracle) - set(pt.oracle)):
        reasons.append(f"variant {name!r}: an oracle check in the worker's record that was never streamed")
        del oracle[name]
    for name, (ok, err, atol, rtol, why) in sorted(pt.oracle.items()):
        got = oracle.get(name)
        want = {"max_abs_error": err, "atol": atol, "rtol": rtol, "ok": ok, "reason": why}
        if not isinstance(got, dict) or any(got.get(k) != v for k, v in want.items()):
            reasons.append(f"variant {name!r}: the worker's record of its oracle check differs from the one "
                           "streamed as it was computed (rewritten in the worker's memory)")
        oracle[name] = want
    data["oracle"] = oracle


RecorderFactory = Callable[[str], PointRecorder]
