"""gRPC servicer for the generator: builds the KB's answerer and translates protobuf <-> domain."""

from __future__ import annotations

from services.generator.answer import Answerer
from services.generator.claims import ClaimChecker
from services.generator.evidence import CachedEmbed
from shared import components, tenancy
from shared.config import KBConfig
from shared.contracts import generator_pb2, generator_pb2_grpc
from shared.cross_encoder import cross_encoder_for
from shared.errors import FailedPrecondition
from shared.kb_settings import SettingsResolver
from shared.registry import ComponentRegistry
from shared.sentence_vectors import embedder_key

SERVICE_NAME = "ragkb.v1.GeneratorService"


class GeneratorServicer(generator_pb2_grpc.GeneratorServiceServicer):
    """The KB's generator, evidence selection and claim check, from the settings the request carries."""

    def __init__(self, registry: ComponentRegistry, kbs: SettingsResolver):
        self._registry = registry
        self._kbs = kbs

    def Generate(self, request: generator_pb2.GenerateRequest, context) -> generator_pb2.GenerateResponse:
        tenancy.check_chunks(s.chunk for s in request.sources)
        return answerer_for(self._kbs.config(request), self._registry).answer(
            request.query, list(request.sources), query_vector=_query_vector(request))

    def GenerateStream(self, request: generator_pb2.GenerateRequest, context):
        tenancy.check_chunks(s.chunk for s in request.sources)
        answerer = answerer_for(self._kbs.config(request), self._registry)
        yield from answerer.stream(request.query, list(request.sources), query_vector=_query_vector(request))


def _query_vector(request: generator_pb2.GenerateRequest):
    return request.query_vector if request.HasField("query_vector") else None


def answerer_for(kb: KBConfig, registry: ComponentRegistry) -> Answerer:
    config = kb.generator
    generator = registry.create("generator", config.name, config, cache_key=(config.model_dump_json(),))
    embedder = components.embedder_for(kb, registry)
    return Answerer(kb.name, config, generator, claim_checker_for(kb, registry),
                    embed=cached_embed(embedder, registry), embed_languages=tuple(embedder.languages),
                    embedder_key=embedder_key(embedder), dimension=embedder.dimension)


def cached_embed(embedder, registry: ComponentRegistry) -> CachedEmbed:
    """One sentence-vector cache per embedding model, shared by the evidence selection and the claim check."""
    return registry.create("embed_cache", "sentences", embedder.embed_documents, cache_key=(embedder.model_id,))


def claim_checker_for(kb: KBConfig, registry: ComponentRegistry) -> ClaimChecker:
    config = kb.generator
    embed, languages, cross, verifier = None, (), None, None
    if config.claim_check == "lexical+embedding":
        embedder = components.embedder_for(kb, registry)
        embed, languages = cached_embed(embedder, registry), embedder.languages
    elif config.claim_check == "cross-encoder" and kb.reranker.name == "bge" and kb.reranker.enabled:
        cross = cross_encoder_for(kb.reranker, registry).score
    try:
        if config.claim_check in ("nli", "llm"):
            verifier = registry.create("verifier", config.claim_check, config, cache_key=(config.model_dump_json(),))
        return ClaimChecker(config.claim_check, min_support=config.min_claim_support,
                            action=config.unsupported_claims, embed=embed, embed_languages=tuple(languages),
                            cross_score=cross, verifier=verifier)
    except ValueError as error:
        raise FailedPrecondition(f"knowledge base {kb.name!r}: {error}") from None


def add_to(server, registry: ComponentRegistry, kbs: SettingsResolver) -> None:
    server.add(generator_pb2_grpc.add_GeneratorServiceServicer_to_server, GeneratorServicer(registry, kbs),
               SERVICE_NAME)
