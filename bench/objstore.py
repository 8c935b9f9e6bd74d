"""The object-storage client of the S3 backend: obstore against s3fs, on one loopback S3 server.

    python -m bench.objstore [--runs 5] [--small 200] [--big-mib 64] [--json PATH]

Starts moto's S3 server (ThreadedMotoServer on 127.0.0.1, in a child process so that it
does not share this interpreter's GIL with the clients), makes one bucket per client, then
`--runs` rounds, the two clients alternating within each round:

- small objects: `--small` puts of 1 KiB objects, then as many gets of them, one at a
  time (latency as a caller sees it: p50 and p99 of every call of the round);
- a `--big-mib` object (64 MiB): one put and one get, throughput in MiB/s;
- import time of each client (`import obstore` / `import s3fs` and its S3 filesystem class)
  in a fresh interpreter, once per round.

Each client uses its natural calls: obstore.put / obstore.get(...).bytes() on an S3Store,
s3fs's pipe_file / cat_file on an S3FileSystem. The table gives the medians over the rounds
and the ratio s3fs / obstore (above 1: obstore is faster). Needs the bench extra
(`pip install 'ckptcli[bench]'`: s3fs, moto[server], obstore).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import fmt_ms, median, percentile, ratio, table, versions

MIB = 1024 * 1024
_SERVER = """
import logging, sys, time
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()
"""
_IMPORTS = {
    "obstore": "import obstore; from obstore.store import S3Store",
    "s3fs": "import s3fs; s3fs.S3FileSystem",
}
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret", "AWS_DEFAULT_REGION": "us-east-1"}


class Client:
    def __init__(self, name: str, put: Callable[[str, bytes], Any], get: Callable[[str], bytes], delete: Callable[[str], Any]) -> None:
        self.name, self.put, self.get, self.delete = name, put, get, delete


def obstore_client(endpoint: str, bucket: str) -> Client:
    import obstore
    from obstore.store import S3Store

    store = S3Store(bucket, endpoint=endpoint, allow_http=True, region="us-east-1")
    return Client(
        "obstore", lambda p, d: obstore.put(store, p, d), lambda p: bytes(obstore.get(store, p).bytes()), lambda p: obstore.delete(store, p)
    )


def s3fs_client(endpoint: str, bucket: str) -> Client:
    import s3fs

    fs = s3fs.S3FileSystem(
        key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        endpoint_url=endpoint,
        client_kwargs={"region_name": "us-east-1"},
        skip_instance_cache=True,
        use_listings_cache=False,
    )
    return Client(
        "s3fs", lambda p, d: fs.pipe_file(f"{bucket}/{p}", d), lambda p: fs.cat_file(f"{bucket}/{p}"), lambda p: fs.rm_file(f"{bucket}/{p}")
    )


def import_seconds(client: str) -> float:
    code = f"import time; t = time.perf_counter(); {_IMPORTS[client]}; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def one_round(client: Client, small: int, big: bytes, round_no: int) -> dict[str, Any]:
    payload = os.urandom(1024)
    puts, gets = [], []
    for i in range(small):
        t = time.perf_counter()
        client.put(f"small/{round_no}/{i:05d}", payload)
        puts.append(time.perf_counter() - t)
    for i in range(small):
        t = time.perf_counter()
        got = client.get(f"small/{round_no}/{i:05d}")
        gets.append(time.perf_counter() - t)
        assert got == payload
    t = time.perf_counter()
    client.put(f"big/{round_no}", big)
    big_put = time.perf_counter() - t
    t = time.perf_counter()
    got = client.get(f"big/{round_no}")
    big_get = time.perf_counter() - t
    assert got == big
    client.delete(f"big/{round_no}")  # the server holds every object in memory
    mib = len(big) / MIB
    return {
        "put_p50": percentile(puts, 50),
        "put_p99": percentile(puts, 99),
        "get_p50": percentile(gets, 50),
        "get_p99": percentile(gets, 99),
        "big_put_mibs": mib / big_put,
        "big_get_mibs": mib / big_get,
        "import_s": import_seconds(client.name),
    }


ROWS = [
    ("1 KiB put p50", "put_p50", "ms"),
    ("1 KiB put p99", "put_p99", "ms"),
    ("1 KiB get p50", "get_p50", "ms"),
    ("1 KiB get p99", "get_p99", "ms"),
    ("big put", "big_put_mibs", "MiB/s"),
    ("big get", "big_get_mibs", "MiB/s"),
    ("import", "import_s", "ms"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.objstore", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--small", type=int, default=200, help="1 KiB objects per round (default 200)")
    ap.add_argument("--big-mib", type=int, default=64)
    ap.add_argument("--json", type=Path, help="also write every figure here")
    args = ap.parse_args(argv)
    os.environ.update(CREDENTIALS)
    server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        endpoint = f"http://127.0.0.1:{int(server.stdout.readline())}"
        clients = []
        for name, make in (("obstore", obstore_client), ("s3fs", s3fs_client)):
            urllib.request.urlopen(urllib.request.Request(f"{endpoint}/bench-{name}", method="PUT"), timeout=30).read()
            clients.append(make(endpoint, f"bench-{name}"))
        big = os.urandom(args.big_mib * MIB)
        results: dict[str, list[dict[str, Any]]] = {c.name: [] for c in clients}
        for r in range(args.runs):
            for client in clients if r % 2 == 0 else reversed(clients):
                results[client.name].append(one_round(client, args.small, big, r))
            print(f"round {r + 1}/{args.runs} done", file=sys.stderr)
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)
    med = {name: {key: median([run[key] for run in runs]) for _, key, _ in ROWS} for name, runs in results.items()}
    rows = []
    for label, key, unit in ROWS:
        o, s = med["obstore"][key], med["s3fs"][key]
        if unit == "ms":
            rows.append([label.replace("big", f"{args.big_mib} MiB"), fmt_ms(o), fmt_ms(s), f"{ratio(s, o):.2f}"])
        else:
            rows.append([label.replace("big", f"{args.big_mib} MiB"), f"{o:.0f} MiB/s", f"{s:.0f} MiB/s", f"{ratio(o, s):.2f}"])
    found = versions("obstore", "s3fs", "moto")
    print(f"moto S3 server on 127.0.0.1, {args.runs} rounds, medians; " + ", ".join(f"{k} {v}" for k, v in found.items()))
    print(table(["", "obstore", "s3fs", "s3fs/obstore"], rows))
    print("(the ratio is s3fs's time over obstore's, or obstore's MiB/s over s3fs's: above 1, obstore is faster)")
    if args.json:
        args.json.write_text(
            json.dumps({"versions": found, "args": vars(args) | {"json": str(args.json)}, "median": med, "runs": results}, indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
