"""Embedding requests in flight: how long indexing waits on a slow OpenAI-compatible provider.

    python -m benchmarks.bench_embed_requests [--notes 3200] [--latency 0.1] [--in-flight 1 4 8]

A local test server answers every /v1/embeddings request after `--latency` seconds (a remote
API's round trip) with deterministic vectors. A generated vault of short notes (one chunk each)
is indexed once per setting of requests_in_flight; the table gives the embedding phase's time
next to the sequential request time (requests x latency). No asserts: figures only.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.common import embedding_server, server_url, short_notes
from memsync.config import load_config
from memsync.memory import index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--notes", type=int, default=3200)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()
    server = embedding_server(args.latency)
    url = server_url(server)
    requests = -(-args.notes // args.batch_size)
    sequential = requests * args.latency
    print(
        f"{args.notes} notes, {requests} requests of {args.batch_size}, {args.latency * 1000:.0f} ms each"
    )
    print("| requests in flight | embedding (s) | sequential request time (s) | share |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        vault = short_notes(
            Path(folder) / "vault", args.notes, 20, lambda i: f"short note {i} about topic {i % 13}"
        )
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
