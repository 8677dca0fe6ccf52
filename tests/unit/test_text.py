import pytest

from shared.text import analyze, detect_language, query_terms, split_sentences

pytestmark = pytest.mark.unit


def test_analyze_lowercases_latin_and_segments_chinese():
    assert analyze("Beacon API Rate") == ["beacon", "api", "rate"]
    tokens = analyze("遥测数据保留30天")
    assert "遥测" in tokens and "数据" in tokens and "30" in tokens


def test_ascii_text_is_analyzed_as_any_text():
    """ASCII text takes a regex of its own; it must give what the general path gives."""
    import random
    import unicodedata

    from shared import text

    def general(value):  # the path every other text takes (no CJK run can occur in ASCII)
        return [m.group(0) for m in text._TOKEN.finditer(unicodedata.normalize("NFKC", value).lower())]

    rng = random.Random(11)
    samples = ["Don't stop: 3.14, e.g. U.S.A.'s 5'-UTR... x_y__z", "a..b ''c'' d.e.f. 1.2.3 ver.2", ""]
    samples += ["".join(rng.choice([chr(c) for c in range(128)]) for _ in range(rng.randint(1, 200)))
                for _ in range(2000)]
    samples += ["".join(rng.choice("ab1.'_ -") for _ in range(rng.randint(1, 40))) for _ in range(2000)]
    for sample in samples:
        assert analyze(sample) == general(sample), sample


def test_text_without_cjk_is_analyzed_as_any_text():
    """Non-ASCII text with no CJK character after NFKC takes a regex without the CJK lookaheads; it must
    give what the general path gives, and text that NFKC turns into CJK (U+3220 -> "(一)") is still cut."""
    import random
    import unicodedata

    from shared import text

    def general(value):
        return [m.group(0) for m in text._TOKEN.finditer(unicodedata.normalize("NFKC", value).lower())]

    rng = random.Random(12)
    alphabet = "ab1.'_ -μ±–éÉßİΣς\u0301\u00a0ｆｕｌｌ①ﬁ"
    samples = ["naïve café Ⅻ ½ μg/mL ± 5 %", "ΟΔΟΣ Straße İstanbul", "e\u0301tude"]
    samples += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(3000)]
    for sample in samples:
        assert analyze(sample) == general(sample), sample
    assert analyze("\u3220 test") == ["一", "test"]
    assert analyze("\u3220 test", "char") == ["一", "test"]


def test_char_analyzer_splits_cjk_into_characters():
    assert analyze("载重", "char") == ["载", "重"]


def test_query_terms_drop_stopwords_but_never_everything():
    assert query_terms("What is the payload of the AMR-7?") == ["payload", "amr", "7"]
    assert query_terms("what is") == ["what", "is"]


@pytest.mark.parametrize(
    "text, language",
    [("How long does charging take?", "en"), ("AMR-7 的最大载重是多少？", "zh"), ("1234", "und")],
)
def test_detect_language(text, language):
    assert detect_language(text) == language


def test_sentences_split_on_chinese_and_latin_marks_but_not_version_numbers():
    text = "Firmware 3.2.1 adds re-routing. It ships today! 充电需要45分钟。载重300公斤；速度1.8米"
    assert split_sentences(text) == [
        "Firmware 3.2.1 adds re-routing.", "It ships today!", "充电需要45分钟。", "载重300公斤；", "速度1.8米"]
