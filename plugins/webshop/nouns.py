"""An offline noun tagger for product titles (WebShop's type reward needs the nouns of a title).

The published reward runs spaCy's ``en_core_web_sm`` and keeps tokens tagged NOUN or PROPN. No
model can be downloaded here, so this module approximates that tagger with rules that fit product
titles, which are mostly Title Case noun phrases that spaCy tags as runs of PROPN/NOUN:

- tokenisation close to spaCy's for titles: whitespace, then leading/trailing punctuation, then
  hyphens and slashes between letters (``Unisex-Adult`` → ``Unisex`` ``-`` ``Adult``); dotted
  abbreviations (``D.o.n.``) and decimals (``3.1``) stay whole;
- a token is a noun unless it is punctuation, a number or starts with a digit (``2``, ``3.1``,
  ``4K``), a closed-class word (determiner, preposition, conjunction, pronoun, auxiliary), an
  adverb in ``-ly``, a past participle in ``-ed``, or a known adjective (a lexicon of adjectives
  common in titles, plus adjective suffixes ``-able``, ``-ible``, ``-ous``, ``-ful``, ``-less``,
  ``-ive`` with noun exceptions).

On the published test titles this reproduces spaCy's title scores (0.86, 0.31, 0.17 and 0.0); on
other titles it can differ where spaCy's choice depends on context (``Black`` as PROPN or ADJ).
A user who has spaCy and a model can pass ``SpacyNounTagger`` instead (see ``make_noun_tagger``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

NounTagger = Callable[[str], list[str]]
"""Text → its nouns, lowercased, in order, duplicates kept (the type reward counts them)."""

_CLOSED_CLASS = frozenset(
    """
    a an the this that these those each every all any some no both either neither another such
    for with of in on at by from to into onto over under without between about against among
    through during before after above below up down off out per via like than across along around
    behind beyond inside outside near within upon toward towards including plus vs versus amp
    and or but nor so yet &
    i you he she it we they me him her us them my your his its our their mine yours ours theirs
    is are was were be been being am do does did has have had can could will would shall should
    may might must
    very not too also just only more most less least much many few lot lots well even still
    x w h l
    """.split()
)

_ADJECTIVES = frozenset(
    """
    adjustable anti big bright cheap clean clear comfortable compact cool cozy cute dark deep dry
    durable easy elegant empty extra fast fine flat free fresh full gentle great heavy high hot
    large light little lightweight long loose low mini natural new nice non old organic original
    perfect plain portable premium professional pure quick real rechargeable safe short
    simple slim small smart soft solid sturdy super sweet tall thick thin tiny tough universal
    useful warm waterproof wide wireless wooden stainless sleek modern classic vintage casual
    breathable reusable disposable handmade delicate fragrant
    vegan healthy crunchy spicy salty sour creamy smooth luxurious
    ergonomic foldable cordless digital electric electronic magnetic acoustic ceramic metallic
    rustic comfy stretchy multi multipurpose multifunctional
    """.split()
)

_ADJ_SUFFIXES = ("able", "ible", "ous", "ful", "less", "ive")
_NOUN_EXCEPTIONS = frozenset(
    """
    table cable vegetable stable turntable timetable fable label bible drive five hive olive
    knive knives archive detective adhesive explosive sedative
    """.split()
)

_PUNCT_EDGE = re.compile(r"^([\"'“”‘’(\[{<,;:!?*|]+)|([\"'“”‘’)\]}>,;:!?*|.]+)$")
_INFIX = re.compile(r"(?<=[A-Za-z0-9])([-/+])(?=[A-Za-z])")
_ABBREV = re.compile(r"^(?:[A-Za-z]\.){2,}$|^(?:[A-Za-z]\.)+[A-Za-z]\.?$")
_NUMBER = re.compile(r"^[\d.,/%$#×x-]+$")


def tokenize(text: str) -> list[str]:
    """Split a title into tokens the way spaCy's English tokenizer does for ordinary titles."""
    out: list[str] = []
    for raw in text.split():
        prefix: list[str] = []
        suffix: list[str] = []
        word = raw
        while word:
            if _ABBREV.match(word):
                break
            m = _PUNCT_EDGE.search(word)
            if m is None:
                break
            if m.group(1):
                prefix.append(m.group(1))
                word = word[len(m.group(1)) :]
            else:
                suffix.insert(0, m.group(2))
                word = word[: -len(m.group(2))]
        out.extend(prefix)
        if word:
            if _ABBREV.match(word):
                out.append(word)
            else:
                out.extend(p for p in _INFIX.split(word) if p)
        out.extend(suffix)
    return out


def is_noun(token: str) -> bool:
    """Whether the rule tagger calls ``token`` a NOUN or PROPN."""
    if not any(ch.isalpha() for ch in token):
        return False
    if token[0].isdigit() or _NUMBER.match(token):
        return False
    low = token.lower()
    if low in _CLOSED_CLASS or low in _ADJECTIVES:
        return False
    if _ABBREV.match(token):
        return True
    if not low.replace("'", "").replace("’", "").isalnum():
        return False
    if len(low) > 4 and low.endswith("ly"):
        return False
    if len(low) > 4 and low.endswith("ed") and not low.endswith("eed"):
        return False
    if low not in _NOUN_EXCEPTIONS and len(low) > 5 and low.endswith(_ADJ_SUFFIXES):
        return False
    return True


@lru_cache(maxsize=65536)
def _nouns_cached(text: str) -> tuple[str, ...]:
    return tuple(t.lower() for t in tokenize(text) if is_noun(t))


def rule_nouns(text: str) -> list[str]:
    """The nouns of ``text`` by the offline rules, lowercased, duplicates kept."""
    return list(_nouns_cached(text))


class SpacyNounTagger:
    """spaCy's tagger, for users who have spaCy and a model installed (the published setup)."""

    def __init__(self, model: str = "en_core_web_sm") -> None:
        try:
            import spacy  # type: ignore[import-not-found]
        except ImportError as exc:
            raise ImportError(
                "noun_tagger='spacy' needs spaCy: pip install spacy and a model such as en_core_web_sm"
            ) from exc
        try:
            self._nlp = spacy.load(model, disable=["parser", "ner", "lemmatizer"])
        except OSError as exc:
            raise ImportError(
                f"spaCy model {model!r} is not installed; install it or use noun_tagger='rules'"
            ) from exc
        self._cache: dict[str, list[str]] = {}

    def __call__(self, text: str) -> list[str]:
        if text not in self._cache:
            self._cache[text] = [
                t.text.lower() for t in self._nlp(text) if t.pos_ in ("PNOUN", "NOUN", "PROPN")
            ]
        return list(self._cache[text])


def make_noun_tagger(name: str = "rules") -> NounTagger:
    """``"rules"`` (offline, the default) or ``"spacy"`` / ``"spacy:MODEL"``."""
    if name == "rules":
        return rule_nouns
    if name == "spacy" or name.startswith("spacy:"):
        model = name.partition(":")[2] or "en_core_web_sm"
        return SpacyNounTagger(model)
    raise ValueError(f"unknown noun tagger {name!r}; use 'rules' or 'spacy[:MODEL]'")
