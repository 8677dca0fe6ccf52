"""E-mail (.eml): the body is the document, each attachment is returned to be parsed as its own document.

The subject is the document title and its level-1 heading; sender, recipients
and date go to chunk metadata.
"""

from __future__ import annotations

from email import policy
from email.parser import BytesParser
from email.utils import collapse_rfc2231_value

from services.parser import elements, errors, formats
from services.parser.cleaning import clean_text
from services.parser.formats import Attachment, Block, ParsedDocument

_METADATA_HEADERS = {"from": "email_from", "to": "email_to", "cc": "email_cc", "date": "email_date"}


def read(filename: str, data: bytes) -> ParsedDocument:
    message = BytesParser(policy=policy.default).parsebytes(data)
    if not any(message.get(h) for h in ("from", "to", "subject", "date", "message-id")):
        raise errors.ParseError(errors.CORRUPT, f"{filename!r} is not an e-mail message (no RFC 822 headers)")
    subject = clean_text(str(message.get("subject") or ""))
    blocks = _body_blocks(message)
    attachments = _attachments(message)
    if not any(b.text for b in blocks) and attachments:
        names = ", ".join(a.filename for a in attachments)
        blocks = [Block(kind="paragraph", text=f"Attachments: {names}")]
    if subject:
        for block in blocks:
            if block.kind == "heading":
                block.level += 1  # body headings sit under the subject
        blocks.insert(0, Block(kind="heading", text=subject, level=1))
    metadata = {key: clean_text(str(message.get(header))) for header, key in _METADATA_HEADERS.items()
                if message.get(header)}
    return ParsedDocument(blocks=blocks, title=subject, attachments=attachments, metadata=metadata,
                          encoding=message.get_content_charset() or "")


def _body_blocks(message) -> list[Block]:
    from unstructured.partition.text import partition_text

    from services.parser.reading import html_document

    body = message.get_body(preferencelist=("html", "plain"))
    if body is None:
        return []
    content = body.get_content()
    if isinstance(content, bytes):
        content, _ = formats.decode(content)
    if not content.strip():
        return []
    if body.get_content_subtype() == "html":
        return html_document(content).blocks
    return elements.to_blocks(partition_text(text=content, languages=["auto"]), headings="none")


def _attachments(message) -> list[Attachment]:
    found: list[Attachment] = []
    used: set[str] = set()
    for number, part in enumerate(message.iter_attachments(), start=1):
        name = collapse_rfc2231_value(part.get_filename() or "") or f"attachment-{number}"
        name = name.replace("/", "_").replace("\\", "_")
        if part.get_content_type() == "message/rfc822" and "." not in name:
            name += ".eml"
        while name in used:  # two attachments with one name must not share a doc_id
            name = f"{number}-{name}"
        used.add(name)
        payload = part.get_payload(decode=True)
        if payload is None and part.is_multipart():
            payload = part.get_payload(0).as_bytes() if part.get_content_type() == "message/rfc822" else b""
        found.append(Attachment(filename=name, data=payload or b""))
    return found
