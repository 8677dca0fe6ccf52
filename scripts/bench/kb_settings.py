"""What carrying the KB settings in every request costs: the gateway's resolution, the slice in the request,
and the inner service's validation (first request of a config) and cache hit (every later one).

    python scripts/bench/kb_settings.py [--rounds 2000]

Prints microseconds per operation (median of `--rounds`) and the bytes each service's slice adds to a request.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shared import kb_settings  # noqa: E402
from shared.contracts import retriever_pb2  # noqa: E402
from shared.kb import KnowledgeBaseCatalog  # noqa: E402
from shared.profiles import LiveProfiles  # noqa: E402

CONFIG = ("retriever: {top_k: 8, fusion: convex}\nreranker: {name: bge, top_n: 5}\n"
          "generator: {claim_check: lexical, refusal_zh: 知识库中没有找到。}\n")


def median_us(operation, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        operation()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ragkb-kb-settings-") as root:
        catalog = KnowledgeBaseCatalog(Path(root))
        catalog.create("handbook", config_yaml=CONFIG)
        settings = kb_settings.for_catalog(catalog, "handbook")
        request = retriever_pb2.RetrieveRequest(kb="handbook", query="q")
        with kb_settings.using(settings):
            kb_settings.attach(request, "retriever")

        def first_resolution():  # a fresh resolver each time: validation and resolution, no cache
            kb_settings.SettingsResolver(LiveProfiles(None)).config(request)

        cached = kb_settings.SettingsResolver(LiveProfiles(None))
        cached.config(request)
        rows = {
            "gateway: resolve the KB from the catalog (per request)":
                median_us(lambda: kb_settings.for_catalog(catalog, "handbook"), args.rounds),
            "gateway: cut the retriever's slice (once per request and service)":
                median_us(lambda: kb_settings.narrow(settings, "retriever"), args.rounds),
            "inner service: first request of a config (validate + resolve)":
                median_us(first_resolution, max(1, args.rounds // 10)),
            "inner service: later requests (cache hit)": median_us(lambda: cached.config(request), args.rounds),
        }
        for name, us in rows.items():
            print(f"{name:<66} {us:8.1f} us")
        for service in kb_settings.SLICES:
            size = kb_settings.narrow(settings, service).ByteSize()
            print(f"slice for the {service:<10} {size:6d} bytes")


if __name__ == "__main__":
    main()
