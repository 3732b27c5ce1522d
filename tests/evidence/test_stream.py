"""The bench passes' result stream (fasttrack.evidence.stream): framing the collector validates.

Each attack plays a process that tries to put figures into the collector's custody that the timing worker
did not measure: a stream with a guessed nonce, a second stream for a rank already connected, frames out of
sequence or for ids the collector never assigned, a record rewritten after its samples were streamed, a
stream kept open by a process the worker left behind. The honest twin is a worker's ordinary stream."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time

import pytest
from stream_records import stream_record

from fasttrack.evidence import stream

JOB = "bench/0000.json"




def _client(server: stream.StreamServer, monkeypatch: pytest.MonkeyPatch, rank: int = 0,
            env: dict[str, str] | None = None) -> stream.StreamClient:
    for k, v in (env or server.env()).items():
        monkeypatch.setenv(k, v)
    client = stream.StreamClient.from_env(rank, server.world, server.pass_kind)
    assert client is not None
    assert stream.ENV not in os.environ  # gone before any contribution module is imported
    return client


def _honest(client: stream.StreamClient, pid: str, samples: dict[str, list[float]]) -> None:
    client.point(pid)
    client.declare(pid, list(samples))
    for name, values in samples.items():
        for v in values:
            client.sample(pid, name, v, None)
            client.check(pid, name, True, None)
    client.result(pid, stream_record(samples))
    client.end()


def _server() -> stream.StreamServer:
    return stream.StreamServer(1, "contribution", [JOB])


def test_an_honest_stream_is_taken_as_streamed(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _server()
    _honest(_client(server, monkeypatch), server.point_ids[JOB], {"stock": [2.0, 3.0], "fused": [1.0, 1.5]})
    server.finish()
    [rec] = server.records(JOB)
    assert rec is not None and rec["status"] == "ok" and not rec["reasons"]
    assert rec["variants"]["fused"]["samples_us"] == [1.0, 1.5]
    assert server.notes() == []


def test_a_record_that_differs_from_its_streamed_samples_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _server()
    client = _client(server, monkeypatch)
    pid = server.point_ids[JOB]
    client.point(pid)
    client.declare(pid, ["stock", "fused"])
    for name, v in (("stock", 2.0), ("fused", 1.0), ("fused", 1.2), ("stock", 2.1)):
        client.sample(pid, name, v, None)
    rewritten = stream_record({"stock": [2.0, 2.1], "fused": [0.01, 0.012]})  # fused rewritten in memory
    client.result(pid, rewritten)
    client.end()
    server.finish()
    [rec] = server.records(JOB)
    assert rec is not None and rec["status"] == "rejected"
    assert rec["variants"]["fused"]["samples_us"] == [1.0, 1.2]  # what was measured, not the record's
    assert any("differs from the samples streamed" in r and "'fused'" in r for r in rec["reasons"])


def test_a_record_that_calls_a_failed_check_accurate_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    from fasttrack.evidence.measurement import AccuracyResult

    server = _server()
    client = _client(server, monkeypatch)
    pid = server.point_ids[JOB]
    client.point(pid)
    client.declare(pid, ["stock", "fused"])
    client.sample(pid, "fused", 1.0, None)
    client.check(pid, "fused", False, "timed output does not match stock")
    rec = stream_record({"stock": [], "fused": [1.0]})
    rec["accuracy"] = {"fused": AccuracyResult(atol=0, rtol=0, ok=True, checked=1).model_dump(mode="json")}
    client.result(pid, rec)
    client.end()
    server.finish()
    [got] = server.records(JOB)
    assert got is not None and got["status"] == "rejected" and not got["accuracy"]["fused"]["ok"]
    assert any("streamed check failed" in r for r in got["reasons"])


def test_a_stream_with_another_nonce_is_refused_and_rejects_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _server()
    honest = _client(server, monkeypatch)
    forged_env = {stream.ENV: json.dumps({"address": server.address, "nonce": "0" * 48})}
    forger = _client(server, monkeypatch, env=forged_env)
    forger.point(server.point_ids[JOB])
    _honest(honest, server.point_ids[JOB], {"stock": [2.0], "fused": [1.0]})
    server.finish()
    [rec] = server.records(JOB)
    assert rec is not None and rec["status"] == "rejected"
    assert any("refused a forged result stream" in r and "nonce" in r for r in rec["reasons"])


def test_a_second_stream_for_a_connected_rank_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # A process that read the nonce (the worker's /proc environ) can only connect after the worker did.
    server = _server()
    honest = _client(server, monkeypatch)
    time.sleep(0.3)  # the honest hello is in
    second = _client(server, monkeypatch)
    with pytest.raises((RuntimeError, OSError)):  # refused: the collector closed it, assigns it no ids
        _honest(second, server.point_ids[JOB], {"stock": [2.0], "fused": [0.001]})
    _honest(honest, server.point_ids[JOB], {"stock": [2.0], "fused": [1.0]})
    server.finish()
    [rec] = server.records(JOB)
    assert rec is not None and rec["variants"]["fused"]["samples_us"] == [1.0]
    assert any("already connected" in r for r in rec["reasons"]) and rec["status"] == "rejected"


@pytest.mark.parametrize("attack", ["seq", "unassigned point", "unassigned variant", "after end",
                                    "second result"])
def test_a_malformed_stream_is_broken_and_none_of_its_data_is_used(attack: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    server = _server()
    client = _client(server, monkeypatch)
    pid = server.point_ids[JOB]
    client.point(pid)
    client.declare(pid, ["stock", "fused"])
    client.sample(pid, "fused", 1.0, None)
    with contextlib.suppress(OSError):  # the collector closes a broken stream: later sends may fail
        if attack == "seq":
            client._seq += 3
            client.sample(pid, "fused", 0.01, None)
        elif attack == "unassigned point":
            client._send("sample", point_id="f" * 16, variant_id=client._ids[pid]["fused"], device_us=0.01)
        elif attack == "unassigned variant":
            client._send("sample", point_id=pid, variant_id="guessed", device_us=0.01)
        client.result(pid, stream_record({"stock": [], "fused": [1.0]}))
        if attack == "second result":
            client.result(pid, stream_record({"stock": [], "fused": [1.0]}))
        client._send("end")
        if attack == "after end":
            client._send("sample", point_id=pid, variant_id=client._ids[pid]["fused"], device_us=0.01)
    client._reader.close()
    client._sock.close()
    server.finish()
    assert server.records(JOB) == [None]
    assert any("broken" in n for n in server.notes()), server.notes()


def test_a_stream_still_open_after_the_worker_exited_is_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    # A process the worker left behind holds the socket (a fork): the collector cannot know what it sent
    # after the worker's own last frame, so nothing of that rank is used.
    server = _server()
    client = _client(server, monkeypatch)
    pid = server.point_ids[JOB]
    client.point(pid)
    client.declare(pid, ["stock"])
    client.sample(pid, "stock", 2.0, None)
    client.result(pid, stream_record({"stock": [2.0]}))
    server.finish(wait_s=0.3)  # the "worker" never closed its end
    assert server.records(JOB) == [None]
    assert any("still open after the worker exited" in n for n in server.notes())
    with pytest.raises(OSError):
        for _ in range(50):
            client._sock.sendall(b"{}\n")
            time.sleep(0.01)


def test_no_socket_file_on_linux() -> None:
    server = _server()
    try:
        if os.uname().sysname == "Linux":
            assert server.address.startswith("@")  # abstract: nothing in any directory to replace or open
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(stream._sockaddr(server.address))
        probe.close()
    finally:
        server.finish()
