"""Ask a gRPC server for its health; exit 0 only if it answers SERVING.

Compose healthchecks and the Kubernetes probes of the inner services call this, so the
image needs no grpc_health_probe binary: it reuses the grpcio already installed. Inner
services serve mutual TLS when RAGKB_TLS_DIR is set; `--identity` names the certificate to
present (the service's own: health is open to any certificate of the CA, the API is not).

    python scripts/grpc_health_check.py --addr 127.0.0.1:50051 [--identity parser] [--service NAME]

Prints the status (SERVING, NOT_SERVING, SERVICE_UNKNOWN) or the gRPC error code
(UNAVAILABLE, DEADLINE_EXCEEDED, ...). Exit codes: 0 SERVING, 1 anything else.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(addr: str, service: str = "", timeout_s: float = 3.0, *, tls_dir: str = "", identity: str = "") -> str:
    """The server's status name for `service` ("" = the whole server), or the gRPC error code name."""
    with _channel(addr, tls_dir, identity) as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError as error:
            # an unknown service name comes back as NOT_FOUND, not as a status
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return "SERVICE_UNKNOWN"
            return error.code().name
    return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


def _channel(addr: str, tls_dir: str, identity: str) -> grpc.Channel:
    if not (tls_dir and identity):
        return grpc.insecure_channel(addr)
    directory = Path(tls_dir)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(directory / "ca.pem").read_bytes(),
        private_key=(directory / f"{identity}.key").read_bytes(),
        certificate_chain=(directory / f"{identity}.pem").read_bytes())
    return grpc.secure_channel(addr, credentials, options=[("grpc.ssl_target_name_override", identity)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", required=True, help="host:port of the gRPC server")
    parser.add_argument("--service", default="", help="service name to check (default: the whole server)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for an answer")
    parser.add_argument("--identity", default="", help="with RAGKB_TLS_DIR set: the service whose certificate to use")
    parser.add_argument("--tls-dir", default=os.environ.get("RAGKB_TLS_DIR", ""), help="default: RAGKB_TLS_DIR")
    args = parser.parse_args(argv)
    status = check(args.addr, args.service, args.timeout, tls_dir=args.tls_dir, identity=args.identity)
    print(status)
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
