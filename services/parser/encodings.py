"""Text decoding: which encoding a text file is in, decided by its bytes.

Order: a byte-order mark (UTF-8, UTF-16, UTF-32); UTF-16 without a BOM (many
NUL bytes, their position telling the byte order); strict UTF-8; then
charset-normalizer, which scores every candidate encoding for how coherent the
decoded text is in some language (Shift-JIS, EUC-KR, Big5, GB18030, cp1252 …),
with a tie-break for short texts (see `detect_encoding`).
"""

from __future__ import annotations

import codecs

_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
TIE_CHAOS = 0.1  # readings this close in "chaos" (odd characters) to the best one are weighed again
# the core character set of each extended encoding: a misreading lands on its rare extension characters
CORE_CHARSET = {"cp949": "euc_kr", "euc_kr": "euc_kr", "cp932": "shift_jis", "shift_jis_2004": "shift_jis", "euc_jis_2004": "euc_jp", "gb18030": "gb2312"}
KOREAN = {"cp949", "euc_kr", "johab"}
PREFERRED_ON_TIE = ("cp1252",)
# readings in rarer encodings (johab, hp_roman8, cp775, …) are never chosen over these; UTF-16 without a
# BOM is recognised by its NUL bytes before detection runs
COMMON_ENCODINGS = {"cp1252", "latin_1", "iso8859_15", "cp1250", "iso8859_2", "cp1251", "koi8_r", "iso8859_5",
                    "cp1253", "cp1254", "cp1255", "cp1256", "cp1257", "cp1258", "cp874", "mac_roman",
                    "shift_jis", "cp932", "euc_jp", "euc_kr", "cp949", "big5", "cp950", "gb2312", "gbk", "gb18030"}


def decode(data: bytes) -> tuple[str, str]:
    """Decode bytes, returning (text, encoding name)."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding), encoding
    if data[:200].count(b"\x00") > len(data[:200]) // 4:
        encoding = "utf-16-le" if data[1:2] == b"\x00" else "utf-16-be"
        try:
            return data.decode(encoding), encoding
        except UnicodeDecodeError:
            pass
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    encoding = detect_encoding(data)
    if encoding:
        return data.decode(encoding, errors="replace"), encoding
    return data.decode("cp1252", errors="replace"), "cp1252"


def detect_encoding(data: bytes) -> str:
    """The most plausible legacy encoding of non-UTF-8 bytes; '' when none fits.

    charset-normalizer proposes and scores the readings. For short texts its
    language scores are weak and several readings come close, so the close ones
    are weighed again, in order: accented letters inside words must read as
    letters (cp1252 "schöne", not hp_roman8 "sch—ne"); characters should stay
    in the encoding's core set (Chinese bytes read as Korean give rare Hanja);
    then cp1252 when it is among the equal readings; then less chaos, more coherence.
    """
    from charset_normalizer import from_bytes

    matches = from_bytes(data)
    best = matches.best()
    if best is None:
        return ""
    readings = []
    for match in matches:
        if match.chaos > best.chaos + TIE_CHAOS:
            continue
        common = [e for e in match.could_be_from_charset if e in COMMON_ENCODINGS]
        if not common:
            continue
        text = str(match)
        encoding = next((e for e in PREFERRED_ON_TIE if e in common), common[0])
        readings.append(((_letters_in_words(text), _core_share(text, encoding), encoding in PREFERRED_ON_TIE,
                          -match.chaos, match.coherence), encoding))
    if not readings:
        return best.encoding
    return max(readings)[1]


def _letters_in_words(text: str) -> float:
    """The share of non-ASCII characters between two ASCII letters that are letters themselves."""
    inside = [c for before, c, after in zip(text, text[1:], text[2:])
              if ord(c) > 0x7F and before.isascii() and before.isalpha() and after.isascii() and after.isalpha()]
    return sum(c.isalpha() for c in inside) / len(inside) if inside else 1.0


def _core_share(text: str, encoding: str) -> float:
    """How well the characters fit the encoding: the share of non-ASCII letters in its core set.

    For Korean encodings, the core is Hangul: modern Korean is written almost all in
    Hangul, while Chinese bytes read as Korean give a mix of Hangul and rare Hanja.
    """
    wide = [c for c in text if ord(c) > 0x7F and c.isalpha()]
    if not wide:
        return 1.0
    core = CORE_CHARSET.get(encoding, encoding)
    held = 0
    for char in wide:
        try:
            fits = len(char.encode(core)) <= 2  # CPython's euc_kr spells rare Hangul as 8-byte sequences
        except (UnicodeEncodeError, LookupError):
            continue
        held += fits and (encoding not in KOREAN or "\uac00" <= char <= "\ud7a3")
    return held / len(wide)
