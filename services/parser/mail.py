"""E-mail (.eml, Outlook .msg): the body is the document, each attachment is returned to be parsed as its own
document.

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
    headers = {key: str(message.get(header)) for header, key in _METADATA_HEADERS.items() if message.get(header)}
    return _document(str(message.get("subject") or ""), _body_blocks(message), _attachments(message), headers,
                     encoding=message.get_content_charset() or "")


def read_msg(filename: str, data: bytes) -> ParsedDocument:
    """An Outlook message (an OLE compound file) read with extract-msg: the same document as an e-mail."""
    import io

    import extract_msg

    try:
        message = extract_msg.openMsg(io.BytesIO(data))
    except Exception as error:  # extract-msg names what it could not find in the compound file
        raise errors.ParseError(errors.CORRUPT, f"{filename!r} is not a readable Outlook message: "
                                                f"{type(error).__name__}: {str(error)[:200]}") from None
    try:
        html = message.htmlBody
        if html:
            blocks = html_document(formats.decode(html)[0]).blocks
        else:
            blocks = _text_blocks(message.body or "")
        headers = {"email_from": message.sender, "email_to": message.to, "email_cc": message.cc,
                   "email_date": message.date.isoformat() if message.date else ""}
        attachments = _unique([(a.longFilename or a.shortFilename or f"attachment-{number}", _attachment_bytes(a))
                               for number, a in enumerate(message.attachments, start=1)])
        return _document(message.subject or "", blocks, attachments, headers)
    finally:
        message.close()


def _attachment_bytes(attachment) -> bytes:
    """A file attachment's bytes; an attached Outlook message is exported as a .msg of its own."""
    data = attachment.data
    if isinstance(data, bytes):
        return data
    export = getattr(data, "exportBytes", None)
    return export() if export else b""


def _document(subject: str, blocks: list[Block], attachments: list[Attachment], headers: dict[str, str],
              encoding: str = "") -> ParsedDocument:
    subject = clean_text(subject)
    if not any(b.text for b in blocks) and attachments:
        names = ", ".join(a.filename for a in attachments)
        blocks = [Block(kind="paragraph", text=f"Attachments: {names}")]
    if subject:
        for block in blocks:
            if block.kind == "heading":
                block.level += 1  # body headings sit under the subject
        blocks.insert(0, Block(kind="heading", text=subject, level=1))
    metadata = {key: clean_text(str(value)) for key, value in headers.items() if value}
    return ParsedDocument(blocks=blocks, title=subject, attachments=attachments, metadata=metadata,
                          encoding=encoding)


def _body_blocks(message) -> list[Block]:
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
    return _text_blocks(content)


def _text_blocks(content: str) -> list[Block]:
    from unstructured.partition.text import partition_text

    if not content.strip():
        return []
    return elements.to_blocks(partition_text(text=content, languages=["auto"]), headings="none")


def html_document(html: str) -> ParsedDocument:
    from services.parser.reading import html_document as read_html

    return read_html(html)


def _attachments(message) -> list[Attachment]:
    found: list[tuple[str, bytes]] = []
    for number, part in enumerate(message.iter_attachments(), start=1):
        name = collapse_rfc2231_value(part.get_filename() or "") or f"attachment-{number}"
        if part.get_content_type() == "message/rfc822" and "." not in name:
            name += ".eml"
        payload = part.get_payload(decode=True)
        if payload is None and part.is_multipart():
            payload = part.get_payload(0).as_bytes() if part.get_content_type() == "message/rfc822" else b""
        found.append((name, payload or b""))
    return _unique(found)


def _unique(attachments: list[tuple[str, bytes]]) -> list[Attachment]:
    """Attachments with safe, distinct names: two attachments with one name must not share a doc_id."""
    found: list[Attachment] = []
    used: set[str] = set()
    for number, (name, data) in enumerate(attachments, start=1):
        name = name.replace("/", "_").replace("\\", "_")
        while name in used:
            name = f"{number}-{name}"
        used.add(name)
        found.append(Attachment(filename=name, data=data))
    return found
