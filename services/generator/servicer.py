"""gRPC servicer for the generator: builds the KB's answerer and translates protobuf <-> domain."""

from __future__ import annotations

from services.generator import extractive, llm  # noqa: F401  (registers the built-in generators)
from services.generator.answer import Answerer
from services.generator.claims import ClaimChecker
from services.generator.evidence import CachedEmbed
from services.generator.verifiers import LlmVerifier, NliVerifier
from shared import components, registry, tenancy
from shared.config import GeneratorConfig, KBConfig
from shared.contracts import generator_pb2, generator_pb2_grpc
from shared.errors import ERROR_KIND_KEY, FailedPrecondition, RagkbError
from shared.kb import KnowledgeBaseCatalog

SERVICE_NAME = "ragkb.v1.GeneratorService"


class GeneratorServicer(generator_pb2_grpc.GeneratorServiceServicer):
    def __init__(self, catalog: KnowledgeBaseCatalog):
        self._catalog = catalog

    def Generate(self, request: generator_pb2.GenerateRequest, context) -> generator_pb2.GenerateResponse:
        tenancy.check_chunks(s.chunk for s in request.sources)
        return answerer_for(self._catalog.get(request.kb)).answer(request.query, list(request.sources))

    def GenerateStream(self, request: generator_pb2.GenerateRequest, context):
        # the shared interceptor translates errors of unary calls only; streams translate their own
        try:
            tenancy.check_chunks(s.chunk for s in request.sources)
            answerer = answerer_for(self._catalog.get(request.kb))
            yield from answerer.stream(request.query, list(request.sources))
        except RagkbError as error:
            context.set_trailing_metadata(((ERROR_KIND_KEY, type(error).__name__),))
            context.abort(error.code, str(error))


def answerer_for(kb: KBConfig) -> Answerer:
    config = kb.generator
    generator = registry.create("generator", config.name, config, cache_key=(config.model_dump_json(),))
    embedder = components.embedder_for(kb)
    return Answerer(kb.name, config, generator, claim_checker_for(kb), embed=cached_embed(embedder),
                    embed_languages=tuple(embedder.languages))


def cached_embed(embedder) -> CachedEmbed:
    """One sentence-vector cache per embedding model, shared by the evidence selection and the claim check."""
    return registry.create("embed_cache", "sentences", embedder.embed_documents,
                           cache_key=(embedder.model_id,))


def claim_checker_for(kb: KBConfig) -> ClaimChecker:
    config = kb.generator
    embed, languages, cross, verifier = None, (), None, None
    if config.claim_check == "lexical+embedding":
        embedder = components.embedder_for(kb)
        embed, languages = cached_embed(embedder), embedder.languages
    elif config.claim_check == "cross-encoder" and kb.reranker.name == "bge" and kb.reranker.enabled:
        reranker = registry.create("reranker", "bge", kb.reranker, cache_key=(kb.reranker.model_dump_json(),))
        cross = reranker.encoder.score
    try:
        if config.claim_check in ("nli", "llm"):
            verifier = registry.create("verifier", config.claim_check, config, cache_key=(config.model_dump_json(),))
        return ClaimChecker(config.claim_check, min_support=config.min_claim_support,
                            action=config.unsupported_claims, embed=embed, embed_languages=tuple(languages),
                            cross_score=cross, verifier=verifier)
    except ValueError as error:
        raise FailedPrecondition(f"knowledge base {kb.name!r}: {error}") from None


registry.register("embed_cache", "sentences")(CachedEmbed)


@registry.register("verifier", "nli")
def _nli(config: GeneratorConfig) -> NliVerifier:
    return NliVerifier(config.nli_model)


@registry.register("verifier", "llm")
def _llm_judge(config: GeneratorConfig) -> LlmVerifier:
    return LlmVerifier(llm.chat_client_for(config))


def add_to(server, catalog: KnowledgeBaseCatalog) -> None:
    server.add(generator_pb2_grpc.add_GeneratorServiceServicer_to_server, GeneratorServicer(catalog), SERVICE_NAME)
