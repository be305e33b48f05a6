"""(h)'s floor: how long the burst's claim GETs take with no dracni, only the test API server,
over as many connections as the service keeps (``connection_pool_maxsize``, 64).

At most 64 requests are out at once and each waits the bench's 20 ms latency, so the burst's
200 GETs need 4 rounds, 80 ms, at the least however fast the service is, and the test API
server (Python, one process, one GIL) adds its own time to each: measured 93-96 ms, about 4x
one pod alone (over 32 connections 7 rounds, 152 ms; over 100, 68 ms; over 200, 49 ms), later
110-124 ms on a slower VM, and 97-108 ms in the same runs once the test API server answered a
GET with the object encoded as it read it instead of deep-copying it first (``objects.Encoded``:
the copy was half of its CPU per GET; in (h)'s bursts its process's CPU went from 70-100 to
60-70 ms).  A round's 64 answers wait for each other in that one interpreter, so its CPU per
request is part of every round.  (h) prints this floor beside the burst's p99, so that a reader
can tell the service's share from what the connections and the test double leave.

``floor_ms`` runs the GETs from a process of their own (not the bench's, whose threads share
the test API server's GIL), through libcurl's multi interface, the connections kept open
between rounds as the service's pool keeps them.  The first round opens the connections and
is left out; the median of the other rounds is reported.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

ROUNDS = 4


def floor_ms(url: str, ca_path: str, token: str, paths: list[str], connections: int) -> float:
    """Median ms to GET every path, ``connections`` at a time, in a process of its own."""
    request = {"url": url, "ca": ca_path, "token": token, "paths": paths, "connections": connections}
    done = subprocess.run(
        [sys.executable, "-m", "tests.tools.bench_api_floor"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return float(done.stdout)


def _round(multi, handles: list, url: str, paths: list[str]) -> float:
    import pycurl

    started = time.perf_counter()
    todo, free, out = list(reversed(paths)), list(handles), 0
    while todo or out:
        while todo and free:
            handle = free.pop()
            handle.setopt(pycurl.URL, url + todo.pop())
            multi.add_handle(handle)
            out += 1
        multi.select(0.005)
        while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
            pass
        _, ok, failed = multi.info_read()
        if failed:
            raise RuntimeError(f"GET failed: {failed[0][2]}")
        for handle in ok:
            status = handle.getinfo(pycurl.RESPONSE_CODE)
            if status != 200:
                raise RuntimeError(f"GET answered {status}")
            multi.remove_handle(handle)
            free.append(handle)
            out -= 1
    return (time.perf_counter() - started) * 1000


def main() -> None:
    import pycurl

    request = json.loads(sys.stdin.read())
    multi = pycurl.CurlMulti()
    multi.setopt(pycurl.M_MAXCONNECTS, request["connections"])
    handles = []
    for _ in range(request["connections"]):
        handle = pycurl.Curl()
        handle.setopt(pycurl.CAINFO, request["ca"])
        handle.setopt(pycurl.HTTPHEADER, [f"Authorization: Bearer {request['token']}", "Accept: application/json"])
        handle.setopt(pycurl.WRITEFUNCTION, lambda _chunk: None)
        handles.append(handle)
    rounds = [_round(multi, handles, request["url"], request["paths"]) for _ in range(ROUNDS)]
    for handle in handles:
        handle.close()
    multi.close()
    print(f"{statistics.median(rounds[1:]):.1f}")


if __name__ == "__main__":
    main()
