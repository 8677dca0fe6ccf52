"""The LLM generator: prompt from templates, then an OpenAI-compatible chat model writes the answer."""

from __future__ import annotations

from collections.abc import Iterator

from services.generator.evidence import Evidence
from services.generator.extractive import Draft
from services.generator.openai_client import ChatClient
from services.generator.prompts import PromptBuilder
from shared.config import GeneratorConfig
from shared.contracts import chunk_pb2
from shared.profiles import read_secret
from shared.text import detect_language


def chat_client_for(config: GeneratorConfig) -> ChatClient:
    """A chat client for the config's LLM profile (endpoint, model, and the key read from the profile's source)."""
    api_key = read_secret(config.profile, env_name=config.api_key_env, file_name=config.api_key_file)
    return ChatClient(config.base_url, config.model, api_key=api_key, timeout_s=config.timeout_s,
                      max_retries=config.max_retries, temperature=config.temperature, max_tokens=config.max_tokens)


class ChatGenerator:
    """Registered as generator `openai`; works with OpenAI, vLLM and Ollama (their /v1 chat endpoint)."""

    name = "openai"

    def __init__(self, config: GeneratorConfig, client: ChatClient | None = None):
        self._config = config
        self._client = client or chat_client_for(config)
        self._prompts = PromptBuilder(config.templates_dir)

    def messages(self, query: str, sources: list[chunk_pb2.Candidate], *, kb: str, intent: str) -> list[dict]:
        language = detect_language(query)
        refusal = self._config.refusal_zh if language == "zh" else self._config.refusal_en
        return self._prompts.messages(kb=kb, query=query, sources=sources, intent=intent, language=language,
                                      refusal=refusal)

    def generate(self, query: str, sources: list[chunk_pb2.Candidate], *, kb: str = "", intent: str = "concept",
                 evidence: Evidence | None = None) -> Draft:
        answer = self._client.complete(self.messages(query, sources, kb=kb, intent=intent))
        return Draft(answer.strip(), self.is_refusal(answer), f"{self.name}:{self._client.model}")

    def stream(self, query: str, sources: list[chunk_pb2.Candidate], *, kb: str = "", intent: str = "concept",
               evidence: Evidence | None = None) -> Iterator[str]:
        yield from self._client.stream(self.messages(query, sources, kb=kb, intent=intent))

    def is_refusal(self, answer: str) -> bool:
        """The prompt asks the model to reply with exactly the refusal text when the sources do not answer."""
        text = answer.strip().rstrip("。.").strip()
        return text in {self._config.refusal_en.rstrip("。."), self._config.refusal_zh.rstrip("。.")}

    def close(self) -> None:
        self._client.close()
