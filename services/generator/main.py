"""Run the generator service as its own process: `python -m services.generator.main`."""

from __future__ import annotations

from services.generator import servicer
from services.generator.evidence import CachedEmbed
from services.generator.extractive import ExtractiveGenerator
from services.generator.llm import ChatGenerator, chat_client_for
from services.generator.verifiers import LlmVerifier, NliVerifier
from shared import warm_up
from shared.components import storage_registry
from shared.config import GeneratorConfig, Settings
from shared.cross_encoder import add_cross_encoder
from shared.kb_settings import SettingsResolver
from shared.profiles import LiveProfiles
from shared.registry import ComponentRegistry
from shared.server import ServiceServer, run_service


def components() -> ComponentRegistry:
    """Generators, claim verifiers and the sentence-vector cache; the embedder (evidence selection, claim
    check) and the cross-encoder (`claim_check: cross-encoder`) are the shared ones."""
    registry = add_cross_encoder(storage_registry("generator"))
    return (registry.add("generator", "extractive", ExtractiveGenerator)
            .add("generator", "openai", ChatGenerator)
            .add("verifier", "nli", nli_verifier)
            .add("verifier", "llm", llm_verifier)
            .add("embed_cache", "sentences", CachedEmbed))


def nli_verifier(config: GeneratorConfig) -> NliVerifier:
    return NliVerifier(config.nli_model)


def llm_verifier(config: GeneratorConfig) -> LlmVerifier:
    return LlmVerifier(chat_client_for(config))


def build(settings: Settings, *, port: int | None = None) -> ServiceServer:
    server = ServiceServer.inner("generator", settings, port=settings.port_of(settings.generator_addr) if port is None else port)
    registry = components()
    servicer.add_to(server, registry, SettingsResolver(LiveProfiles.for_settings(settings)))

    def warm_default_models() -> None:
        """Answer the samples under the default KB: loads and runs its generator, the embedder of evidence
        selection and claim check, and jieba."""
        answerer = servicer.answerer_for(warm_up.default_kb(), registry)
        for question, passage in warm_up.SAMPLES:
            answerer.answer(question, warm_up.sources(passage))

    server.add_warm_up(warm_default_models)
    return server


if __name__ == "__main__":
    run_service(build)
