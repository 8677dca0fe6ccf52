"""Prompt building: an intent classifier picks a template set; Jinja2 renders it in Markdown.

Two sets: `concept` (what/why/how-it-works questions) and `ui` ("where do I
click"). The classifier is a few language-aware cue lists; with no cue it falls
back to `concept`, the general template, which is safe for any question.
A knowledge base overrides any template by putting a file of the same name in
`GeneratorConfig.templates_dir`; the built-ins fill in the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from shared.contracts import chunk_pb2
from shared.errors import FailedPrecondition

BUILTIN_TEMPLATES = Path(__file__).parent / "templates"
INTENTS = ("concept", "ui")
QUESTION_TEMPLATE = "question.md.j2"

_UI_EN = re.compile(
    r"\b(where (do|can|should|is|are)|which (button|menu|tab|page|screen|icon|option|field)|click|tap|"
    r"button|menu|tab|screen|toolbar|sidebar|dropdown|checkbox|toggle|dialog|navigate|settings page)\b",
    re.IGNORECASE,
)
_UI_ZH = ("在哪", "哪里", "哪儿", "点击", "点哪", "按钮", "菜单", "页面", "界面", "入口", "选项卡", "标签页",
          "勾选", "下拉", "图标", "弹窗", "对话框", "设置页", "怎么打开", "如何打开")


@dataclass(frozen=True)
class Intent:
    name: str
    reason: str


def classify_intent(query: str, sources: list[chunk_pb2.Candidate] = ()) -> Intent:
    """`ui` on a UI cue in the question (or a UI-field majority among the sources), else `concept`."""
    cues = [m.group(0).lower() for m in _UI_EN.finditer(query)] + [cue for cue in _UI_ZH if cue in query]
    if cues:
        return Intent("ui", f"ui cue: {cues[0]}")
    ui_fields = sum(1 for s in sources if s.chunk.block_type == chunk_pb2.BLOCK_TYPE_UI_FIELD)
    if sources and ui_fields * 2 > len(sources):
        return Intent("ui", "most sources are UI field descriptions")
    return Intent("concept", "no ui cue (default)")


class PromptBuilder:
    """Renders the system and user messages for one question. Templates are checked when built."""

    def __init__(self, templates_dir: str = ""):
        loaders: list[jinja2.BaseLoader] = []
        if templates_dir:
            override = Path(templates_dir).expanduser()
            if not override.is_dir():
                raise FailedPrecondition(f"generator templates_dir {templates_dir!r} is not a directory")
            loaders.append(jinja2.FileSystemLoader(str(override)))
        loaders.append(jinja2.FileSystemLoader(str(BUILTIN_TEMPLATES)))
        # sandboxed: a template set is operator-supplied, and still renders nothing but its variables
        self._env = SandboxedEnvironment(loader=jinja2.ChoiceLoader(loaders), undefined=jinja2.StrictUndefined,
                                       autoescape=False, keep_trailing_newline=False, trim_blocks=True)
        try:
            self._templates = {name: self._env.get_template(f"{name}.md.j2") for name in INTENTS}
            self._question = self._env.get_template(QUESTION_TEMPLATE)
        except jinja2.TemplateError as error:
            raise FailedPrecondition(f"prompt template error in {templates_dir or BUILTIN_TEMPLATES}: "
                                     f"{type(error).__name__}: {error}") from None

    def messages(self, *, kb: str, query: str, sources: list[chunk_pb2.Candidate], intent: str, language: str,
                 refusal: str) -> list[dict[str, str]]:
        template = self._templates.get(intent, self._templates["concept"])
        try:
            system = template.render(kb=kb, language=language, refusal=refusal)
            user = self._question.render(query=query, groups=source_groups(sources), language=language)
        except jinja2.TemplateError as error:
            raise FailedPrecondition(f"prompt template {template.name!r} failed to render: {error}") from None
        return [{"role": "system", "content": system.strip()}, {"role": "user", "content": user.strip()}]


def fenced_text(text: str) -> str:
    """A source's text made safe inside its <source> fence: it cannot close the fence or open another."""
    return re.sub(r"<(/?\s*source)", r"‹\1", text.strip(), flags=re.IGNORECASE)


def source_groups(sources: list[chunk_pb2.Candidate]) -> list[dict]:
    """Numbered sources [1]..[n] in the given order, grouped into runs of the same document."""
    groups: list[dict] = []
    for number, candidate in enumerate(sources, start=1):
        chunk = candidate.chunk
        if not groups or groups[-1]["doc_id"] != chunk.doc_id:
            header = chunk.metadata.get("source_header") or chunk.source.title or chunk.source.uri or chunk.doc_id
            groups.append({"doc_id": chunk.doc_id, "header": header, "sources": []})
        groups[-1]["sources"].append({
            "number": number, "heading": " > ".join(chunk.heading_path), "part": chunk.metadata.get("part", ""),
            "text": fenced_text(chunk.raw_content or chunk.content),
        })
    return groups
