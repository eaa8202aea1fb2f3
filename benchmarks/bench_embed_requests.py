"""Embedding requests in flight: how long indexing waits on a slow OpenAI-compatible provider.

    python benchmarks/bench_embed_requests.py [--notes 3200] [--latency 0.1] [--in-flight 1 4 8]

A local test server answers every /v1/embeddings request after `--latency` seconds (a remote
API's round trip) with deterministic vectors. A generated vault of short notes (one chunk each)
is indexed once per setting of requests_in_flight; the table gives the embedding phase's time
next to the sequential request time (requests x latency). No asserts: figures only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memsync.config import load_config  # noqa: E402
from memsync.memory import index  # noqa: E402


def serve(latency: float, dims: int = 64) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(latency)
            data = []
            for i, text in enumerate(body["input"]):
                digest = hashlib.sha256(text.encode()).digest()
                vector = [((digest[j % 32] + j) % 17) - 8.0 for j in range(dims)]
                vector[0] += 0.5
                data.append({"index": i, "embedding": vector})
            raw = json.dumps({"data": data, "model": body["model"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--notes", type=int, default=3200)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()
    server = serve(args.latency)
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    requests = -(-args.notes // args.batch_size)
    sequential = requests * args.latency
    print(
        f"{args.notes} notes, {requests} requests of {args.batch_size}, {args.latency * 1000:.0f} ms each"
    )
    print("| requests in flight | embedding (s) | sequential request time (s) | share |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        vault = Path(folder) / "vault"
        for i in range(args.notes):
            path = vault / f"area{i % 20}" / f"n{i}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# Note {i}\n\nshort note {i} about topic {i % 13}\n")
        for in_flight in args.in_flight:
            config = load_config(
                db=str(Path(folder) / f"i{in_flight}.sqlite"),
                provider="openai",
                openai_base_url=url,
                batch_size=args.batch_size,
                requests_in_flight=in_flight,
            )
            index(replace(config, provider="none"), vault)  # the text first: then embeddings alone
            started = time.perf_counter()
            report = index(config, vault).report
            seconds = time.perf_counter() - started
            assert report.embedded == args.notes, report
            print(
                f"| {in_flight} | {seconds:.2f} | {sequential:.2f} | {seconds / sequential:.0%} |"
            )
    server.shutdown()


if __name__ == "__main__":
    main()
