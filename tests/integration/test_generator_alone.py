"""The generator as its own process, with nothing else running: it builds its components from its own
registry and its KB settings from the request, so `claim_check: cross-encoder` works without a reranker
service (the cross-encoder is a shared component) and without a catalog."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict

import pytest

from shared import kb_settings, tenancy
from shared.clients import GeneratorClient
from shared.config import KBConfig, Settings
from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument
from shared.profiles import OperatorProfiles
from tests.conftest import ROOT
from tests.tiny_cross_encoder import build_tiny_cross_encoder

sys.path.insert(0, str(ROOT / "scripts"))
import engines  # noqa: E402
import local_stack  # noqa: E402

pytestmark = pytest.mark.integration

KB = "alone"
MODELS = "models: {tiny-ce: '%s'}\n"
CONFIG = ("generator: {claim_check: cross-encoder, min_claim_support: 0.0}\n"
          "reranker: {name: bge, model: tiny-ce}\n")


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    """Only `python -m services.generator.main`; its data directory holds nothing but the operator's profiles."""
    root = tmp_path_factory.mktemp("generator-alone")
    model = build_tiny_cross_encoder(root / "tiny-ce")
    settings = Settings(data_dir=root / "data", generator_addr=f"127.0.0.1:{engines.free_port()}")
    settings.data_dir.mkdir()
    (settings.data_dir / "profiles.yaml").write_text(MODELS % model, encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAGKB_")}
    env.update({f"RAGKB_{key.upper()}": str(value) for key, value in asdict(settings).items()})
    process = local_stack.ServiceProcess("generator", "services.generator.main", env, settings.generator_addr,
                                         root / "generator.log")
    try:
        process.wait_serving(time.monotonic() + 120)
        client = GeneratorClient(settings.generator_addr)
        yield client, OperatorProfiles.from_yaml(MODELS % model), settings
        client.close()
    finally:
        process.terminate()
        process.wait_stopped(20)
    assert not (settings.data_dir / "kbs").exists()  # no catalog was read or written


def sources() -> list[chunk_pb2.Candidate]:
    """Two retrieved passages (too few for the calibrated answerability model: the coverage floor decides)."""
    texts = {"charging": "To charge the robot, dock it on the base station; a full charge takes 90 minutes.",
             "storage": "Store the robot in a dry room between 5 and 30 degrees Celsius."}
    return [chunk_pb2.Candidate(score=1.0, bm25_rank=rank, dense_rank=rank, chunk=chunk_pb2.KnowledgeChunk(
        chunk_id=f"{doc}-0", doc_id=doc, kb=KB, namespace="default", content=text, raw_content=text))
        for rank, (doc, text) in enumerate(texts.items(), start=1)]


def test_claim_check_with_the_shared_cross_encoder_in_a_generator_running_alone(generator):
    client, profiles, _ = generator
    config = KBConfig.from_tenant_yaml(CONFIG, name=KB, profiles=profiles)
    with tenancy.acting_for(tenancy.operator_tenant("probe", namespaces=["default"])), \
            kb_settings.using(kb_settings.settings_of(config)):
        response = client.generate(KB, "How long does a full charge take?", sources())
    assert not response.refused and "90 minutes" in response.answer and "[1]" in response.answer
    assert response.claim_checks
    for check in response.claim_checks:
        # scored by the cross-encoder (a score in 0..1, not the -1 of "not computed") and verified
        assert check.method == "cross-encoder" and 0.0 <= check.semantic <= 1.0 and check.verdict == "supported"


def test_the_generator_refuses_a_request_without_kb_settings(generator):
    client, _, _ = generator
    with tenancy.acting_for(tenancy.operator_tenant("probe", namespaces=["default"])):
        with pytest.raises(InvalidArgument, match="carries no settings for knowledge base 'alone'"):
            client.generate(KB, "How long does a full charge take?", sources())


def test_a_changed_config_is_used_on_the_next_request(generator):
    """No restart and no stale cache: the settings travel with each request."""
    client, profiles, _ = generator
    refusal = "Nothing in the knowledge base answers this."
    with tenancy.acting_for(tenancy.operator_tenant("probe", namespaces=["default"])):
        before = KBConfig.from_tenant_yaml(CONFIG, name=KB, profiles=profiles)
        after = before.model_copy(
            update={"generator": before.generator.model_copy(update={"min_evidence_score": 1.0,
                                                                      "refusal_en": refusal})})
        for config, refused in ((before, False), (after, True), (before, False)):
            with kb_settings.using(kb_settings.settings_of(config)):
                response = client.generate(KB, "How long does a full charge take?", sources())
            assert response.refused is refused
            assert (response.answer == refusal) is refused
