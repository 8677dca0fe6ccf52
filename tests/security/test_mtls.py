"""Mutual TLS between services: who may call whom, rotation without restart, no plaintext off loopback."""

from __future__ import annotations

from dataclasses import replace

import grpc
import pytest

from ragkb.embedded import EmbeddedStack
from services.generator import main as generator_main
from shared import kb_settings, tenancy, tls
from shared.clients import GeneratorClient
from shared.config import KBConfig, Settings
from shared.contracts import chunk_pb2, generator_pb2, generator_pb2_grpc
from shared.errors import PermissionDenied, Unavailable
from shared.server import ServiceServer

pytestmark = pytest.mark.integration

TENANT = tenancy.operator_tenant("probe", namespaces=["team-a"])
# lexical claim checks: no embedding model to load before the first answer
KB_SETTINGS = kb_settings.settings_of(KBConfig.from_yaml("generator: {claim_check: lexical}", name="k"))


@pytest.fixture()
def generator(tmp_path):
    """A real generator service serving mTLS from a fresh development CA."""
    tls.init_certs(tmp_path / "tls")
    settings = Settings(data_dir=tmp_path / "data", tls_dir=str(tmp_path / "tls"))
    server = generator_main.build(settings, port=0)
    server.start()
    server.mark_serving()
    yield server, settings
    server.stop(0)


def ask(client: GeneratorClient) -> generator_pb2.GenerateResponse:
    with tenancy.acting_for(TENANT), kb_settings.using(KB_SETTINGS):
        return client.generate("k", "anything?", [], timeout_s=10)


def test_only_listed_callers_with_certificates_of_the_ca_get_in(generator, tmp_path):
    server, settings = generator
    gateway = GeneratorClient(server.address, tls_dir=settings.tls_dir, identity="gateway")
    assert ask(gateway).refused  # no sources: a refusal, but an answer from the service
    worker = GeneratorClient(server.address, tls_dir=settings.tls_dir, identity="worker")
    with pytest.raises(PermissionDenied, match="does not accept calls from worker"):
        ask(worker)
    with pytest.raises(Unavailable):  # plaintext: the handshake never completes
        ask(GeneratorClient(server.address, timeout_s=5))
    tls.init_certs(tmp_path / "foreign")  # a certificate named gateway, from another CA
    with pytest.raises(Unavailable):
        ask(GeneratorClient(server.address, tls_dir=str(tmp_path / "foreign"), identity="gateway", timeout_s=5))
    for client in (gateway, worker):
        client.close()


def test_rotated_certificates_take_effect_without_a_restart(generator, monkeypatch):
    server, settings = generator
    monkeypatch.setattr(GeneratorClient, "TLS_RECHECK_S", 0.0)
    client = GeneratorClient(server.address, tls_dir=settings.tls_dir, identity="gateway")
    assert ask(client).refused
    before = (tls.ServiceCertificate(tls.Path(settings.tls_dir), "generator").cert).read_bytes()
    tls.init_certs(settings.tls_dir, force=True)  # a new CA and new certificates for everyone
    assert tls.ServiceCertificate(tls.Path(settings.tls_dir), "generator").cert.read_bytes() != before
    assert ask(client).refused  # the client reopened its channel; the server handshook with the new files
    fresh = GeneratorClient(server.address, tls_dir=settings.tls_dir, identity="gateway")
    assert ask(fresh).refused
    client.close()
    fresh.close()


def test_inner_services_refuse_plaintext_off_loopback(tmp_path):
    settings = Settings(data_dir=tmp_path, host="0.0.0.0")
    server = ServiceServer.inner("retriever", settings, port=0)
    with pytest.raises(RuntimeError, match="refusing plaintext gRPC on 0.0.0.0"):
        server.start()
    with pytest.raises(ValueError, match="loopback only"):
        EmbeddedStack(replace(settings, data_dir=tmp_path / "embedded")).start()


def test_health_stays_reachable_for_probes_with_a_certificate(generator):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    server, settings = generator
    credentials = tls.channel_credentials(settings.tls_dir, "generator")  # the service's own certificate
    with grpc.secure_channel(server.address, credentials,
                             options=[("grpc.ssl_target_name_override", "generator")]) as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status
    assert status == health_pb2.HealthCheckResponse.SERVING
    # the service's own certificate is no pass for its API
    with grpc.secure_channel(server.address, credentials,
                             options=[("grpc.ssl_target_name_override", "generator")]) as channel:
        with pytest.raises(grpc.RpcError) as denied:
            generator_pb2_grpc.GeneratorServiceStub(channel).Generate(generator_pb2.GenerateRequest(
                kb="k", query="q", context=chunk_pb2.CallContext(tenant=TENANT)), timeout=10)
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_the_health_check_script_presents_the_services_certificate(generator):
    from tests.unit.test_deploy_manifests import load_health_check_script

    server, settings = generator
    script = load_health_check_script()
    assert script.check(server.address, tls_dir=settings.tls_dir, identity="generator") == "SERVING"
    assert script.check(server.address) == "UNAVAILABLE"  # plaintext gets no answer
