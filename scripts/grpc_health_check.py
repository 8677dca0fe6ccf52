"""Ask a gRPC server for its health; exit 0 only if it answers SERVING.

Compose healthchecks call this (Kubernetes uses its native gRPC probe instead), so
the image needs no grpc_health_probe binary: it reuses the grpcio already installed.

    python scripts/grpc_health_check.py --addr 127.0.0.1:50051 [--service ragkb.v1.ParserService]

Prints the status (SERVING, NOT_SERVING, SERVICE_UNKNOWN) or the gRPC error code
(UNAVAILABLE, DEADLINE_EXCEEDED, ...). Exit codes: 0 SERVING, 1 anything else.
"""

from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(addr: str, service: str = "", timeout_s: float = 3.0) -> str:
    """The server's status name for `service` ("" = the whole server), or the gRPC error code name."""
    with grpc.insecure_channel(addr) as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError as error:
            # an unknown service name comes back as NOT_FOUND, not as a status
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return "SERVICE_UNKNOWN"
            return error.code().name
    return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", required=True, help="host:port of the gRPC server")
    parser.add_argument("--service", default="", help="service name to check (default: the whole server)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for an answer")
    args = parser.parse_args(argv)
    status = check(args.addr, args.service, args.timeout)
    print(status)
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
