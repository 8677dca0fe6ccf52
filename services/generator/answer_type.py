"""What kind of answer a question asks for, and whether a sentence holds one that the question does not.

Pre-neural question answering's cheapest strong cue: "when" wants a date, "how
many" a number, "who" a name. A sentence that repeats the question's words but
holds no new date, number or name of the asked kind rarely answers it, which is
what the unanswerable questions of SQuAD 2.0 look like (written against the very
paragraph that is indexed). The same patterns pull the short answer phrase out
of the cited sentence, so the extractive reader can lead with it. `is_question_form` tells a question
from a statement (a claim to check), on which these cues mean nothing.
"""

from __future__ import annotations

import re

DATE, NUMBER, PERSON, PLACE = "date", "number", "person", "place"

# the first pattern that matches decides: "how many years" asks for a number, "what year" for a date
_ASKS = (
    (DATE, re.compile(r"\bwhen\b|\b(?:what|which|in what) (?:year|date|century|decade|day|month|time)\b"
                      r"|什么时候|何时|哪一?年|哪天|几月|几号|哪个月|哪个世纪", re.IGNORECASE)),
    (NUMBER, re.compile(r"\bhow (?:many|much|long|far|old|often|fast|big|large|heavy|high|tall|deep|wide)\b"
                        r"|\bwhat (?:percentage|percent|number|amount|proportion|fraction|size)\b"
                        r"|多少|几|多久|多长|多大|多重|多高|多远|多深|百分之", re.IGNORECASE)),
    (PERSON, re.compile(r"\bwho(?:m|se)?\b|谁|哪位|什么人", re.IGNORECASE)),
    (PLACE, re.compile(r"\bwhere\b|\b(?:what|which|in which|in what) (?:country|city|state|region|place|location"
                       r"|river|island|town|province|continent)\b|哪里|哪儿|何处|哪个国家|哪座城市|在哪", re.IGNORECASE)),
)
_MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
_DATE = re.compile(
    r"(?:公元前?)?[\d一二三四五六七八九十〇零]+\s*(?:年(?:代)?|世纪)(?:[\d一二三四五六七八九十]+月)?(?:[\d一二三四五六七八九十]+[日号])?"
    r"|[\d一二三四五六七八九十]+月(?:[\d一二三四五六七八九十]+[日号])?|"
    rf"(?:(?:early|late|mid|the)\s+)?(?:{_MONTH}\s+)?\d{{1,2}}(?:st|nd|rd|th)?\s*,?\s*\d{{3,4}}"  # 5 March 1905
    rf"|(?:{_MONTH}\s+)?\b1\d{{3}}s?\b|\b20\d{{2}}s?\b"  # 1905, May 1905, 1990s
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)[\s-]+[Cc]entury\b|\b[A-Z][a-z]+ [Cc]entury\b"  # 12th century
    rf"|\b{_MONTH}(?:\s+\d{{1,2}})?\b")
_NUMBER_WORDS = (r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty"
                 r"|sixty|seventy|eighty|ninety|hundred|a hundred|thousand|million|billion|half|a dozen|dozens|several|single|a single")
_NUMBER = re.compile(
    r"[\d一二三四五六七八九十百千万亿两零]+(?:\.\d+)?\s*(?:[%％]|[千百万亿]?[^\W\d\s的是了和与]?)(?=[\u3400-\u9fff，。、；])|"
    rf"(?:about |around |over |nearly |almost |more than |less than |up to )?"
    rf"(?:\$|€|£)?\b(?:\d[\d,.]*|{_NUMBER_WORDS})\b(?:[\s-]+(?:{_NUMBER_WORDS}))?"
    r"(?:\s?%| percent| per cent)?(?:[\s-]+(?!of\b|and\b|the\b|in\b|to\b|was\b|were\b|is\b)[a-z]{3,}s?)?"  # + its unit
    , re.IGNORECASE)
_NAME = re.compile(r"\b[A-Z][\w'’-]*[a-z][\w'’-]*(?:\s+(?:(?:of|de|von|van|da|al)\s+)?(?:II|III|IV|[A-Z][\w'’-]*))*")
_LEADING = re.compile(r"^(?:The|A|An|At|In|On|By|For|From|To|With|After|Before|During|Since|Its|His|Her|Their|This|"
                      r"That|These|Those|It|He|She|They|When|While|Although|However|As|Of)\s+")


_WH = r"(?:what|which|who|whom|whose|when|where|why|how)"
_AUXILIARY = (r"(?:is|are|was|were|am|do|does|did|can|could|will|would|shall|should|may|might|must|has|have|had"
              r"|isn't|aren't|wasn't|weren't|don't|doesn't|didn't|can't|won't|wouldn't|shouldn't|hasn't|haven't)")
# a question in English: it ends with "?", opens with a wh-word or an inverted auxiliary ("Did ...", "In what
# year ...", "Where are Jersey and Guernsey"), or a clause does ("Though unknown, what are ..."). Not a
# statement's subordinate clause: "When inoculated early, parasites grow faster." (when/where/why then need
# an auxiliary right after them or no comma), ", which ..." (a relative pronoun)
_ENGLISH_QUESTION = re.compile(
    rf"[?？]\s*$|^\W*(?:what|which|who|whom|whose|how|{_AUXILIARY})\b"
    rf"|^\W*(?:when|where|why)\b(?:\s+{_AUXILIARY}\b|[^,]*$)"
    rf"|^\W*(?:in|on|at|by|for|from|to|with|of|during|after|before|under)\s+{_WH}\b"
    rf"|,\s*(?:what|who|whom|whose|how (?:many|much))\s", re.IGNORECASE)
# a question in Chinese: a question particle or an interrogative word (几 but not 几乎 "almost", 哪怕 "even if")
_CHINESE_QUESTION = re.compile(r"[?？]\s*$|[吗呢][\s。.!！]*$|什么|哪(?!怕)|谁|几(?!乎)|(?<!或)多少|怎么|怎样"
                               r"|为什么|为何|何时|何地|何处|如何|是否|多久|多长|多大|多高|多远"
                               r"|有没有|是不是|能不能|会不会|可不可以")


def is_question_form(query: str) -> bool:
    """Whether the query is worded as a question (and not as a statement or claim to check, like SciFact's):
    the question cues of the answerability model read a question's form, so they mean nothing on a claim."""
    text = query.strip()
    if re.search(r"[\u3400-\u9fff]", text) and _CHINESE_QUESTION.search(text):
        return True
    return bool(_ENGLISH_QUESTION.search(text))


def expected_type(question: str) -> str:
    """DATE, NUMBER, PERSON, PLACE, or '' when the question does not say."""
    for kind, pattern in _ASKS:
        if pattern.search(question):
            return kind
    return ""


def _question_words(question: str) -> set[str]:
    return {w.lower() for w in re.findall(r"\w+", question)}


def _fresh(phrase: str, question: str) -> bool:
    """The phrase says something the question does not: not all of its words are the question's."""
    asked = _question_words(question)
    words = re.findall(r"\w+", phrase)
    if re.search(r"[\u3400-\u9fff]", phrase):
        return phrase not in question
    return bool(words) and any(w.lower() not in asked for w in words)


def answer_phrases(question: str, sentence: str) -> list[str]:
    """Phrases of `sentence` of the kind `question` asks for that the question does not already hold, in order."""
    kind = expected_type(question)
    if not kind:
        return []
    if kind == DATE:
        pattern = _DATE
    elif kind == NUMBER:
        pattern = _NUMBER
    elif re.search(r"[\u3400-\u9fff]", question):
        return []  # Chinese names carry no capitals: nothing to recognise them by
    else:
        pattern = _NAME
    found = []
    for match in pattern.finditer(sentence):
        phrase = match.group(0).strip(" ,;:")
        if kind in (PERSON, PLACE):
            if match.start() == 0:
                phrase = _LEADING.sub("", phrase)  # the capital of the sentence's first word
                if phrase == match.group(0).strip(" ,;:") and " " not in phrase:
                    continue
            phrase = " ".join(w for w in phrase.split() if w.lower() not in _question_words(question)) \
                if len(phrase.split()) > 1 else phrase
        if phrase and _fresh(phrase, question):
            found.append(phrase)
    return found


def holds_answer_type(question: str, text: str) -> bool | None:
    """Whether `text` holds a new phrase of the asked kind; None when the question asks for no kind
    this module recognises (or a Chinese name)."""
    kind = expected_type(question)
    if not kind or kind in (PERSON, PLACE) and re.search(r"[\u3400-\u9fff]", question):
        return None
    return bool(answer_phrases(question, text))
